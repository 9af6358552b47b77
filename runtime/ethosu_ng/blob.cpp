// SPDX-License-Identifier: BSD-3-Clause
#include <ethosu_ng/blob.h>

#include <cmath>
#include <cstring>

#include <executorch/runtime/platform/log.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "ethosu_ng blob reader assumes a little-endian target (blob fields are LE)"
#endif

namespace ethosu_ng {
namespace {

// Field loads through memcpy: valid for any alignment and free of aliasing UB;
// compilers turn them into single loads.
uint16_t ld16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
uint32_t ld32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// CRC-32 tables for slice-by-4, built at compile time into read-only data:
// t[0] is the classic byte table, t[k][i] the CRC of byte i followed by k
// zero bytes, so four table lookups fold one 32-bit word.
struct Crc32Tables {
  uint32_t t[4][256];
  constexpr Crc32Tables() : t{} {
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) {
        c = (c & 1u) != 0 ? (c >> 1) ^ 0xEDB88320u : c >> 1;
      }
      t[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; ++i) {
      for (int s = 1; s < 4; ++s) {
        t[s][i] = (t[s - 1][i] >> 8) ^ t[0][t[s - 1][i] & 0xFFu];
      }
    }
  }
};
constexpr Crc32Tables kCrc;

// Stored CRC against the bytes' CRC; logs the part by name on a mismatch.
bool crc_matches(const char* part, const uint8_t* p, size_t n, uint32_t stored) {
  const uint32_t actual = crc32(p, n);
  if (actual == stored) {
    return true;
  }
  ET_LOG(
      Error,
      "ethosu_ng blob: blob section '%s': checksum 0x%08x, expected 0x%08x "
      "(the blob changed after it was written)",
      part,
      static_cast<unsigned>(actual),
      static_cast<unsigned>(stored));
  return false;
}

// [off, off + len) inside [0, total)? 64-bit sums: u32 + u32 cannot wrap.
bool in_range(uint64_t off, uint64_t len, uint64_t total) {
  return off <= total && len <= total - off;
}

const char* section_name(uint32_t kind) {
  switch (kind) {
    case kSectionCommandStream:
      return "command_stream";
    case kSectionWeights:
      return "weights";
    case kSectionTosa:
      return "tosa";
    default:
      return "unknown";
  }
}

// "input 3" / "output 0" for log lines.
struct IoName {
  const char* kind;
  unsigned index;
};
IoName io_name(size_t k, uint16_t n_in) {
  return k < n_in ? IoName{"input", static_cast<unsigned>(k)}
                  : IoName{"output", static_cast<unsigned>(k - n_in)};
}

IoEntry decode_entry(const uint8_t* p) {
  IoEntry e;
  e.dtype = p[0];
  e.rank = p[1];
  e.elem_size = p[2];
  e.region = p[3];
  e.offset = ld32(p + 4);
  e.byte_size = ld32(p + 8);
  std::memcpy(&e.zero_point, p + 12, 4);
  std::memcpy(&e.scale, p + 16, 4);
  for (int i = 0; i < kMaxRank; ++i) {
    e.shape[i] = ld32(p + 20 + 4 * i);
    e.dim_order[i] = p[44 + i];
  }
  return e;
}

bool all_zero(const uint8_t* p, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    if (p[i] != 0) {
      return false;
    }
  }
  return true;
}

