// SPDX-License-Identifier: BSD-3-Clause
// libFuzzer target: blob parsing + EthosUNGBackend init/execute with fuzzed IO.
//
// Input layout
//   [blob][trailer]   the header's total_size field (bytes 8..11) splits the
//                     input when 64 <= total_size <= input size; otherwise the
//                     whole input is the blob and the trailer is empty.
//   A real blob (tests/runtime/corpus/seeds/) is therefore a complete input:
//   an empty trailer reads as all zeros, which means "matching, contiguous
//   tensors, enough memory, driver succeeds" and reaches the NPU driver.
//
// The trailer is a stream of option bytes (0 once exhausted): blob base
// misalignment and checksum handling, runtime/temp allocator sizes, a
// fast-scratch SRAM area, the driver's result, the argument count, then per
// argument: EValue kind, dtype, shape perturbation, dim order, shape dynamism
// and stride padding.
//
// Checksums: a mutated byte almost always breaks a CRC, and the parser checks
// the CRCs before the rules behind them, so unaided the fuzzer would stop at
// the checksums. For most inputs the harness therefore rewrites every
// checksum of its copy of the blob (testblob::seal, hostile layouts
// tolerated) before parsing; when the first option byte is 0x80..0xEF it
// leaves them as they are, so the checksum paths are fuzzed too. Fixing up
// here rather than giving the parser a "skip checksums" switch keeps the
// parser under test the one the device runs, with no bypass to misuse.
//
// Oracles besides ASan/UBSan (everything is heap-allocated at its exact size):
//   - the fake NPU driver checks the invariants init/execute promise it
//     (sections inside the blob, IO inside a 16-aligned scratch of
//     scratch_size bytes, fast scratch present iff its size is non-zero) and
//     that every input sits in scratch in the entry's dim order;
//   - it writes deterministic bytes over every output region, and a
//     successful execute must have copied exactly those into every output
//     tensor element (through the tensor's own strides);
//   - a successful execute needs arguments that match the IO table.
// A violated oracle prints why and calls abort().
//
// Set FUZZ_DELEGATE_LOG=1 to see the runtime's ET_LOG lines and each execute's
// result (silenced by default: they cost more than the rest of an iteration).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <vector>

#include <executorch/runtime/backend/interface.h>
#include <executorch/runtime/core/evalue.h>
#include <executorch/runtime/core/exec_aten/util/scalar_type_util.h>
#include <executorch/runtime/core/memory_allocator.h>
#include <executorch/runtime/platform/platform.h>
#include <executorch/runtime/platform/runtime.h>

#include <ethosu_ng/backend.h>
#include <ethosu_ng/blob.h>
#include <ethosu_ng/npu_driver.h>

#include "../tests/blob_builder.h"

using executorch::aten::ScalarType;
using executorch::aten::Tensor;
using executorch::aten::TensorImpl;
using executorch::aten::TensorShapeDynamism;
using executorch::runtime::ArrayRef;
using executorch::runtime::BackendExecutionContext;
using executorch::runtime::BackendInitContext;
using executorch::runtime::BackendInterface;
using executorch::runtime::CompileSpec;
using executorch::runtime::DelegateHandle;
using executorch::runtime::Error;
using executorch::runtime::EValue;
using executorch::runtime::FreeableBuffer;
using executorch::runtime::MemoryAllocator;
using executorch::runtime::Span;

