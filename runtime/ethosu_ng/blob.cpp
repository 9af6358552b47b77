#include <ethosu_ng/blob.h>

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

Error check_entry(const IoEntry& e, IoName n, unsigned scratch_size) {
  const uint8_t want_elem = dtype_elem_size(e.dtype);
  if (want_elem == 0) {
    ET_LOG(
        Error,
        "ethosu_ng blob: %s %u: unknown dtype code %u (expected 1..5)",
        n.kind,
        n.index,
        e.dtype);
    return Error::InvalidProgram;
  }
  if (e.rank > kMaxRank) {
    ET_LOG(
        Error,
        "ethosu_ng blob: %s %u: rank %u > %d",
        n.kind,
        n.index,
        e.rank,
        kMaxRank);
    return Error::InvalidProgram;
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
    return Error::InvalidProgram;
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
      return Error::InvalidProgram;
    }
    seen[d] = true;
  }
  // numel * elem_size must equal the u32 byte_size; stop multiplying as soon
  // as the product passes 2^32 so a hostile shape cannot overflow.
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
    return Error::InvalidProgram;
  }
  if (e.region == kRegionScratch &&
      !in_range(e.offset, e.byte_size, scratch_size)) {
    ET_LOG(
        Error,
        "ethosu_ng blob: %s %u: bytes [%u, %llu) outside scratch of %u bytes",
        n.kind,
        n.index,
        static_cast<unsigned>(e.offset),
        static_cast<unsigned long long>(uint64_t{e.offset} + e.byte_size),
        scratch_size);
    return Error::InvalidProgram;
  }
  return Error::Ok;
}

} // namespace

uint8_t dtype_elem_size(uint8_t code) {
  switch (code) {
    case static_cast<uint8_t>(DType::kInt8):
    case static_cast<uint8_t>(DType::kUInt8):
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
    default:
      return "unknown";
  }
}

Result<Blob> Blob::parse(const void* data, size_t size) {
  const uint8_t* p = static_cast<const uint8_t*>(data);
  if (p == nullptr) {
    ET_LOG(Error, "ethosu_ng blob: null buffer");
    return Error::InvalidArgument;
  }
  // In-place use needs an aligned base: every section offset is 16-aligned
  // relative to it, and the NPU reads the command stream/weights directly.
  if (reinterpret_cast<uintptr_t>(p) % kBlobAlign != 0) {
    ET_LOG(
        Error,
        "ethosu_ng blob: base address %p is not %u-byte aligned; load the "
        ".pte at an aligned address (delegate segment alignment >= 16)",
        data,
        kBlobAlign);
    return Error::InvalidProgram;
  }
  if (size < kHeaderSize) {
    ET_LOG(
        Error,
        "ethosu_ng blob: truncated: %zu bytes, header needs %u",
        size,
        kHeaderSize);
    return Error::InvalidProgram;
  }
  if (std::memcmp(p, "EUNG", 4) != 0) {
    ET_LOG(
        Error,
        "ethosu_ng blob: bad magic %02x %02x %02x %02x, expected 'EUNG'",
        p[0],
        p[1],
        p[2],
        p[3]);
    return Error::InvalidProgram;
  }
  const unsigned version = ld16(p + 4);
  if (version != kBlobVersion) {
    ET_LOG(
        Error,
        "ethosu_ng blob: unsupported version %u, this runtime reads %u",
        version,
        kBlobVersion);
    return Error::DelegateInvalidCompatibility;
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

  if (header_size != kHeaderSize || io_entry_size != kIoEntrySize) {
    ET_LOG(
        Error,
        "ethosu_ng blob: header/IO entry size %u/%u, expected %u/%u",
        header_size,
        io_entry_size,
        kHeaderSize,
        kIoEntrySize);
    return Error::InvalidProgram;
  }
  if (total != size) {
    ET_LOG(
        Error,
        "ethosu_ng blob: total_size field says %u bytes, buffer has %zu",
        total,
        size);
    return Error::InvalidProgram;
  }
  if (io_off % kBlobAlign != 0 || sec_off % kBlobAlign != 0) {
    ET_LOG(
        Error,
        "ethosu_ng blob: table offsets io=%u section=%u not %u-byte aligned",
        io_off,
        sec_off,
        kBlobAlign);
    return Error::InvalidProgram;
  }
  const uint64_t n_io = uint64_t{n_in} + n_out;
  if (!in_range(io_off, n_io * kIoEntrySize, total)) {
    ET_LOG(
        Error,
        "ethosu_ng blob: IO table [%u, +%llu) outside the %u-byte blob",
        io_off,
        static_cast<unsigned long long>(n_io * kIoEntrySize),
        total);
    return Error::InvalidProgram;
  }
  if (!in_range(sec_off, uint64_t{n_sec} * kSectionEntrySize, total)) {
    ET_LOG(
        Error,
        "ethosu_ng blob: section table [%u, +%llu) outside the %u-byte blob",
        sec_off,
        static_cast<unsigned long long>(uint64_t{n_sec} * kSectionEntrySize),
        total);
    return Error::InvalidProgram;
  }

  for (uint64_t k = 0; k < n_io; ++k) {
    const IoEntry e = decode_entry(p + io_off + k * kIoEntrySize);
    const Error err = check_entry(e, io_name(k, n_in), scratch);
    if (err != Error::Ok) {
      return err;
    }
  }

  Blob b;
  Section* slots[4] = {nullptr, &b.command_stream_, &b.weights_, &b.tosa_};
  for (unsigned k = 0; k < n_sec; ++k) {
    const uint8_t* s = p + sec_off + k * kSectionEntrySize;
    const unsigned kind = ld32(s);
    const unsigned off = ld32(s + 4);
    const unsigned len = ld32(s + 8);
    if (kind < kSectionCommandStream || kind > kSectionTosa) {
      ET_LOG(Error, "ethosu_ng blob: section %u: unknown kind %u", k, kind);
      return Error::InvalidProgram;
    }
    if (slots[kind]->present()) {
      ET_LOG(
          Error,
          "ethosu_ng blob: section %u: duplicate %s section",
          k,
          section_name(kind));
      return Error::InvalidProgram;
    }
    if (off % kBlobAlign != 0) {
      ET_LOG(
          Error,
          "ethosu_ng blob: section %u (%s): offset %u not %u-byte aligned",
          k,
          section_name(kind),
          off,
          kBlobAlign);
      return Error::InvalidProgram;
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
      return Error::InvalidProgram;
    }
    slots[kind]->data = p + off;
    slots[kind]->size = len;
  }
  if (!b.command_stream_.present() || !b.weights_.present()) {
    ET_LOG(
        Error,
        "ethosu_ng blob: missing %s section",
        b.command_stream_.present() ? "weights" : "command_stream");
    return Error::InvalidProgram;
  }
  if (((flags & kFlagHasTosa) != 0) != b.tosa_.present()) {
    ET_LOG(
        Error,
        "ethosu_ng blob: TOSA flag (%u) and TOSA section (%s) disagree",
        flags & kFlagHasTosa,
        b.tosa_.present() ? "present" : "absent");
    return Error::InvalidProgram;
  }

  b.base_ = p;
  b.size_ = size;
  b.num_inputs_ = n_in;
  b.num_outputs_ = n_out;
  b.io_table_offset_ = io_off;
  b.scratch_size_ = scratch;
  b.fast_scratch_size_ = fast_scratch;
  return b;
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