// The IO rules of docs/blob-format.md for the entry at `p`, in the doc's order.
BlobRule check_entry(const uint8_t* p, IoName n, unsigned scratch_size) {
  const IoEntry e = decode_entry(p);
  const uint8_t want_elem = dtype_elem_size(e.dtype);
  if (want_elem == 0) {
    ET_LOG(
        Error,
        "ethosu_ng blob: %s %u: unknown dtype code %u (expected 1..6)",
        n.kind,
        n.index,
        e.dtype);
    return BlobRule::kDType;
  }
  if (e.rank > kMaxRank) {
    ET_LOG(
        Error,
        "ethosu_ng blob: %s %u: rank %u > %d",
        n.kind,
        n.index,
        e.rank,
        kMaxRank);
    return BlobRule::kRank;
  }
  if (e.elem_size != want_elem) {
    ET_LOG(
        Error,
        "ethosu_ng blob: %s %u: element size %u does not match %s (expected %u)",
        n.kind,
        n.index,
        e.elem_size,
        dtype_name(e.dtype),
        want_elem);
    return BlobRule::kElemSize;
  }
  bool seen[kMaxRank] = {};
  for (int i = 0; i < e.rank; ++i) {
    const uint8_t d = e.dim_order[i];
    if (d >= e.rank || seen[d]) {
      ET_LOG(
          Error,
          "ethosu_ng blob: %s %u: dim_order is not a permutation of rank %u "
          "(entry %d is %u)",
          n.kind,
          n.index,
          e.rank,
          i,
          d);
      return BlobRule::kDimOrder;
    }
    seen[d] = true;
  }
  for (int i = 0; i < e.rank; ++i) {
    if (e.shape[i] == 0) {
      ET_LOG(
          Error,
          "ethosu_ng blob: %s %u: shape entry %d is 0 (zero-size tensor)",
          n.kind,
          n.index,
          i);
      return BlobRule::kZeroDim;
    }
  }
  // numel * elem_size must equal the u32 byte_size. Every dimension is >= 1,
  // so the product only grows: stop as soon as it passes 2^32, before a
  // hostile shape can overflow 64 bits.
  uint64_t bytes = e.elem_size;
  bool too_big = false;
  for (int i = 0; i < e.rank && !too_big; ++i) {
    bytes *= e.shape[i];
    too_big = bytes > 0xFFFFFFFFull;
  }
  if (too_big || bytes != e.byte_size) {
    ET_LOG(
        Error,
        "ethosu_ng blob: %s %u: byte_size %u != numel x %u (%s%llu)",
        n.kind,
        n.index,
        static_cast<unsigned>(e.byte_size),
        e.elem_size,
        too_big ? "> " : "",
        static_cast<unsigned long long>(too_big ? 0xFFFFFFFFull : bytes));
    return BlobRule::kByteSize;
  }
  if (e.region != kRegionScratch) {
    ET_LOG(
        Error,
        "ethosu_ng blob: %s %u: region %u; IO must live in region %u "
        "(scratch)",
        n.kind,
        n.index,
        e.region,
        kRegionScratch);
    return BlobRule::kRegion;
  }
  if (!in_range(e.offset, e.byte_size, scratch_size)) {
    ET_LOG(
        Error,
        "ethosu_ng blob: %s %u: bytes [%u, %llu) outside scratch of %u bytes",
        n.kind,
        n.index,
        static_cast<unsigned>(e.offset),
        static_cast<unsigned long long>(uint64_t{e.offset} + e.byte_size),
        scratch_size);
    return BlobRule::kScratchRange;
  }
  // "No scale" is exactly +0.0 (all bits 0); any other value must be a usable
  // scale. Compare bits, not floats: -0.0 == 0.0 and NaN != NaN.
  const uint32_t scale_bits = ld32(p + 16);
  if (scale_bits != 0 && !(std::isfinite(e.scale) && e.scale > 0.0f)) {
    ET_LOG(
        Error,
        "ethosu_ng blob: %s %u: scale (bits 0x%08x) is neither +0.0 nor "
        "finite and positive",
        n.kind,
        n.index,
        static_cast<unsigned>(scale_bits));
    return BlobRule::kScale;
  }
  if (scale_bits == 0 && e.zero_point != 0) {
    ET_LOG(
        Error,
        "ethosu_ng blob: %s %u: zero point %d without a scale",
        n.kind,
        n.index,
        static_cast<int>(e.zero_point));
    return BlobRule::kZeroPoint;
  }
  for (int i = e.rank; i < kMaxRank; ++i) {
    if (e.shape[i] != 0 || e.dim_order[i] != 0) {
      ET_LOG(
          Error,
          "ethosu_ng blob: %s %u: shape/dim_order slot %d is past rank %u "
          "but not 0",
          n.kind,
          n.index,
          i,
          e.rank);
      return BlobRule::kIoUnused;
    }
  }
  if (!all_zero(p + 50, kIoEntrySize - 50)) {
    ET_LOG(
        Error,
        "ethosu_ng blob: %s %u: reserved bytes are not zero",
        n.kind,
        n.index);
    return BlobRule::kIoReserved;
  }
  return BlobRule::kOk;
}

} // namespace

