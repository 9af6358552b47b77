// SPDX-License-Identifier: BSD-3-Clause
// ethosu_ng delegate blob, format v2: in-place, bounds-checked view.
//
// The layout is specified in docs/blob-format.md (authoritative) and written by
// ethosu_ng/blob.py. Blob::parse validates everything the format lists once, at
// init time, the CRC-32 of every part included; afterwards every accessor reads
// only ranges parse() has proven to lie inside the buffer, so execute() never
// re-checks offsets.
//
// Nothing is copied: sections point into the caller's buffer, IO entries are
// decoded field by field (memcpy loads, so no alignment or aliasing UB) when
// asked for. The caller keeps the buffer alive as long as the Blob.
#pragma once

#include <cstddef>
#include <cstdint>

#include <executorch/runtime/core/error.h>
#include <executorch/runtime/core/result.h>

namespace ethosu_ng {

using executorch::runtime::Error;
using executorch::runtime::Result;

// Dtype codes in the IO table. ethosu_ng/blob.py (DTYPE_CODES) owns them;
// runtime/tests/test_blob.cpp checks this copy against the values the test
// vectors carry from blob.py.
enum class DType : uint8_t {
  kInt8 = 1,
  kUInt8 = 2,
  kInt16 = 3,
  kUInt16 = 4,
  kInt32 = 5,
  kBool = 6, // one byte per element, 0 or 1
};

constexpr int kMaxRank = 6;
// unsigned (not uint32_t): printed with %u, and uint32_t is unsigned long on
// arm-none-eabi.
constexpr unsigned kBlobAlign = 16;
constexpr unsigned kBlobVersion = 2;
constexpr unsigned kHeaderSize = 64;
constexpr unsigned kIoEntrySize = 64;
constexpr unsigned kSectionEntrySize = 16;
constexpr unsigned kFlagHasTosa = 1u;
constexpr uint8_t kRegionScratch = 1;
constexpr unsigned kIoTableOffset = kHeaderSize;
// Checksum fields: two in the header for the tables, one closing the header
// (covering bytes [0, kHeaderCrcOffset)), one per section table entry.
constexpr unsigned kIoTableCrcOffset = 40;
constexpr unsigned kSectionTableCrcOffset = 44;
constexpr unsigned kHeaderReservedOffset = 48;
constexpr unsigned kHeaderCrcOffset = 60;
constexpr unsigned kSectionCrcOffset = 12;

// The blob's checksum: CRC-32 as zlib.crc32 computes it (IEEE polynomial,
// reflected, init and final XOR 0xFFFFFFFF). `crc` continues a previous
// result: crc32(b, n2, crc32(a, n1)) is the CRC of a followed by b. Slice-by-4
// over 4 KiB of constant tables; no heap, no state.
uint32_t crc32(const void* data, size_t size, uint32_t crc = 0);

enum SectionKind : uint32_t {
  kSectionCommandStream = 1,
  kSectionWeights = 2,
  kSectionTosa = 3,
};

// The validation rules of docs/blob-format.md, in the order Blob::parse checks
// them (the table there lists the same ids; blob_rule_id() returns them).
enum class BlobRule : uint8_t {
  kOk = 0,
  kNullBuffer, // API misuse, not a format rule
  kBaseAlign,
  kTruncated,
  kMagic,
  kVersion,
  kHeaderChecksum,
  kHeaderSizeMismatch, // enumerator names must not shadow the constants
  kIoEntrySizeMismatch,
  kTotalSize,
  kTotalSizeAlign,
  kFlags,
  kHeaderReserved,
  kIoTableOffsetMismatch,
  kIoTableRange,
  kIoTableChecksum,
  kSectionTableAlign,
  kSectionTableOrder,
  kSectionTableRange,
  kSectionTableChecksum,
  kDType,
  kRank,
  kElemSize,
  kDimOrder,
  kZeroDim,
  kByteSize,
  kRegion,
  kScratchRange,
  kScale,
  kZeroPoint,
  kIoUnused,
  kIoReserved,
  kSectionKind,
  kSectionDuplicate,
  kSectionAlign,
  kSectionRange,
  kSectionOrder,
  kSectionChecksum,
  kSectionMissing,
  kTosaFlag,
};

// The rule's id in docs/blob-format.md ("ok" for kOk).
const char* blob_rule_id(BlobRule rule);
// The Error Blob::parse returns for a broken rule (the doc's table):
// InvalidArgument for the caller's buffer (null, base address),
// DelegateInvalidCompatibility for another format version, InvalidProgram for
// every other defect; Ok for kOk.
Error blob_rule_error(BlobRule rule);

// Bytes per element for a dtype code, 0 for an unknown code.
uint8_t dtype_elem_size(uint8_t code);
const char* dtype_name(uint8_t code);

// One decoded IO table entry (inputs first, then outputs).
struct IoEntry {
  uint8_t dtype; // DType code
  uint8_t rank;
  uint8_t elem_size;
  uint8_t region;
  uint32_t offset; // inside the region
  uint32_t byte_size; // numel * elem_size (validated)
  int32_t zero_point;
  float scale;
  uint32_t shape[kMaxRank]; // logical (NCHW) order
  uint8_t dim_order[kMaxRank]; // NPU buffer memory order

  uint64_t numel() const {
    uint64_t n = 1;
    for (int i = 0; i < rank; ++i) {
      n *= shape[i];
    }
    return n;
  }
};

struct Section {
  const uint8_t* data = nullptr; // nullptr when absent
  uint32_t size = 0;
  bool present() const {
    return data != nullptr;
  }
};

class Blob {
 public:
  Blob() = default;

  // Validates `size` bytes at `data` against every rule of blob v2, in the
  // doc's order, and returns a view on success. On failure:
  // blob_rule_error() of the first broken rule and one ET_LOG(Error) line
  // naming the defect (a checksum: "blob section 'NAME'"); `violated` (if
  // given) receives the rule (kOk on success).
  static Result<Blob> parse(
      const void* data,
      size_t size,
      BlobRule* violated = nullptr);

  uint16_t num_inputs() const {
    return num_inputs_;
  }
  uint16_t num_outputs() const {
    return num_outputs_;
  }
  // Callers index within [0, num_inputs()) / [0, num_outputs()); out of range
  // returns a zeroed entry (rank 0, dtype 0) rather than reading past the table.
  IoEntry input(size_t i) const;
  IoEntry output(size_t i) const;

  const Section& command_stream() const {
    return command_stream_;
  }
  const Section& weights() const {
    return weights_;
  }
  const Section& tosa() const {
    return tosa_;
  }
  uint32_t scratch_size() const {
    return scratch_size_;
  }
  uint32_t fast_scratch_size() const {
    return fast_scratch_size_;
  }
  const uint8_t* data() const {
    return base_;
  }
  size_t size() const {
    return size_;
  }

 private:
  IoEntry entry(size_t k) const;
  static BlobRule validate(const uint8_t* p, size_t size, Blob* out);

  const uint8_t* base_ = nullptr;
  size_t size_ = 0;
  uint16_t num_inputs_ = 0;
  uint16_t num_outputs_ = 0;
  uint32_t io_table_offset_ = 0;
  uint32_t scratch_size_ = 0;
  uint32_t fast_scratch_size_ = 0;
  Section command_stream_;
  Section weights_;
  Section tosa_;
};

} // namespace ethosu_ng
