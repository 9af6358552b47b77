// SPDX-License-Identifier: BSD-3-Clause
// Layout copy vs a naive per-element reference: every dim order of rank 3, 4
// and 5 on both sides, element sizes 1/2/4, dense and padded strides, plus
// the edge ranks and the error paths. Padding must stay untouched.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <vector>

#include <executorch/runtime/platform/runtime.h>

#include <ethosu_ng/layout_copy.h>

#include "harness.h"

using ethosu_ng::Error;

namespace {

constexpr uint8_t kCanary = 0xA5;

struct Layout {
  std::vector<int64_t> strides; // elements
  int64_t span = 0; // elements the buffer must hold
};

// Strides for `order` with `pad` extra elements after each dim's run (pad=0
// is dense). Outer dims' strides include the inner padding.
Layout make_layout(const std::vector<int64_t>& sizes, const std::vector<uint8_t>& order, int64_t pad) {
  const size_t rank = sizes.size();
  Layout l;
  l.strides.assign(rank, 0);
  // Padded layouts also get a non-unit innermost stride (interleaved data).
  int64_t stride = pad > 0 ? 2 : 1;
  for (size_t i = rank; i-- > 0;) {
    const int d = order[i];
    l.strides[d] = stride;
    stride = stride * sizes[d] + pad;
  }
  l.span = 1;
  for (size_t d = 0; d < rank; ++d) {
    l.span += (sizes[d] - 1) * l.strides[d];
  }
  return l;
}

// Naive reference: walk logical indices, copy element by element.
void reference(uint8_t* dst, const Layout& dl, const uint8_t* src, const Layout& sl,
               const std::vector<int64_t>& sizes, size_t elem) {
  const size_t rank = sizes.size();
  int64_t numel = 1;
  for (int64_t s : sizes) numel *= s;
  std::vector<int64_t> idx(rank, 0);
  for (int64_t n = 0; n < numel; ++n) {
    int64_t d = 0, s = 0;
    for (size_t k = 0; k < rank; ++k) {
      d += idx[k] * dl.strides[k];
      s += idx[k] * sl.strides[k];
    }
    std::memcpy(dst + d * elem, src + s * elem, elem);
    for (size_t k = rank; k-- > 0;) {
      if (++idx[k] < sizes[k]) break;
      idx[k] = 0;
    }
  }
}

std::vector<std::vector<uint8_t>> perms(size_t rank) {
  std::vector<uint8_t> p(rank);
  std::iota(p.begin(), p.end(), 0);
  std::vector<std::vector<uint8_t>> out;
  do {
    out.push_back(p);
  } while (std::next_permutation(p.begin(), p.end()));
  return out;
}

int g_cases = 0;

// One copy src(src_order, src_pad) -> dst(dst_order, dst_pad) checked against
// the reference, canaries intact.
void run_case(const std::vector<int64_t>& sizes, const std::vector<uint8_t>& src_order,
              int64_t src_pad, const std::vector<uint8_t>& dst_order, int64_t dst_pad,
              size_t elem, bool use_wrappers) {
  const Layout sl = make_layout(sizes, src_order, src_pad);
  const Layout dl = make_layout(sizes, dst_order, dst_pad);
  std::vector<uint8_t> src(static_cast<size_t>(sl.span) * elem);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i * 131 + 7);
  std::vector<uint8_t> got(static_cast<size_t>(dl.span) * elem, kCanary);
  std::vector<uint8_t> want(got.size(), kCanary);
  reference(want.data(), dl, src.data(), sl, sizes, elem);
  const int rank = static_cast<int>(sizes.size());
  Error err;
  if (use_wrappers && dst_pad == 0) {
    err = ethosu_ng::copy_to_dim_order(got.data(), dst_order.data(), src.data(),
                                       sl.strides.data(), sizes.data(), rank, elem);
  } else if (use_wrappers && src_pad == 0) {
    err = ethosu_ng::copy_from_dim_order(got.data(), dl.strides.data(), src.data(),
                                         src_order.data(), sizes.data(), rank, elem);
  } else {
    err = ethosu_ng::strided_copy(got.data(), dl.strides.data(), src.data(),
                                  sl.strides.data(), sizes.data(), rank, elem);
  }
  ++g_cases;
  CHECK(err == Error::Ok);
  if (got != want) {
    ++harness::failures();
    std::fprintf(stderr, "mismatch: rank %d elem %zu src_pad %lld dst_pad %lld src_order", rank,
                 elem, static_cast<long long>(src_pad), static_cast<long long>(dst_pad));
    for (auto o : src_order) std::fprintf(stderr, " %d", o);
    std::fprintf(stderr, " dst_order");
    for (auto o : dst_order) std::fprintf(stderr, " %d", o);
    std::fprintf(stderr, "\n");
  }
  ++harness::checks();
}

