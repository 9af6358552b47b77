// SPDX-License-Identifier: BSD-3-Clause
// Test-only C++ writer of blob v2 (mirrors ethosu_ng/blob.py DelegateBlob.
// to_bytes and write_checksums) plus an exact-size aligned buffer, so
// AddressSanitizer flags any read past the end of a (truncated) blob.
//
// Its CRC-32 is a plain byte-table one, written apart from the runtime's
// slice-by-4 ethosu_ng::crc32, so each checks the other.
#pragma once

#include <cstdint>
#include <cstring>
#include <new>
#include <vector>

namespace testblob {

struct Io {
  uint8_t dtype = 1;
  std::vector<uint32_t> shape;
  std::vector<uint8_t> dim_order; // empty = contiguous
  uint8_t region = 1;
  uint32_t offset = 0;
  int32_t zero_point = 0;
  float scale = 0.0f;
  // Overrides for hostile blobs (0 = derive).
  uint8_t elem_size_override = 0;
  uint32_t byte_size_override = 0;
  int rank_override = -1;
};

inline uint8_t elem_size(uint8_t dtype) {
  return dtype == 1 || dtype == 2 || dtype == 6 ? 1 : dtype == 3 || dtype == 4 ? 2 : 4;
}

struct Spec {
  std::vector<Io> inputs;
  std::vector<Io> outputs;
  std::vector<uint8_t> cmd = std::vector<uint8_t>(20, 0xC1);
  std::vector<uint8_t> weights = std::vector<uint8_t>(33, 0x3E);
  bool has_tosa = false;
  std::vector<uint8_t> tosa = std::vector<uint8_t>(7, 0x70);
  uint32_t scratch = 0; // 0 = just big enough for the IO
  uint32_t fast_scratch = 0;
};

// CRC-32 as zlib.crc32 (IEEE polynomial, reflected).
inline uint32_t crc32(const uint8_t* p, size_t n) {
  static const struct Table {
    uint32_t t[256];
    Table() {
      for (uint32_t i = 0; i < 256; ++i) {
        uint32_t c = i;
        for (int k = 0; k < 8; ++k) {
          c = (c & 1u) ? (c >> 1) ^ 0xEDB88320u : c >> 1;
        }
        t[i] = c;
      }
    }
  } table;
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; ++i) {
    c = table.t[(c ^ p[i]) & 0xFFu] ^ (c >> 8);
  }
  return ~c;
}

inline uint32_t get32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
inline uint16_t get16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

// Rewrites every checksum of the `size` bytes at `b` from the bytes it covers
// (blob.py write_checksums): payloads, section table, IO table, header. A
// range outside the buffer keeps its checksum, so hostile layouts are fine.
inline void seal(uint8_t* b, size_t size) {
  if (size < 64) {
    return;
  }
  const uint64_t n_io = uint64_t{get16(b + 12)} + get16(b + 14);
  const uint64_t io_off = get32(b + 16);
  const uint64_t n_sec = get16(b + 22);
  const uint64_t sec_off = get32(b + 24);
  for (uint64_t k = 0; k < n_sec; ++k) {
    const uint64_t e = sec_off + 16 * k;
    if (e + 16 > size) {
      break;
    }
    const uint64_t off = get32(b + e + 4);
    const uint64_t len = get32(b + e + 8);
    if (off + len <= size) {
      const uint32_t c = crc32(b + off, static_cast<size_t>(len));
      std::memcpy(b + e + 12, &c, 4);
    }
  }
  if (sec_off + 16 * n_sec <= size) {
    const uint32_t c = crc32(b + sec_off, static_cast<size_t>(16 * n_sec));
    std::memcpy(b + 44, &c, 4);
  }
  if (io_off + 64 * n_io <= size) {
    const uint32_t c = crc32(b + io_off, static_cast<size_t>(64 * n_io));
    std::memcpy(b + 40, &c, 4);
  }
  const uint32_t c = crc32(b, 60);
  std::memcpy(b + 60, &c, 4);
}
inline void seal(std::vector<uint8_t>& b) {
  seal(b.data(), b.size());
}

inline uint32_t pad16(uint32_t n) {
  return (n + 15u) & ~15u;
}

inline void put16(std::vector<uint8_t>& b, size_t off, uint16_t v) {
  std::memcpy(&b[off], &v, 2);
}
inline void put32(std::vector<uint8_t>& b, size_t off, uint32_t v) {
  std::memcpy(&b[off], &v, 4);
}

