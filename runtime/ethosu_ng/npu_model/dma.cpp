// SPDX-License-Identifier: BSD-3-Clause
// SPDX-License-Identifier: Apache-2.0
// DMA (NPU_OP_DMA_START): 1-D copies between regions and into the internal
// memory (LUTs). See docs/npu-model.md.
#include <ethosu_ng/npu_model/model.h>

#include <algorithm>

namespace ethosu_ng {
namespace npu_model {
namespace detail {

// ------------------------------------------------------------ DMA
Error Model::op_dma() {
  const uint16_t src_reg = p0(SET_DMA0_SRC_REGION);
  const uint16_t dst_reg = p0(SET_DMA0_DST_REGION);
  const uint64_t len = a1(SET_DMA0_LEN);
  const uint64_t src = a1(SET_DMA0_SRC);
  const uint64_t dst = a1(SET_DMA0_DST);
  if (((src_reg >> 9) & 3) != 0 || ((dst_reg >> 9) & 3) != 0) {
    return fail(Error::NotSupported,
                "DMA0_SRC_REGION 0x%04x / DST_REGION 0x%04x: 2D/3D stride modes not modelled",
                src_reg, dst_reg);
  }
  if ((src_reg >> 8) & 1) {
    return fail(Error::NotSupported, "DMA0_SRC_REGION 0x%04x: reads from internal memory",
                src_reg);
  }
  // Ethos-U85: idx_mode (bit 11, gather/scatter) and its LUT memory are not modelled.
  if (u85_ && (((src_reg | dst_reg) >> 11) & 1)) {
    return fail(Error::NotSupported,
                "DMA0_SRC_REGION 0x%04x / DST_REGION 0x%04x: indexed (gather/scatter) DMA not "
                "modelled",
                src_reg, dst_reg);
  }
  uint8_t* s;
  Error e = region_span(src_reg & 0xff, src, len, false, "DMA source", &s);
  if (e != Error::Ok) {
    return e;
  }
  if ((dst_reg >> 8) & 1) {
    // Internal SHRAM (LUT loads).
    if (dst > shram_.size() || len > shram_.size() - dst) {
      return fail(Error::InvalidProgram,
                  "DMA destination 0x%llx (+%llu) outside the %lu-byte internal memory",
                  static_cast<unsigned long long>(dst), static_cast<unsigned long long>(len),
                  static_cast<unsigned long>(shram_.size()));
    }
    std::memmove(shram_.data() + dst, s, len);
    note_span(-1, shram_.data() + dst, len, true);
  } else {
    uint8_t* d;
    e = region_span(dst_reg & 0xff, dst, len, true, "DMA destination", &d);
    if (e != Error::Ok) {
      return e;
    }
    std::memmove(d, s, len);
  }
  if (stats_) {
    ++stats_->dmas;
  }
  return Error::Ok;
}

} // namespace detail
} // namespace npu_model
} // namespace ethosu_ng
