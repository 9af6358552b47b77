// SPDX-License-Identifier: BSD-3-Clause
// Decoder of the Ethos-U55/U65 compressed weight format ("mlw").
//
// Format (as written by Vela's mlw_codec encoder; see docs/npu-model.md):
// a bit stream, LSB first within each byte, made of slices. Each slice
// header holds ZDIV (3 bits; 7 = end of stream, pad to a byte boundary;
// 6 = no zero runs), SLICELEN-1 (15), WDIV (3; 7 = uncompressed), WTRUNC (1),
// NEWPAL (1) and, with NEWPAL, DIROFS (5), PALSIZE (5, +1 when non-zero),
// PALBITS-2 (3) and the palette. The slice body is a sequence of chunks;
// each chunk carries, in this order: the 12-bit weight unary mask, the
// zero-run unary mask, the weight unary extension bits, then the Golomb-Rice
// remainders of the weights and zero runs whose quotients were sent in the
// previous chunk. A weight index below PALSIZE selects a palette entry,
// otherwise it is index - PALSIZE + DIROFS; the value is sign-magnitude with
// the sign in bit 0. Zero runs follow each weight (and one precedes the first
// weight of a slice that sets a new palette).
#include <ethosu_ng/npu_model/npu_model.h>

#include <cstdarg>
#include <cstdio>

namespace ethosu_ng {
namespace npu_model {
namespace {

constexpr int kZdivNoRuns = 6;
constexpr int kZdivEndOfStream = 7;
constexpr int kWdivUncompressed = 7;

class BitReader {
 public:
  BitReader(const uint8_t* data, size_t size) : data_(data), size_(size) {}

  // Reads `n` (<= 31) bits; false when that would pass the end.
  bool get(int n, uint32_t* v) {
    if (n == 0) {
      *v = 0;
      return true;
    }
    if (pos_ + static_cast<uint64_t>(n) > static_cast<uint64_t>(size_) * 8) {
      return false;
    }
    uint32_t r = 0;
    for (int i = 0; i < n; ++i) {
      const uint64_t p = pos_ + i;
      r |= static_cast<uint32_t>((data_[p >> 3] >> (p & 7)) & 1u) << i;
    }
    pos_ += n;
    *v = r;
    return true;
  }
  void align() {
    pos_ = (pos_ + 7) & ~uint64_t{7};
  }
  uint64_t pos() const {
    return pos_;
  }
  bool at_end() const {
    return pos_ >= static_cast<uint64_t>(size_) * 8;
  }