void test_all_orders() {
  const std::vector<std::vector<int64_t>> shapes = {
      {3, 4, 5}, {2, 3, 4, 5}, {2, 3, 1, 4, 3}};
  for (const auto& sizes : shapes) {
    const auto ps = perms(sizes.size());
    const std::vector<uint8_t> contiguous = ps.front();
    // Sources: contiguous, channels-last-like and reversed, each dense and
    // padded; destinations: every permutation (dense, as the NPU buffer).
    std::vector<std::vector<uint8_t>> srcs = {contiguous, ps.back(), ps[ps.size() / 2]};
    for (size_t elem : {size_t{1}, size_t{2}, size_t{4}}) {
      for (const auto& so : srcs) {
        for (int64_t pad : {0, 3}) {
          for (const auto& dor : ps) {
            run_case(sizes, so, pad, dor, 0, elem, true);  // into the NPU
            run_case(sizes, dor, 0, so, pad, elem, true);  // back out
          }
        }
      }
    }
    // Every src order x every dst order, int8, dense (rank 3/4 exhaustive).
    if (sizes.size() <= 4) {
      for (const auto& so : ps) {
        for (const auto& dor : ps) {
          run_case(sizes, so, 0, dor, 0, 1, false);
        }
      }
    }
  }
}

void test_edges() {
  // Rank 0: one element.
  {
    uint32_t src = 0xDEADBEEF, dst = 0;
    CHECK(ethosu_ng::strided_copy(&dst, nullptr, &src, nullptr, nullptr, 0, 4) == Error::Ok);
    CHECK(dst == 0xDEADBEEF);
  }
  // Rank 1 and rank 6 (padded).
  run_case({7}, {0}, 2, {0}, 0, 2, false);
  run_case({2, 1, 3, 2, 2, 3}, {0, 1, 2, 3, 4, 5}, 1, {5, 0, 3, 1, 4, 2}, 0, 1, false);
  run_case({2, 1, 3, 2, 2, 3}, {3, 5, 0, 1, 4, 2}, 0, {0, 2, 3, 1, 5, 4}, 2, 4, false);
  // Image shapes the boundary actually sees.
  run_case({1, 3, 224, 224}, {0, 1, 2, 3}, 0, {0, 2, 3, 1}, 0, 1, true);
  run_case({1, 3, 224, 224}, {0, 2, 3, 1}, 0, {0, 1, 2, 3}, 0, 1, true);
  run_case({1, 4, 9, 9}, {0, 1, 2, 3}, 0, {0, 2, 3, 1}, 0, 2, true);
  run_case({1, 2, 9, 9}, {0, 1, 2, 3}, 0, {0, 2, 3, 1}, 0, 1, true);
  // (De)interleave fast paths with a tail (35 pixels = 8 words + 3).
  for (size_t elem : {size_t{1}, size_t{2}, size_t{4}}) {
    for (int64_t c : {2, 3, 4}) {
      run_case({1, c, 5, 7}, {0, 1, 2, 3}, 0, {0, 2, 3, 1}, 0, elem, true);
      run_case({1, c, 5, 7}, {0, 2, 3, 1}, 0, {0, 1, 2, 3}, 0, elem, true);
      run_case({2, c, 1, 3}, {0, 1, 2, 3}, 0, {0, 2, 3, 1}, 0, elem, true);
    }
  }
  // Generic tiled transpose across tile edges (C = 33, HW = 70).
  run_case({1, 33, 7, 10}, {0, 1, 2, 3}, 0, {0, 2, 3, 1}, 0, 1, true);
  run_case({1, 33, 7, 10}, {0, 2, 3, 1}, 0, {0, 1, 2, 3}, 0, 2, true);
  for (size_t elem : {size_t{1}, size_t{2}, size_t{4}}) {  // whole tiles only
    run_case({2, 16, 8, 8}, {0, 1, 2, 3}, 0, {0, 2, 3, 1}, 0, elem, true);
    run_case({2, 16, 8, 8}, {0, 2, 3, 1}, 0, {0, 1, 2, 3}, 0, elem, true);
    run_case({8, 24}, {1, 0}, 0, {0, 1}, 0, elem, true);
  }
  run_case({1, 16, 7, 5}, {0, 2, 3, 1}, 5, {0, 1, 2, 3}, 0, 1, false);
  // Zero elements: nothing written, even with null buffers.
  {
    const int64_t sizes[2] = {0, 5};
    const int64_t strides[2] = {5, 1};
    CHECK(ethosu_ng::strided_copy(nullptr, strides, nullptr, strides, sizes, 2, 1) == Error::Ok);
  }
  // Errors.
  uint8_t a[64] = {}, b[64] = {};
  const int64_t sizes[7] = {1, 1, 1, 1, 1, 1, 1};
  const int64_t strides[7] = {1, 1, 1, 1, 1, 1, 1};
  CHECK(ethosu_ng::strided_copy(a, strides, b, strides, sizes, 7, 1) == Error::InvalidArgument);
  CHECK(ethosu_ng::strided_copy(a, strides, b, strides, sizes, -1, 1) == Error::InvalidArgument);
  CHECK(ethosu_ng::strided_copy(a, strides, b, strides, sizes, 2, 3) == Error::InvalidArgument);
  CHECK(ethosu_ng::strided_copy(a, strides, b, strides, sizes, 2, 8) == Error::InvalidArgument);
  const int64_t neg[2] = {-1, 1};
  const int64_t sz2[2] = {2, 2};
  CHECK(ethosu_ng::strided_copy(a, strides, b, neg, sz2, 2, 1) == Error::InvalidArgument);
  const uint8_t bad_order[2] = {1, 1};
  CHECK(ethosu_ng::copy_to_dim_order(a, bad_order, b, strides, sz2, 2, 1) == Error::InvalidArgument);
  CHECK(ethosu_ng::copy_from_dim_order(a, strides, b, bad_order, sz2, 2, 1) == Error::InvalidArgument);
  const uint8_t oob_order[2] = {0, 2};
  CHECK(ethosu_ng::copy_to_dim_order(a, oob_order, b, strides, sz2, 2, 1) == Error::InvalidArgument);
  CHECK(ethosu_ng::strided_copy(nullptr, strides, b, strides, sz2, 2, 1) == Error::InvalidArgument);
  // Regressions from fuzzing. (1) IO at a scratch offset that is not a multiple of the element
  // size is legal in blob v1: int16/int32 copies must not do misaligned loads/stores (UBSan
  // flags them; they fault on some cores).
  for (size_t elem : {size_t{2}, size_t{4}}) {
    alignas(16) uint8_t src_buf[1 + 2 * 3 * 4 * 4] = {};
    alignas(16) uint8_t dst_buf[1 + 2 * 3 * 4 * 4] = {};
    for (size_t k = 0; k < sizeof(src_buf); ++k) src_buf[k] = static_cast<uint8_t>(k * 7 + 1);
    const int64_t sz[3] = {2, 3, 4};
    const int64_t src_st[3] = {12, 4, 1};      // contiguous
    const int64_t dst_st[3] = {1, 8, 2};       // a permutation: dims (1, 2, 0)
    CHECK(ethosu_ng::strided_copy(dst_buf + 1, dst_st, src_buf + 1, src_st, sz, 3, elem) == Error::Ok);
    for (int64_t i = 0; i < 2; ++i)
      for (int64_t j = 0; j < 3; ++j)
        for (int64_t l = 0; l < 4; ++l) {
          const size_t so = 1 + static_cast<size_t>(i * 12 + j * 4 + l) * elem;
          const size_t d = 1 + static_cast<size_t>(i * 1 + j * 8 + l * 2) * elem;
          CHECK(std::memcmp(dst_buf + d, src_buf + so, elem) == 0);
        }
  }
  // (2) A zero-size dim next to huge ones: no stride overflow, nothing copied.
  {
    const int64_t sz[4] = {0, 97792, 32865, 44639};
    const uint8_t order[4] = {0, 1, 2, 3};
    int64_t strides_out[4];
    CHECK(ethosu_ng::dense_strides(4, sz, order, strides_out));
    CHECK(ethosu_ng::copy_to_dim_order(a, order, b, strides, sz, 4, 1) == Error::Ok);
  }
  // dense_strides.
  int64_t st[4];
  const int64_t s4[4] = {1, 3, 5, 7};
  const uint8_t nhwc[4] = {0, 2, 3, 1};
  CHECK(ethosu_ng::dense_strides(4, s4, nhwc, st));
  CHECK(st[1] == 1 && st[3] == 3 && st[2] == 21 && st[0] == 105);
}

} // namespace

