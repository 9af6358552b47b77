// SPDX-License-Identifier: BSD-3-Clause
// Host timing of the blob checksums at init: Blob::parse (every rule, the
// CRC-32 of every part included) against the CRC-32 of the bytes it covers
// alone, and a byte-at-a-time table CRC for comparison with the slice-by-4 one.
// Driven by bench/blob_checksum.py; prints one key=value line.
//
// Usage: ethosu_ng_blob_bench BLOB_FILE [REPEATS]
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <new>
#include <vector>

#include <ethosu_ng/blob.h>

namespace {

using Clock = std::chrono::steady_clock;

void clobber(const void* p) {
  asm volatile("" : : "g"(p) : "memory");
}

template <typename F>
double best_ns(F&& f, int repeats) {
  double best = 1e30;
  for (int r = 0; r < repeats; ++r) {
    const auto t0 = Clock::now();
    f();
    const auto t1 = Clock::now();
    best = std::min(best, std::chrono::duration<double, std::nano>(t1 - t0).count());
  }
  return best;
}

// One table lookup per byte (1 KiB table): what slice-by-4 is compared with.
uint32_t crc32_bytewise(const uint8_t* p, size_t n) {
  static uint32_t table[256];
  static bool ready = false;
  if (!ready) {
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) {
        c = (c & 1u) ? (c >> 1) ^ 0xEDB88320u : c >> 1;
      }
      table[i] = c;
    }
    ready = true;
  }
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; ++i) {
    c = table[(c ^ p[i]) & 0xFFu] ^ (c >> 8);
  }
  return ~c;
}

uint32_t ld32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

} // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s BLOB_FILE [REPEATS]\n", argv[0]);
    return 2;
  }
  const int repeats = argc > 2 ? std::atoi(argv[2]) : 20;
  std::ifstream f(argv[1], std::ios::binary);
  const std::vector<uint8_t> bytes(
      (std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  // In place, as on the device: a 16-aligned copy.
  uint8_t* blob = static_cast<uint8_t*>(::operator new[](bytes.size(), std::align_val_t(16)));
  std::memcpy(blob, bytes.data(), bytes.size());

  auto parsed = ethosu_ng::Blob::parse(blob, bytes.size());
  if (!parsed.ok()) {
    std::fprintf(stderr, "%s: not a valid blob\n", argv[1]);
    return 1;
  }
  // The ranges the parser checksums: header, IO table, section table, payloads.
  const ethosu_ng::Blob& b = parsed.get();
  struct Range {
    const uint8_t* p;
    size_t n;
  };
  std::vector<Range> parts = {{blob, ethosu_ng::kHeaderCrcOffset}};
  parts.push_back(
      {blob + ethosu_ng::kIoTableOffset,
       (size_t{b.num_inputs()} + b.num_outputs()) * ethosu_ng::kIoEntrySize});
  uint16_t n_sec;
  std::memcpy(&n_sec, blob + 22, 2);
  parts.push_back({blob + ld32(blob + 24), size_t{n_sec} * ethosu_ng::kSectionEntrySize});
  for (const ethosu_ng::Section* s : {&b.command_stream(), &b.weights(), &b.tosa()}) {
    if (s->present()) {
      parts.push_back({s->data, s->size});
    }
  }
  size_t covered = 0;
  for (const Range& r : parts) {
    covered += r.n;
  }

  volatile uint32_t sink = 0;
  const double parse_ns = best_ns(
      [&] {
        auto r = ethosu_ng::Blob::parse(blob, bytes.size());
        sink = sink + (r.ok() ? 1u : 0u);
      },
      repeats);
  const double crc_ns = best_ns(
      [&] {
        for (const Range& r : parts) {
          sink = sink + ethosu_ng::crc32(r.p, r.n);
        }
        clobber(blob);
      },
      repeats);
  const double bytewise_ns = best_ns(
      [&] {
        for (const Range& r : parts) {
          sink = sink + crc32_bytewise(r.p, r.n);
        }
        clobber(blob);
      },
      repeats);
  std::printf(
      "blob_bytes=%zu checksummed_bytes=%zu parse_ns=%.0f crc_ns=%.0f "
      "structural_ns=%.0f bytewise_crc_ns=%.0f\n",
      bytes.size(),
      covered,
      parse_ns,
      crc_ns,
      std::max(0.0, parse_ns - crc_ns),
      bytewise_ns);
  ::operator delete[](blob, std::align_val_t(16));
  return 0;
}
