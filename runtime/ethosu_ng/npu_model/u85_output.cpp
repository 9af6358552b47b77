// SPDX-License-Identifier: BSD-3-Clause
// SPDX-License-Identifier: Apache-2.0
// Ethos-U85 accumulator format, OFM rounding, output stage and OFM transposes,
// shared by the U85 operation families. Field layouts: regor
// ethos_u85_interface.hpp (npu_set_acc_format_t, npu_set_ofm_precision_t,
// npu_set_ofm_scale_t, npu_set_activation_t). See docs/npu-model.md.
#include <ethosu_ng/npu_model/model.h>

#include <algorithm>

namespace ethosu_ng {
namespace npu_model {
namespace detail {

// ACC_FORMAT: acc_format bits 0..1 (0 I32, 1 I48), acc_input bits 4..5
// (0 RESET, 1 KEEP, 2 IFM2), acc_output bit 6 (0 ENABLE), microblock bits
// 8..10 (0..5). Modelled: kernels that start from a reset accumulator and
// output it; with `ifm2_accumulator`, also an accumulator loaded from IFM2
// (the pooling mode NONE Vela uses to rescale 32-bit tensors).
Error Model::u85_check_acc(bool ifm2_accumulator) {
  const uint16_t acc = p0(SET_ACC_FORMAT);
  if ((acc & 3) > 1 || ((acc >> 4) & 3) == 3 || ((acc >> 8) & 7) > 5) {
    return fail(Error::InvalidProgram,
                "ACC_FORMAT 0x%04x: reserved accumulator format, input or microblock", acc);
  }
  const int input = (acc >> 4) & 3;
  if (!(input == 0 || (input == 2 && ifm2_accumulator)) || ((acc >> 6) & 1) != 0) {
    return fail(Error::NotSupported,
                "ACC_FORMAT 0x%04x: accumulator input %d / output %s (chained or accumulating "
                "kernels) not modelled",
                acc, (acc >> 4) & 3, ((acc >> 6) & 1) ? "disabled" : "enabled");
  }
  return Error::Ok;
}

// Maps a U85 round_mode field to the model's rounding. round_mode_ofm: 0
// DOUBLE_SYMMETRIC, 1 NATURAL, 2 DOUBLE_ASYMMETRIC, 3 SYMMETRIC, 4
// TRUNCATE_TO_ZERO, 5 TRUNCATE_TO_LOWER. NATURAL is TOSA's single rounding
// and is what Vela emits for the TOSA graphs here; DOUBLE_SYMMETRIC is
// accepted only with shift 0 (kRoundExact: the result is exact whatever the
// rounding); the truncations are exact by definition; DOUBLE_ASYMMETRIC,
// SYMMETRIC and a non-zero dbl_rnd are NotSupported.
Error Model::u85_rounding(const char* reg, int mode, int dbl_rnd, int* round) {
  if (dbl_rnd != 0) {
    return fail(Error::NotSupported, "%s: double-round shift %d not modelled", reg, dbl_rnd);
  }
  switch (mode) {
    case 1:
      *round = kRoundNatural;
      return Error::Ok;
    case 0:
      *round = kRoundExact;
      return Error::Ok;
    case 4:
      *round = kRoundTruncate;
      return Error::Ok;
    case 5:
      *round = kRoundFloor;
      return Error::Ok;
    case 2:
    case 3:
      return fail(Error::NotSupported, "%s: rounding mode %d not modelled", reg, mode);
    default:
      return fail(Error::InvalidProgram, "%s: reserved rounding mode %d", reg, mode);
  }
}

Error Model::u85_output_setup(FeatureMap& ofm) {
  trace(cmd_name_, ofm);
  const uint16_t prec = p0(SET_OFM_PRECISION);
  const int reverse = (prec >> 9) & 3;
  const int transpose = (prec >> 11) & 7;
  const int storage = (prec >> 14) & 3;
  // Tiles are in the stored (transposed) axes.
  if (stats_ && transpose == 0 && storage == 0 &&
      ((ofm.w > ofm.w0 && ofm.base[1] == ofm.base[0]) ||
       (ofm.h > ofm.h0 && ofm.base[2] == ofm.base[0]))) {
    ++stats_->aliased_ofm_ops;
  }
  if (transpose == 4 || transpose == 5) {
    return fail(Error::InvalidProgram, "OFM_PRECISION 0x%04x: reserved transpose %d", prec,
                transpose);
  }
  // regor emits a reversed OFM only untransposed and unchained, based at the
  // box's first element (EthosU85RCSGenerator::GenerateOFMPrecision, GetTiles).
  if (reverse != 0 && (transpose != 0 || storage == 2)) {
    return fail(Error::NotSupported,
                "OFM_PRECISION 0x%04x: OFM reverse %d with transpose %d / storage %d not modelled",
                prec, reverse, transpose, storage);
  }
  if (storage == 1 || storage == 3) {
    return fail(Error::NotSupported,
                "OFM_PRECISION 0x%04x: OFM storage %d (3x1 tiles or no output) not modelled",
                prec, storage);
  }
  if (storage == 2) {
    // Chained: OFM_REGION names the chaining buffer.
    if (transpose != 0) {
      return fail(Error::InvalidProgram, "OFM_PRECISION 0x%04x: a chained OFM with transpose %d",
                  prec, transpose);
    }
    ChainBuffer& cb = chain_[ofm.region];
    ofm.chain = ofm.region;
    cb.h = ofm.h;
    cb.w = ofm.w;
    cb.c = ofm.c;
    cb.written = true;
    cb.values.assign(static_cast<size_t>(ofm.h) * ofm.w * ofm.c, 0);
  }
  ofm.transpose = transpose;
  ofm.reverse = reverse;
  const uint16_t sp = p1(SET_OFM_SCALE);
  Error e = u85_rounding("OFM_SCALE", (sp >> 13) & 7, (sp >> 6) & 0x1f, &ofm_round_);
  if (e != Error::Ok) {
    return e;
  }
  // ACTIVATION: function bits 0..4 (activation_function), table bits 5..7.
  // Modelled: LUT_U8_U8 (1) and LUT_S8_S8 (4), 256 one-byte entries at table
  // x 256 in the LUT memory, indexed by the 8-bit result (+128 when signed);
  // LUT_S16_S16 (8), 512 (base, slope) pairs of int16 at table x 2048
  // (regor GraphIrOptimiser::RewriteTable), interpolated. The tables with
  // other input/output widths and the built-in tanh/sigmoid are NotSupported.
  const uint16_t act = p0(SET_ACTIVATION);
  u85_lut_fn_ = act & 0x1f;
  lut_index_ = (act >> 5) & 7;
  if (u85_lut_fn_ != kLutNone && u85_lut_fn_ != kLutU8U8 && u85_lut_fn_ != kLutS8S8 &&
      u85_lut_fn_ != kLutS16S16) {
    return fail(Error::NotSupported,
                "ACTIVATION 0x%04x: LUT function %d not modelled on the Ethos-U85 (U8_U8, S8_S8 "
                "and S16_S16 are)",
                act, u85_lut_fn_);
  }
  const int lut_bits = u85_lut_fn_ == kLutS16S16 ? 16 : 8;
  if (u85_lut_fn_ != kLutNone &&
      (ofm.bits != lut_bits || ofm.is_signed != (u85_lut_fn_ != kLutU8U8))) {
    return fail(Error::InvalidProgram, "ACTIVATION 0x%04x: LUT function %d with a %d-bit %s OFM",
                act, u85_lut_fn_, ofm.bits, ofm.is_signed ? "signed" : "unsigned");
  }
  if (u85_lut_fn_ == kLutS16S16 && static_cast<size_t>(lut_index_ + 1) * 2048 > shram_.size()) {
    return fail(Error::InvalidProgram,
                "ACTIVATION 0x%04x: 2048-byte table %d outside the %lu-byte LUT memory", act,
                lut_index_, static_cast<unsigned long>(shram_.size()));
  }
  int64_t lo, hi;
  if (ofm.bits >= 32) {
    lo = ofm.is_signed ? INT32_MIN : 0;
    hi = ofm.is_signed ? INT32_MAX : UINT32_MAX;
  } else {
    lo = ofm.is_signed ? -(int64_t{1} << (ofm.bits - 1)) : 0;
    hi = ofm.is_signed ? (int64_t{1} << (ofm.bits - 1)) - 1 : (int64_t{1} << ofm.bits) - 1;
  }
  // activation_clip_range (bit 12): 0 clamps to the 16-bit ACTIVATION_MIN/MAX
  // (in the OFM's signedness), 1 only to the OFM type.
  if (((act >> 12) & 1) == 0) {
    const uint16_t amin = p0(SET_ACTIVATION_MIN);
    const uint16_t amax = p0(SET_ACTIVATION_MAX);
    lo = std::max(lo, ofm.is_signed ? int64_t{static_cast<int16_t>(amin)} : int64_t{amin});
    hi = std::min(hi, ofm.is_signed ? int64_t{static_cast<int16_t>(amax)} : int64_t{amax});
  }
  act_lo_ = lo;
  act_hi_ = hi;
  return Error::Ok;
}

// Stores one computed OFM element (h, w, c) at its transposed position
// (activation_transpose: 0 HWC, 1 WHC, 2 HCW, 3 WCH, 6 CHW, 7 CWH name the
// stored axes in terms of the computed ones), or mirrored along the reversed
// axis of the OFM box (activation_reverse H, W, C).
Error Model::u85_write_output(const FeatureMap& ofm, int y, int x, int c, int64_t scaled) {
  int64_t v = scaled + ofm.zp;
  if (u85_lut_fn_ == kLutS16S16) {
    // The int16 value picks one of 512 intervals (its top 9 bits) and a
    // position in it (its low 7 bits); base + slope x position / 128, rounded
    // half up: TOSA TABLE followed by its RESCALE by 2^-7.
    v = std::min<int64_t>(INT16_MAX, std::max<int64_t>(INT16_MIN, v));
    const uint32_t u = static_cast<uint32_t>(v - INT16_MIN);
    const uint8_t* e = &shram_[static_cast<size_t>(lut_index_) * 2048 + (u >> 7) * 4];
    const int16_t base = static_cast<int16_t>(e[0] | (e[1] << 8));
    const int16_t slope = static_cast<int16_t>(e[2] | (e[3] << 8));
    v = base + ((int64_t{slope} * (u & 0x7f) + 64) >> 7);
  } else if (u85_lut_fn_ != kLutNone) {
    const bool sgn = u85_lut_fn_ == kLutS8S8;
    v = std::min<int64_t>(sgn ? 127 : 255, std::max<int64_t>(sgn ? -128 : 0, v));
    const uint8_t raw = shram_[static_cast<size_t>(lut_index_) * 256 +
                               static_cast<size_t>(v + (sgn ? 128 : 0))];
    v = sgn ? int64_t{static_cast<int8_t>(raw)} : int64_t{raw};
  }
  v = std::min(act_hi_, std::max(act_lo_, v));
  last_ofm_value_ = v;
  ++ofm_values_written_;
  if (ofm.chain >= 0) {
    ChainBuffer& cb = chain_[ofm.chain];
    cb.values[(static_cast<size_t>(y) * cb.w + x) * cb.c + c] = v;
    return Error::Ok;
  }
  int sy = y, sx = x, sc = c;
  switch (ofm.reverse) {
    case 1:
      sy = ofm.h - 1 - y;
      break;
    case 2:
      sx = ofm.w - 1 - x;
      break;
    case 3:
      sc = ofm.c - 1 - c;
      break;
    default:
      break;
  }
  switch (ofm.transpose) {
    case 1:
      sy = x, sx = y;
      break;
    case 2:
      sx = c, sc = x;
      break;
    case 3:
      sy = x, sx = c, sc = y;
      break;
    case 6:
      sy = c, sx = y, sc = x;
      break;
    case 7:
      sy = c, sc = y;
      break;
    default:
      break;
  }
  uint8_t* p;
  Error e = element_ptr(ofm, sy, sx, sc, true, &p);
  if (e != Error::Ok) {
    return e;
  }
  switch (ofm.esize) {
    case 1:
      *p = static_cast<uint8_t>(v);
      break;
    case 2: {
      const uint16_t u = static_cast<uint16_t>(v);
      std::memcpy(p, &u, 2);
      break;
    }
    default: {
      const uint32_t u = static_cast<uint32_t>(v);
      std::memcpy(p, &u, 4);
      break;
    }
  }
  return Error::Ok;
}

// Per-channel bias and scale (SCALE_BASE/LENGTH): 10 bytes per OFM channel;
// with 32-bit accumulators a 32-bit bias and 31-bit scale, with 48-bit ones a
// 48-bit bias and 15-bit scale; then a 6-bit shift (regor EncodeBias32 /
// EncodeBias48). Call after u85_output_setup (it checks the shifts against
// the OFM rounding).
Error Model::u85_read_scales(int channels, std::vector<int64_t>& bias,
                             std::vector<uint32_t>& scale, std::vector<int>& shift) {
  uint8_t* sp;
  const uint64_t slen = d1(SET_SCALE_LENGTH);
  if (slen < static_cast<uint64_t>(channels) * 10) {
    return fail(Error::InvalidProgram, "SCALE_LENGTH %llu < 10 bytes x OFM depth %d",
                static_cast<unsigned long long>(slen), channels);
  }
  Error e = region_span(p0(SET_SCALE_REGION) & 7, a1(SET_SCALE_BASE),
                        static_cast<uint64_t>(channels) * 10, false, "scale stream", &sp);
  if (e != Error::Ok) {
    return e;
  }
  const bool acc48 = (p0(SET_ACC_FORMAT) & 3) == 1;
  const int bias_bytes = acc48 ? 6 : 4;
  bias.resize(channels);
  scale.resize(channels);
  shift.resize(channels);
  for (int c = 0; c < channels; ++c) {
    const uint8_t* q = sp + 10 * c;
    uint64_t b = 0;
    for (int k = 0; k < bias_bytes; ++k) {
      b |= static_cast<uint64_t>(q[k]) << (8 * k);
    }
    const int unused = 64 - 8 * bias_bytes;
    bias[c] = static_cast<int64_t>(b << unused) >> unused;
    scale[c] = acc48 ? (uint32_t{q[6]} | ((static_cast<uint32_t>(q[7]) & 0x7f) << 8))
                     : (uint32_t{q[4]} | (uint32_t{q[5]} << 8) | (uint32_t{q[6]} << 16) |
                        ((static_cast<uint32_t>(q[7]) & 0x7f) << 24));
    shift[c] = q[8] & 0x3f;
    if (ofm_round_ == kRoundExact && shift[c] != 0) {
      return fail(Error::NotSupported,
                  "OFM rounding DOUBLE_SYMMETRIC with shift %d (channel %d) not modelled",
                  shift[c], c);
    }
  }
  return Error::Ok;
}

// An input whose storage (IFM/IFM2_PRECISION bits 14..15) is CHAINED reads
// the chaining buffer its region register names; TILE2X2 reads memory.
Error Model::u85_chained_input(FeatureMap& f, uint16_t precision) {
  const int storage = (precision >> 14) & 3;
  if (storage == 0) {
    return Error::Ok;
  }
  if (storage != 2) {
    return fail(Error::NotSupported, "%s_PRECISION 0x%04x: %s storage %d not modelled", f.name,
                precision, f.name, storage);
  }
  if (!chain_[f.region].written) {
    return fail(Error::InvalidProgram, "%s: chaining buffer %d read before any kernel wrote it",
                f.name, f.region);
  }
  f.chain = f.region;
  return Error::Ok;
}

// The chaining buffer as the input's type sees it (the stored value cut to
// its width and signedness), zero point subtracted, dense HWC of f.h x f.w x
// f.c.
Error Model::read_chain(const FeatureMap& f, std::vector<int32_t>& out) {
  const ChainBuffer& cb = chain_[f.chain];
  if (f.h > cb.h || f.w > cb.w || f.c > cb.c) {
    return fail(Error::InvalidProgram,
                "%s: %d x %d x %d elements from chaining buffer %d of %d x %d x %d", f.name, f.h,
                f.w, f.c, f.chain, cb.h, cb.w, cb.c);
  }
  out.resize(static_cast<size_t>(f.h) * f.w * f.c);
  size_t k = 0;
  for (int y = 0; y < f.h; ++y) {
    for (int x = 0; x < f.w; ++x) {
      for (int c = 0; c < f.c; ++c) {
        const uint64_t raw = static_cast<uint64_t>(
            cb.values[(static_cast<size_t>(y) * cb.w + x) * cb.c + c]);
        int64_t v;
        if (f.bits >= 32) {
          v = f.is_signed ? int64_t{static_cast<int32_t>(raw)} : int64_t{static_cast<uint32_t>(raw)};
        } else {
          const uint64_t mask = (uint64_t{1} << f.bits) - 1;
          const uint64_t u = raw & mask;
          v = (f.is_signed && (u >> (f.bits - 1))) ? static_cast<int64_t>(u) - (int64_t{1} << f.bits)
                                                    : static_cast<int64_t>(u);
        }
        out[k++] = static_cast<int32_t>(v - f.zp);
      }
    }
  }
  return Error::Ok;
}

} // namespace detail
} // namespace npu_model
} // namespace ethosu_ng
