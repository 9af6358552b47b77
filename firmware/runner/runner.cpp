// SPDX-License-Identifier: BSD-3-Clause
// SPDX-License-Identifier: Apache-2.0
// The image's main(): loads the program embedded by `ethosu-ng compile
// --emit-c` over static pools of the memory plan's sizes, writes the inputs
// before every execute (the memory plan reuses an input's buffer once it is
// dead), and reports outputs and each pool's high-water mark over semihosting.
//
// Command line (semihosting; key=value, all optional):
//   in=PATH        inputs, raw bytes: per run, input 0, input 1, ... each of
//                  <NAME>_INPUT_k_SIZE bytes; as many runs as the file holds
//                  (no file: one run on zero inputs)
//   method=N temp=N fast=N arena<k>=N
//                  give the allocator N bytes of its pool (at most the pool's
//                  size; default the whole pool)
//   pte_offset=N   load the program from a RAM copy N bytes past a 16-byte
//                  boundary instead of from its place in the image
//   flip=OFFSET    with a RAM copy: invert the byte at OFFSET of the program
// Output lines start with "ethosu_ng_fw: "; the last is "OK" or "ERROR ...".
// Each run's output lines are followed by "run R ticks T": SysTick ticks over its execute();
// "calibration instructions N ticks T" gives the ticks of a loop of N instructions. Under
// `qemu-system-arm -icount shift=0` ticks are proportional to instructions executed (QEMU's
// timing is otherwise no measure of the M55, ../firmware/README.md).
// Exit codes: 0 OK, 1 a runtime error, 2 a bad command line or input file,
// 3 a CPU fault (startup.c), 4 an ExecuTorch abort (pal.cpp).
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <executorch/extension/data_loader/buffer_data_loader.h>
#include <executorch/runtime/core/hierarchical_allocator.h>
#include <executorch/runtime/core/memory_allocator.h>
#include <executorch/runtime/executor/memory_manager.h>
#include <executorch/runtime/executor/method.h>
#include <executorch/runtime/executor/program.h>
#include <executorch/runtime/platform/runtime.h>

#include <ethosu_ng/backend.h>

#include ETHOSU_NG_FW_MODEL_HEADER

#define FW_CAT2(a, b) a##b
#define FW_CAT(a, b) FW_CAT2(a, b)
#define M(suffix) FW_CAT(ETHOSU_NG_FW_MODEL_UPPER, suffix)
#define PTE FW_CAT(ETHOSU_NG_FW_MODEL, _pte)

using executorch::extension::BufferDataLoader;
using executorch::runtime::Error;
using executorch::runtime::EValue;
using executorch::runtime::HierarchicalAllocator;
using executorch::runtime::MemoryAllocator;
using executorch::runtime::MemoryManager;
using executorch::runtime::Method;
using executorch::runtime::Program;
using executorch::runtime::Result;
using executorch::runtime::Span;

extern "C" unsigned long ethosu_ng_fw_npu_invocations(void);
extern "C" void ethosu_ng_fw_ticks_start(void);
extern "C" uint64_t ethosu_ng_fw_ticks(void);
extern "C" void ethosu_ng_fw_npu_model_arena(unsigned long* peak, unsigned long* size);

