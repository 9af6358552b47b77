// SPDX-License-Identifier: BSD-3-Clause
// SPDX-License-Identifier: Apache-2.0
// Ethos-U55/U65 pooling (NPU_OP_POOL): max, average and reduce-sum.
// See docs/npu-model.md.
#include <ethosu_ng/npu_model/model.h>

#include <algorithm>

namespace ethosu_ng {
namespace npu_model {
namespace detail {

// ------------------------------------------------------------ pooling
// scale_round(x, scale, shift, NATURAL) == x for every x.
bool is_unit_scale(uint32_t scale, int shift) {
  return shift < 32 && scale == (uint32_t{1} << shift);
}

Error Model::op_pool() {
  const uint16_t mode = cmd_param_;
  if (mode > 2) {
    return fail(Error::InvalidProgram, "pooling mode %u (0 max, 1 average, 2 reduce-sum)", mode);
  }
  FeatureMap ifm, ofm;
  Error e = feature_map(ofm, false, true);
  e = e == Error::Ok ? check_extent(ofm, true) : e;
  if (e != Error::Ok) {
    return e;
  }
  e = feature_map(ifm, false, false);
  if (e != Error::Ok) {
    return e;
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
  // Max and average pooling work per channel; reduce-sum adds up the kernel
  // window over every IFM channel into a single OFM channel.
  ifm.c = mode == 2 ? p0(SET_IFM_DEPTH_M1) + 1 : ofm.c;
  if (mode == 2 && ofm.c != 1) {
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
  e = output_setup(ofm);
  if (e != Error::Ok) {
    return e;
  }
  const bool global = (p0(SET_OFM_PRECISION) >> 8) & 1;
  const bool padded = pt || pl || pb || pr;
  if (mode == 1 && !global && padded) {
    return fail(Error::NotSupported,
                "average pooling with padding and no global scale (hardware divisor) not modelled");
  }
  uint32_t scale = 1;
  int shift = 0;
  if (global) {
    scale = d1(SET_OFM_SCALE);
    shift = p1(SET_OFM_SCALE) & 0x3f;
  } else if (mode == 1) {
    return fail(Error::NotSupported,
                "average pooling without a global OFM scale (hardware divisor) not modelled");
  }
  // With padding the hardware divides each sum by the number of kernel
  // positions inside the IFM (padding excluded: TFLite's and TOSA's average).
  // Vela computes the scale itself only without padding ("for valid padding
  // vela has to output scaling values"); regor leaves the identity scale for
  // padded TOSA AVG_POOL2D. Modelled as TOSA's reciprocal_scale with single
  // rounding; a non-identity scale or another rounding on top is unverified.
  const bool divide_by_count = mode == 1 && padded;
  if (divide_by_count && (ofm_round_ != kRoundNatural || !is_unit_scale(scale, shift))) {
    return fail(Error::NotSupported,
                "padded average pooling with OFM_SCALE 0x%08x >> %d and rounding %d (only the "
                "identity scale with NATURAL rounding is modelled)",
                scale, shift, ofm_round_);
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
        int64_t acc = 0;
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
            if (mode == 0) {
              acc = any ? std::max(acc, int64_t{px[c]}) : int64_t{px[c]};
            } else if (mode == 1) {
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
        if (divide_by_count) {
          if (count == 0) {
            return fail(Error::InvalidProgram,
                        "average pooling: OFM (%d, %d) has no kernel position inside the IFM", oy,
                        ox);
          }
          const Reciprocal r = reciprocal_scale(count);
          acc = scale_round(acc, r.multiplier, r.shift, kRoundNatural);
        }
        e = write_output(ofm, oy, ox, c, scale_round(acc, scale, shift, ofm_round_));
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
