// SPDX-License-Identifier: BSD-3-Clause
#include <ethosu_ng/backend.h>

#include <cstdio>
#include <cstring>
#include <new>

#include <executorch/runtime/core/evalue.h>
#include <executorch/runtime/core/exec_aten/util/scalar_type_util.h>
#include <executorch/runtime/core/exec_aten/util/tensor_util.h>
#include <executorch/runtime/platform/log.h>

#include <ethosu_ng/blob.h>
#include <ethosu_ng/layout_copy.h>
#include <ethosu_ng/npu_driver.h>

namespace ethosu_ng {
namespace {

using executorch::aten::ScalarType;
using executorch::aten::SizesType;
using executorch::aten::Tensor;
using executorch::aten::TensorShapeDynamism;
using executorch::runtime::ArrayRef;
using executorch::runtime::BackendExecutionContext;
using executorch::runtime::BackendInitContext;
using executorch::runtime::BackendInterface;
using executorch::runtime::CompileSpec;
using executorch::runtime::DelegateHandle;
using executorch::runtime::EValue;
using executorch::runtime::FreeableBuffer;
using executorch::runtime::MemoryAllocator;
using executorch::runtime::Span;

// Platform-provided fast SRAM for region 2 (see ethosu_ng_set_fast_scratch).
uint8_t* g_fast_scratch = nullptr;
size_t g_fast_scratch_size = 0;

// Lives in the runtime allocator; the blob it views stays owned by the
// runtime's BackendDelegate (we never Free() the processed buffer).
struct Handle {
  Blob blob;
};

bool scalar_type_for(uint8_t code, ScalarType* out) {
  switch (code) {
    case static_cast<uint8_t>(DType::kInt8):
      *out = ScalarType::Char;
      return true;
    case static_cast<uint8_t>(DType::kUInt8):
      *out = ScalarType::Byte;
      return true;
    case static_cast<uint8_t>(DType::kInt16):
      *out = ScalarType::Short;
      return true;
    case static_cast<uint8_t>(DType::kUInt16):
      *out = ScalarType::UInt16;
      return true;
    case static_cast<uint8_t>(DType::kInt32):
      *out = ScalarType::Int;
      return true;
    case static_cast<uint8_t>(DType::kBool):
      *out = ScalarType::Bool;
      return true;
    default:
      return false;
  }
}

// "[1, 3, 8, 8]" into buf (truncated, always terminated).
template <typename T>
const char* shape_str(char* buf, size_t cap, const T* dims, size_t rank) {
  size_t pos = 0;
  int n = std::snprintf(buf, cap, "[");
  pos = n > 0 ? static_cast<size_t>(n) : 0;
  for (size_t i = 0; i < rank && pos < cap; ++i) {
    n = std::snprintf(
        buf + pos,
        cap - pos,
        i == 0 ? "%lld" : ", %lld",
        static_cast<long long>(dims[i]));
    pos += n > 0 ? static_cast<size_t>(n) : 0;
  }
  if (pos < cap) {
    std::snprintf(buf + pos, cap - pos, "]");
  }
  return buf;
}

bool same_shape(const Tensor& t, const IoEntry& e) {
  if (t.dim() != e.rank) {
    return false;
  }
  for (int i = 0; i < e.rank; ++i) {
    if (static_cast<int64_t>(t.size(i)) != static_cast<int64_t>(e.shape[i])) {
      return false;
    }
  }
  return true;
}

// Does the tensor's dim order name a permutation of its dims that its strides
// follow (outer dims clear of inner ones; padding allowed)?
bool laid_out_as_its_dim_order(const Tensor& t) {
  const int rank = static_cast<int>(t.dim());
  if (rank > kLayoutMaxRank || t.dim_order().size() != static_cast<size_t>(rank) ||
      t.strides().size() != static_cast<size_t>(rank)) {
    return false;
  }
  int64_t sizes[kLayoutMaxRank];
  int64_t strides[kLayoutMaxRank];
  for (int i = 0; i < rank; ++i) {
    sizes[i] = t.size(i);
    strides[i] = t.strides()[i];
  }
  return strides_follow(rank, sizes, strides, t.dim_order().data());
}

// Checks one delegate argument against its IO entry before the NPU runs.
// Outputs with a dynamic shape are resized to the entry's shape when they
// differ; a static output must already match.
Error check_arg(
    EValue* v,
    const IoEntry& e,
    const char* kind,
    size_t index,
    bool is_output) {
  if (v == nullptr || !v->isTensor()) {
    ET_LOG(
        Error,
        "EthosUNGBackend: %s %lu: expected a %s tensor, got EValue tag %d",
        kind,
        static_cast<unsigned long>(index),
        dtype_name(e.dtype),
        v == nullptr ? -1 : static_cast<int>(v->tag));
    return Error::InvalidArgument;
  }
  Tensor& t = v->toTensor();
  ScalarType want;
  if (!scalar_type_for(e.dtype, &want)) {
    // parse() rejects unknown codes; kept so a future code cannot slip by.
    ET_LOG(
        Error,
        "EthosUNGBackend: %s %lu: bad dtype code",
        kind,
        static_cast<unsigned long>(index));
    return Error::InvalidProgram;
  }
  if (t.scalar_type() != want) {
    ET_LOG(
        Error,
        "EthosUNGBackend: %s %lu: dtype mismatch: expected %s (%s), got %s",
        kind,
        static_cast<unsigned long>(index),
        dtype_name(e.dtype),
        executorch::runtime::toString(want),
        executorch::runtime::toString(t.scalar_type()));
    return Error::InvalidArgument;
  }
  char want_s[96];
  char got_s[96];
  bool resized = false;
  if (!same_shape(t, e) && is_output &&
      t.shape_dynamism() != TensorShapeDynamism::STATIC && t.dim() == e.rank) {
    SizesType sizes[kMaxRank];
    bool fits = true;
    for (int i = 0; i < e.rank; ++i) {
      fits = fits && e.shape[i] <= 0x7FFFFFFFu; // SizesType is int32
      sizes[i] = static_cast<SizesType>(e.shape[i]);
    }
    // Fails (without aborting) when the new shape exceeds the capacity.
    resized = fits &&
        executorch::runtime::resize_tensor(
            t, ArrayRef<SizesType>(sizes, e.rank)) == Error::Ok;
  }
  if (!resized && !same_shape(t, e)) {
    const uint64_t want_numel = e.numel();
    const uint64_t got_numel = static_cast<uint64_t>(t.numel());
    if (want_numel != got_numel) {
      ET_LOG(
          Error,
          "EthosUNGBackend: %s %lu: numel mismatch: expected %llu %s, got "
          "%llu %s%s",
          kind,
          static_cast<unsigned long>(index),
          static_cast<unsigned long long>(want_numel),
          shape_str(want_s, sizeof(want_s), e.shape, e.rank),
          static_cast<unsigned long long>(got_numel),
          shape_str(got_s, sizeof(got_s), t.sizes().data(), t.dim()),
          is_output && got_numel < want_numel ? " (output too small)" : "");
    } else {
      ET_LOG(
          Error,
          "EthosUNGBackend: %s %lu: shape mismatch: expected %s, got %s",
          kind,
          static_cast<unsigned long>(index),
          shape_str(want_s, sizeof(want_s), e.shape, e.rank),
          shape_str(got_s, sizeof(got_s), t.sizes().data(), t.dim()));
    }
    return Error::InvalidArgument;
  }
  if (e.byte_size != 0 && t.const_data_ptr() == nullptr) {
    ET_LOG(
        Error,
        "EthosUNGBackend: %s %lu: tensor has no data buffer",
        kind,
        static_cast<unsigned long>(index));
    return Error::InvalidArgument;
  }
  if (t.strides().size() != static_cast<size_t>(e.rank)) {
    ET_LOG(
        Error,
        "EthosUNGBackend: %s %lu: tensor has %lu strides for rank %u",
        kind,
        static_cast<unsigned long>(index),
        static_cast<unsigned long>(t.strides().size()),
        e.rank);
    return Error::InvalidArgument;
  }
  // The tensor's dim order is the program's (Method::set_input keeps it
  // whatever the caller's layout; check_input_layout is the check on that).
  // It may differ from the blob's, which is the NPU buffer's order: the layout
  // copy converts by the strides, so they must be the ones the dim order says.
  if (!laid_out_as_its_dim_order(t)) {
    char order_s[40];
    char npu_s[40];
    ET_LOG(
        Error,
        "EthosUNGBackend: %s %lu: strides %s contradict its dim order (%s); "
        "the NPU buffer is %s",
        kind,
        static_cast<unsigned long>(index),
        shape_str(got_s, sizeof(got_s), t.strides().data(), t.dim()),
        layout_name(
            order_s,
            sizeof(order_s),
            t.dim_order().data(),
            static_cast<int>(t.dim_order().size())),
        layout_name(npu_s, sizeof(npu_s), e.dim_order, e.rank));
    return Error::InvalidArgument;
  }
  return Error::Ok;
}

void tensor_layout(const Tensor& t, int rank, int64_t* sizes, int64_t* strides) {
  for (int i = 0; i < rank; ++i) {
    sizes[i] = t.size(i);
    strides[i] = t.strides()[i];
  }
}

class EthosUNGBackend final : public BackendInterface {
 public:
  // The instance is a static and never deleted, but the virtual destructor's
  // deleting variant still names a deallocation function; this no-op one keeps
  // the global operator delete (the heap) out of the firmware link.
  static void operator delete(void*) {}

