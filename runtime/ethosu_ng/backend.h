// SPDX-License-Identifier: BSD-3-Clause
// EthosUNGBackend: the ExecuTorch BackendInterface for ethosu_ng delegates.
//
// init:    parse the blob in place (the processed buffer stays owned by the
//          runtime and alive for the delegate's lifetime), keep a small handle
//          in the runtime allocator.
// execute: check every input and output EValue against the IO table (dtype,
//          numel, shape), allocate scratch from the temp allocator, layout-copy
//          inputs in, invoke the NpuDriver, layout-copy outputs back.
//
// Registration: a static initializer registers "EthosUNGBackend" unless the
// build defines ETHOSU_NG_NO_STATIC_REGISTRATION. Firmware linking the static
// library without --whole-archive can call register_backend() instead.
#pragma once

#include <cstddef>

#include <executorch/runtime/backend/interface.h>

namespace ethosu_ng {

constexpr const char* kBackendName = "EthosUNGBackend";

// Registers the backend once; later calls return Error::Ok without
// re-registering.
executorch::runtime::Error register_backend();

// The backend instance (also what register_backend() registers).
executorch::runtime::BackendInterface& backend_instance();

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
