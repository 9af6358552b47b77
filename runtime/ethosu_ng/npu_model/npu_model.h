// SPDX-License-Identifier: BSD-3-Clause
// Functional model of the Arm Ethos-U55 / Ethos-U65 / Ethos-U85 NPU (the
// U85 in part: docs/npu-model.md, "Ethos-U85"): executes the driver
// payload Vela writes (COP1 header, optimizer config, register command
// stream) against the regions the core driver would be given, and leaves in
// them what the NPU would leave.
//
// It sits behind the same seam as ethosu_invoke_v3: the command stream plus
// base and size of region 0 (weights, read-only), 1 (scratch) and 2 (fast
// scratch). Every memory access is checked against its region; anything the
// model does not implement or that is malformed returns an Error with a
// message naming the command index, the opcode/register and the values.
//
// Arithmetic follows the TOSA specification where the NPU and TOSA agree
// (see docs/npu-model.md for the rounding modes and what is covered).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include <executorch/runtime/core/error.h>

namespace ethosu_ng {
namespace npu_model {

using executorch::runtime::Error;

struct Regions {
  const uint8_t* weights = nullptr; // region 0, read-only
  size_t weights_size = 0;
  uint8_t* scratch = nullptr; // region 1
  size_t scratch_size = 0;
  uint8_t* fast_scratch = nullptr; // region 2 (may alias scratch)
  size_t fast_scratch_size = 0;
};

struct Stats {
  uint64_t commands = 0; // command words decoded
  uint64_t ops = 0; // NPU_OP_* kernels executed (not DMA)
  uint64_t dmas = 0;
  uint64_t macs = 0; // multiply-accumulates of conv/depthwise/FC kernels
  // Kernels whose OFM tiles share a base address, so that later elements
  // overwrite earlier ones (see docs/npu-model.md).
  uint64_t aliased_ofm_ops = 0;
};

// Runs a whole driver payload. `msg` (capacity `msg_cap`, may be null)
// receives a NUL-terminated description on failure. Errors:
//   InvalidProgram  malformed payload, unknown opcode, truncated stream,
//                   address outside its region, corrupt weight stream
//   NotSupported    a valid register combination the model does not implement
Error run_payload(
    const uint8_t* payload,
    size_t size,
    const Regions& regions,
    char* msg,
    size_t msg_cap,
    Stats* stats);

// Decodes one compressed weight stream (Vela's mlw format) into signed
// 9-bit weights, appended to `out`. Returns false with a message on a
// malformed or truncated stream (never reads outside [in, in + size)) and on
// a stream that decodes to more than `max_count` weights (checked before
// they are appended).
bool mlw_decode(
    const uint8_t* in,
    size_t size,
    std::vector<int16_t>& out,
    char* msg,
    size_t msg_cap,
    uint64_t max_count = uint64_t{1} << 28);

// Decodes `count` weights of one Ethos-U85 fast-weight-decode (FWD) stream,
// appended to `out`. Returns false with a message when the stream is shorter
// than its header plus `count` codes.
bool fwd_decode(
    const uint8_t* in,
    size_t size,
    size_t count,
    std::vector<int16_t>& out,
    char* msg,
    size_t msg_cap);

} // namespace npu_model
} // namespace ethosu_ng