namespace {

constexpr int kExitError = 1;
constexpr int kExitUsage = 2;
constexpr size_t kMaxArenas = 4;

static_assert(M(_PLANNED_ARENA_COUNT) <= kMaxArenas, "runner supports up to 4 planned arenas");

// A pool of n bytes (at least one, so every pool has an address).
#define FW_POOL(name, n) \
  __attribute__((aligned(16), section(".bss.ethosu_ng_pool." #name))) uint8_t name[(n) + ((n) == 0)]

FW_POOL(method_pool, M(_METHOD_ALLOCATOR_SIZE));
FW_POOL(temp_pool, M(_TEMP_ALLOCATOR_SIZE));
// Vela's region 2 (U65 Dedicated_Sram): a dedicated area, registered with the delegate.
FW_POOL(fast_pool, M(_FAST_SCRATCH_SIZE));
#if M(_PLANNED_ARENA_COUNT) > 0
FW_POOL(arena_pool0, M(_PLANNED_ARENA_0_SIZE));
#endif
#if M(_PLANNED_ARENA_COUNT) > 1
FW_POOL(arena_pool1, M(_PLANNED_ARENA_1_SIZE));
#endif
#if M(_PLANNED_ARENA_COUNT) > 2
FW_POOL(arena_pool2, M(_PLANNED_ARENA_2_SIZE));
#endif
#if M(_PLANNED_ARENA_COUNT) > 3
FW_POOL(arena_pool3, M(_PLANNED_ARENA_3_SIZE));
#endif

struct Pool {
  const char* name;
  uint8_t* base;
  size_t size;
  size_t given; // what the allocator may use (command line; default size)
};

Pool g_arenas[kMaxArenas] = {
#if M(_PLANNED_ARENA_COUNT) > 0
    {"arena0", arena_pool0, M(_PLANNED_ARENA_0_SIZE), M(_PLANNED_ARENA_0_SIZE)},
#endif
#if M(_PLANNED_ARENA_COUNT) > 1
    {"arena1", arena_pool1, M(_PLANNED_ARENA_1_SIZE), M(_PLANNED_ARENA_1_SIZE)},
#endif
#if M(_PLANNED_ARENA_COUNT) > 2
    {"arena2", arena_pool2, M(_PLANNED_ARENA_2_SIZE), M(_PLANNED_ARENA_2_SIZE)},
#endif
#if M(_PLANNED_ARENA_COUNT) > 3
    {"arena3", arena_pool3, M(_PLANNED_ARENA_3_SIZE), M(_PLANNED_ARENA_3_SIZE)},
#endif
};
Pool g_method = {"method", method_pool, M(_METHOD_ALLOCATOR_SIZE), M(_METHOD_ALLOCATOR_SIZE)};
Pool g_temp = {"temp", temp_pool, M(_TEMP_ALLOCATOR_SIZE), M(_TEMP_ALLOCATOR_SIZE)};
Pool g_fast = {"fast", fast_pool, M(_FAST_SCRATCH_SIZE), M(_FAST_SCRATCH_SIZE)};

// RAM copy of the program for the pte_offset/flip diagnostics.
__attribute__((aligned(16), section(".bss.ethosu_ng_diag"))) uint8_t g_pte_copy[M(_PTE_SIZE) + 16];

// A bump allocator over a fixed pool that remembers its high-water mark
// across reset() (the temp allocator is reset after every kernel/delegate).
class PeakAllocator final : public MemoryAllocator {
 public:
  PeakAllocator(uint32_t size, uint8_t* base) : MemoryAllocator(size, base) {}
  void* allocate(size_t size, size_t alignment) override {
    void* p = MemoryAllocator::allocate(size, alignment);
    if (p != nullptr && used_size() > peak_) {
      peak_ = used_size();
    }
    failed_ = failed_ || p == nullptr;
    return p;
  }
  size_t peak() const {
    return peak_;
  }
  bool failed() const {
    return failed_;
  }

 private:
  size_t peak_ = 0;
  bool failed_ = false;
};

// Semihosting SYS_GET_CMDLINE: "image arg arg ..." into buf.
bool get_cmdline(char* buf, int cap) {
  struct {
    char* buf;
    int len;
  } block = {buf, cap};
  register int r0 __asm__("r0") = 0x15;
  register void* r1 __asm__("r1") = &block;
  __asm__ volatile("bkpt 0xab" : "+r"(r0) : "r"(r1) : "memory");
  return r0 == 0;
}

int usage_error(const char* what, const char* arg) {
  std::printf("ethosu_ng_fw: ERROR command line: %s: '%s'\n", what, arg);
  return kExitUsage;
}

int fail(const char* step, Error e, const char* detail) {
  std::printf(
      "ethosu_ng_fw: ERROR %s: %s (error %d)%s\n",
      step,
      executorch::runtime::to_string(e),
      static_cast<int>(e),
      detail);
  return kExitError;
}

bool parse_size(const char* text, size_t* out) {
  char* end = nullptr;
  const unsigned long v = std::strtoul(text, &end, 10);
  if (end == text || *end != '\0') {
    return false;
  }
  *out = v;
  return true;
}

void print_pool(const char* name, size_t used, size_t given, size_t size) {
  std::printf(
      "ethosu_ng_fw: pool %s used %lu given %lu size %lu\n",
      name,
      static_cast<unsigned long>(used),
      static_cast<unsigned long>(given),
      static_cast<unsigned long>(size));
}

// Ticks of a loop of exactly `instructions` instructions (subs + bne per iteration).
uint64_t calibration_ticks(uint32_t instructions) {
  uint32_t n = instructions / 2;
  const uint64_t t0 = ethosu_ng_fw_ticks();
  __asm volatile("1: subs %0, %0, #1\n bne 1b" : "+r"(n) : : "cc");
  return ethosu_ng_fw_ticks() - t0;
}

int run() {
  static char cmdline[512];
  const char* input_path = nullptr;
  size_t pte_offset = 0;
  size_t flip = static_cast<size_t>(-1);
  bool pte_in_ram = false;
  if (get_cmdline(cmdline, sizeof(cmdline))) {
    std::strtok(cmdline, " "); // the image's own name
    for (char* arg = std::strtok(nullptr, " "); arg != nullptr;
         arg = std::strtok(nullptr, " ")) {
      char* eq = std::strchr(arg, '=');
      if (eq == nullptr) {
        return usage_error("expected key=value", arg);
      }
      *eq = '\0';
      const char* value = eq + 1;
      Pool* pool = nullptr;
      if (std::strcmp(arg, "in") == 0) {
        input_path = value;
        continue;
      }
      size_t n = 0;
      if (!parse_size(value, &n)) {
        return usage_error("not a byte count", value);
      }
      if (std::strcmp(arg, "pte_offset") == 0) {
        pte_offset = n;
        pte_in_ram = true;
      } else if (std::strcmp(arg, "flip") == 0) {
        flip = n;
        pte_in_ram = true;
      } else if (std::strcmp(arg, "method") == 0) {
        pool = &g_method;
      } else if (std::strcmp(arg, "temp") == 0) {
        pool = &g_temp;
      } else if (std::strcmp(arg, "fast") == 0) {
        pool = &g_fast;
      } else {
        for (size_t k = 0; k < M(_PLANNED_ARENA_COUNT); ++k) {
          if (std::strcmp(arg, g_arenas[k].name) == 0) {
            pool = &g_arenas[k];
          }
        }
        if (pool == nullptr) {
          return usage_error("unknown key", arg);
        }
      }
      if (pool != nullptr) {
        if (n > pool->size) {
          return usage_error("more than the pool holds", arg);
        }
        pool->given = n;
      }
    }
  }
  if (pte_offset >= 16 || (flip != static_cast<size_t>(-1) && flip >= M(_PTE_SIZE))) {
    return usage_error("pte_offset must be < 16 and flip inside the program", "pte_offset/flip");
  }

  const uint8_t* pte = PTE;
  if (pte_in_ram) {
    std::memcpy(g_pte_copy + pte_offset, PTE, M(_PTE_SIZE));
    if (flip != static_cast<size_t>(-1)) {
      g_pte_copy[pte_offset + flip] ^= 0xff;
    }
    pte = g_pte_copy + pte_offset;
  }

  executorch::runtime::runtime_init();
  ethosu_ng_fw_ticks_start();
  constexpr uint32_t kCalibrationInstructions = 4000000;
  std::printf("ethosu_ng_fw: calibration instructions %lu ticks %llu\n",
              static_cast<unsigned long>(kCalibrationInstructions),
              static_cast<unsigned long long>(calibration_ticks(kCalibrationInstructions)));
  if (g_fast.size > 0) {
    ethosu_ng_set_fast_scratch(g_fast.base, g_fast.given);
  }
  BufferDataLoader loader(pte, M(_PTE_SIZE));
  Result<Program> program = Program::load(&loader, Program::Verification::InternalConsistency);
  if (!program.ok()) {
    return fail("Program::load", program.error(), "");
  }
  const char* method_name = "forward";
  Result<executorch::runtime::MethodMeta> meta = program->method_meta(method_name);
  if (!meta.ok()) {
    return fail("method_meta", meta.error(), "");
  }
  if (meta->num_memory_planned_buffers() != M(_PLANNED_ARENA_COUNT)) {
    std::printf(
        "ethosu_ng_fw: ERROR the method plans %lu arenas, the image has %lu\n",
        static_cast<unsigned long>(meta->num_memory_planned_buffers()),
        static_cast<unsigned long>(M(_PLANNED_ARENA_COUNT)));
    return kExitError;
  }
  Span<uint8_t> spans[kMaxArenas];
  for (size_t k = 0; k < M(_PLANNED_ARENA_COUNT); ++k) {
    spans[k] = Span<uint8_t>(g_arenas[k].base, g_arenas[k].given);
  }
  HierarchicalAllocator planned(Span<Span<uint8_t>>(spans, M(_PLANNED_ARENA_COUNT)));
  PeakAllocator method_alloc(static_cast<uint32_t>(g_method.given), g_method.base);
  PeakAllocator temp_alloc(static_cast<uint32_t>(g_temp.given), g_temp.base);
  MemoryManager mm(&method_alloc, &planned, &temp_alloc);
  Result<Method> method = program->load_method(method_name, &mm);
  if (!method.ok()) {
    print_pool("method", method_alloc.peak(), g_method.given, g_method.size);
    return fail(
        "load_method",
        method.error(),
        method_alloc.failed() ? " (method allocator exhausted)" : "");
  }

  const size_t input_sizes[M(_INPUT_COUNT) + 1] = {
#define FW_IN(k) M(FW_CAT(_INPUT_, FW_CAT(k, _SIZE)))
#if M(_INPUT_COUNT) > 0
      FW_IN(0),
#endif
#if M(_INPUT_COUNT) > 1
      FW_IN(1),
#endif
#if M(_INPUT_COUNT) > 2
      FW_IN(2),
#endif
#if M(_INPUT_COUNT) > 3
      FW_IN(3),
#endif
      0};
  static_assert(M(_INPUT_COUNT) <= 4, "runner supports up to 4 inputs");
  if (method->inputs_size() != M(_INPUT_COUNT)) {
    std::printf("ethosu_ng_fw: ERROR the method takes %lu inputs, the header says %lu\n",
                static_cast<unsigned long>(method->inputs_size()),
                static_cast<unsigned long>(M(_INPUT_COUNT)));
    return kExitError;
  }
  FILE* in = nullptr;
  if (input_path != nullptr) {
    in = std::fopen(input_path, "rb");
    if (in == nullptr) {
      return usage_error("cannot open the input file", input_path);
    }
  }
  unsigned long runs = 0;
  for (;; ++runs) {
    // Every input, every run: an input's planned buffer holds intermediates
    // after the previous execute.
    bool got_all = true;
    for (size_t i = 0; i < M(_INPUT_COUNT); ++i) {
      EValue& v = method->mutable_input(i);
      if (!v.isTensor() || v.toTensor().nbytes() != input_sizes[i]) {
        std::printf("ethosu_ng_fw: ERROR input %lu is not a tensor of %lu bytes\n",
                    static_cast<unsigned long>(i), static_cast<unsigned long>(input_sizes[i]));
        return kExitError;
      }
      auto* dst = static_cast<uint8_t*>(v.toTensor().mutable_data_ptr());
      if (in == nullptr) {
        std::memset(dst, 0, input_sizes[i]);
      } else if (std::fread(dst, 1, input_sizes[i], in) != input_sizes[i]) {
        got_all = false;
        if (i != 0) {
          return usage_error("input file ends inside a run", input_path);
        }
        break;
      }
    }
    if (!got_all || (in == nullptr && runs == 1)) {
      break;
    }
    const uint64_t t0 = ethosu_ng_fw_ticks();
    const Error e = method->execute();
    const uint64_t ticks = ethosu_ng_fw_ticks() - t0;
    if (e != Error::Ok) {
      print_pool("temp", temp_alloc.peak(), g_temp.given, g_temp.size);
      return fail("execute", e, temp_alloc.failed() ? " (temp allocator exhausted)" : "");
    }
    for (size_t o = 0; o < method->outputs_size(); ++o) {
      const EValue& v = method->get_output(o);
      if (!v.isTensor()) {
        std::printf("ethosu_ng_fw: ERROR output %lu is not a tensor\n",
                    static_cast<unsigned long>(o));
        return kExitError;
      }
      const auto* p = static_cast<const uint8_t*>(v.toTensor().const_data_ptr());
      std::printf("ethosu_ng_fw: run %lu output %lu ", runs, static_cast<unsigned long>(o));
      for (size_t b = 0; b < v.toTensor().nbytes(); ++b) {
        std::printf("%02x", p[b]);
      }
      std::printf("\n");
    }
    std::printf("ethosu_ng_fw: run %lu ticks %llu\n", runs, static_cast<unsigned long long>(ticks));
  }
  if (in != nullptr) {
    std::fclose(in);
  }
  if (runs == 0) {
    return usage_error("no complete run in the input file", input_path);
  }
  print_pool("method", method_alloc.peak(), g_method.given, g_method.size);
  print_pool("temp", temp_alloc.peak(), g_temp.given, g_temp.size);
  if (g_fast.size > 0) {
    // The delegate takes the whole fast scratch of a delegate that has one.
    print_pool("fast", g_fast.given, g_fast.given, g_fast.size);
  }
  for (size_t k = 0; k < M(_PLANNED_ARENA_COUNT); ++k) {
    // The planned arenas are used as planned: their high-water mark is their size.
    print_pool(g_arenas[k].name, g_arenas[k].given, g_arenas[k].given, g_arenas[k].size);
  }
  unsigned long model_peak = 0, model_size = 0;
  ethosu_ng_fw_npu_model_arena(&model_peak, &model_size);
  // The NPU model's working memory: not a pool of the plan (a device has the NPU instead).
  std::printf("ethosu_ng_fw: npu_model_arena used %lu size %lu\n", model_peak, model_size);
  std::printf("ethosu_ng_fw: runs %lu npu_invocations %lu\n", runs, ethosu_ng_fw_npu_invocations());
  std::printf("ethosu_ng_fw: OK\n");
  return 0;
}

} // namespace

int main() {
  const int rc = run();
  std::fflush(stdout);
  return rc;
}