uint32_t crc32(const void* data, size_t size, uint32_t crc) {
  const uint8_t* p = static_cast<const uint8_t*>(data);
  const uint8_t* const end = p + size;
  // One pointer per table and a pointer-compare loop: the shape that keeps
  // the word loop at ~15 Thumb-2 instructions per 4 bytes even at -Os.
  const uint32_t* const t0 = kCrc.t[0];
  const uint32_t* const t1 = kCrc.t[1];
  const uint32_t* const t2 = kCrc.t[2];
  const uint32_t* const t3 = kCrc.t[3];
  uint32_t c = ~crc;
  // Bytes up to a word boundary, so the word loads below are aligned (blob
  // parts start 16-aligned: this loop is for other callers).
  while (p != end && (reinterpret_cast<uintptr_t>(p) & 3u) != 0) {
    c = t0[(c ^ *p++) & 0xFFu] ^ (c >> 8);
  }
  const uint8_t* const words_end = p + (static_cast<size_t>(end - p) & ~size_t{3});
  while (p != words_end) {
    c ^= ld32(p); // little-endian: the first byte is the low one
    p += 4;
    c = t3[c & 0xFFu] ^ t2[(c >> 8) & 0xFFu] ^ t1[(c >> 16) & 0xFFu] ^ t0[c >> 24];
  }
  while (p != end) {
    c = t0[(c ^ *p++) & 0xFFu] ^ (c >> 8);
  }
  return ~c;
}

uint8_t dtype_elem_size(uint8_t code) {
  switch (code) {
    case static_cast<uint8_t>(DType::kInt8):
    case static_cast<uint8_t>(DType::kUInt8):
    case static_cast<uint8_t>(DType::kBool):
      return 1;
    case static_cast<uint8_t>(DType::kInt16):
    case static_cast<uint8_t>(DType::kUInt16):
      return 2;
    case static_cast<uint8_t>(DType::kInt32):
      return 4;
    default:
      return 0;
  }
}

const char* dtype_name(uint8_t code) {
  switch (code) {
    case static_cast<uint8_t>(DType::kInt8):
      return "int8";
    case static_cast<uint8_t>(DType::kUInt8):
      return "uint8";
    case static_cast<uint8_t>(DType::kInt16):
      return "int16";
    case static_cast<uint8_t>(DType::kUInt16):
      return "uint16";
    case static_cast<uint8_t>(DType::kInt32):
      return "int32";
    case static_cast<uint8_t>(DType::kBool):
      return "bool";
    default:
      return "unknown";
  }
}

const char* blob_rule_id(BlobRule rule) {
  switch (rule) {
    case BlobRule::kOk:
      return "ok";
    case BlobRule::kNullBuffer:
      return "null_buffer";
    case BlobRule::kBaseAlign:
      return "base_align";
    case BlobRule::kTruncated:
      return "truncated";
    case BlobRule::kMagic:
      return "magic";
    case BlobRule::kVersion:
      return "version";
    case BlobRule::kHeaderChecksum:
      return "header_checksum";
    case BlobRule::kHeaderSizeMismatch:
      return "header_size";
    case BlobRule::kIoEntrySizeMismatch:
      return "io_entry_size";
    case BlobRule::kTotalSize:
      return "total_size";
    case BlobRule::kTotalSizeAlign:
      return "total_size_align";
    case BlobRule::kFlags:
      return "flags";
    case BlobRule::kHeaderReserved:
      return "header_reserved";
    case BlobRule::kIoTableOffsetMismatch:
      return "io_table_offset";
    case BlobRule::kIoTableRange:
      return "io_table_range";
    case BlobRule::kIoTableChecksum:
      return "io_table_checksum";
    case BlobRule::kSectionTableAlign:
      return "section_table_align";
    case BlobRule::kSectionTableOrder:
      return "section_table_order";
    case BlobRule::kSectionTableRange:
      return "section_table_range";
    case BlobRule::kSectionTableChecksum:
      return "section_table_checksum";
    case BlobRule::kDType:
      return "dtype";
    case BlobRule::kRank:
      return "rank";
    case BlobRule::kElemSize:
      return "elem_size";
    case BlobRule::kDimOrder:
      return "dim_order";
    case BlobRule::kZeroDim:
      return "zero_dim";
    case BlobRule::kByteSize:
      return "byte_size";
    case BlobRule::kRegion:
      return "region";
    case BlobRule::kScratchRange:
      return "scratch_range";
    case BlobRule::kScale:
      return "scale";
    case BlobRule::kZeroPoint:
      return "zero_point";
    case BlobRule::kIoUnused:
      return "io_unused";
    case BlobRule::kIoReserved:
      return "io_reserved";
    case BlobRule::kSectionKind:
      return "section_kind";
    case BlobRule::kSectionDuplicate:
      return "section_duplicate";
    case BlobRule::kSectionAlign:
      return "section_align";
    case BlobRule::kSectionRange:
      return "section_range";
    case BlobRule::kSectionOrder:
      return "section_order";
    case BlobRule::kSectionChecksum:
      return "section_checksum";
    case BlobRule::kSectionMissing:
      return "section_missing";
    case BlobRule::kTosaFlag:
      return "tosa_flag";
  }
  return "unknown";
}

