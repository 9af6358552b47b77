// SPDX-License-Identifier: BSD-3-Clause
// SPDX-License-Identifier: Apache-2.0
// DMA (NPU_OP_DMA_START): 1-D copies between regions and into the internal
// memory (LUTs), Ethos-U65 2D/3D writes, and Ethos-U85 2D/3D strided and
// indexed (gather/scatter) copies. See docs/npu-model.md.
#include <ethosu_ng/npu_model/model.h>
#include <ethosu_ng/npu_model/registers_u85.h>

#include <algorithm>
#include <cstdio>

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
  // Ethos-U85 DMA0_SRC_REGION bits 9..10 select 1D/2D/3D (regor dma_stride_mode);
  // its DMA0_DST_REGION has those bits reserved. Ethos-U55/U65 keep a stride mode in
  // both registers (u65_dma_strided).
  const int stride_mode = (src_reg >> 9) & 3;
  if (u85_ && ((dst_reg >> 9) & 3) != 0) {
    return fail(Error::InvalidProgram,
                "DMA0_DST_REGION 0x%04x: bits 9..10 are reserved on Ethos-U85", dst_reg);
  }
  if (u85_ && stride_mode == 3) {
    return fail(Error::InvalidProgram,
                "DMA0_SRC_REGION 0x%04x: stride mode 3 is reserved (0 1D, 1 2D, 2 3D)", src_reg);
  }
  if ((src_reg >> 8) & 1) {
    return fail(Error::NotSupported, "DMA0_SRC_REGION 0x%04x: reads from internal memory",
                src_reg);
  }
  if (!u85_ && (stride_mode != 0 || ((dst_reg >> 9) & 3) != 0)) {
    return u65_dma_strided(src_reg, dst_reg);
  }
  if (u85_ && (stride_mode != 0 || (((src_reg | dst_reg) >> 11) & 1))) {
    return u85_dma_strided(src_reg, dst_reg, stride_mode);
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

// Ethos-U65 2D/3D DMA writes (regor EthosU65RCSGenerator::GenerateDMA, which wrote TILE as
// such DMAs: the source read contiguously in 1D mode, the destination in stride mode 1 or 2):
// SIZE1 planes (3D; 1 in 2D) of SIZE0 rows of LEN bytes, row r of plane p read at
// SRC + (p * SIZE0 + r) * LEN and written at DST + p * (SIZE0 * LEN + SKIP1) + r * (LEN + SKIP0),
// regor's DMA0_SKIP0 = row stride - LEN and DMA0_SKIP1 = plane stride - SIZE0 * LEN. Only what
// that source pins down is modelled: a strided source, a 3D write with SKIP0 != 0 (whether the
// plane step counts the rows' skips is not stated there) and Ethos-U55 (no public stream or
// generator uses its stride modes) are NotSupported.
Error Model::u65_dma_strided(uint16_t src_reg, uint16_t dst_reg) {
  const int src_mode = (src_reg >> 9) & 3;
  const int mode = (dst_reg >> 9) & 3;
  if (src_mode == 3 || mode == 3) {
    return fail(Error::InvalidProgram,
                "DMA0_SRC_REGION 0x%04x / DST_REGION 0x%04x: stride mode 3 is reserved (0 1D, "
                "1 2D, 2 3D)",
                src_reg, dst_reg);
  }
  if (!u65_) {
    return fail(Error::NotSupported,
                "DMA0_SRC_REGION 0x%04x / DST_REGION 0x%04x: Ethos-U55 2D/3D DMA not modelled "
                "(regor emits them for Ethos-U65 only)",
                src_reg, dst_reg);
  }
  if (src_mode != 0) {
    return fail(Error::NotSupported,
                "DMA0_SRC_REGION 0x%04x: %dD DMA reads not modelled (regor's Ethos-U65 DMAs "
                "stride the destination only)",
                src_reg, src_mode + 1);
  }
  if ((dst_reg >> 8) & 1) {
    return fail(Error::NotSupported,
                "DMA0_DST_REGION 0x%04x: %dD DMA into internal memory not modelled", dst_reg,
                mode + 1);
  }
  const uint64_t len = a1(SET_DMA0_LEN);
  const uint64_t src = a1(SET_DMA0_SRC);
  const uint64_t dst = a1(SET_DMA0_DST);
  const uint64_t rows = p0(SET_DMA0_SIZE0);
  const uint64_t planes = mode == 2 ? p0(SET_DMA0_SIZE1) : 1;
  const uint64_t skip0 = a1(SET_DMA0_SKIP0);
  const uint64_t skip1 = mode == 2 ? a1(SET_DMA0_SKIP1) : 0;
  if (rows == 0 || planes == 0) {
    return fail(Error::InvalidProgram,
                "%dD DMA with DMA0_SIZE0 %llu, DMA0_SIZE1 %llu: each size must be at least 1",
                mode + 1, static_cast<unsigned long long>(rows),
                static_cast<unsigned long long>(planes));
  }
  if (mode == 2 && skip0 != 0) {
    return fail(Error::NotSupported,
                "3D DMA with DMA0_SKIP0 %llu: the plane step beside row skips not modelled",
                static_cast<unsigned long long>(skip0));
  }
  // rows * planes < 2^32 and len < 2^40: the byte count is checked by division; then
  // rows * len <= 2^26, each extent term is below 2^57 and the sum below 2^58.
  const uint64_t copies = rows * planes;
  if (len > kMaxElements / copies) {
    return fail(Error::NotSupported,
                "%dD DMA of %llu x %llu rows of %llu bytes exceeds the model's limit of %llu bytes",
                mode + 1, static_cast<unsigned long long>(planes),
                static_cast<unsigned long long>(rows), static_cast<unsigned long long>(len),
                static_cast<unsigned long long>(kMaxElements));
  }
  const uint64_t row_step = len + skip0;
  const uint64_t plane_step = rows * len + skip1;
  const uint64_t src_extent = copies * len;
  const uint64_t dst_extent = len == 0 ? 0 : (planes - 1) * plane_step + (rows - 1) * row_step + len;
  char what[160];
  uint8_t* s;
  uint8_t* d;
  snprintf(what, sizeof(what), "%dD DMA source (SIZE0 %llu, SIZE1 %llu, LEN %llu, contiguous)",
           mode + 1, static_cast<unsigned long long>(rows),
           static_cast<unsigned long long>(planes), static_cast<unsigned long long>(len));
  Error e = region_span(src_reg & 0xff, src, src_extent, false, what, &s);
  if (e != Error::Ok) {
    return e;
  }
  snprintf(what, sizeof(what),
           "%dD DMA destination (SIZE0 %llu, SIZE1 %llu, LEN %llu, SKIP0 %llu, SKIP1 %llu)",
           mode + 1, static_cast<unsigned long long>(rows),
           static_cast<unsigned long long>(planes), static_cast<unsigned long long>(len),
           static_cast<unsigned long long>(skip0), static_cast<unsigned long long>(skip1));
  e = region_span(dst_reg & 0xff, dst, dst_extent, true, what, &d);
  if (e != Error::Ok) {
    return e;
  }
  if (len > 0) {
    for (uint64_t p = 0; p < planes; ++p) {
      for (uint64_t r = 0; r < rows; ++r) {
        std::memmove(d + p * plane_step + r * row_step, s + (p * rows + r) * len, len);
      }
    }
  }
  if (stats_) {
    ++stats_->dmas;
  }
  return Error::Ok;
}

// Ethos-U85 2D/3D and indexed DMA (regor EthosU85RCSGenerator::GenerateDMA and
// HLCStreamGenerator::GenerateHLCDMACommands): SIZE1 planes (3D; 1 otherwise) of SIZE0 rows
// (2D/3D; 1 in 1D) of LEN contiguous bytes. Row r of plane p is read at SRC + p * SRC_STRIDE1 +
// r * SRC_STRIDE0 and written at DST + p * DST_STRIDE1 + r * DST_STRIDE0, planes outer, rows
// inner, each row copied before the next. Strides are unsigned byte offsets. With idx_mode
// (bit 11) on one side (gather: source, scatter: destination) that side's row coordinate r is
// replaced by the int32 index read at IDX + (p * SIZE0 + r) * 4 + p * IDX_SKIP1 in the
// DMA0_IDX_REGION region, which must lie in 0..IDX_MAX; repeated indices of a scatter are
// written in order, the last one wins.
Error Model::u85_dma_strided(uint16_t src_reg, uint16_t dst_reg, int stride_mode) {
  const uint64_t len = a1(SET_DMA0_LEN);
  const uint64_t src = a1(SET_DMA0_SRC);
  const uint64_t dst = a1(SET_DMA0_DST);
  const uint64_t rows = stride_mode == 0 ? 1 : p0(SET_DMA0_SIZE0);
  const uint64_t planes = stride_mode == 2 ? p0(SET_DMA0_SIZE1) : 1;
  const bool src_indexed = (src_reg >> 11) & 1;
  const bool dst_indexed = (dst_reg >> 11) & 1;
  // In 1D mode the indexed side still steps by its STRIDE0 (regor emits it for that side).
  const uint64_t src_row =
      stride_mode != 0 || src_indexed ? a1(static_cast<Cmd1>(U85_SET_DMA0_SRC_STRIDE0)) : 0;
  const uint64_t dst_row =
      stride_mode != 0 || dst_indexed ? a1(static_cast<Cmd1>(U85_SET_DMA0_DST_STRIDE0)) : 0;
  const uint64_t src_plane = stride_mode == 2 ? a1(static_cast<Cmd1>(U85_SET_DMA0_SRC_STRIDE1)) : 0;
  const uint64_t dst_plane = stride_mode == 2 ? a1(static_cast<Cmd1>(U85_SET_DMA0_DST_STRIDE1)) : 0;
  const int dims = stride_mode + 1;
  if (src_indexed && dst_indexed) {
    return fail(Error::InvalidProgram,
                "DMA0_SRC_REGION 0x%04x / DST_REGION 0x%04x: idx_mode (bit 11) set on both sides",
                src_reg, dst_reg);
  }
  if (rows == 0 || planes == 0) {
    return fail(Error::InvalidProgram,
                "%dD DMA with DMA0_SIZE0 %llu, DMA0_SIZE1 %llu: each size must be at least 1",
                dims, static_cast<unsigned long long>(rows),
                static_cast<unsigned long long>(planes));
  }
  if ((dst_reg >> 8) & 1) {
    return fail(Error::NotSupported,
                "DMA0_DST_REGION 0x%04x: %dD%s DMA into internal memory not modelled", dst_reg,
                dims, src_indexed ? " indexed" : "");
  }
  // rows * planes < 2^32 and len < 2^40, so the byte count is checked by division; each
  // extent term is below 2^56 and the sums below 2^58.
  const uint64_t copies = rows * planes;
  if (len > kMaxElements / copies) {
    return fail(Error::NotSupported,
                "%dD DMA of %llu x %llu rows of %llu bytes exceeds the model's limit of %llu bytes",
                dims, static_cast<unsigned long long>(planes),
                static_cast<unsigned long long>(rows), static_cast<unsigned long long>(len),
                static_cast<unsigned long long>(kMaxElements));
  }
  const uint32_t idx_max_word = d1(static_cast<Cmd1>(U85_SET_DMA0_IDX_MAX));
  if ((src_indexed || dst_indexed) && (idx_max_word >> 31) != 0) {
    return fail(Error::InvalidProgram, "DMA0_IDX_MAX 0x%08x: bit 31 is reserved",
                static_cast<unsigned>(idx_max_word));
  }
  const uint64_t idx_max = idx_max_word;
  // The hull of one side's rows is what region_span checks and notes for the hazard check;
  // the indexed side spans rows 0..IDX_MAX.
  auto side = [&](const char* name, uint16_t reg, uint64_t addr, uint64_t row, uint64_t plane,
                  bool indexed, bool write, uint8_t** out) {
    const uint64_t last_row = indexed ? idx_max : rows - 1;
    const uint64_t extent = len == 0 ? 0 : (planes - 1) * plane + last_row * row + len;
    char what[192];
    snprintf(what, sizeof(what),
             "%dD%s DMA %s (SIZE0 %llu, SIZE1 %llu, LEN %llu, STRIDE0 %llu, STRIDE1 %llu%s)", dims,
             indexed ? " indexed" : "", name, static_cast<unsigned long long>(rows),
             static_cast<unsigned long long>(planes), static_cast<unsigned long long>(len),
             static_cast<unsigned long long>(row), static_cast<unsigned long long>(plane),
             indexed ? ", rows 0..IDX_MAX" : "");
    return region_span(reg & 0xff, addr, extent, write, what, out);
  };
  uint8_t* s;
  uint8_t* d;
  Error e = side("source", src_reg, src, src_row, src_plane, src_indexed, false, &s);
  e = e == Error::Ok ? side("destination", dst_reg, dst, dst_row, dst_plane, dst_indexed, true, &d)
                     : e;
  if (e != Error::Ok) {
    return e;
  }
  const uint8_t* idx = nullptr;
  const uint64_t idx_addr = a1(static_cast<Cmd1>(U85_SET_DMA0_IDX));
  const uint64_t idx_skip = a1(static_cast<Cmd1>(U85_SET_DMA0_IDX_SKIP1));
  const int idx_region = p0(static_cast<Cmd0>(U85_SET_DMA0_IDX_REGION));
  if (src_indexed || dst_indexed) {
    // rows * planes * 4 < 2^34 and (planes - 1) * IDX_SKIP1 < 2^56.
    const uint64_t idx_extent = copies * 4 + (planes - 1) * idx_skip;
    uint8_t* p;
    char what[160];
    snprintf(what, sizeof(what),
             "indexed DMA indices (%llu x %llu int32, IDX_SKIP1 %llu, DMA0_IDX_REGION)",
             static_cast<unsigned long long>(planes), static_cast<unsigned long long>(rows),
             static_cast<unsigned long long>(idx_skip));
    e = region_span(idx_region, idx_addr, idx_extent, false, what, &p);
    if (e != Error::Ok) {
      return e;
    }
    idx = p;
  }
  if (len > 0) {
    for (uint64_t p = 0; p < planes; ++p) {
      for (uint64_t r = 0; r < rows; ++r) {
        uint64_t src_r = r;
        uint64_t dst_r = r;
        if (idx != nullptr) {
          const uint64_t at = (p * rows + r) * 4 + p * idx_skip;
          int32_t index;
          std::memcpy(&index, idx + at, 4);
          if (index < 0 || static_cast<uint64_t>(index) > idx_max) {
            return fail(Error::InvalidProgram,
                        "indexed DMA: index %ld (plane %llu, row %llu, read at region %d address "
                        "0x%llx) outside 0..DMA0_IDX_MAX %llu",
                        static_cast<long>(index), static_cast<unsigned long long>(p),
                        static_cast<unsigned long long>(r), idx_region,
                        static_cast<unsigned long long>(idx_addr + at),
                        static_cast<unsigned long long>(idx_max));
          }
          (src_indexed ? src_r : dst_r) = static_cast<uint64_t>(index);
        }
        std::memmove(d + p * dst_plane + dst_r * dst_row, s + p * src_plane + src_r * src_row,
                     len);
      }
    }
  }
  if (stats_) {
    ++stats_->dmas;
  }
  return Error::Ok;
}

} // namespace detail
} // namespace npu_model
} // namespace ethosu_ng
