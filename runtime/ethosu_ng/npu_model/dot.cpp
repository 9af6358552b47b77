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