Error blob_rule_error(BlobRule rule) {
  switch (rule) {
    case BlobRule::kOk:
      return Error::Ok;
    case BlobRule::kNullBuffer:
    case BlobRule::kBaseAlign:
      return Error::InvalidArgument;
    case BlobRule::kVersion:
      return Error::DelegateInvalidCompatibility;
    default:
      return Error::InvalidProgram;
  }
}

Result<Blob> Blob::parse(const void* data, size_t size, BlobRule* violated) {
  Blob b;
  const BlobRule rule = validate(static_cast<const uint8_t*>(data), size, &b);
  if (violated != nullptr) {
    *violated = rule;
  }
  if (rule != BlobRule::kOk) {
    return blob_rule_error(rule);
  }
  return b;
}

// The rules of docs/blob-format.md in the doc's order; fills *out on success.
BlobRule Blob::validate(const uint8_t* p, size_t size, Blob* out) {
  if (p == nullptr) {
    ET_LOG(Error, "ethosu_ng blob: null buffer");
    return BlobRule::kNullBuffer;
  }
  // In-place use needs an aligned base: every section offset is 16-aligned
  // relative to it, and the NPU reads the command stream/weights directly.
  if (reinterpret_cast<uintptr_t>(p) % kBlobAlign != 0) {
    ET_LOG(
        Error,
        "ethosu_ng blob: base address %p is not %u-byte aligned; load the "
        ".pte at an aligned address (delegate segment alignment >= 16)",
        static_cast<const void*>(p),
        kBlobAlign);
    return BlobRule::kBaseAlign;
  }
  if (size < kHeaderSize) {
    ET_LOG(
        Error,
        "ethosu_ng blob: truncated: %lu bytes, header needs %u",
        static_cast<unsigned long>(size),
        kHeaderSize);
    return BlobRule::kTruncated;
  }
  if (std::memcmp(p, "EUNG", 4) != 0) {
    ET_LOG(
        Error,
        "ethosu_ng blob: bad magic %02x %02x %02x %02x, expected 'EUNG'",
        p[0],
        p[1],
        p[2],
        p[3]);
    return BlobRule::kMagic;
  }
  const unsigned version = ld16(p + 4);
  if (version != kBlobVersion) {
    ET_LOG(
        Error,
        "ethosu_ng blob: blob format version %u, this runtime reads version %u: "
        "rebuild the .pte with a matching ethosu_ng",
        version,
        kBlobVersion);
    return BlobRule::kVersion;
  }
  // Before any other header field is believed: a flipped bit in a size or an
  // offset must read as corruption, not as a malformed blob.
  if (!crc_matches("header", p, kHeaderCrcOffset, ld32(p + kHeaderCrcOffset))) {
    return BlobRule::kHeaderChecksum;
  }
  const unsigned header_size = ld16(p + 6);
  const unsigned total = ld32(p + 8);
  const unsigned n_in = ld16(p + 12);
  const unsigned n_out = ld16(p + 14);
  const unsigned io_off = ld32(p + 16);
  const unsigned io_entry_size = ld16(p + 20);
  const unsigned n_sec = ld16(p + 22);
  const unsigned sec_off = ld32(p + 24);
  const unsigned scratch = ld32(p + 28);
  const unsigned fast_scratch = ld32(p + 32);
  const unsigned flags = ld32(p + 36);

  if (header_size != kHeaderSize) {
    ET_LOG(
        Error,
        "ethosu_ng blob: header size %u, expected %u",
        header_size,
        kHeaderSize);
    return BlobRule::kHeaderSizeMismatch;
  }
  if (io_entry_size != kIoEntrySize) {
    ET_LOG(
        Error,
        "ethosu_ng blob: IO entry size %u, expected %u",
        io_entry_size,
        kIoEntrySize);
    return BlobRule::kIoEntrySizeMismatch;
  }
  if (total != size) {
    ET_LOG(
        Error,
        "ethosu_ng blob: total_size field says %u bytes, buffer has %lu",
        total,
        static_cast<unsigned long>(size));
    return BlobRule::kTotalSize;
  }
  if (total % kBlobAlign != 0) {
    ET_LOG(
        Error,
        "ethosu_ng blob: total_size %u is not a multiple of %u",
        total,
        kBlobAlign);
    return BlobRule::kTotalSizeAlign;
  }
  if ((flags & ~kFlagHasTosa) != 0) {
    ET_LOG(
        Error,
        "ethosu_ng blob: unknown flag bits 0x%x",
        flags & ~kFlagHasTosa);
    return BlobRule::kFlags;
  }
  if (!all_zero(p + kHeaderReservedOffset, kHeaderCrcOffset - kHeaderReservedOffset)) {
    ET_LOG(Error, "ethosu_ng blob: reserved header bytes are not zero");
    return BlobRule::kHeaderReserved;
  }
  if (io_off != kIoTableOffset) {
    ET_LOG(
        Error,
        "ethosu_ng blob: IO table offset %u, expected %u",
        io_off,
        kIoTableOffset);
    return BlobRule::kIoTableOffsetMismatch;
  }
  const uint64_t n_io = uint64_t{n_in} + n_out;
  const uint64_t io_end = io_off + n_io * kIoEntrySize;
  if (!in_range(io_off, n_io * kIoEntrySize, total)) {
    ET_LOG(
        Error,
        "ethosu_ng blob: IO table [%u, %llu) outside the %u-byte blob",
        io_off,
        static_cast<unsigned long long>(io_end),
        total);
    return BlobRule::kIoTableRange;
  }
  if (!crc_matches(
          "io_table",
          p + io_off,
          static_cast<size_t>(n_io * kIoEntrySize),
          ld32(p + kIoTableCrcOffset))) {
    return BlobRule::kIoTableChecksum;
  }
  if (sec_off % kBlobAlign != 0) {
    ET_LOG(
        Error,
        "ethosu_ng blob: section table offset %u is not %u-byte aligned",
        sec_off,
        kBlobAlign);
    return BlobRule::kSectionTableAlign;
  }
  if (sec_off < io_end) {
    ET_LOG(
        Error,
        "ethosu_ng blob: section table at %u overlaps the IO table (ends at "
        "%llu)",
        sec_off,
        static_cast<unsigned long long>(io_end));
    return BlobRule::kSectionTableOrder;
  }
  const uint64_t sec_bytes = uint64_t{n_sec} * kSectionEntrySize;
  if (!in_range(sec_off, sec_bytes, total)) {
    ET_LOG(
        Error,
        "ethosu_ng blob: section table [%u, %llu) outside the %u-byte blob",
        sec_off,
        static_cast<unsigned long long>(sec_off + sec_bytes),
        total);
    return BlobRule::kSectionTableRange;
  }
  if (!crc_matches(
          "section_table",
          p + sec_off,
          static_cast<size_t>(sec_bytes),
          ld32(p + kSectionTableCrcOffset))) {
    return BlobRule::kSectionTableChecksum;
  }

  for (uint64_t k = 0; k < n_io; ++k) {
    const BlobRule r =
        check_entry(p + io_off + k * kIoEntrySize, io_name(k, n_in), scratch);
    if (r != BlobRule::kOk) {
      return r;
    }
  }

  Section* slots[4] = {
      nullptr, &out->command_stream_, &out->weights_, &out->tosa_};
  // Sections follow the section table and each other without overlap.
  uint64_t cursor = sec_off + sec_bytes;
  for (unsigned k = 0; k < n_sec; ++k) {
    const uint8_t* s = p + sec_off + k * kSectionEntrySize;
    const unsigned kind = ld32(s);
    const unsigned off = ld32(s + 4);
    const unsigned len = ld32(s + 8);
    const uint32_t stored_crc = ld32(s + kSectionCrcOffset);
    if (kind < kSectionCommandStream || kind > kSectionTosa) {
      ET_LOG(Error, "ethosu_ng blob: section %u: unknown kind %u", k, kind);
      return BlobRule::kSectionKind;
    }
    if (slots[kind]->present()) {
      ET_LOG(
          Error,
          "ethosu_ng blob: section %u: duplicate %s section",
          k,
          section_name(kind));
      return BlobRule::kSectionDuplicate;
    }
    if (off % kBlobAlign != 0) {
      ET_LOG(
          Error,
          "ethosu_ng blob: section %u (%s): offset %u not %u-byte aligned",
          k,
          section_name(kind),
          off,
          kBlobAlign);
      return BlobRule::kSectionAlign;
    }
    if (!in_range(off, len, total)) {
      ET_LOG(
          Error,
          "ethosu_ng blob: section %u (%s): bytes [%u, %llu) outside the "
          "%u-byte blob",
          k,
          section_name(kind),
          off,
          static_cast<unsigned long long>(uint64_t{off} + len),
          total);
      return BlobRule::kSectionRange;
    }
    if (off < cursor) {
      ET_LOG(
          Error,
          "ethosu_ng blob: section %u (%s) at %u overlaps the section table "
          "or the section before it (which end at %llu)",
          k,
          section_name(kind),
          off,
          static_cast<unsigned long long>(cursor));
      return BlobRule::kSectionOrder;
    }
    cursor = uint64_t{off} + len;
    if (!crc_matches(section_name(kind), p + off, len, stored_crc)) {
      return BlobRule::kSectionChecksum;
    }
    slots[kind]->data = p + off;
    slots[kind]->size = len;
  }
  if (!out->command_stream_.present() || !out->weights_.present()) {
    ET_LOG(
        Error,
        "ethosu_ng blob: missing %s section",
        out->command_stream_.present() ? "weights" : "command_stream");
    return BlobRule::kSectionMissing;
  }
  if (((flags & kFlagHasTosa) != 0) != out->tosa_.present()) {
    ET_LOG(
        Error,
        "ethosu_ng blob: TOSA flag (%u) and TOSA section (%s) disagree",
        flags & kFlagHasTosa,
        out->tosa_.present() ? "present" : "absent");
    return BlobRule::kTosaFlag;
  }

  out->base_ = p;
  out->size_ = size;
  out->num_inputs_ = static_cast<uint16_t>(n_in);
  out->num_outputs_ = static_cast<uint16_t>(n_out);
  out->io_table_offset_ = io_off;
  out->scratch_size_ = scratch;
  out->fast_scratch_size_ = fast_scratch;
  return BlobRule::kOk;
}

IoEntry Blob::entry(size_t k) const {
  if (base_ == nullptr || k >= size_t{num_inputs_} + num_outputs_) {
    IoEntry zero;
    std::memset(&zero, 0, sizeof(zero));
    return zero;
  }
  return decode_entry(base_ + io_table_offset_ + k * kIoEntrySize);
}

IoEntry Blob::input(size_t i) const {
  return i < num_inputs_ ? entry(i) : entry(SIZE_MAX);
}

IoEntry Blob::output(size_t i) const {
  return i < num_outputs_ ? entry(size_t{num_inputs_} + i) : entry(SIZE_MAX);
}

} // namespace ethosu_ng
