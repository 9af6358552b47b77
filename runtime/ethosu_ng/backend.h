// SPDX-License-Identifier: BSD-3-Clause
// EthosUNGBackend: the ExecuTorch BackendInterface for ethosu_ng delegates.
//
// init:    parse the blob in place (the processed buffer stays owned by the
//          runtime and alive for the delegate's lifetime), keep a small handle
//          in the runtime allocator.
// execute: check every input and output EValue against the IO table (dtype,
//          numel, shape; strides those of the tensor's dim order), allocate scratch from the temp allocator, layout-copy
//          inputs in, invoke the NpuDriver, layout-copy outputs back.
//
// Registration: a static initializer registers "EthosUNGBackend" unless the
// build defines ETHOSU_NG_NO_STATIC_REGISTRATION. Firmware linking the static
// library without --whole-archive can call register_backend() instead.
#pragma once

#include <cstddef>

#include <executorch/runtime/backend/interface.h>
#include <executorch/runtime/core/exec_aten/exec_aten.h>
#include <executorch/runtime/executor/method_meta.h>

namespace ethosu_ng {

constexpr const char* kBackendName = "EthosUNGBackend";

// Registers the backend once; later calls return Error::Ok without
// re-registering.
executorch::runtime::Error register_backend();

// The backend instance (also what register_backend() registers).
executorch::runtime::BackendInterface& backend_instance();

// Is `input` laid out as the program takes its input `index`? Call it before
// Method::set_input(input, index): set_input checks the dtype and the sizes,
// then copies (or aliases) the bytes without looking at the dim order, so
// planar bytes fed to an NHWC program (or the reverse) would be misread, and
// the delegate only ever sees the program's own dim order. Returns
// InvalidArgument, logging "ethosu_ng: input <index>: laid out nchw, the
// program takes nhwc", when the tensor's dim order is not the program's or its
// strides are not those of its dim order; the error of input_tensor_meta for
// an index that is not a tensor input.
executorch::runtime::Error check_input_layout(
    const executorch::runtime::MethodMeta& meta,
    size_t index,
    const executorch::aten::Tensor& input);

// The same check against a given dim order: `kind` and `index` name the
// tensor in the log ("input 0").
executorch::runtime::Error check_tensor_layout(
    const char* kind,
    size_t index,
    const executorch::aten::Tensor& t,
    const uint8_t* want_dim_order,
    int want_rank);

} // namespace ethosu_ng

#if defined(__GNUC__)
#define ETHOSU_NG_PUBLIC __attribute__((visibility("default")))
#else
#define ETHOSU_NG_PUBLIC
#endif

extern "C" {
// Optional platform hook: a dedicated (fast) SRAM area for Vela's region 2.
// Without it, fast scratch is allocated from the temp allocator like scratch.
ETHOSU_NG_PUBLIC void ethosu_ng_set_fast_scratch(void* base, size_t size);
}
