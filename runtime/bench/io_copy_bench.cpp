// SPDX-License-Identifier: BSD-3-Clause
// Host timing of the delegate IO layout copy vs a plain memcpy of the same
// bytes. Driven by bench/io_copy.py; prints one key=value line per case.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include <ethosu_ng/layout_copy.h>

namespace {

using Clock = std::chrono::steady_clock;

void clobber(void* p) {
  // Keep the compiler from dropping copies whose result is never read.
  asm volatile("" : : "g"(p) : "memory");
}

template <typename F>
double best_ns_per_call(F&& f, int iters, int repeats) {
  double best = 1e30;
  for (int r = 0; r < repeats; ++r) {
    const auto t0 = Clock::now();
    for (int i = 0; i < iters; ++i) {
      f();
    }
    const auto t1 = Clock::now();
    best = std::min(best, std::chrono::duration<double, std::nano>(t1 - t0).count() / iters);
  }
  return best;
}

struct Case {
  const char* name;
  std::vector<int64_t> sizes;
  std::vector<uint8_t> src_order;
  std::vector<uint8_t> dst_order;
  size_t elem;
};

} // namespace

int main(int argc, char** argv) {
  const int repeats = argc > 1 ? std::atoi(argv[1]) : 7;
  const std::vector<Case> cases = {
      {"u8_1x3x224x224_nchw_to_nhwc", {1, 3, 224, 224}, {0, 1, 2, 3}, {0, 2, 3, 1}, 1},
      {"u8_1x3x224x224_nhwc_to_nhwc", {1, 3, 224, 224}, {0, 2, 3, 1}, {0, 2, 3, 1}, 1},
      {"i8_1x1000", {1, 1000}, {0, 1}, {0, 1}, 1},
      {"i8_1x3x224x224_nhwc_to_nchw", {1, 3, 224, 224}, {0, 2, 3, 1}, {0, 1, 2, 3}, 1},
      {"i8_1x32x56x56_nhwc_to_nchw", {1, 32, 56, 56}, {0, 2, 3, 1}, {0, 1, 2, 3}, 1},
      {"i16_1x16x28x28_nchw_to_nhwc", {1, 16, 28, 28}, {0, 1, 2, 3}, {0, 2, 3, 1}, 2},
  };
  for (const Case& c : cases) {
    const int rank = static_cast<int>(c.sizes.size());
    size_t numel = 1;
    for (int64_t s : c.sizes) numel *= static_cast<size_t>(s);
    const size_t bytes = numel * c.elem;
    std::vector<uint8_t> src(bytes), dst(bytes), dst2(bytes);
    for (size_t i = 0; i < bytes; ++i) src[i] = static_cast<uint8_t>(i * 7);
    int64_t src_strides[6];
    ethosu_ng::dense_strides(rank, c.sizes.data(), c.src_order.data(), src_strides);
    // Size the loop to ~2 ms per repeat.
    const int iters = static_cast<int>(std::max<size_t>(20, 4000000 / std::max<size_t>(bytes, 1)));
    const double copy_ns = best_ns_per_call(
        [&] {
          if (ethosu_ng::copy_to_dim_order(dst.data(), c.dst_order.data(), src.data(), src_strides,
                                           c.sizes.data(), rank, c.elem) != ethosu_ng::Error::Ok) {
            std::abort();
          }
          clobber(dst.data());
        },
        iters, repeats);
    const double memcpy_ns = best_ns_per_call(
        [&] {
          std::memcpy(dst2.data(), src.data(), bytes);
          clobber(dst2.data());
        },
        iters, repeats);
    std::printf("case=%s bytes=%zu copy_ns=%.1f memcpy_ns=%.1f ratio=%.2f\n", c.name, bytes,
                copy_ns, memcpy_ns, copy_ns / memcpy_ns);
  }
  return 0;
}
