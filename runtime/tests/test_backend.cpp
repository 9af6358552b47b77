// SPDX-License-Identifier: BSD-3-Clause
// EthosUNGBackend with a fake NpuDriver: registration, init, the layout
// copies around the driver, and every argument mismatch rejected with an
// Error before the driver runs.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include <executorch/runtime/backend/interface.h>
#include <executorch/runtime/core/evalue.h>
#include <executorch/runtime/core/exec_aten/util/tensor_util.h>
#include <executorch/runtime/core/memory_allocator.h>
#include <executorch/runtime/platform/runtime.h>

#include <ethosu_ng/backend.h>
#include <ethosu_ng/npu_driver.h>

#include "blob_builder.h"
#include "harness.h"

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

// Fake NPU: adds 1 to every byte of input 0 and writes it to output 0 (both
// in the same NPU layout), recording what it saw.
struct FakeDriver : ethosu_ng::NpuDriver {
  int calls = 0;
  Error result = Error::Ok;
  std::vector<uint8_t> seen_input; // input 0 as it sat in scratch
  const uint8_t* cmd = nullptr;
  const uint8_t* weights = nullptr;
  uint8_t* scratch = nullptr;
  size_t scratch_size = 0;
  uint8_t* fast = nullptr;
  size_t fast_size = 0;

  Error invoke(const uint8_t* c, size_t, const uint8_t* w, size_t, uint8_t* s, size_t ss,
               uint8_t* f, size_t fs, const ethosu_ng::Blob& blob) override {
    ++calls;
    cmd = c;
    weights = w;
    scratch = s;
    scratch_size = ss;
    fast = f;
    fast_size = fs;
    if (result != Error::Ok) {
      return result;
    }
    if (blob.num_inputs() > 0 && blob.num_outputs() > 0) {
      const auto in = blob.input(0);
      const auto out = blob.output(0);
      seen_input.assign(s + in.offset, s + in.offset + in.byte_size);
      for (uint32_t i = 0; i < out.byte_size && i < in.byte_size; ++i) {
        s[out.offset + i] = static_cast<uint8_t>(s[in.offset + i] + 1);
      }
    }
    return Error::Ok;
  }
};

FakeDriver g_driver;

} // namespace

namespace ethosu_ng {
NpuDriver& platform_driver() {
  return g_driver;
}
} // namespace ethosu_ng

namespace {

// An ExecuTorch tensor with its own storage; `order` sets dim order/strides.
struct TestTensor {
  std::vector<int32_t> sizes;
  std::vector<uint8_t> order;
  std::vector<int32_t> strides;
  std::vector<uint8_t> data;
  TensorImpl impl;
  Tensor tensor;
  EValue value;

  static std::vector<int32_t> dense(const std::vector<int32_t>& sizes, const std::vector<uint8_t>& order) {
    std::vector<int32_t> st(sizes.size());
    int32_t s = 1;
    for (size_t i = sizes.size(); i-- > 0;) {
      st[order[i]] = s;
      s *= sizes[order[i]];
    }
    return st;
  }
  static std::vector<uint8_t> contiguous(size_t rank) {
    std::vector<uint8_t> o(rank);
    for (size_t i = 0; i < rank; ++i) o[i] = static_cast<uint8_t>(i);
    return o;
  }

  TestTensor(ScalarType type, std::vector<int32_t> sz, std::vector<uint8_t> ord = {},
             TensorShapeDynamism dyn = TensorShapeDynamism::STATIC, size_t capacity_elems = 0)
      : sizes(std::move(sz)),
        order(ord.empty() ? contiguous(sizes.size()) : std::move(ord)),
        strides(dense(sizes, order)),
        data(0),
        impl(type, static_cast<ssize_t>(sizes.size()), sizes.data(), nullptr, order.data(),
             strides.data(), dyn),
        tensor(&impl),
        value(tensor) {
    size_t n = 1;
    for (int32_t s : sizes) n *= static_cast<size_t>(s);
    n = std::max(n, capacity_elems);
    data.assign(n * executorch::runtime::elementSize(type) + 1, 0);
    impl.set_data(data.data());
  }
  // Value at logical NCHW index (rank 4, 1-byte elements).
  uint8_t& at(int n, int c, int h, int w) {
    return data[n * strides[0] + c * strides[1] + h * strides[2] + w * strides[3]];
  }
};

struct Fixture {
  std::vector<uint8_t> blob_bytes;
  std::unique_ptr<testblob::Buffer> blob;
  alignas(16) uint8_t runtime_mem[512];
  alignas(16) uint8_t temp_mem[4096];
  MemoryAllocator runtime_alloc{sizeof(runtime_mem), runtime_mem};
  MemoryAllocator temp_alloc{sizeof(temp_mem), temp_mem};
  BackendInterface* backend = executorch::runtime::get_backend_class("EthosUNGBackend");
  DelegateHandle* handle = nullptr;
  FreeableBuffer processed;

