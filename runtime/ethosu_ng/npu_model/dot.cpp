// SPDX-License-Identifier: BSD-3-Clause
// The convolutions' inner product. Its own translation unit: inlined into the
// large kernel functions, GCC 12 -O3 left this loop scalar (measured); here
// its 16 x 16 -> 32 bit products vectorize (pmaddwd on x86-64).
#include <ethosu_ng/npu_model/model.h>

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

} // namespace detail
} // namespace npu_model
} // namespace ethosu_ng
