// SPDX-License-Identifier: BSD-3-Clause
// SPDX-License-Identifier: Apache-2.0
// Ethos-U85 elementwise operations (NPU_OP_ELEMENTWISE): arithmetic (MUL, ADD,
// SUB, MIN, MAX, ABS), shifts (SHL, SHR, LSR), CLZ, comparisons (CMP_EQ, NE,
// GE, GT) and bitwise logic (AND, OR, XOR, NOT, AND_NOT), with per-operand
// scaling (IFM_SCALE, IFM2_SCALE), broadcast of either input in H/W/C and
// scalars (IFM_BROADCAST, IFM2_BROADCAST, OP_SCALAR). Modes: regor
// ethos_u85_interface.hpp elementwise_mode. See docs/npu-model.md, "Ethos-U85".
#include <ethosu_ng/npu_model/model.h>

#include <algorithm>

namespace ethosu_ng {
namespace npu_model {
namespace detail {

namespace {

constexpr int kMul = 0, kAdd = 1, kSub = 2, kMin = 3, kMax = 4, kAbs = 6, kClz = 7, kShr = 8,
              kShl = 9, kLsr = 10, kCmpEq = 16, kCmpNe = 17, kCmpGe = 18, kCmpGt = 19, kAnd = 33,
              kOr = 34, kXor = 35, kNot = 36, kAndNot = 42;

bool modelled(int mode) {
  switch (mode) {
    case kMul: case kAdd: case kSub: case kMin: case kMax: case kAbs: case kClz: case kShr:
    case kShl: case kLsr: case kCmpEq: case kCmpNe: case kCmpGe: case kCmpGt: case kAnd:
    case kOr: case kXor: case kNot: case kAndNot:
      return true;
    default:
      return false;
  }
}

bool is_unary(int mode) {
  return mode == kAbs || mode == kClz || mode == kNot;
}

// A comparison writes all ones for true (regor RewriteSelect ANDs the result
// with the selected values) and zero for false.
constexpr int64_t kTrue = -1;

// a << sh within `bits` bits, as a signed value; amounts outside 0..bits-1
// give 0.
int64_t shift_left(int64_t a, int64_t sh, int bits) {
  if (sh < 0 || sh >= bits) {
    return 0;
  }
  const uint64_t mask = bits >= 64 ? ~uint64_t{0} : (uint64_t{1} << bits) - 1;
  const uint64_t u = (static_cast<uint64_t>(a) << sh) & mask;
  // Back to a signed value of `bits` bits.
  return bits >= 64 || !(u >> (bits - 1)) ? static_cast<int64_t>(u)
                                           : static_cast<int64_t>(u) - (int64_t{1} << bits);
}

struct OperandScale {
  uint32_t scale;
  int shift;
  int round;
};

} // namespace

Error Model::u85_elementwise() {
  const uint16_t mode = cmd_param_ & 0x3f;
  if (!modelled(mode)) {
    return fail(Error::NotSupported,
                "elementwise mode %u not modelled (MUL, ADD, SUB, MIN, MAX, ABS, CLZ, SHR, SHL, "
                "LSR, CMP_EQ/NE/GE/GT, AND, OR, XOR, NOT, AND_NOT are)",
                mode);
  }
  const bool unary = is_unary(mode);
  FeatureMap ifm, ifm2, ofm;
  Error e = feature_map(ofm, false, true);
  if (e != Error::Ok) {
    return e;
  }
  if (p0(SET_IFM_UPSCALE) != 0) {
    return fail(Error::NotSupported, "IFM_UPSCALE %u on an elementwise op not modelled",
                p0(SET_IFM_UPSCALE));
  }
  if (static_cast<uint64_t>(ofm.h) * ofm.w * ofm.c > kMaxElements) {
    return fail(Error::NotSupported, "OFM of %d x %d x %d exceeds the model's limit", ofm.h, ofm.w,
                ofm.c);
  }
  // Each input: its feature map (or a scalar), broadcast and scale.
  struct Input {
    FeatureMap* fm;
    bool scalar;
    std::vector<int32_t> data;
    OperandScale s;
  } inputs[2] = {{&ifm, false, {}, {}}, {&ifm2, false, {}, {}}};
  const int ninputs = unary ? 1 : 2;
  for (int k = 0; k < ninputs; ++k) {
    Input& in = inputs[k];
    e = feature_map(*in.fm, k == 1, false);
    if (e != Error::Ok) {
      return e;
    }
    const uint16_t prec = k == 1 ? p0(SET_IFM2_PRECISION) : p0(SET_IFM_PRECISION);
    const uint16_t bc = k == 1 ? p0(SET_IFM2_BROADCAST) : p0(static_cast<Cmd0>(U85_SET_IFM_BROADCAST));
    const int storage = (prec >> 14) & 3;
    if ((bc & 0xf) > 8) {
      return fail(Error::InvalidProgram, "%s_BROADCAST 0x%04x: reserved mode", in.fm->name, bc);
    }
    in.scalar = (bc & 0xf) == 8;
    if (in.scalar != (storage == 3)) {
      return fail(Error::InvalidProgram, "%s: storage %d with broadcast 0x%04x", in.fm->name,
                  storage, bc);
    }
    if (!in.scalar) {
      e = u85_chained_input(*in.fm, prec);
      if (e != Error::Ok) {
        return e;
      }
    }
    in.fm->h = (bc & 1) ? 1 : ofm.h;
    in.fm->w = (bc & 2) ? 1 : ofm.w;
    in.fm->c = (bc & 4) ? 1 : ofm.c;
    const Cmd1 sreg = static_cast<Cmd1>(k == 1 ? U85_SET_IFM2_SCALE : U85_SET_IFM_SCALE);
    const uint16_t sp = p1(sreg);
    in.s.scale = d1(sreg) & 0x7fffffffu;
    in.s.shift = sp & 0x3f;
    e = u85_rounding(k == 1 ? "IFM2_SCALE" : "IFM_SCALE", (sp >> 13) & 1, (sp >> 6) & 0x1f,
                     &in.s.round);
    if (e != Error::Ok) {
      return e;
    }
    if (in.s.round == kRoundExact && in.s.shift != 0) {
      return fail(Error::NotSupported,
                  "%s_SCALE: rounding DOUBLE_SYMMETRIC with shift %d not modelled", in.fm->name,
                  in.s.shift);
    }
  }
  e = u85_output_setup(ofm);
  if (e != Error::Ok) {
    return e;
  }
  const uint32_t ofm_scale = d1(SET_OFM_SCALE) & 0x7fffffffu;
  const int ofm_shift = p1(SET_OFM_SCALE) & 0x3f;
  if (ofm_round_ == kRoundExact && ofm_shift != 0) {
    return fail(Error::NotSupported, "OFM rounding DOUBLE_SYMMETRIC with shift %d not modelled",
                ofm_shift);
  }
  int32_t scalar_v[2] = {0, 0};
  for (int k = 0; k < ninputs; ++k) {
    Input& in = inputs[k];
    if (in.scalar) {
      // OP_SCALAR holds the value in the input's type, zero point included.
      const uint32_t raw = d1(static_cast<Cmd1>(U85_SET_OP_SCALAR));
      scalar_v[k] = static_cast<int32_t>(raw) - in.fm->zp;
    } else {
      e = read_dense(*in.fm, in.data);
      if (e != Error::Ok) {
        return e;
      }
    }
  }
  if (stats_) {
    ++stats_->ops;
  }
  for (int y = 0; y < ofm.h; ++y) {
    for (int x = 0; x < ofm.w; ++x) {
      for (int c = 0; c < ofm.c; ++c) {
        int64_t v[2] = {0, 0};
        for (int k = 0; k < ninputs; ++k) {
          const Input& in = inputs[k];
          int64_t raw;
          if (in.scalar) {
            raw = scalar_v[k];
          } else {
            const FeatureMap& f = *in.fm;
            const int by = f.h == 1 ? 0 : y, bx = f.w == 1 ? 0 : x, bc = f.c == 1 ? 0 : c;
            raw = in.data[(static_cast<size_t>(by) * f.w + bx) * f.c + bc];
          }
          v[k] = scale_round(raw, in.s.scale, in.s.shift, in.s.round);
        }
        int64_t r = 0;
        // Shifts and CLZ work on the operand's own width (32 bits at most).
        const int width = std::min(32, ifm.bits);
        switch (mode) {
          case kMul:
            r = v[0] * v[1];
            break;
          case kClz: {
            const uint32_t u = static_cast<uint32_t>(v[0]) &
                               (width >= 32 ? 0xffffffffu : (1u << width) - 1);
            int n = 0;
            while (n < width && !((u >> (width - 1 - n)) & 1)) {
              ++n;
            }
            r = n;
            break;
          }
          case kShl:
            r = shift_left(v[0], v[1], width);
            break;
          case kShr: {
            // Arithmetic, rounded by the OFM rounding mode (regor: TOSA
            // ARITHMETIC_RIGHT_SHIFT round -> NATURAL, else TRUNCATE_TO_LOWER).
            const int64_t sh = v[1];
            if (sh <= 0) {
              r = v[0];
            } else if (sh >= 63) {
              r = v[0] < 0 ? -1 : 0;
            } else {
              const int64_t rnd = ofm_round_ == kRoundNatural ? (int64_t{1} << (sh - 1)) : 0;
              r = (v[0] + rnd) >> sh;
            }
            break;
          }
          case kLsr: {
            const int64_t sh = v[1];
            const uint64_t mask = width >= 64 ? ~uint64_t{0} : (uint64_t{1} << width) - 1;
            r = (sh < 0 || sh >= width) ? 0
                                        : static_cast<int64_t>((static_cast<uint64_t>(v[0]) & mask) >> sh);
            break;
          }
          case kCmpEq:
            r = v[0] == v[1] ? kTrue : 0;
            break;
          case kCmpNe:
            r = v[0] != v[1] ? kTrue : 0;
            break;
          case kCmpGe:
            r = v[0] >= v[1] ? kTrue : 0;
            break;
          case kCmpGt:
            r = v[0] > v[1] ? kTrue : 0;
            break;
          case kAnd:
            r = v[0] & v[1];
            break;
          case kOr:
            r = v[0] | v[1];
            break;
          case kXor:
            r = v[0] ^ v[1];
            break;
          case kNot:
            r = ~v[0];
            break;
          case kAndNot:
            r = v[0] & ~v[1];
            break;
          case kAdd:
            r = v[0] + v[1];
            break;
          case kSub:
            r = v[0] - v[1];
            break;
          case kMin:
            r = std::min(v[0], v[1]);
            break;
          case kMax:
            r = std::max(v[0], v[1]);
            break;
          default: // kAbs
            r = v[0] < 0 ? -v[0] : v[0];
            break;
        }
        e = u85_write_output(ofm, y, x, c, scale_round(r, ofm_scale, ofm_shift, ofm_round_));
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
