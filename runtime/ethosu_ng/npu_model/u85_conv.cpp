// SPDX-License-Identifier: BSD-3-Clause
// SPDX-License-Identifier: Apache-2.0
// Ethos-U85 convolution, depthwise convolution and fully connected
// (NPU_OP_CONV, NPU_OP_DEPTHWISE): the U85 weight order (regor
// ethos_u85_weight_encoder.cpp, EthosU85WeightOrdering), one weight stream per
// core, the 32/48-bit bias and scale stream, and the kernel. See
// docs/npu-model.md, "Ethos-U85".
#include <ethosu_ng/npu_model/model.h>

#include <algorithm>

namespace ethosu_ng {
namespace npu_model {
namespace detail {

namespace {

// What the U85 weight order depends on (regor EthosU85WeightOrdering).
struct U85WeightLayout {
  int ofm_depth, kh, kw, ifm_depth;
  int stride_x, stride_y; // the weight order's stride (1 x 1 for depth-first)
  int ofm_block_depth, ifm_block_depth;
  int ofm_ublock_depth, ifm_ublock_depth;
  int sub_kernel_round;
  int ifm_step; // IFM channels per innermost group: 1 depthwise, 16 with 2:4 sparsity, else 8
  int dw_padding; // extra zero slots after every sub-kernel group of a depthwise stream
  int decomp_x, decomp_y;
  bool depthwise;
  int cores, core; // streams and which one this is
};

int round_up(int v, int m) {
  return (v + m - 1) / m * m;
}

// Calls fn(ofm_z, ky, kx, ifm_z, valid) for each position of one core's
// stream, in stream order: OFM blocks; IFM blocks, serpentine (the direction
// alternates with each OFM block); sub-kernels of decomp_x x decomp_y, x
// outer; IFM and OFM micro-blocks; stride phases; kernel rows, serpentine in
// x; then groups of 4 OFM channels interleaved across the cores; padding
// slots (valid false) round every sub-kernel up to sub_kernel_round elements.
template <typename Fn>
void traverse_u85_weights(const U85WeightLayout& L, Fn&& fn) {
  constexpr int kInterleave = 4;
  const int ifm_end = L.depthwise ? 1 : L.ifm_depth;
  const int nblocks = (ifm_end + L.ifm_block_depth - 1) / L.ifm_block_depth;
  bool forward = true;
  for (int ofm_block_z = 0; ofm_block_z < L.ofm_depth; ofm_block_z += L.ofm_block_depth) {
    const int clipped_ofm = std::min(L.ofm_block_depth, L.ofm_depth - ofm_block_z);
    for (int b = 0; b < nblocks; ++b) {
      const int ifm_block_z = (forward ? b : nblocks - 1 - b) * L.ifm_block_depth;
      const int clipped_ifm = std::min(L.ifm_block_depth, ifm_end - ifm_block_z);
      for (int skx = 0; skx < L.kw; skx += L.decomp_x) {
        const int sub_w = std::min(L.kw - skx, L.decomp_x);
        for (int sky = 0; sky < L.kh; sky += L.decomp_y) {
          const int sub_h = std::min(L.kh - sky, L.decomp_y);
          const int outer_end = L.depthwise ? 1 : clipped_ifm;
          for (int io = 0; io < outer_end; io += L.ifm_ublock_depth) {
            for (int oo = 0; oo < clipped_ofm; oo += L.ofm_ublock_depth) {
              int remaining = round_up(sub_w * sub_h, L.sub_kernel_round);
              for (int py = 0; py < L.stride_y; ++py) {
                const int skh = (sub_h + L.stride_y - 1 - py) / L.stride_y;
                for (int px = 0; px < L.stride_x; ++px) {
                  const int skw = (sub_w + L.stride_x - 1 - px) / L.stride_x;
                  for (int ky = 0; ky < skh; ++ky) {
                    for (int kxi = 0; kxi < skw; ++kxi) {
                      const int kx = ky % 2 == 0 ? kxi : skw - 1 - kxi;
                      --remaining;
                      const int step = L.ifm_step;
                      for (int ii = 0; ii < L.ifm_ublock_depth; ii += step) {
                        for (int oz = L.core * kInterleave; oz < L.ofm_ublock_depth;
                             oz += kInterleave * L.cores) {
                          for (int oi = 0; oi < kInterleave; ++oi) {
                            for (int iz = 0; iz < step; ++iz) {
                              const int wx = skx + px + kx * L.stride_x;
                              const int wy = sky + py + ky * L.stride_y;
                              const int ifm_z = ifm_block_z + io + ii + iz;
                              const int ofm_z = ofm_block_z + oo + oi + oz;
                              fn(ofm_z, wy, wx, ifm_z, ifm_z < ifm_end && ofm_z < L.ofm_depth);
                            }
                          }
                        }
                      }
                      if (L.depthwise && remaining % L.sub_kernel_round == 0) {
                        const int pad = L.dw_padding * L.ofm_ublock_depth / L.cores;
                        for (int k = 0; k < pad; ++k) {
                          fn(0, 0, 0, 0, false);
                        }
                      }
                    }
                  }
                }
              }
              if (remaining > 0) {
                const int pad = (remaining + (L.depthwise ? L.dw_padding : 0)) *
                                L.ifm_ublock_depth * L.ofm_ublock_depth / L.cores;
                for (int k = 0; k < pad; ++k) {
                  fn(0, 0, 0, 0, false);
                }
              }
            }
          }
        }
      }
    }
    forward = !forward;
  }
}

uint64_t sat_add(uint64_t a, uint64_t b) {
  uint64_t r;
  return __builtin_add_overflow(a, b, &r) ? UINT64_MAX : r;
}

uint64_t sat_mul(uint64_t a, uint64_t b) {
  uint64_t r;
  return __builtin_mul_overflow(a, b, &r) ? UINT64_MAX : r;
}

// The number of positions traverse_u85_weights visits for core L.core, in
// closed form: every OFM block, IFM block and sub-kernel of one size visits
// the same number, and there are at most two sizes of each.
uint64_t u85_stream_positions(const U85WeightLayout& L) {
  constexpr int kInterleave = 4;
  auto ceil_div = [](uint64_t a, uint64_t b) { return (a + b - 1) / b; };
  const uint64_t first_oz = static_cast<uint64_t>(L.core) * kInterleave;
  const uint64_t n_oz = L.ofm_ublock_depth > static_cast<int>(first_oz)
                            ? ceil_div(L.ofm_ublock_depth - first_oz, kInterleave * L.cores)
                            : 0;
  const uint64_t per_element =
      ceil_div(L.ifm_ublock_depth, L.ifm_step) * n_oz * kInterleave * L.ifm_step;
  const uint64_t dw_pad = L.depthwise ? static_cast<uint64_t>(L.dw_padding) : 0;
  // One (IFM micro-block, OFM micro-block) pass over a sub-kernel of k elements.
  auto sub_kernel = [&](uint64_t k) {
    const uint64_t R = L.sub_kernel_round;
    uint64_t p = sat_mul(k, per_element);
    if (L.depthwise) {
      p = sat_add(p, sat_mul(k / R, dw_pad * L.ofm_ublock_depth / L.cores));
    }
    const uint64_t rem = ceil_div(k, R) * R - k;
    if (rem > 0) {
      p = sat_add(p, sat_mul(rem + dw_pad, static_cast<uint64_t>(L.ifm_ublock_depth) *
                                               L.ofm_ublock_depth / L.cores));
    }
    return p;
  };
  // (count, size) of the pieces `n` splits into at `step`.
  struct Piece {
    uint64_t count, size;
  };
  auto pieces = [](uint64_t n, uint64_t step, Piece out[2]) {
    out[0] = {n / step, step};
    out[1] = {n % step ? 1u : 0u, n % step};
  };
  Piece pw[2], ph[2], po[2], pi[2];
  pieces(L.kw, L.decomp_x, pw);
  pieces(L.kh, L.decomp_y, ph);
  pieces(L.ofm_depth, L.ofm_block_depth, po);
  pieces(L.depthwise ? 1 : L.ifm_depth, L.ifm_block_depth, pi);
  uint64_t per_block = 0; // one (OFM block, IFM block) pair, per micro-block pass
  for (const Piece& w : pw) {
    for (const Piece& h : ph) {
      per_block = sat_add(per_block, sat_mul(w.count * h.count, sub_kernel(w.size * h.size)));
    }
  }
  uint64_t total = 0;
  for (const Piece& o : po) {
    for (const Piece& i : pi) {
      const uint64_t outer = L.depthwise ? 1 : i.size;
      const uint64_t passes =
          sat_mul(ceil_div(outer, L.ifm_ublock_depth), ceil_div(o.size, L.ofm_ublock_depth));
      total = sat_add(total, sat_mul(sat_mul(o.count, i.count), sat_mul(passes, per_block)));
    }
  }
  return total;
}

// OFM micro-block height x width of ACC_FORMAT's microblock field.
const int kMicroblockHW[6][2] = {{1, 1}, {1, 2}, {1, 4}, {2, 2}, {2, 4}, {4, 4}};

} // namespace

Error Model::u85_conv(bool depthwise) {
  FeatureMap ifm, ofm;
  Error e = feature_map(ofm, false, true);
  if (e != Error::Ok) {
    return e;
  }
  e = feature_map(ifm, false, false);
  if (e != Error::Ok) {
    return e;
  }
  if ((cmd_param_ & ~1u) != 0 || (depthwise && cmd_param_ != 0)) {
    return fail(Error::InvalidProgram, "parameter 0x%04x: reserved bits", cmd_param_);
  }
  if (cmd_param_ & 1) {
    return u85_matmul(ifm, ofm);
  }
  e = u85_chained_input(ifm, p0(SET_IFM_PRECISION));
  if (e != Error::Ok) {
    return e;
  }
  const int upscale = p0(SET_IFM_UPSCALE) & 3;
  if (upscale == 3 || (p0(SET_IFM_UPSCALE) & ~3u) != 0) {
    return fail(Error::InvalidProgram, "IFM_UPSCALE 0x%04x: reserved mode", p0(SET_IFM_UPSCALE));
  }
  if (ifm.bits != 8 && ifm.bits != 16) {
    return fail(Error::NotSupported, "convolution with a %d-bit IFM not modelled on the Ethos-U85",
                ifm.bits);
  }
  const bool ifm16 = ifm.bits == 16;
  // WEIGHT_FORMAT: bit 0 fast weight decode (FWD), bit 4 2:4 sparsity.
  const uint16_t wf = p0(static_cast<Cmd0>(U85_SET_WEIGHT_FORMAT));
  if ((wf & ~0x11u) != 0) {
    return fail(Error::InvalidProgram, "WEIGHT_FORMAT 0x%04x: reserved bits", wf);
  }
  // 2:4 sparsity changes the weight order only (the stream still holds every
  // weight; the hardware skips the zeros).
  const bool sparse = wf & 0x10;
  const bool fast = wf & 1;
  if (sparse && depthwise) {
    return fail(Error::InvalidProgram, "WEIGHT_FORMAT 0x%04x: 2:4 sparsity on a depthwise", wf);
  }
  if (fast && depthwise) {
    return fail(Error::InvalidProgram, "WEIGHT_FORMAT 0x%04x: fast weight decode on a depthwise",
                wf);
  }
  const uint16_t ks = p0(SET_KERNEL_STRIDE);
  const int stride_x = ((((ks >> 6) & 1) << 1) | (ks & 1)) + 1;
  const int stride_y = ((((ks >> 9) & 1) << 1) | ((ks >> 1) & 1)) + 1;
  const bool part_kernel = (ks >> 2) & 1;
  const int dil_x = ((ks >> 3) & 1) + 1;
  const int dil_y = ((ks >> 4) & 1) + 1;
  if ((ks >> 5) & 1) {
    return fail(Error::NotSupported, "KERNEL_STRIDE 0x%04x: 4x4 kernel decomposition", ks);
  }
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
  if (macs > kMaxMacs || static_cast<uint64_t>(ofm.h) * ofm.w * ofm.c > kMaxElements ||
      static_cast<uint64_t>(ofm.c) * kh * kw * ifm.c > kMaxElements) {
    return fail(Error::NotSupported, "operation of %llu MACs exceeds the model's limit",
                static_cast<unsigned long long>(macs));
  }
  e = u85_output_setup(ofm);
  if (e != Error::Ok) {
    return e;
  }

  // Weight order (regor EthosU85WeightOrdering and ArchEthosU85's IFM block
  // depth choice for convolutions).
  const uint16_t acc = p0(SET_ACC_FORMAT);
  const int* ub = kMicroblockHW[(acc >> 8) & 7];
  const int macs_per_cc = 1 << macs_per_cc_log2_;
  U85WeightLayout L;
  L.ofm_depth = ofm.c;
  L.kh = kh;
  L.kw = kw;
  L.ifm_depth = depthwise ? 1 : ifm.c;
  L.depthwise = depthwise;
  L.ofm_block_depth = p0(SET_OFM_BLK_DEPTH_M1) + 1;
  L.ofm_ublock_depth = macs_per_cc / 8 / (ub[0] * ub[1]);
  L.decomp_x = 8 / dil_x;
  L.decomp_y = 8 / dil_y;
  L.cores = cores_;
  L.dw_padding = (!ifm16 && macs_per_cc <= 256) ? 0 : macs_per_cc <= 512 ? 2 : 6;
  L.ifm_step = depthwise ? 1 : sparse ? 16 : 8;
  if (depthwise) {
    L.stride_x = stride_x;
    L.stride_y = stride_y;
    L.ifm_block_depth = 1;
    L.ifm_ublock_depth = 1;
    L.sub_kernel_round = 10;
  } else if (part_kernel) {
    L.stride_x = stride_x;
    L.stride_y = stride_y;
    L.ifm_block_depth = 16;
    L.ifm_ublock_depth = ifm16 && !sparse ? 8 : 16;
    L.sub_kernel_round = ifm16 || sparse ? 10 : 5;
  } else {
    L.stride_x = 1;
    L.stride_y = 1;
    L.ifm_block_depth = sparse && !ifm16                                      ? 128
                        : (!sparse && macs_per_cc <= 256 && L.ofm_ublock_depth == 16) ? 32
                                                                                      : 64;
    L.ifm_ublock_depth = L.ifm_block_depth;
    L.sub_kernel_round = 1;
  }
  if (L.ofm_ublock_depth < 4 * cores_) {
    return fail(Error::InvalidProgram,
                "ACC_FORMAT 0x%04x: microblock %d x %d leaves OFM micro-block depth %d for %d "
                "cores",
                acc, ub[0], ub[1], L.ofm_ublock_depth, cores_);
  }
  static const Cmd1 kBase[4] = {SET_WEIGHT_BASE, SET_WEIGHT1_BASE,
                                static_cast<Cmd1>(U85_SET_WEIGHT2_BASE),
                                static_cast<Cmd1>(U85_SET_WEIGHT3_BASE)};
  static const Cmd1 kLength[4] = {SET_WEIGHT_LENGTH, SET_WEIGHT1_LENGTH,
                                  static_cast<Cmd1>(U85_SET_WEIGHT2_LENGTH),
                                  static_cast<Cmd1>(U85_SET_WEIGHT3_LENGTH)};
  // Each core's stream length in closed form, checked against what the
  // streams hold before any position table is built: a hostile kernel shape
  // costs no more than its streams' bytes.
  uint64_t positions[4] = {0, 0, 0, 0};
  uint64_t total_positions = 0;
  for (int core = 0; core < cores_; ++core) {
    L.core = core;
    positions[core] = u85_stream_positions(L);
    total_positions = sat_add(total_positions, positions[core]);
  }
  if (total_positions > kMaxElements * 16) {
    return fail(Error::NotSupported,
                "weight streams of %llu positions (OFM depth %d, kernel %d x %d, IFM depth %d) "
                "exceed the model's limit",
                static_cast<unsigned long long>(total_positions), ofm.c, kh, kw, L.ifm_depth);
  }
  std::vector<int16_t> decoded[4];
  char wmsg[200];
  if (fast) {
    uint8_t* wp;
    const uint64_t wlen = d1(SET_WEIGHT_LENGTH);
    e = region_span(p0(SET_WEIGHT_REGION) & 7, a1(SET_WEIGHT_BASE), wlen, false,
                    "weight stream", &wp);
    if (e != Error::Ok) {
      return e;
    }
    // fwd_decode checks the length against the count before it allocates.
    if (!fwd_decode(wp, wlen, total_positions, decoded[0], wmsg, sizeof(wmsg))) {
      return fail(Error::InvalidProgram, "weight stream at 0x%llx (+%llu): %s",
                  static_cast<unsigned long long>(a1(SET_WEIGHT_BASE)),
                  static_cast<unsigned long long>(wlen), wmsg);
    }
  } else {
    for (int core = 0; core < cores_; ++core) {
      uint8_t* wp;
      const uint64_t wlen = d1(kLength[core]);
      e = region_span(p0(SET_WEIGHT_REGION) & 7, a1(kBase[core]), wlen, false, "weight stream",
                      &wp);
      if (e != Error::Ok) {
        return e;
      }
      if (wlen > 0 &&
          !mlw_decode(wp, wlen, decoded[core], wmsg, sizeof(wmsg), positions[core])) {
        return fail(Error::InvalidProgram, "weight stream %d at 0x%llx (+%llu): %s", core,
                    static_cast<unsigned long long>(a1(kBase[core])),
                    static_cast<unsigned long long>(wlen), wmsg);
      }
      if (decoded[core].size() != positions[core]) {
        return fail(Error::InvalidProgram,
                    "weight stream %d decodes to %llu weights; OFM depth %d, kernel %d x %d, IFM "
                    "depth %d, block depth %d, micro-block depth %d need %llu",
                    core, static_cast<unsigned long long>(decoded[core].size()), ofm.c, kh, kw,
                    L.ifm_depth, L.ofm_block_depth, L.ofm_ublock_depth,
                    static_cast<unsigned long long>(positions[core]));
      }
    }
  }

  const size_t wcount = static_cast<size_t>(ofm.c) * kh * kw * L.ifm_depth;
  std::vector<int16_t> W(wcount, 0); // [oc][ky][kx][ic]
  // Each core's stream positions: the index into W, or -1 for a padding slot.
  std::vector<int32_t> slots[4];
  for (int core = 0; core < cores_; ++core) {
    L.core = core;
    slots[core].reserve(positions[core]);
    traverse_u85_weights(L, [&](int oz, int ky, int kx, int iz, bool valid) {
      slots[core].push_back(
          valid ? static_cast<int32_t>(((static_cast<size_t>(oz) * kh + ky) * kw + kx) *
                                           L.ifm_depth +
                                       iz)
                : -1);
    });
  }
  // Places decoded values on their slots; padding slots must be zero.
  auto place = [&](const std::vector<int16_t>& values, const std::vector<int32_t>& order,
                   int stream) -> Error {
    if (values.size() != order.size()) {
      return fail(Error::InvalidProgram,
                  "weight stream %d decodes to %u weights; OFM depth %d, kernel %d x %d, IFM "
                  "depth %d, block depth %d, micro-block depth %d need %u",
                  stream, static_cast<unsigned>(values.size()), ofm.c, kh, kw, L.ifm_depth,
                  L.ofm_block_depth, L.ofm_ublock_depth, static_cast<unsigned>(order.size()));
    }
    for (size_t k = 0; k < order.size(); ++k) {
      if (order[k] >= 0) {
        W[static_cast<size_t>(order[k])] = values[k];
      } else if (values[k] != 0) {
        return fail(Error::InvalidProgram,
                    "weight stream %d has a non-zero value in padding position %u", stream,
                    static_cast<unsigned>(k));
      }
    }
    return Error::Ok;
  };
  if (fast) {
    // One stream for every core: blocks of each core's positions in turn
    // (regor EthosU85WeightOrderingFwd).
    const int block = L.ofm_ublock_depth * L.ifm_ublock_depth * L.sub_kernel_round / cores_;
    std::vector<int32_t> order;
    order.reserve(total_positions);
    size_t taken[4] = {0, 0, 0, 0};
    for (bool more = true; more;) {
      more = false;
      for (int core = 0; core < cores_; ++core) {
        const size_t n = std::min<size_t>(block, slots[core].size() - taken[core]);
        order.insert(order.end(), slots[core].begin() + taken[core],
                     slots[core].begin() + taken[core] + n);
        taken[core] += n;
        more = more || taken[core] < slots[core].size();
      }
    }
    e = place(decoded[0], order, 0);
    if (e != Error::Ok) {
      return e;
    }
  } else {
    for (int core = 0; core < cores_; ++core) {
      e = place(decoded[core], slots[core], core);
      if (e != Error::Ok) {
        return e;
      }
    }
  }

  if ((p0(SET_OFM_PRECISION) >> 8) & 1) {
    return fail(Error::NotSupported, "convolution with a global OFM scale not modelled");
  }
  std::vector<int64_t> bias;
  std::vector<uint32_t> scale;
  std::vector<int> shift;
  e = u85_read_scales(ofm.c, bias, scale, shift);
  if (e != Error::Ok) {
    return e;
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
  // The inner products in 16 x 16 -> 32 bits (what compilers vectorize) when
  // every IFM value fits 16 bits; exact either way.
  std::vector<int16_t> in16;
  const bool narrow = !depthwise && narrow_ifm(in, in16);
  // A narrow convolution takes each output's window as one int16 row laid out
  // as a weight row ([ky][kx][ic], zero where the window is in the padding):
  // one long dot product per output channel instead of one per kernel tap.
  const size_t row = static_cast<size_t>(kh) * kw * ifm.c;
  std::vector<int16_t> window(narrow ? row : 0);
  std::vector<int64_t> accv(ofm.c);
  for (int oy = 0; oy < ofm.h; ++oy) {
    for (int ox = 0; ox < ofm.w; ++ox) {
      for (int c = 0; c < ofm.c; ++c) {
        accv[c] = bias[c];
      }
      if (narrow) {
        gather_window(in16.data(), ifm.h, ifm.w, ifm.c, oy * stride_y - pt, ox * stride_x - pl,
                      kh, kw, dil_y, dil_x, window.data());
        for (int oc = 0; oc < ofm.c; ++oc) {
          accv[oc] += dot16(window.data(), &W[static_cast<size_t>(oc) * row], static_cast<int>(row));
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
              accv[c] += int64_t{px[c]} * W[(static_cast<size_t>(c) * kh + ky) * kw + kx];
            }
          } else {
            for (int oc = 0; oc < ofm.c; ++oc) {
              const int16_t* wr = &W[((static_cast<size_t>(oc) * kh + ky) * kw + kx) * ifm.c];
              int64_t s = 0;
              for (int ic = 0; ic < ifm.c; ++ic) {
                s += int64_t{px[ic]} * wr[ic];
              }
              accv[oc] += s;
            }
          }
        }
      }
      for (int c = 0; c < ofm.c; ++c) {
        e = u85_write_output(ofm, oy, ox, c,
                             scale_round(accv[c], scale[c], shift[c], ofm_round_));
        if (e != Error::Ok) {
          return e;
        }
      }
    }
  }
  return Error::Ok;
}

// NPU_OP_CONV with weights_ifm2: a vector product with IFM2 as the weights,
// how regor runs a TOSA MATMUL (graphir_optimiser RewriteMatmul: the
// right-hand side transposed to rows of output channels, batches in the
// height). OFM(y, x, oc) = sum_ic (IFM(y, x, ic) - zp) * (IFM2(y, oc, ic) -
// zp2), a 1x1 kernel, no bias, then the global OFM_SCALE.
Error Model::u85_matmul(FeatureMap& ifm, FeatureMap& ofm) {
  FeatureMap ifm2;
  Error e = feature_map(ifm2, true, false);
  if (e != Error::Ok) {
    return e;
  }
  e = u85_chained_input(ifm, p0(SET_IFM_PRECISION));
  if (e != Error::Ok) {
    return e;
  }
  e = u85_chained_input(ifm2, p0(SET_IFM2_PRECISION));
  if (e != Error::Ok) {
    return e;
  }
  const uint16_t ks = p0(SET_KERNEL_STRIDE);
  if (p0(SET_KERNEL_HEIGHT_M1) != 0 || p0(SET_KERNEL_WIDTH_M1) != 0 || (ks & 0x25b) != 0 ||
      p0(SET_IFM_PAD_TOP) || p0(SET_IFM_PAD_LEFT) || p0(SET_IFM_PAD_BOTTOM) ||
      p0(SET_IFM_PAD_RIGHT) || p0(SET_IFM_UPSCALE)) {
    return fail(Error::NotSupported,
                "matmul (IFM2 as weights) with a kernel, stride, padding or upscaling not "
                "modelled");
  }
  if ((ifm.bits != 8 && ifm.bits != 16) || (ifm2.bits != 8 && ifm2.bits != 16)) {
    return fail(Error::NotSupported, "matmul with %d-bit / %d-bit inputs not modelled", ifm.bits,
                ifm2.bits);
  }
  if (!((p0(SET_OFM_PRECISION) >> 8) & 1)) {
    return fail(Error::NotSupported, "matmul with per-channel scales not modelled");
  }
  ifm.h = ofm.h;
  ifm.w = ofm.w;
  ifm.c = p0(SET_IFM_DEPTH_M1) + 1;
  ifm2.h = ofm.h;
  ifm2.w = ofm.c;
  ifm2.c = ifm.c;
  const uint64_t macs = static_cast<uint64_t>(ofm.h) * ofm.w * ofm.c * ifm.c;
  if (macs > kMaxMacs || static_cast<uint64_t>(ofm.h) * ofm.w * ofm.c > kMaxElements ||
      static_cast<uint64_t>(ifm2.h) * ifm2.w * ifm2.c > kMaxElements ||
      static_cast<uint64_t>(ifm.h) * ifm.w * ifm.c > kMaxElements) {
    return fail(Error::NotSupported, "matmul of %llu MACs exceeds the model's limit",
                static_cast<unsigned long long>(macs));
  }
  e = u85_output_setup(ofm);
  if (e != Error::Ok) {
    return e;
  }
  const uint32_t scale = d1(SET_OFM_SCALE) & 0x7fffffffu;
  const int shift = p1(SET_OFM_SCALE) & 0x3f;
  if (ofm_round_ == kRoundExact && shift != 0) {
    return fail(Error::NotSupported, "OFM rounding DOUBLE_SYMMETRIC with shift %d not modelled",
                shift);
  }
  std::vector<int32_t> a, b;
  e = read_dense(ifm, a);
  if (e != Error::Ok) {
    return e;
  }
  e = read_dense(ifm2, b);
  if (e != Error::Ok) {
    return e;
  }
  if (stats_) {
    stats_->macs += macs;
    ++stats_->ops;
  }
  for (int y = 0; y < ofm.h; ++y) {
    for (int x = 0; x < ofm.w; ++x) {
      const int32_t* pa = &a[(static_cast<size_t>(y) * ifm.w + x) * ifm.c];
      for (int oc = 0; oc < ofm.c; ++oc) {
        const int32_t* pb = &b[(static_cast<size_t>(y) * ifm2.w + oc) * ifm2.c];
        int64_t acc = 0;
        for (int ic = 0; ic < ifm.c; ++ic) {
          acc += int64_t{pa[ic]} * pb[ic];
        }
        e = u85_write_output(ofm, y, x, oc, scale_round(acc, scale, shift, ofm_round_));
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
