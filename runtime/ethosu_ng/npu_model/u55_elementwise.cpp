// SPDX-License-Identifier: BSD-3-Clause
// SPDX-License-Identifier: Apache-2.0
// Ethos-U55/U65 elementwise operations (NPU_OP_ELEMENTWISE): binary and unary
// modes, IFM2 broadcast and scalars, operand scaling. See docs/npu-model.md.
#include <ethosu_ng/npu_model/model.h>

#include <algorithm>

namespace ethosu_ng {
namespace npu_model {
namespace detail {

enum class Elementwise : uint16_t {
  kMul = 0,
  kAdd = 1,
  kSub = 2,
  kMin = 3,
  kMax = 4,
  kLrelu = 5,
  kAbs = 6,
  kClz = 7,
  kShr = 8,
  kShl = 9,
};

const char* elementwise_name(uint16_t m) {
  static const char* const names[] = {
      "MUL", "ADD", "SUB", "MIN", "MAX", "LRELU", "ABS", "CLZ", "SHR", "SHL"};
  return m < 10 ? names[m] : "?";
}

// ------------------------------------------------------------ elementwise
int count_leading_zeros32(uint32_t v) {
  int n = 0;
  for (int b = 31; b >= 0 && !((v >> b) & 1); --b) {
    ++n;
  }
  return n;
}

Error Model::op_elementwise() {
  const uint16_t mode = cmd_param_;
  if (mode > 9) {
    return fail(Error::InvalidProgram, "elementwise mode %u (0..9)", mode);
  }
  const Elementwise m = static_cast<Elementwise>(mode);
  const bool unary = m == Elementwise::kLrelu || m == Elementwise::kAbs || m == Elementwise::kClz;
  FeatureMap ifm, ifm2, ofm;
  Error e = feature_map(ofm, false, true);
  e = e == Error::Ok ? check_extent(ofm, true) : e;
  if (e != Error::Ok) {
    return e;
  }
  e = feature_map(ifm, false, false);
  if (e != Error::Ok) {
    return e;
  }
  if (p0(SET_IFM_UPSCALE) != 0) {
    return fail(Error::NotSupported, "IFM_UPSCALE %u on an elementwise op not modelled",
                p0(SET_IFM_UPSCALE));
  }
  ifm.h = ofm.h;
  ifm.w = ofm.w;
  ifm.c = ofm.c;
  const uint16_t bc = p0(SET_IFM2_BROADCAST);
  const bool reversed = (bc >> 6) & 1;
  const bool scalar = (bc >> 7) & 1;
  int32_t scalar_v = 0;
  if (!unary) {
    e = feature_map(ifm2, true, false);
    if (e != Error::Ok) {
      return e;
    }
    ifm2.h = (bc & 1) ? 1 : ofm.h;
    ifm2.w = (bc & 2) ? 1 : ofm.w;
    ifm2.c = (bc & 4) ? 1 : ofm.c;
    if (scalar) {
      const uint16_t s = p0(SET_IFM2_SCALAR);
      scalar_v = (ifm2.is_signed ? int32_t{static_cast<int16_t>(s)} : int32_t{s}) - ifm2.zp;
    }
  }
  if (static_cast<uint64_t>(ofm.h) * ofm.w * ofm.c > kMaxElements) {
    return fail(Error::NotSupported, "OFM of %d x %d x %d exceeds the model's limit", ofm.h, ofm.w,
                ofm.c);
  }
  e = output_setup(ofm);
  if (e != Error::Ok) {
    return e;
  }
  const uint16_t iprec = p0(SET_IFM_PRECISION);
  const int scale_mode = (iprec >> 8) & 3;
  const int ifm_round = (iprec >> 14) & 3;
  if (scale_mode == 3 || ifm_round == 3) {
    return fail(Error::InvalidProgram, "IFM_PRECISION 0x%04x: reserved scale or round mode", iprec);
  }
  const uint32_t ofm_scale = d1(SET_OFM_SCALE);
  const int ofm_shift = p1(SET_OFM_SCALE) & 0x3f;
  const uint32_t opa_scale = d1(SET_OPA_SCALE);
  const int opa_shift = p1(SET_OPA_SCALE) & 0x3f;
  const uint32_t opb_scale = d1(SET_OPB_SCALE);

  // 32-bit operand scaling (OPA_32 / OPB_32): the scaled operand goes through
  // OPA_SCALE with rounding, the other one is multiplied by the fixed power of
  // two Vela's "advanced" add/sub scaling assumes (2^(input_shift - 1):
  // input_shift 20 for 8-bit, 15 for 16-bit inputs).
  const int unscaled_shift = ifm.bits == 16 ? 14 : 19;
  if ((m == Elementwise::kAdd || m == Elementwise::kSub) && scale_mode != 0 && ifm.bits == 32) {
    return fail(Error::NotSupported,
                "elementwise %s with 32-bit inputs and IFM scale mode %d not modelled",
                elementwise_name(mode), scale_mode);
  }
  std::vector<int32_t> a, b;
  e = read_dense(ifm, a);
  if (e != Error::Ok) {
    return e;
  }
  if (!unary && !scalar) {
    e = read_dense(ifm2, b);
    if (e != Error::Ok) {
      return e;
    }
  }
  if (stats_) {
    ++stats_->ops;
  }
  for (int y = 0; y < ofm.h; ++y) {
    for (int x = 0; x < ofm.w; ++x) {
      for (int c = 0; c < ofm.c; ++c) {
        int64_t va = a[(static_cast<size_t>(y) * ofm.w + x) * ofm.c + c];
        int64_t vb = 0;
        if (!unary) {
          if (scalar) {
            vb = scalar_v;
          } else {
            const int by = ifm2.h == 1 ? 0 : y, bx = ifm2.w == 1 ? 0 : x, bch = ifm2.c == 1 ? 0 : c;
            vb = b[(static_cast<size_t>(by) * ifm2.w + bx) * ifm2.c + bch];
          }
          if (reversed) {
            std::swap(va, vb);
          }
        }
        int64_t r = 0;
        switch (m) {
          case Elementwise::kAdd:
          case Elementwise::kSub: {
            if (scale_mode == 0) {
              va *= static_cast<int64_t>(opa_scale & 0xffff);
              vb *= static_cast<int64_t>(opb_scale & 0xffff);
            } else if (scale_mode == 1) {
              va = scale_round(va, opa_scale, opa_shift, ifm_round);
              vb *= int64_t{1} << unscaled_shift;
            } else {
              vb = scale_round(vb, opa_scale, opa_shift, ifm_round);
              va *= int64_t{1} << unscaled_shift;
            }
            const int64_t s = m == Elementwise::kAdd ? va + vb : va - vb;
            r = scale_round(s, ofm_scale, ofm_shift, ofm_round_);
            break;
          }
          case Elementwise::kMul:
            r = scale_round(va * vb, ofm_scale, ofm_shift, ofm_round_);
            break;
          case Elementwise::kMin:
            r = scale_round(std::min(va, vb), ofm_scale, ofm_shift, ofm_round_);
            break;
          case Elementwise::kMax:
            r = scale_round(std::max(va, vb), ofm_scale, ofm_shift, ofm_round_);
            break;
          case Elementwise::kAbs:
            r = scale_round(va < 0 ? -va : va, ofm_scale, ofm_shift, ofm_round_);
            break;
          case Elementwise::kLrelu:
            r = va < 0 ? scale_round(va, ofm_scale, ofm_shift, ofm_round_) : va;
            break;
          case Elementwise::kClz:
            r = count_leading_zeros32(static_cast<uint32_t>(va));
            break;
          case Elementwise::kShl: {
            const int64_t sh = vb;
            r = (sh < 0 || sh > 31)
                    ? 0
                    : static_cast<int32_t>(static_cast<uint32_t>(va) << static_cast<int>(sh));
            break;
          }
          case Elementwise::kShr: {
            const int64_t sh = vb;
            if (sh <= 0) {
              r = va;
            } else if (sh > 31) {
              r = va < 0 ? -1 : 0;
            } else {
              const int64_t rnd =
                  ofm_round_ == kRoundNatural ? (int64_t{1} << (sh - 1)) : 0;
              r = (va + rnd) >> sh;
            }
            break;
          }
        }
        e = write_output(ofm, y, x, c, r);
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