// The IO layout checks: names, density, and the dim-order comparison.
void test_layout_checks() {
  using ethosu_ng::check_dim_order;
  using ethosu_ng::strides_follow;
  using ethosu_ng::layout_name;
  const uint8_t nchw[4] = {0, 1, 2, 3};
  const uint8_t nhwc[4] = {0, 2, 3, 1};
  const uint8_t not_perm[4] = {0, 2, 2, 1};
  const uint8_t two[2] = {1, 0};
  char buf[40];
  CHECK(std::strcmp(layout_name(buf, sizeof(buf), nchw, 4), "nchw") == 0);
  CHECK(std::strcmp(layout_name(buf, sizeof(buf), nhwc, 4), "nhwc") == 0);
  CHECK(std::strcmp(layout_name(buf, sizeof(buf), two, 2), "dim order 1,0") == 0);
  CHECK(std::strcmp(layout_name(buf, sizeof(buf), nchw, 3), "dim order 0,1,2") == 0);
  CHECK(std::strcmp(layout_name(buf, sizeof(buf), nchw, 7), "not a dim order (rank 7)") == 0);
  char tiny[5];
  CHECK(std::strlen(layout_name(tiny, sizeof(tiny), two, 2)) == 4); // truncated, terminated

  const int64_t sizes[4] = {1, 3, 4, 5};
  const int64_t planar[4] = {60, 20, 5, 1};
  const int64_t interleaved[4] = {60, 1, 15, 3};
  CHECK(strides_follow(4, sizes, planar, nchw));
  CHECK(!strides_follow(4, sizes, planar, nhwc));
  CHECK(strides_follow(4, sizes, interleaved, nhwc));
  CHECK(!strides_follow(4, sizes, interleaved, nchw));
  CHECK(!strides_follow(4, sizes, planar, not_perm));
  const int64_t padded[4] = {7, 20, 5, 1}; // N is 1: any stride
  CHECK(strides_follow(4, sizes, padded, nchw));
  const int64_t row_padded[4] = {96, 24, 6, 1}; // rows padded to 6: still NCHW
  CHECK(strides_follow(4, sizes, row_padded, nchw));
  CHECK(!strides_follow(4, sizes, row_padded, nhwc));
  const int64_t overlapping[4] = {60, 20, 4, 1}; // rows of 5 at a stride of 4
  CHECK(!strides_follow(4, sizes, overlapping, nchw));
  const int64_t negative[4] = {60, 20, 5, -1};
  CHECK(!strides_follow(4, sizes, negative, nchw));
  const int64_t empty[4] = {1, 0, 4, 5};
  CHECK(strides_follow(4, empty, planar, nhwc)); // nothing to misplace
  const int64_t huge[4] = {1, 3, 4, 5};
  const int64_t huge_strides[4] = {1, INT64_MAX / 2, 5, 1};
  CHECK(!strides_follow(4, huge, huge_strides, nchw)); // C x stride overflows
  const int64_t one_c[4] = {1, 1, 4, 5};
  const int64_t one_c_strides[4] = {20, 20, 5, 1}; // C = 1: planar is interleaved too
  CHECK(strides_follow(4, one_c, one_c_strides, nchw) && strides_follow(4, one_c, one_c_strides, nhwc));
  // A rank outside 0..kLayoutMaxRank is refused before any array is read (7 would overrun them).
  const int64_t seven[7] = {1, 1, 1, 1, 1, 1, 1};
  const uint8_t order7[7] = {0, 1, 2, 3, 4, 5, 6};
  CHECK(strides_follow(0, seven, seven, order7)); // a scalar follows any order
  CHECK(!strides_follow(-1, seven, seven, order7));
  CHECK(!strides_follow(7, seven, seven, order7));

  CHECK(check_dim_order("input", 0, nhwc, 4, nhwc, 4) == Error::Ok);
  CHECK(check_dim_order("input", 0, nhwc, 4, nchw, 4) == Error::InvalidArgument);
  CHECK(check_dim_order("output", 2, nchw, 4, nhwc, 4) == Error::InvalidArgument);
  CHECK(check_dim_order("input", 0, nchw, 4, nchw, 3) == Error::InvalidArgument);
  CHECK(check_dim_order("input", 0, two, 2, two, 2) == Error::Ok);
  CHECK(check_dim_order("input", 0, nchw, 9, nchw, 9) == Error::InvalidArgument);
}

int main() {
  executorch::runtime::runtime_init();
  test_all_orders();
  test_edges();
  test_layout_checks();
  std::printf("layout copy: %d cases\n", g_cases);
  return harness::finish("test_layout_copy");
}
