// ethosu_ng delegate blob, format v1: in-place, bounds-checked view.
//
// The layout is specified in docs/blob-format.md (authoritative) and written by
// ethosu_ng/blob.py. Blob::parse validates everything the format lists once, at
// init time; afterwards every accessor reads only ranges parse() has proven to
// lie inside the buffer, so execute() never re-checks offsets.
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

// Dtype codes in the IO table. Keep in sync with ethosu_ng/tensor_spec.py.
enum class DType : uint8_t {
  kInt8 = 1,
  kUInt8 = 2,
  kInt16 = 3,
  kUInt16 = 4,
  kInt32 = 5,
};

constexpr int kMaxRank = 6;
// unsigned (not uint32_t): printed with %u, and uint32_t is unsigned long on
// arm-none-eabi.
constexpr unsigned kBlobAlign = 16;
constexpr unsigned kBlobVersion = 1;
constexpr unsigned kHeaderSize = 64;
constexpr unsigned kIoEntrySize = 64;
constexpr unsigned kSectionEntrySize = 16;
constexpr unsigned kFlagHasTosa = 1u;
constexpr uint8_t kRegionScratch = 1;

enum SectionKind : uint32_t {
  kSectionCommandStream = 1,
  kSectionWeights = 2,
  kSectionTosa = 3,
};

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

  // Validates `size` bytes at `data` against every rule of blob v1 and returns
  // a view on success. On failure: an Error (InvalidProgram for a malformed
  // blob, DelegateInvalidCompatibility for a version or size-field mismatch)
  // and one ET_LOG(Error) line naming the defect.
  static Result<Blob> parse(const void* data, size_t size);

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
