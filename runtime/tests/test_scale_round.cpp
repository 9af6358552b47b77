// SPDX-License-Identifier: BSD-3-Clause
// SPDX-License-Identifier: Apache-2.0
// The NPU model's scale_round (two 64-bit halves, so it builds for 32-bit
// Cortex-M) against the __int128 arithmetic it replaced, on the host: every
// rounding mode, shifts 0..63, the accumulator's and the scale's extremes and
// their neighbours, and millions of random operands drawn with a fixed seed
// from widths spread over 1..64 bits.
#include <cstdint>
#include <cstdio>

#include <ethosu_ng/npu_model/model.h>

#include "harness.h"

namespace {
using ethosu_ng::npu_model::detail::scale_round;

// The arithmetic scale_round had while it used __int128.
int64_t reference(int64_t v, uint32_t scale, int shift, int mode) {
  namespace d = ethosu_ng::npu_model::detail;
  __int128 p = static_cast<__int128>(v) * scale;
  if (shift > 0) {
    switch (mode) {
      case d::kRoundTruncate:
        p = p >= 0 ? (p >> shift) : -((-p) >> shift);
        break;
      case d::kRoundNatural:
        p = (p + (static_cast<__int128>(1) << (shift - 1))) >> shift;
        break;
      case d::kRoundDbl:
      default: {
        __int128 r = static_cast<__int128>(1) << (shift - 1);
        if (shift > 31) {
          r += v >= 0 ? (__int128{1} << 30) : -(__int128{1} << 30);
        }
        p = (p + r) >> shift;
        break;
      }
    }
  }
  const __int128 lim = static_cast<__int128>(1) << 62;
  if (p > lim) {
    p = lim;
  } else if (p < -lim) {
    p = -lim;
  }
  return static_cast<int64_t>(p);
}

uint64_t g_state = 0x9e3779b97f4a7c15ull;
uint64_t next() { // splitmix64
  uint64_t z = (g_state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

int g_reported = 0;
void check(int64_t v, uint32_t scale, int shift, int mode) {
  const int64_t got = scale_round(v, scale, shift, mode);
  const int64_t want = reference(v, scale, shift, mode);
  if (got != want && g_reported++ < 10) {
    std::fprintf(stderr, "scale_round(%lld, %u, %d, %d) = %lld, __int128 gives %lld\n",
                 static_cast<long long>(v), scale, shift, mode, static_cast<long long>(got),
                 static_cast<long long>(want));
  }
  CHECK(got == want);
}
} // namespace

int main() {
  const int modes[] = {0, 1, 2};
  const int64_t edges_v[] = {0, 1, -1, 2, -2, INT64_MAX, INT64_MIN, INT64_MAX - 1, INT64_MIN + 1,
                             (int64_t{1} << 39) - 1, -(int64_t{1} << 39), (int64_t{1} << 31),
                             -(int64_t{1} << 31), (int64_t{1} << 32) - 1, 127, -128, 255};
  const uint32_t edges_s[] = {0, 1, 2, 0x7fffffffu, 0x80000000u, 0xffffffffu, 1u << 30, 12345};
  for (int mode : modes) {
    for (int shift = 0; shift < 64; ++shift) {
      for (int64_t v : edges_v) {
        for (uint32_t s : edges_s) {
          check(v, s, shift, mode);
        }
      }
    }
  }
  // Random operands: a random bit width for each, so small and large values
  // are both common (the accumulators of real streams are mostly small).
  for (int i = 0; i < 3000000; ++i) {
    const int vbits = static_cast<int>(next() % 64) + 1;
    const int sbits = static_cast<int>(next() % 32) + 1;
    int64_t v = static_cast<int64_t>(next() >> (64 - vbits));
    if (next() & 1) {
      v = -v;
    }
    const uint32_t s = static_cast<uint32_t>(next() >> (64 - sbits));
    const int shift = static_cast<int>(next() % 64);
    check(v, s, shift, modes[i % 3]);
  }
  return harness::finish("scale_round");
}
