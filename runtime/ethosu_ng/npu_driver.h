// SPDX-License-Identifier: BSD-3-Clause
// Driver seam: the one call the backend makes to run a delegate on the NPU.
//
// The backend has validated the blob and copied every input into `scratch` (at
// the IO entries' offsets, in their dim orders) before invoke(); it copies the
// outputs out of `scratch` afterwards. Implementations:
//   npu_driver_ethosu.cpp  Ethos-U core driver (firmware)
//   npu_driver_host.cpp    TOSA reference model via a callback (host only)
//   tests                  fakes
// Exactly one of them provides platform_driver() in a given link.
#pragma once

#include <cstddef>
#include <cstdint>

#include <ethosu_ng/blob.h>

namespace ethosu_ng {

class NpuDriver {
 public:
  // Runs the command stream. Region 0 = weights, 1 = scratch, 2 = fast scratch
  // (Vela's numbering). `blob` gives access to the IO table and optional TOSA
  // section. Returns Error::Ok or an error after logging why.
  virtual Error invoke(
      const uint8_t* cmd,
      size_t cmd_size,
      const uint8_t* weights,
      size_t weights_size,
      uint8_t* scratch,
      size_t scratch_size,
      uint8_t* fast_scratch,
      size_t fast_scratch_size,
      const Blob& blob) = 0;

 protected:
  // Drivers are statics, never deleted through this base: a non-virtual
  // destructor keeps a deleting destructor (and operator delete) out of the
  // firmware link.
  ~NpuDriver() = default;
};

// The driver this link uses (defined by the driver implementation linked in).
NpuDriver& platform_driver();

} // namespace ethosu_ng
