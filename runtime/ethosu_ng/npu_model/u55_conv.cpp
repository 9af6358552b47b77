// SPDX-License-Identifier: BSD-3-Clause
// SPDX-License-Identifier: Apache-2.0
// Ethos-U55/U65 convolution, depthwise convolution and fully connected
// (NPU_OP_CONV, NPU_OP_DEPTHWISE): weight-stream layout, bias/scale stream and
// the kernel. See docs/npu-model.md.
#include <ethosu_ng/npu_model/model.h>

#include <algorithm>

namespace ethosu_ng {
namespace npu_model {
namespace detail {

// ------------------------------------------------------------ conv
// Position of every decoded weight: the traversal Vela's weight encoder uses
// to order them (OFM blocks, IFM blocks, 8x8 sub-kernels, micro-blocks), run
// forwards to undo the reordering. Slots that fall outside the kernel or the
// channel ranges are padding and must decode to zero.
struct WeightLayout {
  int ofm_depth, kh, kw, ifm_depth;
  int ofm_block_depth;
  int ifm_ublock, ofm_ublock;
  bool depthwise, part_kernel;
  int ifm_bits;
  int decomp_h, decomp_w;
};

// Calls fn(ofm_z, ky, kx, ifm_z, valid) for each stream position in order.
template <typename Fn>
void traverse_weights(const WeightLayout& L, Fn&& fn) {
  const int ifm_block_depth = (L.part_kernel || L.ifm_bits == 16) ? 16 : 32;
  for (int ofm_block_z = 0; ofm_block_z < L.ofm_depth; ofm_block_z += L.ofm_block_depth) {
    const int clipped_ofm = std::min(L.ofm_block_depth, L.ofm_depth - ofm_block_z);
    const int ifm_end = L.depthwise ? 1 : L.ifm_depth;
    for (int ifm_block_z = 0; ifm_block_z < ifm_end; ifm_block_z += ifm_block_depth) {
      int clipped_ifm;
      if (L.depthwise) {
        clipped_ifm = L.ifm_ublock;
      } else {
        clipped_ifm = L.part_kernel ? std::min(ifm_block_depth, L.ifm_depth - ifm_block_z)
                                    : ifm_block_depth;
      }
      for (int sy = 0; sy < L.kh; sy += L.decomp_h) {
        const int sub_h = std::min(L.kh - sy, L.decomp_h);
        for (int sx = 0; sx < L.kw; sx += L.decomp_w) {
          const int sub_w = std::min(L.kw - sx, L.decomp_w);
          int elements = sub_w * sub_h;
          if (L.part_kernel) {
            const int m = L.ifm_bits == 16 ? 2 : 4;
            elements = (elements + m - 1) / m * m;
          } else if (L.depthwise) {
            elements = (elements + 3) / 4 * 4;
          }
          const int outer = L.part_kernel ? clipped_ifm : 1;
          const int inner = L.part_kernel ? 1 : clipped_ifm;
          for (int io = 0; io < outer; io += L.ifm_ublock) {
            for (int ou = 0; ou < clipped_ofm; ou += L.ofm_ublock) {
              for (int el = 0; el < elements; ++el) {
                const int kx = el % sub_w;
                const int ky = el / sub_w;
                for (int ii = 0; ii < inner; ii += L.ifm_ublock) {
                  for (int oz = 0; oz < L.ofm_ublock; ++oz) {
                    const int iu_end = L.depthwise ? 1 : L.ifm_ublock;
                    for (int iz = 0; iz < iu_end; ++iz) {
                      const int ifm_z = ifm_block_z + ii + io + iz;
                      const int ofm_z = ofm_block_z + ou + oz;
                      const bool valid = ifm_z < L.ifm_depth && ofm_z < L.ofm_depth && ky < sub_h;
                      fn(ofm_z, sy + ky, sx + kx, ifm_z, valid);
                    }
                  }
                }
              }
            }
          }
        }
      }
    }
  }
}

// Number of fn calls traverse_weights(L, fn) makes (stream positions, padding
// included), in closed form: the stream must decode to exactly this many
// weights, which bounds the decode before anything is allocated.
uint64_t weight_positions(const WeightLayout& L) {
  const int ifm_block_depth = (L.part_kernel || L.ifm_bits == 16) ? 16 : 32;
  auto ceil_div = [](uint64_t a, uint64_t b) { return (a + b - 1) / b; };
  uint64_t ofm_slots = 0; // OFM micro-block slots over all OFM blocks
  for (int z = 0; z < L.ofm_depth; z += L.ofm_block_depth) {
    const int clipped = std::min(L.ofm_block_depth, L.ofm_depth - z);
    ofm_slots += ceil_div(clipped, L.ofm_ublock) * L.ofm_ublock;
  }
  uint64_t ifm_slots = 0; // IFM positions per OFM slot and kernel element
  const int ifm_end = L.depthwise ? 1 : L.ifm_depth;
  for (int z = 0; z < ifm_end; z += ifm_block_depth) {
    int clipped;
    if (L.depthwise) {
      clipped = L.ifm_ublock;
    } else {
      clipped = L.part_kernel ? std::min(ifm_block_depth, L.ifm_depth - z) : ifm_block_depth;
    }
    const uint64_t outer = L.part_kernel ? ceil_div(clipped, L.ifm_ublock) : 1;
    const uint64_t inner = L.part_kernel ? 1 : ceil_div(clipped, L.ifm_ublock);
    ifm_slots += outer * inner * (L.depthwise ? 1 : L.ifm_ublock);
  }
  const uint64_t m = L.part_kernel ? (L.ifm_bits == 16 ? 2 : 4) : L.depthwise ? 4 : 1;
  auto padded = [&](uint64_t n) { return ceil_div(n, m) * m; };
  const uint64_t full_h = L.kh / L.decomp_h, rem_h = L.kh % L.decomp_h;
  const uint64_t full_w = L.kw / L.decomp_w, rem_w = L.kw % L.decomp_w;
  const uint64_t dh = L.decomp_h, dw = L.decomp_w;
  const uint64_t elements = full_h * full_w * padded(dh * dw) +
                            (rem_w ? full_h * padded(dh * rem_w) : 0) +
                            (rem_h ? full_w * padded(rem_h * dw) : 0) +
                            (rem_h && rem_w ? padded(rem_h * rem_w) : 0);
  // Hostile sizes can take the product past 64 bits: saturate (no weight stream
  // decodes to that many) instead of wrapping.
  uint64_t r;
  if (__builtin_mul_overflow(ofm_slots, ifm_slots, &r) ||
      __builtin_mul_overflow(r, elements, &r)) {
    return UINT64_MAX;
  }
  return r;
}

Error Model::op_conv(bool depthwise) {
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
  if (ifm.bits == 32) {
    return fail(Error::InvalidProgram, "convolution with a 32-bit IFM (IFM_PRECISION 0x%04x)",
                p0(SET_IFM_PRECISION));
  }
  const uint16_t ks = p0(SET_KERNEL_STRIDE);
  const int stride_x = ((((ks >> 6) & 1) << 1) | (ks & 1)) + 1;
  const int stride_y = ((((ks >> 9) & 1) << 1) | ((ks >> 1) & 1)) + 1;
  const bool part_kernel = (ks >> 2) & 1;
  const int dil_x = ((ks >> 3) & 1) + 1;
  const int dil_y = ((ks >> 4) & 1) + 1;
  const int decomp = ((ks >> 5) & 1) ? 4 : 8;
  const int kh_eff = p0(SET_KERNEL_HEIGHT_M1) + 1;
  const int kw_eff = p0(SET_KERNEL_WIDTH_M1) + 1;
  if ((kh_eff - 1) % dil_y != 0 || (kw_eff - 1) % dil_x != 0) {
    return fail(Error::InvalidProgram,
                "kernel %d x %d (dilated) is not a whole kernel for dilation %d x %d", kh_eff,
                kw_eff, dil_y, dil_x);
  }
  if (depthwise && part_kernel) {
    return fail(Error::InvalidProgram, "KERNEL_STRIDE 0x%04x: part-kernel-first depthwise", ks);
  }
  const int kh = (kh_eff - 1) / dil_y + 1;
  const int kw = (kw_eff - 1) / dil_x + 1;
  const int pt = p0(SET_IFM_PAD_TOP), pl = p0(SET_IFM_PAD_LEFT);
  const int pb = p0(SET_IFM_PAD_BOTTOM), pr = p0(SET_IFM_PAD_RIGHT);
  e = check_ifm_padding(pt, pl, pb, pr);
  if (e != Error::Ok) {
    return e;
  }
  // The NPU has no IFM height/width register: the IFM is the area the
  // kernel sweeps, less the padding.
  ifm.h = (ofm.h - 1) * stride_y + kh_eff - pt - pb;
  ifm.w = (ofm.w - 1) * stride_x + kw_eff - pl - pr;
  ifm.c = depthwise ? ofm.c : p0(SET_IFM_DEPTH_M1) + 1;
  if (ifm.h <= 0 || ifm.w <= 0) {
    return fail(Error::InvalidProgram,
                "padding (t %d b %d l %d r %d) leaves no IFM for OFM %d x %d, kernel %d x %d", pt,
                pb, pl, pr, ofm.h, ofm.w, kh_eff, kw_eff);
  }
  if (depthwise && p0(SET_IFM_DEPTH_M1) + 1 < ofm.c) {
    return fail(Error::InvalidProgram, "depthwise: IFM depth %d < OFM depth %d",
                p0(SET_IFM_DEPTH_M1) + 1, ofm.c);
  }
  const uint64_t macs = static_cast<uint64_t>(ofm.h) * ofm.w * ofm.c * kh * kw *
                        (depthwise ? 1 : static_cast<uint64_t>(ifm.c));
  if (macs > kMaxMacs || static_cast<uint64_t>(ofm.h) * ofm.w * ofm.c > kMaxElements) {
    return fail(Error::NotSupported, "operation of %llu MACs exceeds the model's limit",
                static_cast<unsigned long long>(macs));
  }
  if (d1(SET_WEIGHT1_LENGTH) != 0 || d1(SET_SCALE1_LENGTH) != 0) {
    return fail(Error::NotSupported,
                "WEIGHT1_LENGTH %lu / SCALE1_LENGTH %lu: second-core streams (Ethos-U65-512) not "
                "modelled",
                static_cast<unsigned long>(d1(SET_WEIGHT1_LENGTH)),
                static_cast<unsigned long>(d1(SET_SCALE1_LENGTH)));
  }
  e = output_setup(ofm);
  if (e != Error::Ok) {
    return e;
  }

  // Weights.
  uint8_t* wp;
  const uint64_t wlen = d1(SET_WEIGHT_LENGTH);
  e = region_span(p0(SET_WEIGHT_REGION), a1(SET_WEIGHT_BASE), wlen, false, "weight stream",
                  &wp);
  if (e != Error::Ok) {
    return e;
  }
  WeightLayout L;
  L.ofm_depth = ofm.c;
  L.kh = kh;
  L.kw = kw;
  L.ifm_depth = depthwise ? 1 : ifm.c;
  L.ofm_block_depth = p0(SET_OFM_BLK_DEPTH_M1) + 1;
  L.ifm_ublock = 8;
  L.ofm_ublock = macs_per_cc_log2_ <= 5 ? 4 : 8;
  L.depthwise = depthwise;
  L.part_kernel = part_kernel;
  L.ifm_bits = ifm.bits;
  L.decomp_h = decomp / dil_y;
  L.decomp_w = decomp / dil_x;
  const uint64_t positions = weight_positions(L);
  std::vector<int16_t> decoded;
  char wmsg[200];
  if (!mlw_decode(wp, wlen, decoded, wmsg, sizeof(wmsg), positions)) {
    return fail(Error::InvalidProgram, "weight stream at 0x%llx (+%llu): %s",
                static_cast<unsigned long long>(a1(SET_WEIGHT_BASE)),
                static_cast<unsigned long long>(wlen), wmsg);
  }
  if (decoded.size() != positions) {
    return fail(Error::InvalidProgram,
                "weight stream decodes to %lu weights; OFM depth %d, kernel %d x %d, IFM depth "
                "%d, block depth %d need %llu",
                static_cast<unsigned long>(decoded.size()), ofm.c, kh, kw, L.ifm_depth,
                L.ofm_block_depth, static_cast<unsigned long long>(positions));
  }
  // Every weight has a position: wcount <= positions == decoded.size().
  const size_t wcount = static_cast<size_t>(ofm.c) * kh * kw * L.ifm_depth;
  std::vector<int16_t> W(wcount, 0); // [oc][ky][kx][ic]
  size_t pos = 0;
  bool short_stream = false, nonzero_pad = false;
  traverse_weights(L, [&](int oz, int ky, int kx, int iz, bool valid) {
    if (pos >= decoded.size()) {
      short_stream = true;
      ++pos;
      return;
    }
    const int16_t v = decoded[pos++];
    if (valid) {
      W[((static_cast<size_t>(oz) * kh + ky) * kw + kx) * L.ifm_depth + iz] = v;
    } else if (v != 0) {
      nonzero_pad = true;
    }
  });
  if (short_stream || pos != decoded.size()) {
    return fail(Error::InvalidProgram,
                "weight stream decodes to %lu weights; OFM depth %d, kernel %d x %d, IFM depth "
                "%d, block depth %d need %lu",
                static_cast<unsigned long>(decoded.size()), ofm.c, kh, kw, L.ifm_depth,
                L.ofm_block_depth, static_cast<unsigned long>(pos));
  }
  if (nonzero_pad) {
    return fail(Error::InvalidProgram, "weight stream has non-zero values in padding positions");
  }

  // Bias and scale: 10 bytes per OFM channel.
  uint8_t* sp;
  const uint64_t slen = d1(SET_SCALE_LENGTH);
  if (slen < static_cast<uint64_t>(ofm.c) * 10) {
    return fail(Error::InvalidProgram, "SCALE_LENGTH %llu < 10 bytes x OFM depth %d",
                static_cast<unsigned long long>(slen), ofm.c);
  }
  e = region_span(p0(SET_SCALE_REGION), a1(SET_SCALE_BASE), static_cast<uint64_t>(ofm.c) * 10,
                  false, "scale stream", &sp);
  if (e != Error::Ok) {
    return e;
  }
  const bool global = (p0(SET_OFM_PRECISION) >> 8) & 1;
  std::vector<int64_t> bias(ofm.c);
  std::vector<uint32_t> scale(ofm.c);
  std::vector<int> shift(ofm.c);
  for (int c = 0; c < ofm.c; ++c) {
    const uint8_t* q = sp + 10 * c;
    uint64_t b = 0;
    for (int k = 0; k < 5; ++k) {
      b |= static_cast<uint64_t>(q[k]) << (8 * k);
    }
    bias[c] = static_cast<int64_t>(b << 24) >> 24; // 40-bit signed
    uint32_t s;
    std::memcpy(&s, q + 5, 4);
    scale[c] = global ? d1(SET_OFM_SCALE) : s;
    shift[c] = global ? (p1(SET_OFM_SCALE) & 0x3f) : (q[9] & 0x3f);
  }

  std::vector<int32_t> in;
  e = read_ifm(ifm, upscale, in);
  if (e != Error::Ok) {
    return e;
  }
  if (stats_) {
    stats_->macs += macs;
    ++stats_->ops;
  }
  std::vector<int16_t> in16;
  const bool narrow = !depthwise && narrow_ifm(in, in16);
  // A narrow convolution takes each output's window as one int16 row laid out
  // as a weight row ([ky][kx][ic], zero where the window is in the padding):
  // one long dot product per output channel instead of one per kernel tap.
  const size_t row = static_cast<size_t>(kh) * kw * ifm.c;
  std::vector<int16_t> window(narrow ? row : 0);
  std::vector<int64_t> acc(ofm.c);
  for (int oy = 0; oy < ofm.h; ++oy) {
    for (int ox = 0; ox < ofm.w; ++ox) {
      for (int c = 0; c < ofm.c; ++c) {
        acc[c] = bias[c];
      }
      if (narrow) {
        gather_window(in16.data(), ifm.h, ifm.w, ifm.c, oy * stride_y - pt, ox * stride_x - pl,
                      kh, kw, dil_y, dil_x, window.data());
        for (int oc = 0; oc < ofm.c; ++oc) {
          acc[oc] += dot16(window.data(), &W[static_cast<size_t>(oc) * row], static_cast<int>(row));
        }
      }
      for (int ky = 0; !narrow && ky < kh; ++ky) {
        const int iy = oy * stride_y - pt + ky * dil_y;
        if (iy < 0 || iy >= ifm.h) {
          continue;
        }
        for (int kx = 0; kx < kw; ++kx) {
          const int ix = ox * stride_x - pl + kx * dil_x;
          if (ix < 0 || ix >= ifm.w) {
            continue;
          }
          const int32_t* px = &in[(static_cast<size_t>(iy) * ifm.w + ix) * ifm.c];
          if (depthwise) {
            for (int c = 0; c < ofm.c; ++c) {
              acc[c] += int64_t{px[c]} * W[(static_cast<size_t>(c) * kh + ky) * kw + kx];
            }
          } else {
            for (int oc = 0; oc < ofm.c; ++oc) {
              const int16_t* wr = &W[((static_cast<size_t>(oc) * kh + ky) * kw + kx) * ifm.c];
              int64_t s = 0;
              for (int ic = 0; ic < ifm.c; ++ic) {
                s += int64_t{px[ic]} * wr[ic];
              }
              acc[oc] += s;
            }
          }
        }
      }
      for (int c = 0; c < ofm.c; ++c) {
        e = write_output(ofm, oy, ox, c, scale_round(acc[c], scale[c], shift[c], ofm_round_));
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
