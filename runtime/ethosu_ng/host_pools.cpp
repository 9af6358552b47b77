// SPDX-License-Identifier: BSD-3-Clause
// Host only: load and run a method with caller-sized memory pools, the way
// firmware does (Program::load + a MemoryManager over fixed buffers), and
// measure what each pool actually used. Backs ethosu_ng/memory_plan.py: the
// method allocator figure in the memory plan is this measurement, and the
// tests prove the plan by running with pools of exactly the planned sizes.
#include <ethosu_ng/host_api.h>

#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>

#include <executorch/extension/data_loader/buffer_data_loader.h>
#include <executorch/runtime/core/exec_aten/util/dim_order_util.h>
#include <executorch/runtime/core/hierarchical_allocator.h>
#include <executorch/runtime/core/memory_allocator.h>
#include <executorch/runtime/executor/memory_manager.h>
#include <executorch/runtime/executor/method.h>
#include <executorch/runtime/executor/program.h>

namespace {

using executorch::aten::DimOrderType;
using executorch::aten::SizesType;
using executorch::aten::StridesType;
using executorch::aten::Tensor;
using executorch::aten::TensorImpl;
using executorch::extension::BufferDataLoader;
using executorch::runtime::Error;
using executorch::runtime::EValue;
using executorch::runtime::HierarchicalAllocator;
using executorch::runtime::MemoryAllocator;
using executorch::runtime::MemoryManager;
using executorch::runtime::Method;
using executorch::runtime::MethodMeta;
using executorch::runtime::Program;
using executorch::runtime::Result;
using executorch::runtime::Span;

constexpr size_t kAlign = 16;
constexpr size_t kMaxArenas = 16;
constexpr size_t kMaxRank = 16;

// A bump allocator over a fixed buffer that remembers its high-water mark
// across reset() (the temp allocator is reset after every kernel/delegate).
class PeakAllocator final : public MemoryAllocator {
 public:
  PeakAllocator(uint32_t size, uint8_t* base) : MemoryAllocator(size, base) {}
  void* allocate(size_t size, size_t alignment) override {
    void* p = MemoryAllocator::allocate(size, alignment);
    if (p != nullptr && used_size() > peak_) {
      peak_ = used_size();
    }
    if (p == nullptr) {
      failed_ = true;
    }
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

// 16-byte aligned heap buffer (host only; firmware provides static arrays).
struct Buffer {
  uint8_t* p = nullptr;
  explicit Buffer(size_t n) {
    // A zero-byte pool still needs a distinct, valid address.
    p = static_cast<uint8_t*>(std::aligned_alloc(kAlign, ((n + kAlign) / kAlign) * kAlign));
  }
  ~Buffer() {
    std::free(p);
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
};

void set_err(char* err, size_t cap, const char* fmt, ...) {
  if (err == nullptr || cap == 0) {
    return;
  }
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(err, cap, fmt, ap);
  va_end(ap);
}

} // namespace

extern "C" ETHOSU_NG_EXPORT int ethosu_ng_host_run_with_pools(
    const uint8_t* pte,
    size_t pte_len,
    const char* method_name,
    const size_t* arena_sizes,
    size_t n_arenas,
    size_t method_allocator_size,
    size_t temp_allocator_size,
    const void* const* inputs,
    const size_t* input_bytes,
    size_t n_inputs,
    void* const* outputs,
    const size_t* output_bytes,
    size_t n_outputs,
    ethosu_ng_pool_usage* usage,
    char* err,
    size_t err_cap) {
  if (usage == nullptr || pte == nullptr || method_name == nullptr ||
      (n_arenas > 0 && arena_sizes == nullptr) || n_arenas > kMaxArenas ||
      method_allocator_size > UINT32_MAX || temp_allocator_size > UINT32_MAX) {
    set_err(err, err_cap, "bad arguments");
    return ETHOSU_NG_POOLS_BAD_ARGUMENTS;
  }
  std::memset(usage, 0, sizeof(*usage));
  BufferDataLoader loader(pte, pte_len);
  Result<Program> program = Program::load(&loader);
  if (!program.ok()) {
    usage->error = static_cast<int>(program.error());
    set_err(err, err_cap, "Program::load failed (error %d)", usage->error);
    return ETHOSU_NG_POOLS_LOAD_PROGRAM;
  }
  Result<MethodMeta> meta = program->method_meta(method_name);
  if (!meta.ok()) {
    usage->error = static_cast<int>(meta.error());
    set_err(err, err_cap, "program has no method '%s'", method_name);
    return ETHOSU_NG_POOLS_LOAD_PROGRAM;
  }
  if (meta->num_memory_planned_buffers() != n_arenas) {
    set_err(
        err,
        err_cap,
        "the method plans %zu arenas, %zu sizes given",
        meta->num_memory_planned_buffers(),
        n_arenas);
    return ETHOSU_NG_POOLS_BAD_ARGUMENTS;
  }

  std::unique_ptr<Buffer> arena_bufs[kMaxArenas];
  Span<uint8_t> spans[kMaxArenas];
  for (size_t i = 0; i < n_arenas; ++i) {
    arena_bufs[i].reset(new Buffer(arena_sizes[i]));
    spans[i] = Span<uint8_t>(arena_bufs[i]->p, arena_sizes[i]);
  }
  HierarchicalAllocator planned(Span<Span<uint8_t>>(spans, n_arenas));
  Buffer method_buf(method_allocator_size);
  Buffer temp_buf(temp_allocator_size);
  PeakAllocator method_alloc(static_cast<uint32_t>(method_allocator_size), method_buf.p);
  PeakAllocator temp_alloc(static_cast<uint32_t>(temp_allocator_size), temp_buf.p);
  MemoryManager mm(&method_alloc, &planned, &temp_alloc);

  Result<Method> method = program->load_method(method_name, &mm);
  usage->method_allocator_used = method_alloc.peak();
  if (!method.ok()) {
    usage->error = static_cast<int>(method.error());
    set_err(
        err,
        err_cap,
        "load_method failed (error %d; method allocator %s after %zu bytes)",
        usage->error,
        method_alloc.failed() ? "exhausted" : "not exhausted",
        method_alloc.peak());
    return ETHOSU_NG_POOLS_LOAD_METHOD;
  }
  if (inputs == nullptr) {
    return ETHOSU_NG_POOLS_OK; // load only: the method allocator measurement
  }
  if (n_inputs != method->inputs_size() || n_outputs != method->outputs_size()) {
    set_err(
        err,
        err_cap,
        "the method takes %zu inputs and returns %zu outputs; %zu and %zu given",
        method->inputs_size(),
        method->outputs_size(),
        n_inputs,
        n_outputs);
    return ETHOSU_NG_POOLS_BAD_ARGUMENTS;
  }
  for (size_t i = 0; i < n_inputs; ++i) {
    auto info = meta->input_tensor_meta(i);
    if (!info.ok()) {
      set_err(err, err_cap, "input %zu is not a tensor", i);
      return ETHOSU_NG_POOLS_BAD_ARGUMENTS;
    }
    if (info->nbytes() != input_bytes[i] || info->sizes().size() > kMaxRank) {
      set_err(
          err,
          err_cap,
          "input %zu: the method takes %zu bytes, %zu given",
          i,
          info->nbytes(),
          input_bytes[i]);
      return ETHOSU_NG_POOLS_BAD_ARGUMENTS;
    }
    const size_t rank = info->sizes().size();
    SizesType sizes[kMaxRank];
    DimOrderType order[kMaxRank];
    StridesType strides[kMaxRank];
    for (size_t d = 0; d < rank; ++d) {
      sizes[d] = info->sizes()[d];
      order[d] = info->dim_order()[d];
    }
    if (executorch::runtime::dim_order_to_stride(sizes, order, rank, strides) != Error::Ok) {
      set_err(err, err_cap, "input %zu: bad dim order", i);
      return ETHOSU_NG_POOLS_BAD_ARGUMENTS;
    }
    TensorImpl impl(
        info->scalar_type(),
        static_cast<ssize_t>(rank),
        sizes,
        const_cast<void*>(inputs[i]),
        order,
        strides);
    const Error e = method->set_input(EValue(Tensor(&impl)), i);
    if (e != Error::Ok) {
      usage->error = static_cast<int>(e);
      set_err(err, err_cap, "set_input %zu failed (error %d)", i, usage->error);
      return ETHOSU_NG_POOLS_EXECUTE;
    }
  }
  const Error run = method->execute();
  usage->temp_allocator_peak = temp_alloc.peak();
  usage->method_allocator_used = method_alloc.peak();
  if (run != Error::Ok) {
    usage->error = static_cast<int>(run);
    set_err(
        err,
        err_cap,
        "execute failed (error %d; temp allocator %s, peak %zu of %zu bytes)",
        usage->error,
        temp_alloc.failed() ? "exhausted" : "not exhausted",
        temp_alloc.peak(),
        temp_allocator_size);
    return ETHOSU_NG_POOLS_EXECUTE;
  }
  for (size_t i = 0; i < n_outputs; ++i) {
    const EValue& v = method->get_output(i);
    if (!v.isTensor() || v.toTensor().nbytes() != output_bytes[i]) {
      set_err(err, err_cap, "output %zu: not a tensor of %zu bytes", i, output_bytes[i]);
      return ETHOSU_NG_POOLS_BAD_ARGUMENTS;
    }
    std::memcpy(outputs[i], v.toTensor().const_data_ptr(), output_bytes[i]);
  }
  return ETHOSU_NG_POOLS_OK;
}
