// SPDX-License-Identifier: BSD-3-Clause
// Tiny test harness: CHECK never compiles out (unlike assert under NDEBUG),
// reports file:line and keeps going so one run lists every failure.
#pragma once

#include <cstdio>
#include <cstdlib>

namespace harness {
inline int& failures() {
  static int n = 0;
  return n;
}
inline int& checks() {
  static int n = 0;
  return n;
}
inline int finish(const char* name) {
  std::printf(
      "%s: %d checks, %d failures\n", name, checks(), failures());
  return failures() == 0 ? 0 : 1;
}
} // namespace harness

#define CHECK(cond)                                                      \
  do {                                                                   \
    ++harness::checks();                                                 \
    if (!(cond)) {                                                       \
      ++harness::failures();                                             \
      std::fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__,        \
                   __LINE__, #cond);                                     \
    }                                                                    \
  } while (0)

#define CHECK_MSG(cond, ...)                                             \
  do {                                                                   \
    ++harness::checks();                                                 \
    if (!(cond)) {                                                       \
      ++harness::failures();                                             \
      std::fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__,        \
                   __LINE__, #cond);                                     \
      std::fprintf(stderr, __VA_ARGS__);                                 \
      std::fprintf(stderr, "\n");                                        \
    }                                                                    \
  } while (0)