  bool is_available() const override {
    return true;
  }

  executorch::runtime::Result<DelegateHandle*> init(
      BackendInitContext& context,
      FreeableBuffer* processed,
      ArrayRef<CompileSpec> compile_specs) const override {
    (void)compile_specs; // everything the runtime needs is in the blob
    if (processed == nullptr) {
      ET_LOG(Error, "EthosUNGBackend: init without a processed buffer");
      return Error::InvalidArgument;
    }
    executorch::runtime::Result<Blob> blob =
        Blob::parse(processed->data(), processed->size());
    if (!blob.ok()) {
      return blob.error();
    }
    // IO is copied into scratch at the entry's offset: the parser proved every
    // entry lives in region 1 (scratch) and fits in scratch_size.
    const Blob& b = blob.get();
    MemoryAllocator* alloc = context.get_runtime_allocator();
    if (alloc == nullptr) {
      ET_LOG(Error, "EthosUNGBackend: no runtime allocator");
      return Error::InvalidState;
    }
    Handle* h = alloc->allocateInstance<Handle>();
    if (h == nullptr) {
      ET_LOG(
          Error,
          "EthosUNGBackend: runtime allocator cannot hold the %lu-byte "
          "handle",
          static_cast<unsigned long>(sizeof(Handle)));
      return Error::MemoryAllocationFailed;
    }
    new (h) Handle{b};
    return h;
  }