inline uint32_t io_bytes(const Io& io) {
  uint32_t n = elem_size(io.dtype);
  for (uint32_t d : io.shape) {
    n *= d;
  }
  return n;
}

// Places IO without explicit offsets one after another (16-aligned).
inline void place(Spec& s) {
  uint32_t cursor = 0;
  for (auto* list : {&s.inputs, &s.outputs}) {
    for (Io& io : *list) {
      io.offset = cursor;
      cursor = pad16(cursor + io_bytes(io));
    }
  }
  if (s.scratch == 0) {
    s.scratch = cursor;
  }
}

inline std::vector<uint8_t> build(const Spec& s) {
  const uint32_t n_io = static_cast<uint32_t>(s.inputs.size() + s.outputs.size());
  const uint32_t n_sec = s.has_tosa ? 3 : 2;
  const uint32_t io_off = 64;
  const uint32_t sec_off = pad16(io_off + 64 * n_io);
  const uint32_t data_off = pad16(sec_off + 16 * n_sec);
  const std::vector<uint8_t>* payload[3] = {&s.cmd, &s.weights, &s.tosa};
  uint32_t total = data_off;
  for (uint32_t k = 0; k < n_sec; ++k) {
    total += pad16(static_cast<uint32_t>(payload[k]->size()));
  }
  std::vector<uint8_t> b(total, 0);
  std::memcpy(&b[0], "EUNG", 4);
  put16(b, 4, 2);
  put16(b, 6, 64);
  put32(b, 8, total);
  put16(b, 12, static_cast<uint16_t>(s.inputs.size()));
  put16(b, 14, static_cast<uint16_t>(s.outputs.size()));
  put32(b, 16, io_off);
  put16(b, 20, 64);
  put16(b, 22, static_cast<uint16_t>(n_sec));
  put32(b, 24, sec_off);
  put32(b, 28, s.scratch);
  put32(b, 32, s.fast_scratch);
  put32(b, 36, s.has_tosa ? 1u : 0u);
  size_t k = 0;
  for (auto* list : {&s.inputs, &s.outputs}) {
    for (const Io& io : *list) {
      const size_t p = io_off + 64 * k++;
      const size_t rank = io.shape.size();
      b[p + 0] = io.dtype;
      b[p + 1] = static_cast<uint8_t>(io.rank_override >= 0 ? io.rank_override : static_cast<int>(rank));
      b[p + 2] = io.elem_size_override ? io.elem_size_override : elem_size(io.dtype);
      b[p + 3] = io.region;
      put32(b, p + 4, io.offset);
      put32(b, p + 8, io.byte_size_override ? io.byte_size_override : io_bytes(io));
      std::memcpy(&b[p + 12], &io.zero_point, 4);
      std::memcpy(&b[p + 16], &io.scale, 4);
      for (size_t i = 0; i < rank && i < 6; ++i) {
        put32(b, p + 20 + 4 * i, io.shape[i]);
        b[p + 44 + i] = io.dim_order.empty() ? static_cast<uint8_t>(i) : io.dim_order[i];
      }
    }
  }
  uint32_t cursor = data_off;
  for (uint32_t j = 0; j < n_sec; ++j) {
    const size_t p = sec_off + 16 * j;
    put32(b, p, j + 1);
    put32(b, p + 4, cursor);
    put32(b, p + 8, static_cast<uint32_t>(payload[j]->size()));
    if (!payload[j]->empty()) {
      std::memcpy(&b[cursor], payload[j]->data(), payload[j]->size());
    }
    cursor += pad16(static_cast<uint32_t>(payload[j]->size()));
  }
  seal(b);
  return b;
}

// Exactly `size` bytes at a 16-aligned address (+`misalign`), no slack.
class Buffer {
 public:
  Buffer(const uint8_t* data, size_t size, size_t misalign = 0)
      : raw_(static_cast<uint8_t*>(::operator new[](size + misalign, std::align_val_t(16)))),
        ptr_(raw_ + misalign),
        size_(size) {
    if (size) {
      std::memcpy(ptr_, data, size);
    }
  }
  explicit Buffer(const std::vector<uint8_t>& v, size_t misalign = 0)
      : Buffer(v.data(), v.size(), misalign) {}
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer() {
    ::operator delete[](raw_, std::align_val_t(16));
  }
  uint8_t* data() {
    return ptr_;
  }
  size_t size() const {
    return size_;
  }

 private:
  uint8_t* raw_;
  uint8_t* ptr_;
  size_t size_;
};

} // namespace testblob
