// SPDX-License-Identifier: BSD-3-Clause
// SPDX-License-Identifier: Apache-2.0
// ExecuTorch platform layer for the image: logs go to semihosting stdout, an
// abort ends the run with a message, and there is no heap: every pool the
// runtime uses is given to it, so et_pal_allocate refuses.
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <executorch/runtime/platform/platform.h>

namespace {
// Exit code of an ExecuTorch abort (ET_CHECK); see runner.cpp for the others.
constexpr int kAbortExitCode = 4;
} // namespace

void et_pal_init(void) {}

ET_NORETURN void et_pal_abort(void) {
  std::printf("ethosu_ng_fw: ABORT (ExecuTorch et_pal_abort)\n");
  std::fflush(stdout);
  std::_Exit(kAbortExitCode);
}

et_timestamp_t et_pal_current_ticks(void) {
  return 0; // No time source worth reporting: QEMU time says nothing about the M55.
}

et_tick_ratio_t et_pal_ticks_to_ns_multiplier(void) {
  return {1, 1};
}

void et_pal_emit_log_message(
    et_timestamp_t /*timestamp*/,
    et_pal_log_level_t level,
    const char* filename,
    const char* /*function*/,
    size_t line,
    const char* message,
    size_t length) {
  const char* base = std::strrchr(filename, '/');
  std::printf(
      "%c [%s:%lu] %.*s\n",
      static_cast<char>(level),
      base != nullptr ? base + 1 : filename,
      static_cast<unsigned long>(line),
      static_cast<int>(length),
      message);
}

void* et_pal_allocate(size_t /*size*/) {
  return nullptr;
}

void et_pal_free(void* /*ptr*/) {}