  Error execute(
      BackendExecutionContext& context,
      DelegateHandle* handle,
      Span<EValue*> args) const override {
    if (handle == nullptr) {
      ET_LOG(Error, "EthosUNGBackend: execute with a null handle");
      return Error::DelegateInvalidHandle;
    }
    const Blob& blob = static_cast<const Handle*>(handle)->blob;
    const size_t n_in = blob.num_inputs();
    const size_t n_out = blob.num_outputs();
    if (args.size() != n_in + n_out) {
      ET_LOG(
          Error,
          "EthosUNGBackend: expected %lu arguments (%lu inputs + %lu "
          "outputs), got %lu",
          static_cast<unsigned long>(n_in + n_out),
          static_cast<unsigned long>(n_in),
          static_cast<unsigned long>(n_out),
          static_cast<unsigned long>(args.size()));
      return Error::InvalidArgument;
    }
    // Every argument is checked before any NPU or scratch work.
    for (size_t i = 0; i < n_in; ++i) {
      const Error err = check_arg(args[i], blob.input(i), "input", i, false);
      if (err != Error::Ok) {
        return err;
      }
    }
    for (size_t i = 0; i < n_out; ++i) {
      const Error err =
          check_arg(args[n_in + i], blob.output(i), "output", i, true);
      if (err != Error::Ok) {
        return err;
      }
    }

    // Scratch from the temp allocator: reset after every delegate call, so
    // delegates share it and nothing is reserved between calls.
    MemoryAllocator* temp = context.get_temp_allocator();
    if (temp == nullptr) {
      ET_LOG(
          Error,
          "EthosUNGBackend: no temp allocator; the Method needs one of at "
          "least %u bytes (+%u fast scratch, 16-byte aligned) for NPU scratch",
          static_cast<unsigned>(blob.scratch_size()),
          static_cast<unsigned>(blob.fast_scratch_size()));
      return Error::MemoryAllocationFailed;
    }
    uint8_t* scratch = nullptr;
    if (blob.scratch_size() > 0) {
      scratch = static_cast<uint8_t*>(temp->allocate(blob.scratch_size(), 16));
      if (scratch == nullptr) {
        ET_LOG(
            Error,
            "EthosUNGBackend: temp allocator cannot provide %u bytes of NPU "
            "scratch",
            static_cast<unsigned>(blob.scratch_size()));
        return Error::MemoryAllocationFailed;
      }
    }
    uint8_t* fast = nullptr;
    const size_t fast_size = blob.fast_scratch_size();
    if (fast_size > 0) {
      if (g_fast_scratch != nullptr && g_fast_scratch_size >= fast_size) {
        fast = g_fast_scratch;
      } else {
        fast = static_cast<uint8_t*>(temp->allocate(fast_size, 16));
        if (fast == nullptr) {
          ET_LOG(
              Error,
              "EthosUNGBackend: temp allocator cannot provide %lu bytes of "
              "fast scratch",
              static_cast<unsigned long>(fast_size));
          return Error::MemoryAllocationFailed;
        }
      }
    }

    int64_t sizes[kMaxRank];
    int64_t strides[kMaxRank];
    for (size_t i = 0; i < n_in; ++i) {
      const IoEntry e = blob.input(i);
      const Tensor& t = args[i]->toTensor();
      tensor_layout(t, e.rank, sizes, strides);
      const Error err = copy_to_dim_order(
          scratch + e.offset,
          e.dim_order,
          t.const_data_ptr(),
          strides,
          sizes,
          e.rank,
          e.elem_size);
      if (err != Error::Ok) {
        ET_LOG(
            Error,
            "EthosUNGBackend: input %lu: layout copy failed",
            static_cast<unsigned long>(i));
        return err;
      }
    }

    const Error run = platform_driver().invoke(
        blob.command_stream().data,
        blob.command_stream().size,
        blob.weights().data,
        blob.weights().size,
        scratch,
        blob.scratch_size(),
        fast,
        fast_size,
        blob);
    if (run != Error::Ok) {
      return run;
    }

    for (size_t i = 0; i < n_out; ++i) {
      const IoEntry e = blob.output(i);
      const Tensor& t = args[n_in + i]->toTensor();
      tensor_layout(t, e.rank, sizes, strides);
      const Error err = copy_from_dim_order(
          t.mutable_data_ptr(),
          strides,
          scratch + e.offset,
          e.dim_order,
          sizes,
          e.rank,
          e.elem_size);
      if (err != Error::Ok) {
        ET_LOG(
            Error,
            "EthosUNGBackend: output %lu: layout copy failed",
            static_cast<unsigned long>(i));
        return err;
      }
    }
    return Error::Ok;
  }

