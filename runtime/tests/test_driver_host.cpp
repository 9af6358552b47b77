// SPDX-License-Identifier: BSD-3-Clause
// Host TOSA driver through the backend: the callback gets the TOSA section
// and the IO buffers in NPU layout with memory-order shapes; missing TOSA,
// missing callback and a failing callback are Errors, not crashes.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include <executorch/runtime/backend/interface.h>
#include <executorch/runtime/core/evalue.h>
#include <executorch/runtime/core/memory_allocator.h>
#include <executorch/runtime/platform/runtime.h>

#include <ethosu_ng/backend.h>
#include <ethosu_ng/host_api.h>

#include "blob_builder.h"
#include "harness.h"

using executorch::aten::ScalarType;
using executorch::aten::Tensor;
using executorch::aten::TensorImpl;
using executorch::runtime::ArrayRef;
using executorch::runtime::BackendExecutionContext;
using executorch::runtime::BackendInitContext;
using executorch::runtime::CompileSpec;
using executorch::runtime::Error;
using executorch::runtime::EValue;
using executorch::runtime::FreeableBuffer;
using executorch::runtime::MemoryAllocator;
using executorch::runtime::Span;

namespace {

struct Seen {
  std::vector<uint8_t> tosa;
  int n_in = 0, n_out = 0;
  int64_t in_shape[6] = {};
  int in_rank = 0, in_dtype = 0;
  int64_t in_bytes = 0;
  bool fail = false;
} g_seen;

int fake_tosa(const uint8_t* tosa, size_t tosa_len, int n_in, const void* const* in_ptrs,
              const int* in_dtypes, const int* in_ranks, const int64_t* in_shapes,
              const int64_t* in_byte_sizes, int n_out, void* const* out_ptrs, const int*,
              const int*, const int64_t*, const int64_t* out_byte_sizes, char* err,
              size_t err_cap) {
  g_seen.tosa.assign(tosa, tosa + tosa_len);
  g_seen.n_in = n_in;
  g_seen.n_out = n_out;
  g_seen.in_rank = in_ranks[0];
  g_seen.in_dtype = in_dtypes[0];
  g_seen.in_bytes = in_byte_sizes[0];
  std::memcpy(g_seen.in_shape, in_shapes, sizeof(g_seen.in_shape));
  if (g_seen.fail) {
    std::snprintf(err, err_cap, "reference model said no");
    return 3;
  }
  const uint8_t* in = static_cast<const uint8_t*>(in_ptrs[0]);
  uint8_t* out = static_cast<uint8_t*>(out_ptrs[0]);
  for (int64_t i = 0; i < out_byte_sizes[0]; ++i) {
    out[i] = static_cast<uint8_t>(in[i] * 2);
  }
  return 0;
}

struct Tensor4 {
  int32_t sizes[4] = {1, 3, 4, 5};
  uint8_t order[4] = {0, 1, 2, 3};
  int32_t strides[4] = {60, 20, 5, 1};
  uint8_t data[60] = {};
  TensorImpl impl{ScalarType::Char, 4, sizes, data, order, strides};
  EValue value{Tensor(&impl)};
};

Error run(bool with_tosa) {
  testblob::Spec s;
  testblob::Io io;
  io.dtype = 1;
  io.shape = {1, 3, 4, 5};
  io.dim_order = {0, 2, 3, 1};
  s.inputs = {io};
  s.outputs = {io};
  s.has_tosa = with_tosa;
  s.tosa = {'T', 'O', 'S', 'A', 1, 2, 3};
  testblob::place(s);
  const auto bytes = testblob::build(s);
  testblob::Buffer buf(bytes);
  FreeableBuffer processed(buf.data(), buf.size(), nullptr);
  alignas(16) uint8_t rt_mem[256];
  alignas(16) uint8_t tmp_mem[1024];
  MemoryAllocator rt(sizeof(rt_mem), rt_mem);
  MemoryAllocator tmp(sizeof(tmp_mem), tmp_mem);
  auto* backend = executorch::runtime::get_backend_class("EthosUNGBackend");
  BackendInitContext ictx(&rt);
  auto h = backend->init(ictx, &processed, ArrayRef<CompileSpec>());
  if (!h.ok()) return h.error();
  Tensor4 in, out;
  for (int i = 0; i < 60; ++i) in.data[i] = static_cast<uint8_t>(i);
  EValue* args[2] = {&in.value, &out.value};
  BackendExecutionContext ectx(nullptr, &tmp);
  const Error e = backend->execute(ectx, h.get(), Span<EValue*>(args, 2));
  if (e == Error::Ok) {
    bool ok = true;
    for (int i = 0; i < 60; ++i) ok = ok && out.data[i] == static_cast<uint8_t>(2 * i);
    CHECK(ok);
  }
  backend->destroy(h.get());
  return e;
}

} // namespace

int main() {
  executorch::runtime::runtime_init();
  CHECK(ethosu_ng_host_abi_version() == ETHOSU_NG_HOST_ABI_VERSION);
  // No callback yet.
  CHECK(run(true) == Error::InvalidState);
  ethosu_ng_set_tosa_callback(&fake_tosa);
  const uint64_t before = ethosu_ng_host_invoke_count();
  CHECK(run(true) == Error::Ok);
  CHECK(ethosu_ng_host_invoke_count() == before + 1);
  CHECK((g_seen.tosa == std::vector<uint8_t>{'T', 'O', 'S', 'A', 1, 2, 3}));
  CHECK(g_seen.n_in == 1 && g_seen.n_out == 1 && g_seen.in_rank == 4 && g_seen.in_dtype == 1);
  CHECK(g_seen.in_bytes == 60);
  // Memory order of the NPU buffer: NHWC.
  CHECK(g_seen.in_shape[0] == 1 && g_seen.in_shape[1] == 4 && g_seen.in_shape[2] == 5 &&
        g_seen.in_shape[3] == 3 && g_seen.in_shape[4] == 0);
  // No TOSA section on the host: clean error, callback not called.
  const uint64_t n = ethosu_ng_host_invoke_count();
  CHECK(run(false) == Error::NotSupported);
  CHECK(ethosu_ng_host_invoke_count() == n);
  // Failing callback.
  g_seen.fail = true;
  CHECK(run(true) == Error::Internal);
  g_seen.fail = false;
  ethosu_ng_set_tosa_callback(nullptr);
  CHECK(run(true) == Error::InvalidState);
  return harness::finish("test_driver_host");
}
