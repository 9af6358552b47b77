// SPDX-License-Identifier: BSD-3-Clause
// The narrow convolutions' window and inner product. Their own translation
// unit: inlined into the large kernel functions, GCC 12 -O3 left the inner
// product scalar (measured); here its 16 x 16 -> 32 bit products vectorize
// (pmaddwd on x86-64).
#include <ethosu_ng/npu_model/model.h>

#include <algorithm>

namespace ethosu_ng {
namespace npu_model {
namespace detail {

// int32 partial sums over 128 elements (|sum| <= 2^15 * 2^8 * 2^7 = 2^30),
// added up in 64 bits.
int64_t dot16(const int16_t* a, const int16_t* b, int n) {
  int64_t total = 0;
  for (int base = 0; base < n; base += 128) {
    const int end = n < base + 128 ? n : base + 128;
    int32_t s = 0;
    for (int i = base; i < end; ++i) {
      s += int32_t{a[i]} * int32_t{b[i]};
    }
    total += s;
  }
  return total;
}

// dot16 of four windows, `stride` apart, against one weight row: the row is
// read once for the four (an OFM row's weights stream through the cache a
// quarter as often).
static void dot16x4(const int16_t* a, size_t stride, const int16_t* b, int n, int64_t* out) {
  const int16_t* a0 = a;
  const int16_t* a1 = a + stride;
  const int16_t* a2 = a + 2 * stride;
  const int16_t* a3 = a + 3 * stride;
  int64_t t0 = 0, t1 = 0, t2 = 0, t3 = 0;
  for (int base = 0; base < n; base += 128) {
    const int end = n < base + 128 ? n : base + 128;
    int32_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    for (int i = base; i < end; ++i) {
      const int32_t w = b[i];
      s0 += int32_t{a0[i]} * w;
      s1 += int32_t{a1[i]} * w;
      s2 += int32_t{a2[i]} * w;
      s3 += int32_t{a3[i]} * w;
    }
    t0 += s0;
    t1 += s1;
    t2 += s2;
    t3 += s3;
  }
  out[0] = t0;
  out[1] = t1;
  out[2] = t2;
  out[3] = t3;
}

void window_products(const int16_t* windows, int count, int n, const int16_t* weights,
                     int rows, int64_t* acc) {
  for (int r = 0; r < rows; ++r) {
    const int16_t* w = weights + static_cast<size_t>(r) * n;
    if (count == kWindowBlock) {
      int64_t o[kWindowBlock];
      dot16x4(windows, static_cast<size_t>(n), w, n, o);
      for (int b = 0; b < kWindowBlock; ++b) {
        acc[static_cast<size_t>(b) * rows + r] += o[b];
      }
    } else {
      for (int b = 0; b < count; ++b) {
        acc[static_cast<size_t>(b) * rows + r] += dot16(windows + static_cast<size_t>(b) * n, w, n);
      }
    }
  }
}

void gather_window(const int16_t* in, int h, int w, int c, int y0, int x0, int kh, int kw,
                   int dil_y, int dil_x, int16_t* row) {
  for (int ky = 0; ky < kh; ++ky) {
    const int iy = y0 + ky * dil_y;
    for (int kx = 0; kx < kw; ++kx, row += c) {
      const int ix = x0 + kx * dil_x;
      if (iy < 0 || iy >= h || ix < 0 || ix >= w) {
        std::fill(row, row + c, int16_t{0});
      } else {
        const int16_t* px = in + (static_cast<size_t>(iy) * w + ix) * c;
        std::copy(px, px + c, row);
      }
    }
  }
}

} // namespace detail
} // namespace npu_model
} // namespace ethosu_ng