  void destroy(DelegateHandle* handle) const override {
    // Memory belongs to the runtime allocator; only end the object's life.
    if (handle != nullptr) {
      static_cast<Handle*>(handle)->~Handle();
    }
  }
};

} // namespace

Error check_tensor_layout(
    const char* kind,
    size_t index,
    const Tensor& t,
    const uint8_t* want_dim_order,
    int want_rank) {
  const Error err = check_dim_order(
      kind,
      index,
      want_dim_order,
      want_rank,
      t.dim_order().data(),
      static_cast<int>(t.dim_order().size()));
  if (err != Error::Ok) {
    return err;
  }
  if (!laid_out_as_its_dim_order(t)) {
    char order_s[40];
    ET_LOG(
        Error,
        "ethosu_ng: %s %lu: its strides contradict its dim order (%s)",
        kind,
        static_cast<unsigned long>(index),
        layout_name(
            order_s,
            sizeof(order_s),
            t.dim_order().data(),
            static_cast<int>(t.dim_order().size())));
    return Error::InvalidArgument;
  }
  return Error::Ok;
}

Error check_input_layout(
    const executorch::runtime::MethodMeta& meta,
    size_t index,
    const Tensor& input) {
  executorch::runtime::Result<executorch::runtime::TensorInfo> info =
      meta.input_tensor_meta(index);
  if (!info.ok()) {
    return info.error();
  }
  const Span<const uint8_t> want = info->dim_order();
  return check_tensor_layout(
      "input", index, input, want.data(), static_cast<int>(want.size()));
}

BackendInterface& backend_instance() {
  static EthosUNGBackend backend;
  return backend;
}

Error register_backend() {
  static bool registered = false;
  if (registered) {
    return Error::Ok;
  }
  const Error err = executorch::runtime::register_backend(
      executorch::runtime::Backend{kBackendName, &backend_instance()});
  if (err != Error::Ok) {
    ET_LOG(
        Error,
        "EthosUNGBackend: registration failed: 0x%x",
        static_cast<unsigned>(err));
    return err;
  }
  registered = true;
  return Error::Ok;
}

#ifndef ETHOSU_NG_NO_STATIC_REGISTRATION
namespace {
const Error g_registered = register_backend();
} // namespace
#endif

} // namespace ethosu_ng

extern "C" void ethosu_ng_set_fast_scratch(void* base, size_t size) {
  ethosu_ng::g_fast_scratch = static_cast<uint8_t*>(base);
  ethosu_ng::g_fast_scratch_size = base != nullptr ? size : 0;
}