  explicit Fixture(const testblob::Spec& spec)
      : blob_bytes(testblob::build(spec)),
        blob(new testblob::Buffer(blob_bytes)),
        processed(blob->data(), blob->size(), nullptr) {}
  ~Fixture() {
    if (handle) backend->destroy(handle);
  }
  Error init() {
    BackendInitContext ctx(&runtime_alloc);
    auto r = backend->init(ctx, &processed, ArrayRef<CompileSpec>());
    if (!r.ok()) return r.error();
    handle = r.get();
    return Error::Ok;
  }
  Error execute(std::vector<EValue*> args, MemoryAllocator* temp) {
    temp_alloc.reset();
    BackendExecutionContext ctx(nullptr, temp);
    return backend->execute(ctx, handle, Span<EValue*>(args.data(), args.size()));
  }
  Error execute(std::vector<EValue*> args) {
    return execute(std::move(args), &temp_alloc);
  }
};

// Blob: input int8 (1,3,4,5) read by the NPU channels-last, output int8
// (1,3,4,5) written channels-last.
testblob::Spec conv_like(uint8_t dtype = 1) {
  testblob::Spec s;
  testblob::Io in;
  in.dtype = dtype;
  in.shape = {1, 3, 4, 5};
  in.dim_order = {0, 2, 3, 1};
  testblob::Io out = in;
  s.inputs = {in};
  s.outputs = {out};
  testblob::place(s);
  return s;
}

void test_registration() {
  CHECK(executorch::runtime::get_backend_class("EthosUNGBackend") == &ethosu_ng::backend_instance());
  CHECK(ethosu_ng::register_backend() == Error::Ok); // idempotent
  CHECK(ethosu_ng::backend_instance().is_available());
}

void test_roundtrip(bool channels_last_et) {
  Fixture f(conv_like());
  CHECK(f.init() == Error::Ok);
  const std::vector<uint8_t> ord = channels_last_et ? std::vector<uint8_t>{0, 2, 3, 1}
                                                    : std::vector<uint8_t>{};
  TestTensor in(ScalarType::Char, {1, 3, 4, 5}, ord);
  TestTensor out(ScalarType::Char, {1, 3, 4, 5}, ord);
  for (int c = 0; c < 3; ++c)
    for (int h = 0; h < 4; ++h)
      for (int w = 0; w < 5; ++w) in.at(0, c, h, w) = static_cast<uint8_t>(c * 100 + h * 10 + w);
  const int calls = g_driver.calls;
  CHECK(f.execute({&in.value, &out.value}) == Error::Ok);
  CHECK(g_driver.calls == calls + 1);
  // The NPU saw NHWC regardless of the ExecuTorch layout.
  bool nhwc = g_driver.seen_input.size() == 60;
  for (int h = 0; h < 4 && nhwc; ++h)
    for (int w = 0; w < 5; ++w)
      for (int c = 0; c < 3; ++c)
        nhwc = nhwc && g_driver.seen_input[(h * 5 + w) * 3 + c] == c * 100 + h * 10 + w;
  CHECK(nhwc);
  bool ok = true;
  for (int c = 0; c < 3; ++c)
    for (int h = 0; h < 4; ++h)
      for (int w = 0; w < 5; ++w)
        ok = ok && out.at(0, c, h, w) == static_cast<uint8_t>(c * 100 + h * 10 + w + 1);
  CHECK(ok);
  CHECK(out.data.back() == 0); // nothing written past the tensor
  // Driver got the blob's sections in place and 16-aligned scratch from temp.
  CHECK(g_driver.cmd == f.blob->data() + (g_driver.cmd - f.blob->data()));
  CHECK(g_driver.cmd > f.blob->data() && g_driver.cmd < f.blob->data() + f.blob->size());
  CHECK(reinterpret_cast<uintptr_t>(g_driver.scratch) % 16 == 0);
  CHECK(g_driver.scratch >= f.temp_mem && g_driver.scratch < f.temp_mem + sizeof(f.temp_mem));
  CHECK(g_driver.fast == nullptr && g_driver.fast_size == 0);
  // The handle lives in the runtime allocator.
  CHECK(reinterpret_cast<uint8_t*>(f.handle) >= f.runtime_mem &&
        reinterpret_cast<uint8_t*>(f.handle) < f.runtime_mem + sizeof(f.runtime_mem));
}

void test_dtypes() {
  struct Case {
    uint8_t code;
    ScalarType ok;
    ScalarType wrong;
  } cases[] = {
      {1, ScalarType::Char, ScalarType::Byte},   {2, ScalarType::Byte, ScalarType::Char},
      {3, ScalarType::Short, ScalarType::Char},  {4, ScalarType::UInt16, ScalarType::Short},
      {5, ScalarType::Int, ScalarType::Float},   {6, ScalarType::Bool, ScalarType::Byte},
  };
  for (const Case& c : cases) {
    Fixture f(conv_like(c.code));
    CHECK(f.init() == Error::Ok);
    TestTensor in(c.ok, {1, 3, 4, 5});
    TestTensor out(c.ok, {1, 3, 4, 5});
    CHECK(f.execute({&in.value, &out.value}) == Error::Ok);
    const int calls = g_driver.calls;
    TestTensor bad(c.wrong, {1, 3, 4, 5});
    CHECK(f.execute({&bad.value, &out.value}) == Error::InvalidArgument);
    CHECK(f.execute({&in.value, &bad.value}) == Error::InvalidArgument);
    TestTensor flt(ScalarType::Float, {1, 3, 4, 5});
    CHECK(f.execute({&flt.value, &out.value}) == Error::InvalidArgument);
    CHECK(g_driver.calls == calls); // rejected before the NPU
  }
}

void test_mismatches() {
  Fixture f(conv_like());
  CHECK(f.init() == Error::Ok);
  TestTensor in(ScalarType::Char, {1, 3, 4, 5});
  TestTensor out(ScalarType::Char, {1, 3, 4, 5});
  const int calls = g_driver.calls;

  TestTensor small_in(ScalarType::Char, {1, 3, 4, 4});
  CHECK(f.execute({&small_in.value, &out.value}) == Error::InvalidArgument);
  TestTensor big_in(ScalarType::Char, {1, 3, 4, 6});
  CHECK(f.execute({&big_in.value, &out.value}) == Error::InvalidArgument);
  // Same numel, other shape / rank.
  TestTensor perm_in(ScalarType::Char, {1, 4, 3, 5});
  CHECK(f.execute({&perm_in.value, &out.value}) == Error::InvalidArgument);
  TestTensor flat_in(ScalarType::Char, {60});
  CHECK(f.execute({&flat_in.value, &out.value}) == Error::InvalidArgument);
  // Output too small / too big (static shape).
  TestTensor small_out(ScalarType::Char, {1, 3, 4, 4});
  CHECK(f.execute({&in.value, &small_out.value}) == Error::InvalidArgument);
  TestTensor big_out(ScalarType::Char, {1, 3, 4, 6});
  CHECK(f.execute({&in.value, &big_out.value}) == Error::InvalidArgument);
  // Not a tensor.
  EValue scalar(static_cast<int64_t>(3));
  CHECK(f.execute({&scalar, &out.value}) == Error::InvalidArgument);
  CHECK(f.execute({&in.value, &scalar}) == Error::InvalidArgument);
  EValue none;
  CHECK(f.execute({&none, &out.value}) == Error::InvalidArgument);
  CHECK(f.execute({nullptr, &out.value}) == Error::InvalidArgument);
  // Argument count.
  CHECK(f.execute({&in.value}) == Error::InvalidArgument);
  CHECK(f.execute({&in.value, &out.value, &out.value}) == Error::InvalidArgument);
  CHECK(g_driver.calls == calls);

  // Dynamic-bound output with a different current shape is resized to the
  // entry's shape when capacity allows; beyond capacity it is an error.
  TestTensor dyn_out(ScalarType::Char, {1, 3, 4, 5}, {}, TensorShapeDynamism::DYNAMIC_BOUND);
  const int32_t shrunk[4] = {1, 3, 4, 2};
  CHECK(executorch::runtime::resize_tensor(dyn_out.tensor, ArrayRef<int32_t>(shrunk, 4)) == Error::Ok);
  CHECK(dyn_out.tensor.numel() == 24);
  CHECK(f.execute({&in.value, &dyn_out.value}) == Error::Ok);
  CHECK(dyn_out.tensor.size(3) == 5 && dyn_out.tensor.numel() == 60);
  TestTensor dyn_small(ScalarType::Char, {1, 3, 4, 2}, {}, TensorShapeDynamism::DYNAMIC_BOUND);
  CHECK(f.execute({&in.value, &dyn_small.value}) == Error::InvalidArgument);

  // Scratch: no temp allocator, too small a temp allocator.
  CHECK(f.execute({&in.value, &out.value}, nullptr) == Error::MemoryAllocationFailed);
  alignas(16) uint8_t tiny[32];
  MemoryAllocator tiny_alloc(sizeof(tiny), tiny);
  CHECK(f.execute({&in.value, &out.value}, &tiny_alloc) == Error::MemoryAllocationFailed);

  // Driver failure propagates.
  g_driver.result = Error::Internal;
  CHECK(f.execute({&in.value, &out.value}) == Error::Internal);
  g_driver.result = Error::Ok;

  // Null handle.
  BackendExecutionContext ctx(nullptr, &f.temp_alloc);
  EValue* args[2] = {&in.value, &out.value};
  CHECK(f.backend->execute(ctx, nullptr, Span<EValue*>(args, 2)) == Error::DelegateInvalidHandle);
}

void test_init_errors() {
  {
    auto s = conv_like();
    Fixture f(s);
    f.blob->data()[0] = 'X';
    CHECK(f.init() == Error::InvalidProgram);
  }
  {
    auto s = conv_like();
    s.inputs[0].region = 2; // a format rule: IO lives in region 1
    Fixture f(s);
    CHECK(f.init() == Error::InvalidProgram);
  }
  {
    // Runtime allocator too small for the handle.
    Fixture f(conv_like());
    MemoryAllocator none(8, f.runtime_mem);
    BackendInitContext ctx(&none);
    auto r = f.backend->init(ctx, &f.processed, ArrayRef<CompileSpec>());
    CHECK(!r.ok() && r.error() == Error::MemoryAllocationFailed);
  }
  {
    Fixture f(conv_like());
    BackendInitContext ctx(&f.runtime_alloc);
    auto r = f.backend->init(ctx, nullptr, ArrayRef<CompileSpec>());
    CHECK(!r.ok());
  }
}

void test_fast_scratch() {
  auto s = conv_like();
  s.fast_scratch = 256;
  {
    Fixture f(s);
    CHECK(f.init() == Error::Ok);
    TestTensor in(ScalarType::Char, {1, 3, 4, 5});
    TestTensor out(ScalarType::Char, {1, 3, 4, 5});
    CHECK(f.execute({&in.value, &out.value}) == Error::Ok);
    CHECK(g_driver.fast != nullptr && g_driver.fast_size == 256);
    CHECK(g_driver.fast >= f.temp_mem && g_driver.fast < f.temp_mem + sizeof(f.temp_mem));
    // A platform SRAM area big enough is used instead.
    alignas(16) static uint8_t sram[512];
    ethosu_ng_set_fast_scratch(sram, sizeof(sram));
    CHECK(f.execute({&in.value, &out.value}) == Error::Ok);
    CHECK(g_driver.fast == sram);
    ethosu_ng_set_fast_scratch(nullptr, 0);
  }
}

void test_multi_io() {
  // Two inputs (int16 rank 2 transposed by the NPU, int32 scalar), one
  // uint8 output rank 3: exercises offsets and element sizes.
  testblob::Spec s;
  testblob::Io a;
  a.dtype = 3;
  a.shape = {3, 5};
  a.dim_order = {1, 0};
  testblob::Io b;
  b.dtype = 5;
  testblob::Io o;
  o.dtype = 2;
  o.shape = {2, 3, 5};
  s.inputs = {a, b};
  s.outputs = {o};
  testblob::place(s);
  Fixture f(s);
  CHECK(f.init() == Error::Ok);
  TestTensor ta(ScalarType::Short, {3, 5});
  TestTensor tb(ScalarType::Int, {});
  TestTensor to(ScalarType::Byte, {2, 3, 5});
  for (int i = 0; i < 15; ++i) {
    const int16_t v = static_cast<int16_t>(1000 + i);
    std::memcpy(&ta.data[2 * i], &v, 2);
  }
  CHECK(f.execute({&ta.value, &tb.value, &to.value}) == Error::Ok);
  // NPU saw input 0 transposed (5,3) as int16 (driver recorded raw bytes).
  bool t = g_driver.seen_input.size() == 30;
  for (int r = 0; r < 3 && t; ++r)
    for (int c = 0; c < 5; ++c) {
      int16_t v;
      std::memcpy(&v, &g_driver.seen_input[2 * (c * 3 + r)], 2);
      t = t && v == 1000 + r * 5 + c;
    }
  CHECK(t);
  TestTensor bad_b(ScalarType::Int, {1});
  CHECK(f.execute({&ta.value, &bad_b.value, &to.value}) == Error::InvalidArgument);
}

// A (valid) blob whose output dim exceeds int32: a dynamic output must not be
// "resized" to a negative size; it is a shape mismatch.
void test_huge_dynamic_output() {
  testblob::Spec s;
  testblob::Io in;
  in.dtype = 1;
  in.shape = {1, 5};
  testblob::Io out;
  out.dtype = 1;
  out.shape = {1, 0x80000000u};
  s.inputs = {in};
  s.outputs = {out};
  testblob::place(s);
  Fixture f(s);
  CHECK(f.init() == Error::Ok);
  TestTensor tin(ScalarType::Char, {1, 5});
  TestTensor tout(ScalarType::Char, {1, 5}, {}, TensorShapeDynamism::DYNAMIC_BOUND);
  const int calls = g_driver.calls;
  CHECK(f.execute({&tin.value, &tout.value}) == Error::InvalidArgument);
  CHECK(tout.tensor.size(1) == 5);
  CHECK(g_driver.calls == calls);
}

} // namespace

