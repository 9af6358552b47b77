// SPDX-License-Identifier: BSD-3-Clause
// SPDX-License-Identifier: Apache-2.0
// Ethos-U85 pooling (NPU_OP_POOL): max, min, sum, average and reduce-sum
// (regor ethos_u85_interface.hpp pooling_mode). See docs/npu-model.md,
// "Ethos-U85".
#include <ethosu_ng/npu_model/model.h>

#include <algorithm>

namespace ethosu_ng {
namespace npu_model {
namespace detail {

namespace {
constexpr int kPoolMax = 0, kPoolAverage = 1, kPoolReduceSum = 2, kPoolSum = 3, kPoolNone = 4,
              kPoolMin = 5;
} // namespace

Error Model::u85_pool() {
  const uint16_t mode = cmd_param_ & 7;
  if ((cmd_param_ & ~7u) != 0) {
    return fail(Error::InvalidProgram, "pooling parameter 0x%04x: reserved bits", cmd_param_);
  }
  if (mode > 5) {
    return fail(Error::NotSupported, "pooling mode %u (ARGMAX) not modelled", mode);
  }
  FeatureMap ifm, ofm;
  Error e = feature_map(ofm, false, true);
  if (e != Error::Ok) {
    return e;
  }
  e = feature_map(ifm, false, false);
  if (e != Error::Ok) {
    return e;
  }
  const bool acc_from_ifm2 = ((p0(SET_ACC_FORMAT) >> 4) & 3) == 2;
  if (acc_from_ifm2 != (mode == kPoolNone)) {
    return fail(Error::NotSupported,
                "pooling mode %u with ACC_FORMAT 0x%04x: only mode NONE with the accumulator "
                "loaded from IFM2 and the other modes from a reset accumulator are modelled",
                mode, p0(SET_ACC_FORMAT));
  }
  if (mode == kPoolNone) {
    // The accumulator is IFM2 (32-bit, Vela's rescale of a 32-bit tensor);
    // the IFM is not read.
    FeatureMap ifm2;
    e = feature_map(ifm2, true, false);
    if (e != Error::Ok) {
      return e;
    }
    e = u85_chained_input(ifm2, p0(SET_IFM2_PRECISION));
    if (e != Error::Ok) {
      return e;
    }
    ifm = ifm2;
  } else {
    e = u85_chained_input(ifm, p0(SET_IFM_PRECISION));
    if (e != Error::Ok) {
      return e;
    }
  }
  const int upscale = p0(SET_IFM_UPSCALE) & 3;
  if (upscale == 3 || (p0(SET_IFM_UPSCALE) & ~3u) != 0) {
    return fail(Error::InvalidProgram, "IFM_UPSCALE 0x%04x: reserved mode", p0(SET_IFM_UPSCALE));
  }
  const uint16_t ks = p0(SET_KERNEL_STRIDE);
  const int stride_x = ((((ks >> 6) & 1) << 1) | (ks & 1)) + 1;
  const int stride_y = ((((ks >> 9) & 1) << 1) | ((ks >> 1) & 1)) + 1;
  if ((ks >> 3) & 3) {
    return fail(Error::NotSupported, "KERNEL_STRIDE 0x%04x: dilated pooling not modelled", ks);
  }
  const int kh = p0(SET_KERNEL_HEIGHT_M1) + 1;
  const int kw = p0(SET_KERNEL_WIDTH_M1) + 1;
  const int pt = p0(SET_IFM_PAD_TOP), pl = p0(SET_IFM_PAD_LEFT);
  const int pb = p0(SET_IFM_PAD_BOTTOM), pr = p0(SET_IFM_PAD_RIGHT);
  e = check_ifm_padding(pt, pl, pb, pr);
  if (e != Error::Ok) {
    return e;
  }
  ifm.h = (ofm.h - 1) * stride_y + kh - pt - pb;
  ifm.w = (ofm.w - 1) * stride_x + kw - pl - pr;
  ifm.c = mode == kPoolReduceSum ? p0(SET_IFM_DEPTH_M1) + 1 : ofm.c;
  if (mode == kPoolReduceSum && ofm.c != 1) {
    return fail(Error::NotSupported, "reduce-sum into OFM depth %d (only 1 modelled)", ofm.c);
  }
  if (ifm.h <= 0 || ifm.w <= 0) {
    return fail(Error::InvalidProgram,
                "padding (t %d b %d l %d r %d) leaves no IFM for OFM %d x %d, kernel %d x %d", pt,
                pb, pl, pr, ofm.h, ofm.w, kh, kw);
  }
  const uint64_t work = static_cast<uint64_t>(ofm.h) * ofm.w * ifm.c * kh * kw;
  if (work > kMaxMacs || static_cast<uint64_t>(ofm.h) * ofm.w * ofm.c > kMaxElements) {
    return fail(Error::NotSupported, "pooling of %llu kernel elements exceeds the model's limit",
                static_cast<unsigned long long>(work));
  }
  e = u85_output_setup(ofm);
  if (e != Error::Ok) {
    return e;
  }
  // Global scale (OFM_SCALE), or per channel from the scale stream (bias
  // added to the accumulator: Vela's bias add after a transpose convolution).
  const bool global = (p0(SET_OFM_PRECISION) >> 8) & 1;
  std::vector<int64_t> bias(ofm.c, 0);
  std::vector<uint32_t> scale(ofm.c, d1(SET_OFM_SCALE) & 0x7fffffffu);
  std::vector<int> shift(ofm.c, p1(SET_OFM_SCALE) & 0x3f);
  if (!global) {
    if (mode != kPoolNone) {
      return fail(Error::NotSupported, "pooling mode %u with per-channel scales not modelled",
                  mode);
    }
    e = u85_read_scales(ofm.c, bias, scale, shift);
    if (e != Error::Ok) {
      return e;
    }
  } else if (ofm_round_ == kRoundExact && shift[0] != 0) {
    return fail(Error::NotSupported, "OFM rounding DOUBLE_SYMMETRIC with shift %d not modelled",
                shift[0]);
  }
  std::vector<int32_t> in;
  e = read_ifm(ifm, upscale, in);
  if (e != Error::Ok) {
    return e;
  }
  if (stats_) {
    ++stats_->ops;
  }
  for (int oy = 0; oy < ofm.h; ++oy) {
    for (int ox = 0; ox < ofm.w; ++ox) {
      for (int c = 0; c < ofm.c; ++c) {
        int64_t acc = bias[c];
        bool any = false;
        uint32_t count = 0; // kernel positions inside the IFM
        for (int ky = 0; ky < kh; ++ky) {
          const int iy = oy * stride_y - pt + ky;
          if (iy < 0 || iy >= ifm.h) {
            continue;
          }
          for (int kx = 0; kx < kw; ++kx) {
            const int ix = ox * stride_x - pl + kx;
            if (ix < 0 || ix >= ifm.w) {
              continue;
            }
            const int32_t* px = &in[(static_cast<size_t>(iy) * ifm.w + ix) * ifm.c];
            if (mode == kPoolMax) {
              acc = any ? std::max(acc, int64_t{px[c]}) : int64_t{px[c]};
            } else if (mode == kPoolMin) {
              acc = any ? std::min(acc, int64_t{px[c]}) : int64_t{px[c]};
            } else if (mode == kPoolSum || mode == kPoolNone || mode == kPoolAverage) {
              acc += px[c];
            } else {
              for (int ic = 0; ic < ifm.c; ++ic) {
                acc += px[ic];
              }
            }
            any = true;
            ++count;
          }
        }
        if (mode == kPoolAverage) {
          // The hardware divides by the kernel positions inside the IFM
          // (padding excluded), as TOSA AVG_POOL2D: reciprocal_scale, NATURAL.
          if (count == 0) {
            return fail(Error::InvalidProgram,
                        "average pooling: OFM (%d, %d) has no kernel position inside the IFM", oy,
                        ox);
          }
          const Reciprocal r = reciprocal_scale(count);
          acc = scale_round(acc, r.multiplier, r.shift, kRoundNatural);
        }
        e = u85_write_output(ofm, oy, ox, c, scale_round(acc, scale[c], shift[c], ofm_round_));
        if (e != Error::Ok) {
          return e;
        }
      }
    }
  }
  return Error::Ok;
}

} // namespace detail
} // namespace npu_model
} // namespace ethosu_ng
