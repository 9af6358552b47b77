// SPDX-License-Identifier: BSD-3-Clause
// ethosu_ng._host_runtime: the host runtime (delegate, host NPU driver, NPU
// model, pool runner) as a Python extension module. Importing it registers
// EthosUNGBackend into the ExecuTorch runtime of the executorch wheel (the
// backend's static initializer); these bindings are the only way Python
// reaches the C API of host_api.h.
//
// Python objects cross as buffers (bytes, bytearray, numpy arrays: anything
// with the buffer protocol); a wrong one (None included) is a TypeError
// naming the argument. The delegate code is built without exceptions: none crosses
// host_api.h (the TOSA callback trampoline catches everything).
#include <ethosu_ng/backend.h>
#include <ethosu_ng/host_api.h>

#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace nb = nanobind;

namespace {

// What ethosu_ng/runtime/host_module.py expects of this module; bumped with
// every change of a signature below.
constexpr int kInterfaceVersion = 1;

std::string type_of(nb::handle obj) {
  return nb::type_name(obj.type()).c_str();
}

// A contiguous view of a Python buffer, released when destroyed.
class Buffer {
 public:
  Buffer(nb::handle obj, bool writable, const std::string& what) {
    const int flags = writable ? PyBUF_WRITABLE : PyBUF_SIMPLE;
    if (PyObject_GetBuffer(obj.ptr(), &view_, flags) != 0) {
      PyErr_Clear();
      throw nb::type_error(
          (what + ": expected a " + (writable ? "writable" : "readable") +
           " contiguous buffer (bytes, bytearray, numpy array), got " + type_of(obj))
              .c_str());
    }
    held_ = true;
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer() {
    if (held_) {
      PyBuffer_Release(&view_);
    }
  }
  uint8_t* data() const {
    return static_cast<uint8_t*>(view_.buf);
  }
  size_t size() const {
    return static_cast<size_t>(view_.len);
  }

 private:
  Py_buffer view_{};
  bool held_ = false;
};

void copy_message(const std::string& msg, char* err, size_t err_cap) {
  if (err != nullptr && err_cap > 0) {
    std::snprintf(err, err_cap, "%s", msg.c_str());
  }
}

// The registered Python callable: a strong reference, dropped only when
// replaced (never at interpreter exit, when Python is gone).
PyObject* g_tosa_callback = nullptr;

std::string describe(nb::python_error& e) {
  nb::handle value = e.value();
  return type_of(value) + ": " + nb::str(value).c_str();
}

// host_api.h's ethosu_ng_tosa_callback over the registered Python callable:
//   callback(tosa: bytes, inputs: list[(dtype_code, shape, bytes)],
//            outputs: list[(dtype_code, shape, byte_size)]) -> outputs' buffers
// Each returned buffer holds exactly its output's byte size.
int tosa_trampoline(
    const uint8_t* tosa,
    size_t tosa_len,
    int n_in,
    const void* const* in_ptrs,
    const int* in_dtypes,
    const int* in_ranks,
    const int64_t* in_shapes,
    const int64_t* in_byte_sizes,
    int n_out,
    void* const* out_ptrs,
    const int* out_dtypes,
    const int* out_ranks,
    const int64_t* out_shapes,
    const int64_t* out_byte_sizes,
    char* err,
    size_t err_cap) {
  nb::gil_scoped_acquire gil;
  try {
    if (g_tosa_callback == nullptr) {
      copy_message("no TOSA callback registered", err, err_cap);
      return 1;
    }
    auto shape = [](const int64_t* shapes, int k, int rank) {
      nb::list dims;
      for (int i = 0; i < rank; ++i) {
        dims.append(shapes[k * 6 + i]);
      }
      return nb::tuple(dims);
    };
    nb::list inputs;
    for (int k = 0; k < n_in; ++k) {
      const size_t nbytes = static_cast<size_t>(in_byte_sizes[k]);
      const char* p = nbytes ? static_cast<const char*>(in_ptrs[k]) : "";
      inputs.append(
          nb::make_tuple(in_dtypes[k], shape(in_shapes, k, in_ranks[k]), nb::bytes(p, nbytes)));
    }
    nb::list outputs;
    for (int k = 0; k < n_out; ++k) {
      outputs.append(
          nb::make_tuple(out_dtypes[k], shape(out_shapes, k, out_ranks[k]), out_byte_sizes[k]));
    }
    nb::object result = nb::handle(g_tosa_callback)(nb::bytes(tosa, tosa_len), inputs, outputs);
    const size_t n = nb::len(result);
    if (n != static_cast<size_t>(n_out)) {
      copy_message(
          "the TOSA callback returned " + std::to_string(n) + " outputs, the blob declares " +
              std::to_string(n_out),
          err,
          err_cap);
      return 1;
    }
    for (int k = 0; k < n_out; ++k) {
      Buffer out(result[k], false, "TOSA callback output " + std::to_string(k));
      if (out.size() != static_cast<size_t>(out_byte_sizes[k])) {
        copy_message(
            "TOSA callback output " + std::to_string(k) + ": " + std::to_string(out.size()) +
                " bytes, the blob's IO entry holds " + std::to_string(out_byte_sizes[k]),
            err,
            err_cap);
        return 1;
      }
      std::memcpy(out_ptrs[k], out.data(), out.size());
    }
    return 0;
  } catch (nb::python_error& e) {
    copy_message(describe(e), err, err_cap);
  } catch (const std::exception& e) {
    copy_message(e.what(), err, err_cap);
  } catch (...) {
    copy_message("unknown C++ exception in the TOSA callback", err, err_cap);
  }
  return 1;
}

void set_tosa_callback(nb::handle callback) {
  if (!callback.is_none() && !PyCallable_Check(callback.ptr())) {
    throw nb::type_error(("callback: expected a callable or None, got " + type_of(callback)).c_str());
  }
  PyObject* old = g_tosa_callback;
  if (callback.is_none()) {
    ethosu_ng_set_tosa_callback(nullptr);
    g_tosa_callback = nullptr;
  } else {
    g_tosa_callback = callback.inc_ref().ptr();
    ethosu_ng_set_tosa_callback(&tosa_trampoline);
  }
  Py_XDECREF(old);
}

void set_npu_mode(int mode) {
  if (mode != ETHOSU_NG_NPU_TOSA && mode != ETHOSU_NG_NPU_MODEL) {
    throw nb::value_error(
        ("mode: " + std::to_string(mode) + " is neither NPU_TOSA (0) nor NPU_MODEL (1)").c_str());
  }
  ethosu_ng_set_npu_mode(mode);
}

// (0, "") or (the ExecuTorch Error code, the model's message).
nb::tuple npu_model_run(
    nb::handle payload,
    nb::handle weights,
    nb::handle scratch,
    nb::handle fast_scratch) {
  Buffer p(payload, false, "payload");
  Buffer w(weights, false, "weights");
  Buffer s(scratch, true, "scratch");
  std::unique_ptr<Buffer> f;
  if (!fast_scratch.is_none()) {
    f = std::make_unique<Buffer>(fast_scratch, true, "fast_scratch");
  }
  char err[1024] = {0};
  int rc;
  {
    nb::gil_scoped_release release;
    rc = ethosu_ng_npu_model_run(
        p.data(),
        p.size(),
        w.data(),
        w.size(),
        s.size() ? s.data() : nullptr,
        s.size(),
        f && f->size() ? f->data() : nullptr,
        f ? f->size() : 0,
        err,
        sizeof(err));
  }
  return nb::make_tuple(rc, std::string(rc == 0 ? "" : err));
}

nb::tuple npu_model_stats() {
  uint64_t out[5];
  ethosu_ng_npu_model_stats(out);
  return nb::make_tuple(out[0], out[1], out[2], out[3], out[4]);
}

// The int16 weights of one compressed stream, as native-endian bytes.
nb::bytes mlw_decode(nb::handle stream) {
  Buffer in(stream, false, "stream");
  char err[512] = {0};
  std::vector<int16_t> w;
  int64_t n;
  {
    nb::gil_scoped_release release;
    n = ethosu_ng_mlw_decode(in.data(), in.size(), nullptr, 0, err, sizeof(err));
    if (n >= 0) {
      w.resize(static_cast<size_t>(n));
      ethosu_ng_mlw_decode(in.data(), in.size(), w.data(), w.size(), err, sizeof(err));
    }
  }
  if (n < 0) {
    throw nb::value_error(err);
  }
  return nb::bytes(reinterpret_cast<const char*>(w.data()), w.size() * sizeof(int16_t));
}

// (step, message, (method_allocator_used, temp_allocator_peak, error)); step
// is one of ETHOSU_NG_POOLS_*, 0 when the method loaded (and, given inputs, ran).
nb::tuple run_with_pools(
    nb::handle pte,
    const std::string& method,
    const std::vector<size_t>& arena_sizes,
    size_t method_allocator,
    size_t temp_allocator,
    nb::handle inputs,
    nb::handle outputs) {
  Buffer program(pte, false, "pte");
  std::vector<std::unique_ptr<Buffer>> held;
  std::vector<const void*> in_ptrs;
  std::vector<size_t> in_bytes;
  const bool run = !inputs.is_none();
  if (run) {
    size_t k = 0;
    for (nb::handle item : inputs) {
      held.push_back(std::make_unique<Buffer>(item, false, "input " + std::to_string(k++)));
      in_ptrs.push_back(held.back()->data());
      in_bytes.push_back(held.back()->size());
    }
  }
  std::vector<void*> out_ptrs;
  std::vector<size_t> out_bytes;
  if (!outputs.is_none()) {
    size_t k = 0;
    for (nb::handle item : outputs) {
      held.push_back(std::make_unique<Buffer>(item, true, "output " + std::to_string(k++)));
      out_ptrs.push_back(held.back()->data());
      out_bytes.push_back(held.back()->size());
    }
  }
  ethosu_ng_pool_usage usage{};
  char err[512] = {0};
  int rc;
  {
    nb::gil_scoped_release release;
    rc = ethosu_ng_host_run_with_pools(
        program.data(),
        program.size(),
        method.c_str(),
        arena_sizes.data(),
        arena_sizes.size(),
        method_allocator,
        temp_allocator,
        run ? in_ptrs.data() : nullptr,
        in_bytes.data(),
        in_ptrs.size(),
        out_ptrs.data(),
        out_bytes.data(),
        out_ptrs.size(),
        &usage,
        err,
        sizeof(err));
  }
  return nb::make_tuple(
      rc,
      std::string(rc == ETHOSU_NG_POOLS_OK ? "" : err),
      nb::make_tuple(usage.method_allocator_used, usage.temp_allocator_peak, usage.error));
}

// The registered fast-scratch area, held while registered (never released at
// interpreter exit).
Buffer* g_fast_area = nullptr;

void set_fast_scratch(nb::handle area) {
  Buffer* next = area.is_none() ? nullptr : new Buffer(area, true, "area");
  ethosu_ng_set_fast_scratch(next ? next->data() : nullptr, next ? next->size() : 0);
  delete g_fast_area;
  g_fast_area = next;
}

} // namespace

NB_MODULE(_host_runtime, m) {
  m.doc() = "ethosu_ng's C++ host runtime; use it through ethosu_ng.runtime";
  m.attr("INTERFACE_VERSION") = kInterfaceVersion;
  m.attr("NPU_TOSA") = ETHOSU_NG_NPU_TOSA;
  m.attr("NPU_MODEL") = ETHOSU_NG_NPU_MODEL;
  m.def("set_tosa_callback", &set_tosa_callback, nb::arg("callback").none(),
        "Register (None: clear) the callable that runs a delegate's TOSA graph.");
  m.def("invoke_count", &ethosu_ng_host_invoke_count,
        "Delegate calls the host driver has run in this process.");
  m.def("set_npu_mode", &set_npu_mode, nb::arg("mode"),
        "What runs each delegate: NPU_TOSA or NPU_MODEL.");
  m.def("npu_mode", &ethosu_ng_get_npu_mode);
  m.def("npu_model_run", &npu_model_run, nb::arg("payload").none(), nb::arg("weights").none(),
        nb::arg("scratch").none(), nb::arg("fast_scratch").none(),
        "Run one Vela driver payload on the NPU model in place: (error code, message).");
  m.def("npu_model_stats", &npu_model_stats,
        "(commands, ops, dmas, macs, aliased_ofm_ops) of the last NPU-model run.");
  m.def("mlw_decode", &mlw_decode, nb::arg("stream").none(),
        "Decode one compressed weight stream into int16 weights (bytes).");
  m.def("run_with_pools", &run_with_pools, nb::arg("pte").none(), nb::arg("method"),
        nb::arg("arena_sizes"), nb::arg("method_allocator"), nb::arg("temp_allocator"),
        nb::arg("inputs").none(), nb::arg("outputs").none(),
        "Load (and, given inputs, run) a method over pools of exactly these sizes.");
  m.def("set_fast_scratch", &set_fast_scratch, nb::arg("area").none(),
        "Register (None: clear) a writable buffer as the platform's fast-scratch area.");
}
