// SPDX-License-Identifier: BSD-3-Clause
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
// library is checked to have no heap references); its high-water mark is
// reported. Running out ends the run with an ERROR line naming the arena,
// not a fault.
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

// First fit over an address-ordered free list, neighbours merged on free, the
// top of the used part lowered when its last block is freed: the model frees
// every feature map when its operation ends, so the arena holds one
// operation's data at a time, not the whole stream's.
struct Block {
  size_t size; // bytes including this header
  Block* next; // next free block (free blocks only)
};
constexpr size_t kHeader = 16;
static_assert(sizeof(Block) <= kHeader, "block header fits its 16 bytes");
Block* g_free = nullptr;
size_t g_top = 0; // bytes of the arena in use or on the free list
size_t g_peak = 0;

[[noreturn]] void exhausted(size_t n) {
  std::printf(
      "ethosu_ng_fw: ERROR NPU model working memory exhausted: %lu bytes asked with %lu of "
      "ETHOSU_NG_NPU_MODEL_ARENA_BYTES=%lu in use\n",
      static_cast<unsigned long>(n),
      static_cast<unsigned long>(g_top),
      static_cast<unsigned long>(sizeof(g_arena)));
  std::fflush(stdout);
  std::_Exit(1);
}

void* arena_allocate(size_t n) {
  if (n > sizeof(g_arena)) {
    exhausted(n);
  }
  const size_t need = kHeader + ((n + 15u) & ~size_t{15});
  for (Block** link = &g_free; *link != nullptr; link = &(*link)->next) {
    Block* b = *link;
    if (b->size < need) {
      continue;
    }
    if (b->size - need >= 2 * kHeader) { // split: the rest stays free
      Block* rest = reinterpret_cast<Block*>(reinterpret_cast<uint8_t*>(b) + need);
      rest->size = b->size - need;
      rest->next = b->next;
      *link = rest;
      b->size = need;
    } else {
      *link = b->next;
    }
    return reinterpret_cast<uint8_t*>(b) + kHeader;
  }
  if (need > sizeof(g_arena) - g_top) {
    exhausted(n);
  }
  Block* b = reinterpret_cast<Block*>(g_arena + g_top);
  b->size = need;
  g_top += need;
  if (g_top > g_peak) {
    g_peak = g_top;
  }
  return reinterpret_cast<uint8_t*>(b) + kHeader;
}

void arena_free(void* p) {
  if (p == nullptr) {
    return;
  }
  Block* b = reinterpret_cast<Block*>(static_cast<uint8_t*>(p) - kHeader);
  Block* prev = nullptr;
  Block* next = g_free;
  while (next != nullptr && next < b) {
    prev = next;
    next = next->next;
  }
  if (next != nullptr && reinterpret_cast<uint8_t*>(b) + b->size == reinterpret_cast<uint8_t*>(next)) {
    b->size += next->size;
    next = next->next;
  }
  b->next = next;
  if (prev != nullptr && reinterpret_cast<uint8_t*>(prev) + prev->size == reinterpret_cast<uint8_t*>(b)) {
    prev->size += b->size;
    prev->next = b->next;
  } else if (prev != nullptr) {
    prev->next = b;
  } else {
    g_free = b;
  }
  // A free block that ends at the top (the list's last) goes back to it.
  Block** last = &g_free;
  while ((*last)->next != nullptr) {
    last = &(*last)->next;
  }
  if (reinterpret_cast<uint8_t*>(*last) + (*last)->size == g_arena + g_top) {
    g_top = static_cast<size_t>(reinterpret_cast<uint8_t*>(*last) - g_arena);
    *last = nullptr;
  }
}
} // namespace

void* operator new(size_t n) {
  return arena_allocate(n);
}
void* operator new[](size_t n) {
  return arena_allocate(n);
}
void operator delete(void* p) noexcept {
  arena_free(p);
}
void operator delete[](void* p) noexcept {
  arena_free(p);
}
void operator delete(void* p, size_t) noexcept {
  arena_free(p);
}
void operator delete[](void* p, size_t) noexcept {
  arena_free(p);
}

extern "C" unsigned long ethosu_ng_fw_npu_invocations(void) {
  return g_invocations;
}

extern "C" void ethosu_ng_fw_npu_model_arena(unsigned long* peak, unsigned long* size) {
  *peak = g_peak;
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
  if (e != m::Error::Ok) {
    std::printf("ethosu_ng_fw: NPU model error %d: %s\n", static_cast<int>(e), msg);
    return -1;
  }
  return 0;
}
