// SPDX-License-Identifier: Apache-2.0
// The Ethos-U core driver's entry points the delegate calls
// (npu_driver_ethosu.cpp), implemented by the NPU model: the image runs the
// real command stream through the same delegate and ExecuTorch runtime as a
// device, with only the NPU replaced. Each invocation is counted and a model
// error is printed, so the runner can report both.
//
// The model's working memory (SHRAM, feature maps, decoded weights: its
// std::vectors) comes from a fixed arena of ETHOSU_NG_NPU_MODEL_ARENA_BYTES,
// through operator new (nothing else in the image uses it: the delegate
// library is checked to have no heap references), emptied after every
// invocation; its high-water mark is reported. Running out ends the run
// with an ERROR line naming the arena, not a fault.
#include <cstdio>
#include <cstdlib>
#include <new>

#include <ethosu_ng/ethosu_driver_decls.h>
#include <ethosu_ng/npu_model/npu_model.h>

struct ethosu_driver {
  bool reserved;
};

#ifndef ETHOSU_NG_NPU_MODEL_ARENA_BYTES
#define ETHOSU_NG_NPU_MODEL_ARENA_BYTES (16u << 20)
#endif

namespace {
ethosu_driver g_driver{false};
unsigned long g_invocations = 0;

__attribute__((aligned(16), section(".bss.ethosu_ng_npu_model_arena")))
uint8_t g_arena[ETHOSU_NG_NPU_MODEL_ARENA_BYTES];
size_t g_arena_used = 0;
size_t g_arena_peak = 0;

void* arena_allocate(size_t n) {
  const size_t start = (g_arena_used + 15u) & ~size_t{15};
  if (start > sizeof(g_arena) || n > sizeof(g_arena) - start) {
    std::printf(
        "ethosu_ng_fw: ERROR NPU model working memory exhausted: %lu bytes asked with %lu of "
        "ETHOSU_NG_NPU_MODEL_ARENA_BYTES=%lu in use\n",
        static_cast<unsigned long>(n),
        static_cast<unsigned long>(g_arena_used),
        static_cast<unsigned long>(sizeof(g_arena)));
    std::fflush(stdout);
    std::_Exit(1);
  }
  g_arena_used = start + n;
  if (g_arena_used > g_arena_peak) {
    g_arena_peak = g_arena_used;
  }
  return g_arena + start;
}
} // namespace

void* operator new(size_t n) {
  return arena_allocate(n);
}
void* operator new[](size_t n) {
  return arena_allocate(n);
}
// Freed all at once after each invocation.
void operator delete(void*) noexcept {}
void operator delete[](void*) noexcept {}
void operator delete(void*, size_t) noexcept {}
void operator delete[](void*, size_t) noexcept {}

extern "C" unsigned long ethosu_ng_fw_npu_invocations(void) {
  return g_invocations;
}

extern "C" void ethosu_ng_fw_npu_model_arena(unsigned long* peak, unsigned long* size) {
  *peak = g_arena_peak;
  *size = sizeof(g_arena);
}

extern "C" struct ethosu_driver* ethosu_reserve_driver(void) {
  if (g_driver.reserved) {
    return nullptr;
  }
  g_driver.reserved = true;
  return &g_driver;
}

extern "C" void ethosu_release_driver(struct ethosu_driver* drv) {
  if (drv == &g_driver) {
    g_driver.reserved = false;
  }
}

extern "C" int ethosu_invoke_v3(
    struct ethosu_driver* drv,
    const void* custom_data_ptr,
    const int custom_data_size,
    uint64_t* const base_addr,
    const size_t* base_addr_size,
    const int num_base_addr,
    void* /*user_arg*/) {
  if (drv != &g_driver || !g_driver.reserved || custom_data_ptr == nullptr ||
      custom_data_size < 0 || num_base_addr < 3 || base_addr == nullptr ||
      base_addr_size == nullptr) {
    std::printf("ethosu_ng_fw: ethosu_invoke_v3: bad arguments\n");
    return -1;
  }
  ++g_invocations;
  namespace m = ethosu_ng::npu_model;
  m::Regions r;
  r.weights = reinterpret_cast<const uint8_t*>(static_cast<uintptr_t>(base_addr[0]));
  r.weights_size = base_addr_size[0];
  r.scratch = reinterpret_cast<uint8_t*>(static_cast<uintptr_t>(base_addr[1]));
  r.scratch_size = base_addr_size[1];
  r.fast_scratch = reinterpret_cast<uint8_t*>(static_cast<uintptr_t>(base_addr[2]));
  r.fast_scratch_size = base_addr_size[2];
  static char msg[512];
  m::Stats stats;
  const m::Error e = m::run_payload(
      static_cast<const uint8_t*>(custom_data_ptr),
      static_cast<size_t>(custom_data_size),
      r,
      msg,
      sizeof(msg),
      &stats);
  g_arena_used = 0; // the model's vectors died with run_payload
  if (e != m::Error::Ok) {
    std::printf("ethosu_ng_fw: NPU model error %d: %s\n", static_cast<int>(e), msg);
    return -1;
  }
  return 0;
}