namespace {

// Harness limits (not runtime limits): keep one iteration cheap.
constexpr size_t kMaxTensorBytes = size_t{1} << 20;
constexpr size_t kMaxTempBytes = size_t{16} << 20;
constexpr int64_t kMaxOracleElems = int64_t{1} << 16;
constexpr int kMaxTensorRank = 8;

[[noreturn]] void fail(const char* what, long long a = 0, long long b = 0) {
  std::fprintf(stderr, "fuzz_delegate: ORACLE VIOLATED: %s (%lld, %lld)\n", what, a, b);
  std::abort();
}

uint32_t ld32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// Option bytes; 0 after the end so an empty trailer means "all defaults".
struct Reader {
  const uint8_t* p;
  size_t n;
  uint8_t u8() {
    if (n == 0) {
      return 0;
    }
    --n;
    return *p++;
  }
};

// Exactly `size` bytes, 16-aligned (+misalign), so ASan sees any overrun.
struct AlignedBuf {
  uint8_t* raw = nullptr;
  uint8_t* ptr = nullptr;
  AlignedBuf(size_t size, size_t misalign = 0) {
    raw = static_cast<uint8_t*>(::operator new[](size + misalign, std::align_val_t(16)));
    ptr = raw + misalign;
  }
  ~AlignedBuf() {
    ::operator delete[](raw, std::align_val_t(16));
  }
  AlignedBuf(const AlignedBuf&) = delete;
  AlignedBuf& operator=(const AlignedBuf&) = delete;
};

bool scalar_type_for(uint8_t code, ScalarType* out) {
  switch (code) {
    case 1: *out = ScalarType::Char; return true;
    case 2: *out = ScalarType::Byte; return true;
    case 3: *out = ScalarType::Short; return true;
    case 4: *out = ScalarType::UInt16; return true;
    case 5: *out = ScalarType::Int; return true;
    default: return false;
  }
}

const ScalarType kAnyDtype[8] = {
    ScalarType::Char, ScalarType::Byte, ScalarType::Short, ScalarType::UInt16,
    ScalarType::Int,  ScalarType::Float, ScalarType::Long,  ScalarType::Bool};

uint8_t fill_byte(size_t arg, size_t i) {
  return static_cast<uint8_t>(i * 13 + arg * 29 + 7);
}
uint8_t npu_byte(size_t out, size_t j) {
  return static_cast<uint8_t>(j * 31 + out * 7 + 1);
}

// One delegate argument.
struct Arg {
  enum Kind { kTensor, kInt, kNone, kNull } kind = kTensor;
  int rank = 0;
  int32_t sizes[kMaxTensorRank] = {};
  uint8_t order[kMaxTensorRank] = {};
  int32_t strides[kMaxTensorRank] = {};
  size_t elem = 1;
  size_t alloc_bytes = 0;
  std::unique_ptr<uint8_t[]> data;
  std::unique_ptr<TensorImpl> impl;
  EValue value;
};

// Logical index -> byte offset walker over `rank` dims of `sizes`.
template <typename F>
void for_each_index(int rank, const int64_t* sizes, F f) {
  int64_t idx[kMaxTensorRank] = {};
  for (int i = 0; i < rank; ++i) {
    if (sizes[i] == 0) {
      return;
    }
  }
  for (;;) {
    f(idx);
    int k = rank - 1;
    for (; k >= 0; --k) {
      if (++idx[k] < sizes[k]) {
        break;
      }
      idx[k] = 0;
    }
    if (k < 0) {
      return;
    }
  }
}

// Strides (elements) of the NPU's dense buffer for entry `e` (independent of
// the runtime's dense_strides).
void npu_strides(const ethosu_ng::IoEntry& e, int64_t* st) {
  int64_t s = 1;
  for (int i = e.rank - 1; i >= 0; --i) {
    st[e.dim_order[i]] = s;
    s *= e.shape[e.dim_order[i]];
  }
}

// Elements to check, -1 to skip: too many, or none (a zero-size entry's other
// dims may be huge, so its strides must not be formed).
int64_t oracle_numel(const ethosu_ng::IoEntry& e) {
  const uint64_t n = e.numel();
  return n == 0 || n > static_cast<uint64_t>(kMaxOracleElems) ? -1 : static_cast<int64_t>(n);
}

// Builds argument `a` for entry `e` (index `idx` among all arguments) from
// option bytes; all zeros gives a dense contiguous tensor matching `e`.
void build_arg(Arg& a, const ethosu_ng::IoEntry* e, size_t idx, Reader& r, bool is_output) {
  const uint8_t kind = r.u8();
  const uint8_t dt = r.u8();
  const uint8_t shp = r.u8();
  const uint8_t shp_arg = r.u8();
  const uint8_t ord = r.u8();
  const uint8_t dyn = r.u8();
  const uint8_t pad = r.u8();
  switch (kind % 16) {
    case 1: a.kind = Arg::kInt; a.value = EValue(static_cast<int64_t>(shp_arg)); return;
    case 2: a.kind = Arg::kNone; return;
    case 3: a.kind = Arg::kNull; return;
    default: break;
  }
  const bool null_data = kind % 16 == 4;

  ScalarType type = ScalarType::Char;
  if (dt != 0 || e == nullptr || !scalar_type_for(e->dtype, &type)) {
    type = kAnyDtype[dt % 8];
  }
  a.elem = executorch::runtime::elementSize(type);

  // Shape: the entry's (dims clamped to int32), then one perturbation.
  int rank = e != nullptr ? e->rank : 1;
  int64_t sz[kMaxTensorRank + 1] = {};
  for (int i = 0; i < rank; ++i) {
    sz[i] = e != nullptr ? int64_t{e->shape[i]} : 1;
    if (sz[i] > 0x7FFFFFFF) {
      sz[i] = 0x7FFFFFFF;
    }
  }
  switch (shp % 8) {
    case 1: // drop the last dim
      if (rank > 0) --rank;
      break;
    case 2: // append a dim
      if (rank < kMaxTensorRank) sz[rank++] = shp_arg % 3;
      break;
    case 3: // grow one dim
      if (rank > 0) sz[shp_arg % rank] += 1 + (shp_arg >> 6);
      break;
    case 4: // shrink one dim
      if (rank > 0 && sz[shp_arg % rank] > 0) sz[shp_arg % rank] -= 1;
      break;
    case 5: { // arbitrary small shape
      rank = shp_arg % (kMaxTensorRank + 1);
      for (int i = 0; i < rank; ++i) sz[i] = 1 + (r.u8() % 5);
      break;
    }
    case 6: // swap two dims (same numel, other shape)
      if (rank > 1) {
        const int i = shp_arg % rank;
        const int j = (shp_arg / rank) % rank;
        const int64_t t = sz[i];
        sz[i] = sz[j];
        sz[j] = t;
      }
      break;
    default:
      break;
  }
  // Sizes are int32 in ExecuTorch (a negative one aborts in TensorImpl).
  for (int i = 0; i < rank; ++i) {
    if (sz[i] > 0x7FFFFFFF) sz[i] = 0x7FFFFFFF;
  }
  // ExecuTorch computes numel as a signed product: keep it representable.
  // (Only reachable for hostile zero-size entries like [0, 2^31-1, ...].)
  {
    long double prod = 1;
    for (int i = 0; i < rank; ++i) prod *= sz[i] > 0 ? static_cast<long double>(sz[i]) : 1.0L;
    if (prod > static_cast<long double>(int64_t{1} << 40)) {
      for (int i = 0; i < rank; ++i) sz[i] = sz[i] > 255 ? 255 : sz[i];
    }
  }
  a.rank = rank;
  for (int i = 0; i < rank; ++i) a.sizes[i] = static_cast<int32_t>(sz[i]);

  // Dim order: permutation number `ord` (Lehmer code), 0 = contiguous.
  {
    uint8_t avail[kMaxTensorRank];
    for (int i = 0; i < rank; ++i) avail[i] = static_cast<uint8_t>(i);
    unsigned code = ord;
    for (int i = 0; i < rank; ++i) {
      const int left = rank - i;
      const int pick = static_cast<int>(code % left);
      code /= left;
      a.order[i] = avail[pick];
      for (int j = pick; j + 1 < left; ++j) avail[j] = avail[j + 1];
    }
  }
  // Strides in that order, optionally padded (a tensor view into a bigger
  // buffer); computed in 64 bits, dropped to dense if they do not fit int32.
  int64_t st[kMaxTensorRank];
  int64_t s = 1;
  bool fits = true;
  for (int i = rank - 1; i >= 0; --i) {
    const int d = a.order[i];
    st[d] = s;
    const int level = rank - 1 - i;
    const int64_t extra = ((pad >> (level % 8)) & 1) ? 1 + level % 3 : 0;
    s = s * (sz[d] > 0 ? sz[d] : 1) + extra;
    fits = fits && s <= 0x7FFFFFFF;
  }
  if (!fits) {
    s = 1;
    for (int i = rank - 1; i >= 0; --i) {
      st[a.order[i]] = s;
      s *= sz[a.order[i]] > 0 ? sz[a.order[i]] : 1;
    }
  }
  int64_t numel = 1;
  int64_t span = 1; // elements the strides reach
  for (int i = 0; i < rank; ++i) {
    a.strides[i] = static_cast<int32_t>(st[i]);
    numel *= sz[i];
    span += (sz[i] - 1) * st[i];
  }
  if (numel == 0) span = 0;
  const TensorShapeDynamism dynamism = dyn % 3 == 1 ? TensorShapeDynamism::DYNAMIC_BOUND
      : dyn % 3 == 2                                ? TensorShapeDynamism::DYNAMIC_UNBOUND
                                                    : TensorShapeDynamism::STATIC;
  const uint64_t bytes = static_cast<uint64_t>(span) * a.elem;
  if (!null_data && bytes <= kMaxTensorBytes) {
    a.alloc_bytes = static_cast<size_t>(bytes);
    a.data.reset(new uint8_t[a.alloc_bytes ? a.alloc_bytes : 1]);
    for (size_t i = 0; i < a.alloc_bytes; ++i) {
      a.data[i] = is_output ? 0xEE : fill_byte(idx, i);
    }
  }
  a.impl.reset(new TensorImpl(type, rank, a.sizes, a.data.get(), a.order, a.strides, dynamism));
  a.value = EValue(Tensor(a.impl.get()));
}

// Which inputs the driver can check: those not overlapping another input in
// scratch (a later copy may legitimately overwrite an earlier one).
struct Expect {
  const ethosu_ng::Blob* blob = nullptr;
  std::vector<Arg>* args = nullptr;
  std::vector<bool> check_input;
  const uint8_t* scratch = nullptr; // what the driver was given
  bool active = false;
  int calls = 0;
};
Expect g_expect;
bool g_verbose = false; // FUZZ_DELEGATE_LOG: runtime log lines + one line per call

bool inside(const uint8_t* p, size_t n, const uint8_t* base, size_t size) {
  return p >= base && static_cast<size_t>(p - base) <= size && n <= size - static_cast<size_t>(p - base);
}

// Fake NPU: checks what the backend promises, then writes npu_byte() over
// every output region.
struct FuzzDriver final : ethosu_ng::NpuDriver {
  Error result = Error::Ok;
  Error invoke(const uint8_t* cmd, size_t cmd_size, const uint8_t* weights, size_t weights_size,
               uint8_t* scratch, size_t scratch_size, uint8_t* fast, size_t fast_size,
               const ethosu_ng::Blob& blob) override {
    if (!g_expect.active) fail("driver invoked outside execute");
    ++g_expect.calls;
    g_expect.scratch = scratch;
    const ethosu_ng::Blob& b = *g_expect.blob;
    if (blob.data() != b.data() || blob.size() != b.size()) fail("driver got another blob");
    if (!inside(cmd, cmd_size, b.data(), b.size())) fail("command stream outside blob", cmd_size);
    if (!inside(weights, weights_size, b.data(), b.size())) fail("weights outside blob", weights_size);
    if (blob.tosa().present() && !inside(blob.tosa().data, blob.tosa().size, b.data(), b.size()))
      fail("tosa outside blob");
    if (scratch_size != blob.scratch_size()) fail("scratch size", scratch_size, blob.scratch_size());
    if (scratch_size > 0 && (scratch == nullptr || reinterpret_cast<uintptr_t>(scratch) % 16 != 0))
      fail("scratch null or misaligned");
    if (fast_size != blob.fast_scratch_size()) fail("fast scratch size", fast_size);
    if ((fast_size > 0) != (fast != nullptr)) fail("fast scratch pointer/size disagree", fast_size);
    if (fast != nullptr && reinterpret_cast<uintptr_t>(fast) % 16 != 0) fail("fast scratch misaligned");
    if (fast != nullptr) {
      fast[0] = 0x5A; // ASan: the area is really there
      fast[fast_size - 1] = 0x5A;
    }
    const size_t n_in = blob.num_inputs();
    for (size_t k = 0; k < n_in + blob.num_outputs(); ++k) {
      const ethosu_ng::IoEntry e = k < n_in ? blob.input(k) : blob.output(k - n_in);
      if (e.region != 1) fail("IO outside region 1 reached the driver", static_cast<long long>(k));
      if (uint64_t{e.offset} + e.byte_size > scratch_size)
        fail("IO outside scratch", static_cast<long long>(k), e.offset);
    }
    // Inputs: each element where the entry's dim order puts it.
    for (size_t i = 0; i < n_in; ++i) {
      if (!g_expect.check_input[i]) continue;
      const ethosu_ng::IoEntry e = blob.input(i);
      const int64_t n = oracle_numel(e);
      if (n < 0) continue;
      const Arg& a = (*g_expect.args)[i];
      int64_t npu_st[ethosu_ng::kMaxRank];
      npu_strides(e, npu_st);
      int64_t sizes[ethosu_ng::kMaxRank];
      for (int d = 0; d < e.rank; ++d) sizes[d] = e.shape[d];
      for_each_index(e.rank, sizes, [&](const int64_t* ix) {
        int64_t no = 0, to = 0;
        for (int d = 0; d < e.rank; ++d) {
          no += ix[d] * npu_st[d];
          to += ix[d] * a.strides[d];
        }
        if (std::memcmp(scratch + e.offset + no * e.elem_size, &a.data[to * e.elem_size], e.elem_size) != 0)
          fail("input element not where the NPU expects it", static_cast<long long>(i), no);
      });
    }
    if (result != Error::Ok) return result;
    for (size_t o = 0; o < blob.num_outputs(); ++o) {
      const ethosu_ng::IoEntry e = blob.output(o);
      for (uint32_t j = 0; j < e.byte_size; ++j) scratch[e.offset + j] = npu_byte(o, j);
    }
    return Error::Ok;
  }
};
FuzzDriver g_driver;

void silent_log(et_timestamp_t, et_pal_log_level_t, const char*, const char*, size_t, const char*,
                size_t) {}

} // namespace