// A tensor whose strides are not those of its dim order is refused before the
// NPU (the layout copy reads by strides, so the bytes would be read in a layout
// the tensor does not claim); the application-side check names a tensor whose
// dim order is not the program's.
void test_dim_order_checks() {
  Fixture f(conv_like());
  CHECK(f.init() == Error::Ok);
  TestTensor out(ScalarType::Char, {1, 3, 4, 5}, {0, 2, 3, 1});
  const int calls = g_driver.calls;
  {
    TestTensor in(ScalarType::Char, {1, 3, 4, 5}, {0, 2, 3, 1});
    const std::vector<int32_t> planar = TestTensor::dense(in.sizes, TestTensor::contiguous(4));
    std::copy(planar.begin(), planar.end(), in.strides.begin()); // claims NHWC, strided NCHW
    CHECK(f.execute({&in.value, &out.value}) == Error::InvalidArgument);
  }
  {
    TestTensor in(ScalarType::Char, {1, 3, 4, 5});
    in.order[2] = 1; // {0, 1, 1, 3}: not a permutation
    CHECK(f.execute({&in.value, &out.value}) == Error::InvalidArgument);
  }
  {
    TestTensor in(ScalarType::Char, {1, 3, 4, 5});
    TestTensor bad_out(ScalarType::Char, {1, 3, 4, 5}, {0, 2, 3, 1});
    bad_out.strides[1] = 2; // channel stride 2: not dense in NHWC
    CHECK(f.execute({&in.value, &bad_out.value}) == Error::InvalidArgument);
  }
  CHECK(g_driver.calls == calls); // all refused before the NPU
  // Either consistent layout still runs (the copy converts to the NPU's).
  TestTensor planar_in(ScalarType::Char, {1, 3, 4, 5});
  CHECK(f.execute({&planar_in.value, &out.value}) == Error::Ok);

  const uint8_t nhwc[4] = {0, 2, 3, 1};
  const uint8_t nchw[4] = {0, 1, 2, 3};
  TestTensor cl(ScalarType::Char, {1, 3, 4, 5}, {0, 2, 3, 1});
  TestTensor planar(ScalarType::Char, {1, 3, 4, 5});
  CHECK(ethosu_ng::check_tensor_layout("input", 0, cl.tensor, nhwc, 4) == Error::Ok);
  CHECK(ethosu_ng::check_tensor_layout("input", 0, planar.tensor, nchw, 4) == Error::Ok);
  CHECK(ethosu_ng::check_tensor_layout("input", 0, planar.tensor, nhwc, 4) ==
        Error::InvalidArgument);
  CHECK(ethosu_ng::check_tensor_layout("input", 1, cl.tensor, nchw, 4) == Error::InvalidArgument);
  CHECK(ethosu_ng::check_tensor_layout("input", 0, cl.tensor, nhwc, 3) == Error::InvalidArgument);
  cl.strides[3] = 1; // claims NHWC, strides no longer dense in it
  CHECK(ethosu_ng::check_tensor_layout("input", 0, cl.tensor, nhwc, 4) == Error::InvalidArgument);
}

int main() {
  executorch::runtime::runtime_init();
  test_registration();
  test_roundtrip(false);
  test_roundtrip(true);
  test_dtypes();
  test_mismatches();
  test_init_errors();
  test_fast_scratch();
  test_multi_io();
  test_huge_dynamic_output();
  test_dim_order_checks();
  return harness::finish("test_backend");
}
