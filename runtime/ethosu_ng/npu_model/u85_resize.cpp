// SPDX-License-Identifier: BSD-3-Clause
// SPDX-License-Identifier: Apache-2.0
// Ethos-U85 resize (NPU_OP_RESIZE): nearest and bilinear, as regor emits a
// TOSA RESIZE (ethos_u85_register_cs_generator.cpp GenerateResizeOp). The
// registers hold TOSA's scale and offset: RESIZE_X/Y_SCALE_N_M1 the
// numerator n - 1, RESIZE_X/Y_OFFSET the 12-bit signed offset, and the
// RESIZE_X/Y step registers d / n as an integer part and a remainder (d =
// one_step_int * n + one_step_mod). KERNEL_HEIGHT/WIDTH_M1 give the IFM
// extent read. The value is TOSA's (bilinear: the sum of the four corners
// weighted by (n - dy) or dy times (n - dx) or dx) held with 16 fraction
// bits, so OFM_SCALE is 1 with shift 16 plus the shift of the TOSA RESCALE
// regor folds in. See docs/npu-model.md, "Ethos-U85".
#include <ethosu_ng/npu_model/model.h>

#include <algorithm>

namespace ethosu_ng {
namespace npu_model {
namespace detail {

namespace {

constexpr int kBilinear = 0, kReplicate = 1;

// floor(a / b) for b > 0.
int64_t floor_div(int64_t a, int64_t b) {
  return a >= 0 ? a / b : -((-a + b - 1) / b);
}

} // namespace

Error Model::u85_resize() {
  const int mode = cmd_param_ & 3;
  if ((cmd_param_ & ~3u) != 0 || mode == 3) {
    return fail(Error::InvalidProgram, "resize parameter 0x%04x: reserved mode or bits",
                cmd_param_);
  }
  if (mode == kReplicate) {
    return fail(Error::NotSupported, "resize mode REPLICATE not modelled");
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
  e = u85_chained_input(ifm, p0(SET_IFM_PRECISION));
  if (e != Error::Ok) {
    return e;
  }
  if (p0(SET_IFM_UPSCALE) != 0) {
    return fail(Error::InvalidProgram, "IFM_UPSCALE %u on a resize", p0(SET_IFM_UPSCALE));
  }
  if ((p0(SET_OFM_PRECISION) >> 11) & 7) {
    return fail(Error::NotSupported, "resize with an OFM transpose not modelled");
  }
  // Per axis: numerator n, denominator d, offset (TOSA RESIZE scale/offset).
  struct Axis {
    int64_t n, d, offset;
  } ax[2]; // 0: y, 1: x
  const Cmd0 scale_reg[2] = {static_cast<Cmd0>(U85_SET_RESIZE_Y_SCALE_N_M1),
                             static_cast<Cmd0>(U85_SET_RESIZE_X_SCALE_N_M1)};
  const Cmd0 offset_reg[2] = {static_cast<Cmd0>(U85_SET_RESIZE_Y_OFFSET),
                              static_cast<Cmd0>(U85_SET_RESIZE_X_OFFSET)};
  const Cmd1 step_reg[2] = {static_cast<Cmd1>(U85_SET_RESIZE_Y),
                            static_cast<Cmd1>(U85_SET_RESIZE_X)};
  for (int a = 0; a < 2; ++a) {
    const uint16_t sn = p0(scale_reg[a]);
    const uint16_t off = p0(offset_reg[a]);
    if ((sn >> 11) != 0 || (off >> 12) != 0) {
      return fail(Error::InvalidProgram, "resize %s: scale 0x%04x / offset 0x%04x reserved bits",
                  a ? "x" : "y", sn, off);
    }
    ax[a].n = int64_t{sn} + 1;
    ax[a].offset = static_cast<int16_t>(static_cast<uint16_t>(off << 4)) >> 4;
    // one_step_int: parameter bits 0..3; one_step_mod: data bits 0..10.
    const int64_t step_int = p1(step_reg[a]) & 0xf;
    const int64_t step_mod = d1(step_reg[a]) & 0x7ff;
    if (step_mod >= ax[a].n) {
      return fail(Error::InvalidProgram, "resize %s: step remainder %lld >= scale %lld",
                  a ? "x" : "y", static_cast<long long>(step_mod),
                  static_cast<long long>(ax[a].n));
    }
    ax[a].d = step_int * ax[a].n + step_mod;
  }
  ifm.h = p0(SET_KERNEL_HEIGHT_M1) + 1;
  ifm.w = p0(SET_KERNEL_WIDTH_M1) + 1;
  ifm.c = ofm.c;
  if (static_cast<uint64_t>(ofm.h) * ofm.w * ofm.c > kMaxElements ||
      static_cast<uint64_t>(ifm.h) * ifm.w * ifm.c > kMaxElements) {
    return fail(Error::NotSupported, "resize of %d x %d x %d exceeds the model's limit", ofm.h,
                ofm.w, ofm.c);
  }
  e = u85_output_setup(ofm);
  if (e != Error::Ok) {
    return e;
  }
  if (!((p0(SET_OFM_PRECISION) >> 8) & 1)) {
    return fail(Error::NotSupported, "resize with per-channel scales not modelled");
  }
  const uint32_t scale = d1(SET_OFM_SCALE) & 0x7fffffffu;
  const int shift = p1(SET_OFM_SCALE) & 0x3f;
  // The value carries 16 zero fraction bits: a shift up to 16 is exact in
  // every rounding mode.
  if (ofm_round_ == kRoundExact && shift > 16) {
    return fail(Error::NotSupported, "OFM rounding DOUBLE_SYMMETRIC with shift %d not modelled",
                shift);
  }
  const int round = ofm_round_ == kRoundExact ? kRoundNatural : ofm_round_;
  std::vector<int32_t> in;
  e = read_ifm(ifm, 0, in);
  if (e != Error::Ok) {
    return e;
  }
  if (stats_) {
    ++stats_->ops;
  }
  // Source rows/columns and fractions of every output row/column.
  struct Tap {
    int i0, i1;
    int64_t frac;
  };
  auto taps = [&](const Axis& A, int out, int in_extent, std::vector<Tap>& t) {
    t.resize(out);
    for (int o = 0; o < out; ++o) {
      const int64_t pos = o * A.d + A.offset;
      const int64_t i = floor_div(pos, A.n);
      const int64_t frac = pos - i * A.n;
      const int64_t i0 = std::min<int64_t>(std::max<int64_t>(i, 0), in_extent - 1);
      const int64_t i1 = std::min<int64_t>(std::max<int64_t>(i + 1, 0), in_extent - 1);
      t[o] = {static_cast<int>(i0), static_cast<int>(i1), frac};
    }
  };
  std::vector<Tap> ty, tx;
  taps(ax[0], ofm.h, ifm.h, ty);
  taps(ax[1], ofm.w, ifm.w, tx);
  auto at = [&](int y, int x, int c) -> int64_t {
    return in[(static_cast<size_t>(y) * ifm.w + x) * ifm.c + c];
  };
  for (int oy = 0; oy < ofm.h; ++oy) {
    const Tap& Y = ty[oy];
    for (int ox = 0; ox < ofm.w; ++ox) {
      const Tap& X = tx[ox];
      for (int c = 0; c < ofm.c; ++c) {
        int64_t v;
        if (mode == kBilinear) {
          const int64_t wy0 = ax[0].n - Y.frac, wx0 = ax[1].n - X.frac;
          v = at(Y.i0, X.i0, c) * wy0 * wx0 + at(Y.i0, X.i1, c) * wy0 * X.frac +
              at(Y.i1, X.i0, c) * Y.frac * wx0 + at(Y.i1, X.i1, c) * Y.frac * X.frac;
        } else { // kNearest: the nearer sample, ties to the higher index
          v = at(2 * Y.frac >= ax[0].n ? Y.i1 : Y.i0, 2 * X.frac >= ax[1].n ? X.i1 : X.i0, c);
        }
        e = u85_write_output(ofm, oy, ox, c, scale_round(v * 65536, scale, shift, round));
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