namespace ethosu_ng {
NpuDriver& platform_driver() {
  return g_driver;
}
} // namespace ethosu_ng

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  executorch::runtime::runtime_init();
  const char* log = std::getenv("FUZZ_DELEGATE_LOG");
  g_verbose = log != nullptr && log[0] != '0';
  if (!g_verbose) {
    executorch::runtime::register_pal(
        executorch::runtime::PalImpl::create(silent_log, __FILE__));
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // Split blob / trailer.
  size_t blob_size = size;
  if (size >= 12) {
    const uint32_t total = ld32(data + 8);
    if (total >= ethosu_ng::kHeaderSize && total <= size) blob_size = total;
  }
  Reader r{data + blob_size, size - blob_size};

  const uint8_t g = r.u8();
  const size_t misalign = (g >> 4) == 0xF ? (g & 0xF) : 0;
  const bool keep_checksums = g >= 0x80 && g < 0xF0;
  AlignedBuf blob_mem(blob_size, misalign);
  if (blob_size) std::memcpy(blob_mem.ptr, data, blob_size);
  if (!keep_checksums) testblob::seal(blob_mem.ptr, blob_size);

  // 1. The parser on its own.
  executorch::runtime::Result<ethosu_ng::Blob> parsed = ethosu_ng::Blob::parse(blob_mem.ptr, blob_size);
  if (!parsed.ok()) {
    if (parsed.error() == Error::Ok) fail("parse failed with Error::Ok");
    return 0;
  }
  const ethosu_ng::Blob blob = parsed.get();
  const size_t n_in = blob.num_inputs();
  const size_t n_out = blob.num_outputs();
  // Out-of-range accessors return a zeroed entry.
  if (blob.input(n_in).rank != 0 || blob.output(n_out).dtype != 0) fail("out-of-range entry not zero");

  // 2. init.
  BackendInterface& backend = ethosu_ng::backend_instance();
  const uint8_t ra = r.u8();
  const size_t rt_size = ra == 0 ? 512 : size_t{ra} * 2;
  AlignedBuf rt_mem(rt_size);
  MemoryAllocator rt_alloc(static_cast<uint32_t>(rt_size), rt_mem.ptr);
  FreeableBuffer processed(blob_mem.ptr, blob_size, nullptr);
  BackendInitContext ictx(&rt_alloc);
  executorch::runtime::Result<DelegateHandle*> h = backend.init(ictx, &processed, ArrayRef<CompileSpec>());
  if (!h.ok()) {
    if (h.error() == Error::Ok) fail("init failed with Error::Ok");
    return 0;
  }
  DelegateHandle* handle = h.get();
  if (handle == nullptr) fail("init returned a null handle");

  // 3. execute.
  const uint8_t tm = r.u8();
  const uint8_t fs = r.u8();
  const uint8_t dr = r.u8();
  const uint8_t argc = r.u8();
  const uint8_t runs = r.u8();

  const uint64_t need = ((uint64_t{blob.scratch_size()} + 15) & ~uint64_t{15}) + blob.fast_scratch_size();
  uint64_t temp_size = need;
  if (tm >= 2) temp_size = need * tm / 256;
  if (temp_size > kMaxTempBytes) temp_size = kMaxTempBytes;
  AlignedBuf temp_mem(static_cast<size_t>(temp_size));
  MemoryAllocator temp_alloc(static_cast<uint32_t>(temp_size), temp_mem.ptr);
  MemoryAllocator* temp = tm == 1 ? nullptr : &temp_alloc;

  std::unique_ptr<AlignedBuf> sram;
  if (fs != 0) {
    const size_t sram_size = size_t{fs} * 16;
    sram.reset(new AlignedBuf(sram_size));
    ethosu_ng_set_fast_scratch(sram->ptr, sram_size);
  }
  g_driver.result = dr == 0xFF ? Error::Internal : Error::Ok;

  size_t n_args = n_in + n_out;
  if (argc == 1 && n_args > 0) --n_args;
  if (argc == 2) ++n_args;
  std::vector<Arg> args(n_args);
  std::vector<EValue*> argv(n_args);
  for (size_t k = 0; k < n_args; ++k) {
    ethosu_ng::IoEntry e;
    const ethosu_ng::IoEntry* ep = nullptr;
    if (k < n_in + n_out) {
      e = k < n_in ? blob.input(k) : blob.output(k - n_in);
      ep = &e;
    }
    build_arg(args[k], ep, k, r, k >= n_in);
    argv[k] = args[k].kind == Arg::kNull ? nullptr : &args[k].value;
  }

  g_expect.blob = &blob;
  g_expect.args = &args;
  g_expect.check_input.assign(n_in, true);
  for (size_t i = 0; i < n_in; ++i) {
    const ethosu_ng::IoEntry a = blob.input(i);
    for (size_t j = 0; j < n_in; ++j) {
      const ethosu_ng::IoEntry b = blob.input(j);
      if (i != j && a.byte_size && b.byte_size && a.offset < b.offset + uint64_t{b.byte_size} &&
          b.offset < a.offset + uint64_t{a.byte_size})
        g_expect.check_input[i] = false;
    }
  }

  for (int run = 0; run <= (runs & 1); ++run) {
    temp_alloc.reset();
    BackendExecutionContext ectx(nullptr, temp);
    g_expect.active = true;
    g_expect.calls = 0;
    const Error err = backend.execute(ectx, handle, Span<EValue*>(argv.data(), argv.size()));
    g_expect.active = false;
    if (g_verbose) {
      std::fprintf(stderr, "fuzz_delegate: execute %d -> 0x%x (%zu in, %zu out, %zu args)\n", run,
                   static_cast<unsigned>(err), n_in, n_out, n_args);
    }
    if (err != Error::Ok) {
      continue;
    }
    if (g_expect.calls != 1) fail("execute Ok without exactly one driver call", g_expect.calls);
    if (g_driver.result != Error::Ok) fail("driver error swallowed");
    if (n_args != n_in + n_out) fail("execute Ok with a wrong argument count", static_cast<long long>(n_args));
    // Outputs hold what the NPU wrote, element by element through the
    // tensor's (possibly resized) sizes/strides.
    const uint8_t* scratch = g_expect.scratch;
    for (size_t o = 0; o < n_out; ++o) {
      const ethosu_ng::IoEntry e = blob.output(o);
      Arg& a = args[n_in + o];
      if (a.kind != Arg::kTensor) fail("execute Ok with a non-tensor output", static_cast<long long>(o));
      const Tensor t = a.value.toTensor();
      if (t.dim() != e.rank) fail("output rank differs after Ok", static_cast<long long>(o));
      int64_t sizes[ethosu_ng::kMaxRank];
      for (int d = 0; d < e.rank; ++d) {
        sizes[d] = e.shape[d];
        if (t.size(d) != static_cast<int64_t>(e.shape[d])) fail("output shape differs after Ok", d);
      }
      ScalarType want;
      if (!scalar_type_for(e.dtype, &want) || t.scalar_type() != want) fail("output dtype differs after Ok");
      if (oracle_numel(e) < 0) continue;
      int64_t npu_st[ethosu_ng::kMaxRank];
      npu_strides(e, npu_st);
      const uint8_t* tdata = static_cast<const uint8_t*>(t.const_data_ptr());
      for_each_index(e.rank, sizes, [&](const int64_t* ix) {
        int64_t no = 0, to = 0;
        for (int d = 0; d < e.rank; ++d) {
          no += ix[d] * npu_st[d];
          to += ix[d] * t.strides()[d];
        }
        if (std::memcmp(tdata + to * e.elem_size, scratch + e.offset + no * e.elem_size, e.elem_size) != 0)
          fail("output element differs from what the NPU wrote", static_cast<long long>(o), no);
      });
    }
    for (size_t i = 0; i < n_in; ++i) {
      Arg& a = args[i];
      if (a.kind != Arg::kTensor) fail("execute Ok with a non-tensor input", static_cast<long long>(i));
      const ethosu_ng::IoEntry e = blob.input(i);
      ScalarType want;
      if (!scalar_type_for(e.dtype, &want) || a.value.toTensor().scalar_type() != want)
        fail("input dtype differs after Ok");
      for (size_t j = 0; j < a.alloc_bytes; ++j)
        if (a.data[j] != fill_byte(i, j)) fail("execute wrote into an input", static_cast<long long>(i));
    }
  }

  backend.destroy(handle);
  if (sram) ethosu_ng_set_fast_scratch(nullptr, 0);
  return 0;
}