 private:
  const uint8_t* data_;
  size_t size_;
  uint64_t pos_ = 0;
};

void say(char* msg, size_t cap, const char* fmt, ...) {
  if (msg == nullptr || cap == 0) {
    return;
  }
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, cap, fmt, ap);
  va_end(ap);
}

} // namespace

bool mlw_decode(
    const uint8_t* in,
    size_t size,
    std::vector<int16_t>& out,
    char* msg,
    size_t msg_cap,
    uint64_t max_count) {
  BitReader bb(in, size);
  bool first = true;
  bool prev_runs = false;
  int palsize = 0;
  int palbits = 0;
  int dirofs = 0;
  int16_t palette[32] = {};
  int slice = 0;
#define MLW_GET(var, n, what)                                                  \
  do {                                                                         \
    if (!bb.get((n), &(var))) {                                                \
      say(msg, msg_cap, "weight stream truncated in slice %d reading %s at bit %llu of %lu bytes", \
          slice, (what), static_cast<unsigned long long>(bb.pos()),            \
          static_cast<unsigned long>(size));                                   \
      return false;                                                            \
    }                                                                          \
  } while (0)

  for (;; ++slice) {
    if (bb.at_end()) {
      return true;
    }
    uint32_t zdiv = 0;
    MLW_GET(zdiv, 3, "ZDIV");
    bool ended = false;
    while (zdiv == kZdivEndOfStream) {
      bb.align();
      first = true;
      if (bb.at_end()) {
        ended = true;
        break;
      }
      MLW_GET(zdiv, 3, "ZDIV");
    }
    if (ended || bb.at_end()) {
      return true;
    }
    if (zdiv > 3 && zdiv != kZdivNoRuns) {
      say(msg, msg_cap, "weight stream slice %d: invalid ZDIV %u", slice, zdiv);
      return false;
    }
    const bool runs = zdiv != kZdivNoRuns;
    uint32_t len_m1 = 0, wdiv = 0, wtrunc = 0, newpal = 0;
    MLW_GET(len_m1, 15, "SLICELEN");
    MLW_GET(wdiv, 3, "WDIV");
    MLW_GET(wtrunc, 1, "WTRUNC");
    MLW_GET(newpal, 1, "NEWPAL");
    const int nvalues = static_cast<int>(len_m1) + 1;
    if (first && !newpal) {
      say(msg, msg_cap, "weight stream slice %d: first slice of a stream has no palette setup", slice);
      return false;
    }
    if (!newpal && runs != prev_runs) {
      say(msg, msg_cap, "weight stream slice %d: zero-run mode changes without a new palette", slice);
      return false;
    }
    first = false;
    prev_runs = runs;
    if (newpal) {
      uint32_t v = 0;
      MLW_GET(v, 5, "DIROFS");
      dirofs = static_cast<int>(v);
      MLW_GET(v, 5, "PALSIZE");
      palsize = v > 0 ? static_cast<int>(v) + 1 : 0;
      MLW_GET(v, 3, "PALBITS");
      palbits = static_cast<int>(v) + 2;
      for (int i = 0; i < palsize; ++i) {
        MLW_GET(v, palbits, "PALETTE");
        palette[i] = static_cast<int16_t>(v);
      }
    }
    bool uncompressed = false;
    int wshift = static_cast<int>(wdiv);
    if (wdiv == kWdivUncompressed) {
      uncompressed = true;
      if (palsize > 0) {
        wshift = 0;
        while ((1 << wshift) < palsize) {
          ++wshift;
        }
      } else {
        wshift = palbits;
      }
    } else if (wdiv > 5) {
      say(msg, msg_cap, "weight stream slice %d: invalid WDIV %u", slice, wdiv);
      return false;
    }
    const int zshift = runs ? static_cast<int>(zdiv) : 0;
    const int z_nvalues = nvalues + (newpal ? 1 : 0);
    std::vector<int> wval(nvalues, 0);
    std::vector<int> zval(runs ? z_nvalues : 0, 0);
    int wpos = 0, zpos = 0, wprev_pos = 0, zprev_pos = 0;
    int wq[12] = {}, zq[12] = {}, wprev_q[12] = {}, zprev_q[12] = {};
    int wn = 0, zn = 0, wprev_n = 0, zprev_n = 0;
    int wcarry = 0, zcarry = 0;
    bool wprev_en = false, zprev_en = false;
    const int zunary_len = zdiv < 3 ? 12 : 8;
    int64_t total_zeros = 0;
    do {
      const int balance = runs ? wpos - zpos : 0;
      const bool wen = (balance < 8 || !runs) && wpos < nvalues;
      const bool zen = balance >= 0 && runs && zpos < z_nvalues;
      uint32_t wunary0 = 0;
      if (wen && !uncompressed) {
        MLW_GET(wunary0, 12, "WUNARY0");
      }
      if (zen) {
        uint32_t zu = 0;
        MLW_GET(zu, zunary_len, "ZUNARY");
        zn = 0;
        int cnt = zcarry;
        for (int i = 0; i < zunary_len; ++i) {
          if (zu & (1u << i)) {
            ++cnt;
          } else {
            zq[zn++] = cnt;
            cnt = 0;
          }
        }
        zcarry = cnt;
        zpos += zn;
        if (zcarry >= (1 << 24)) {
          say(msg, msg_cap, "weight stream slice %d: unterminated zero-run unary code", slice);
          return false;
        }
      }
      if (wen) {
        const int max_symbols = uncompressed && wshift > 5 ? 8 : 12;
        int ones = 0;
        for (int i = 0; i < max_symbols; ++i) {
          ones += (wunary0 >> i) & 1;
        }
        uint32_t wunary1 = 0;
        MLW_GET(wunary1, ones, "WUNARY1");
        wn = 0;
        int cnt = wcarry;
        for (int i = 0; i < max_symbols; ++i) {
          int code = 0;
          if (wunary0 & (1u << i)) {
            code = 1 + static_cast<int>(wunary1 & 1u);
            wunary1 >>= 1;
          }
          cnt += code;
          if (code < 2 || wtrunc) {
            wq[wn++] = cnt;
            cnt = 0;
          }
        }
        wcarry = cnt;
        wpos += wn;
        if (wcarry >= (1 << 24)) {
          say(msg, msg_cap, "weight stream slice %d: unterminated weight unary code", slice);
          return false;
        }
      }
      if (wprev_en) {
        for (int i = 0; i < wprev_n && wprev_pos < nvalues; ++i, ++wprev_pos) {
          uint32_t rem = 0;
          MLW_GET(rem, wshift, "WREMAIN");
          // A weight index has 9 bits: a larger quotient is a corrupt stream
          // (and would overflow the shift below).
          if (wprev_q[i] >= 512) {
            say(msg, msg_cap, "weight stream slice %d: weight quotient %d exceeds 9 bits", slice,
                wprev_q[i]);
            return false;
          }
          wval[wprev_pos] = (wprev_q[i] << wshift) + static_cast<int>(rem);
        }
      }
      if (zprev_en) {
        for (int i = 0; i < zprev_n && zprev_pos < z_nvalues; ++i, ++zprev_pos) {
          uint32_t rem = 0;
          MLW_GET(rem, zshift, "ZREMAIN");
          if (zprev_q[i] >= (1 << 24)) {
            say(msg, msg_cap, "weight stream slice %d: zero-run quotient %d implausible", slice,
                zprev_q[i]);
            return false;
          }
          zval[zprev_pos] = (zprev_q[i] << zshift) + static_cast<int>(rem);
          total_zeros += zval[zprev_pos];
        }
      }
      wprev_en = wen;
      wprev_n = wn;
      zprev_en = zen;
      zprev_n = zn;
      for (int i = 0; i < 12; ++i) {
        wprev_q[i] = wq[i];
        zprev_q[i] = zq[i];
      }
    } while (wprev_en || zprev_en);

    // A corrupt stream can announce huge zero runs; bound what one slice may
    // add (the largest real weight volume is far below this).
    if (total_zeros > (int64_t{1} << 26) ||
        out.size() + static_cast<size_t>(total_zeros) + nvalues > (size_t{1} << 28)) {
      say(msg, msg_cap, "weight stream slice %d: implausible zero-run total %lld", slice,
          static_cast<long long>(total_zeros));
      return false;
    }
    const uint64_t slice_count =
        static_cast<uint64_t>(total_zeros) + static_cast<uint64_t>(nvalues);
    if (out.size() + slice_count > max_count) {
      say(msg, msg_cap,
          "weight stream slice %d: decodes to more than the %llu weights the kernel reads",
          slice, static_cast<unsigned long long>(max_count));
      return false;
    }
    if (newpal && runs) {
      out.insert(out.end(), static_cast<size_t>(zval[0]), int16_t{0});
    }
    for (int i = 0; i < nvalues; ++i) {
      const int w = wval[i];
      if (w >= 512) {
        say(msg, msg_cap, "weight stream slice %d: weight index %d exceeds 9 bits", slice, w);
        return false;
      }
      const int v = w < palsize ? palette[w] : w - palsize + dirofs;
      const int mag = v >> 1;
      out.push_back(static_cast<int16_t>((v & 1) ? -mag : mag));
      if (runs) {
        out.insert(out.end(), static_cast<size_t>(zval[i + (newpal ? 1 : 0)]), int16_t{0});
      }
    }
  }
#undef MLW_GET
}

// Ethos-U85 fast weight decode (FWD) format, as regor's mlw_encode_fwd.cpp
// writes it: a 256-bit header (bit 0 raw mode, bit 1 small LUT, bits
// 104..111 a signed zero adjustment, from bit 112 sixteen 9-bit LUT entries
// folded as magnitude << 1 | sign), then from bit 256 one code per weight: 2-bit
// LUT index (small LUT), 8-bit value + zero adjustment (raw) or 4-bit LUT
// index; LSB first. The stream carries no count: the caller says how many.
bool fwd_decode(
    const uint8_t* in,
    size_t size,
    size_t count,
    std::vector<int16_t>& out,
    char* msg,
    size_t msg_cap) {
  BitReader br(in, size);
  uint32_t raw = 0, small = 0, zadj = 0, skip = 0;
  bool ok = br.get(1, &raw) && br.get(1, &small);
  for (int k = 0; ok && k < 102; k += 17) {
    ok = br.get(17, &skip);
  }
  ok = ok && br.get(8, &zadj);
  int16_t lut[16] = {};
  for (int k = 0; ok && k < 16; ++k) {
    uint32_t f = 0;
    ok = br.get(9, &f);
    const int mag = static_cast<int>(f >> 1);
    lut[k] = static_cast<int16_t>((f & 1) ? -mag : mag);
  }
  if (!ok) {
    say(msg, msg_cap, "fast weight stream of %u bytes: header truncated",
        static_cast<unsigned>(size));
    return false;
  }
  const int bits = raw ? 8 : small ? 2 : 4;
  if (count > (size_t{1} << 28) ||
      256 + static_cast<uint64_t>(count) * bits > static_cast<uint64_t>(size) * 8) {
    say(msg, msg_cap, "fast weight stream of %u bytes holds fewer than %u %d-bit weights",
        static_cast<unsigned>(size), static_cast<unsigned>(count), bits);
    return false;
  }
  const int adjust = static_cast<int8_t>(static_cast<uint8_t>(zadj));
  out.reserve(out.size() + count);
  for (size_t k = 0; k < count; ++k) {
    uint32_t v = 0;
    br.get(bits, &v);
    out.push_back(raw ? static_cast<int16_t>(static_cast<int8_t>(static_cast<uint8_t>(v)) - adjust)
                      : lut[v]);
  }
  return true;
}

} // namespace npu_model
} // namespace ethosu_ng
