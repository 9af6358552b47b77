// SPDX-License-Identifier: BSD-3-Clause
// SPDX-License-Identifier: Apache-2.0
// Ethos-U85 command-stream opcodes that differ from the Ethos-U55/U65 ones
// (registers.h), as listed in regor's ethos_u85_interface.hpp (cmd0_opcode,
// cmd1_opcode). Every other register keeps its U55 number and name; the field
// layouts inside some of them differ (docs/npu-model.md, "Ethos-U85").
#pragma once

#include <cstdint>

namespace ethosu_ng {
namespace npu_model {

enum U85Cmd0 : uint16_t {
  U85_OP_RESIZE = 0x007,
  U85_SET_IFM_BROADCAST = 0x108,
  U85_SET_RESIZE_X_SCALE_N_M1 = 0x12A,
  U85_SET_RESIZE_Y_SCALE_N_M1 = 0x12B,
  U85_SET_RESIZE_X_OFFSET = 0x12C,
  U85_SET_RESIZE_Y_OFFSET = 0x12D,
  U85_SET_WEIGHT_FORMAT = 0x12E,
  U85_SET_DMA0_IDX_REGION = 0x134,
};

enum U85Cmd1 : uint16_t {
  U85_SET_IFM_SCALE = 0x025,
  U85_SET_IFM2_SCALE = 0x026,
  U85_SET_OP_SCALAR = 0x027,
  // 2D/3D DMA byte strides (40-bit, as addresses): STRIDE0 between rows,
  // STRIDE1 between planes.
  U85_SET_DMA0_SRC_STRIDE0 = 0x033,
  U85_SET_DMA0_SRC_STRIDE1 = 0x034,
  U85_SET_DMA0_DST_STRIDE0 = 0x035,
  U85_SET_DMA0_DST_STRIDE1 = 0x036,
  // Indexed (gather/scatter) DMA: address of the int32 indices, the largest
  // index allowed, and the bytes skipped in the indices after each plane.
  U85_SET_DMA0_IDX = 0x037,
  U85_SET_DMA0_IDX_MAX = 0x038,
  U85_SET_DMA0_IDX_SKIP1 = 0x039,
  U85_SET_WEIGHT2_BASE = 0x092,
  U85_SET_WEIGHT2_LENGTH = 0x093,
  U85_SET_WEIGHT3_BASE = 0x094,
  U85_SET_WEIGHT3_LENGTH = 0x095,
  U85_SET_RESIZE_X = 0x096,
  U85_SET_RESIZE_Y = 0x097,
  U85_OP_BRANCH = 0x100,
};

// Name of a U85 cmd0 / cmd1 opcode, nullptr when the U85 has no such opcode.
const char* u85_cmd0_name(uint16_t op);
const char* u85_cmd1_name(uint16_t op);

} // namespace npu_model
} // namespace ethosu_ng
