// SPDX-License-Identifier: BSD-3-Clause
#include <ethosu_ng/layout_copy.h>

#include <cstdint>
#include <cstdio>
#include <cstring>

#include <executorch/runtime/platform/log.h>

namespace ethosu_ng {
namespace {

struct Dim {
  int64_t size;
  int64_t dst; // stride in elements
  int64_t src;
};

#if defined(__GNUC__)
#define ETHOSU_NG_RESTRICT __restrict__
#else
#define ETHOSU_NG_RESTRICT
#endif

// Planar -> interleaved (NCHW -> NHWC with N channels): N source planes
// `plane` elements apart become `count` groups of N. N is a compile-time
// constant so compilers with shuffles (SSSE3/AVX2, NEON, MVE for N = 2, 4)
// vectorize the group store; hand-written SWAR was measured slower than that
// and no faster than this loop on baseline x86-64, so it is kept plain.
template <typename T, int N>
void interleave(T* ETHOSU_NG_RESTRICT d, const T* ETHOSU_NG_RESTRICT s, int64_t plane, int64_t count) {
  const T* p[N];
  for (int c = 0; c < N; ++c) {
    p[c] = s + c * plane;
  }
  for (int64_t i = 0; i < count; ++i) {
    for (int c = 0; c < N; ++c) {
      d[i * N + c] = p[c][i];
    }
  }
}

// Interleaved -> planar (NHWC -> NCHW with N channels).
template <typename T, int N>
void deinterleave(T* ETHOSU_NG_RESTRICT d, int64_t plane, const T* ETHOSU_NG_RESTRICT s, int64_t count) {
  T* p[N];
  for (int c = 0; c < N; ++c) {
    p[c] = d + c * plane;
  }
  for (int64_t i = 0; i < count; ++i) {
    for (int c = 0; c < N; ++c) {
      p[c][i] = s[i * N + c];
    }
  }
}

// d[i * d_row + j] = s[i + j * s_col]: a 2-D transpose. Full 8x8 tiles go
// through a register-sized buffer with constant bounds (contiguous 8-element
// reads and writes, which compilers turn into wide moves/shuffles); measured
// ~2x faster than a plain tiled loop on x86-64. Edges are done element-wise.
template <typename T>
void transpose(T* ETHOSU_NG_RESTRICT d, int64_t d_row, const T* ETHOSU_NG_RESTRICT s,
               int64_t s_col, int64_t rows, int64_t cols) {
  constexpr int kTile = 8;
  const int64_t rows_full = rows - rows % kTile;
  const int64_t cols_full = cols - cols % kTile;
  for (int64_t i0 = 0; i0 < rows_full; i0 += kTile) {
    for (int64_t j0 = 0; j0 < cols_full; j0 += kTile) {
      T tile[kTile][kTile];
      for (int j = 0; j < kTile; ++j) {
        const T* src = s + i0 + (j0 + j) * s_col;
        for (int i = 0; i < kTile; ++i) {
          tile[i][j] = src[i];
        }
      }
      for (int i = 0; i < kTile; ++i) {
        std::memcpy(d + (i0 + i) * d_row + j0, tile[i], sizeof(tile[i]));
      }
    }
    for (int64_t i = i0; i < i0 + kTile; ++i) {
      for (int64_t j = cols_full; j < cols; ++j) {
        d[i * d_row + j] = s[i + j * s_col];
      }
    }
  }
  for (int64_t i = rows_full; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) {
      d[i * d_row + j] = s[i + j * s_col];
    }
  }
}

// Innermost two dims as tight loops, element type fixed so the compiler can
// vectorize/unroll. `outer`/`inner` are the last two (coalesced) dims, sorted
// by destination stride, so writes run along `inner`.
template <typename T>
void copy_2d(T* d, const T* s, const Dim& outer, const Dim& inner) {
  const int64_t n = inner.size;
  const int64_t ds = inner.dst;
  const int64_t ss = inner.src;
  if (ds == 1 && ss == 1) {
    for (int64_t i = 0; i < outer.size; ++i) {
      std::memcpy(d + i * outer.dst, s + i * outer.src, n * sizeof(T));
    }
    return;
  }
  if (ds == 1 && outer.src == 1) {
    // A transpose of the two dims: image layout changes land here.
    if (outer.dst == n && n >= 2 && n <= 4) {
      switch (n) {
        case 2:
          return interleave<T, 2>(d, s, ss, outer.size);
        case 3:
          return interleave<T, 3>(d, s, ss, outer.size);
        default:
          return interleave<T, 4>(d, s, ss, outer.size);
      }
    }
    if (ss == outer.size && ss >= 2 && ss <= 4) {
      switch (ss) {
        case 2:
          return deinterleave<T, 2>(d, outer.dst, s, n);
        case 3:
          return deinterleave<T, 3>(d, outer.dst, s, n);
        default:
          return deinterleave<T, 4>(d, outer.dst, s, n);
      }
    }
    return transpose(d, outer.dst, s, ss, outer.size, n);
  }
  // Small fixed extents (channel counts of images: 2, 3, 4) are unrolled;
  // a generic loop of 3 iterations per pixel costs more than the copy.
  switch (n) {
    case 2:
      for (int64_t i = 0; i < outer.size; ++i) {
        T* dd = d + i * outer.dst;
        const T* ssrc = s + i * outer.src;
        dd[0] = ssrc[0];
        dd[ds] = ssrc[ss];
      }
      return;
    case 3:
      for (int64_t i = 0; i < outer.size; ++i) {
        T* dd = d + i * outer.dst;
        const T* ssrc = s + i * outer.src;
        dd[0] = ssrc[0];
        dd[ds] = ssrc[ss];
        dd[2 * ds] = ssrc[2 * ss];
      }
      return;
    case 4:
      for (int64_t i = 0; i < outer.size; ++i) {
        T* dd = d + i * outer.dst;
        const T* ssrc = s + i * outer.src;
        dd[0] = ssrc[0];
        dd[ds] = ssrc[ss];
        dd[2 * ds] = ssrc[2 * ss];
        dd[3 * ds] = ssrc[3 * ss];
      }
      return;
    default:
      break;
  }
  if (ds == 1) {
    for (int64_t i = 0; i < outer.size; ++i) {
      T* dd = d + i * outer.dst;
      const T* ssrc = s + i * outer.src;
      for (int64_t j = 0; j < n; ++j) {
        dd[j] = ssrc[j * ss];
      }
    }
  } else {
    for (int64_t i = 0; i < outer.size; ++i) {
      T* dd = d + i * outer.dst;
      const T* ssrc = s + i * outer.src;
      for (int64_t j = 0; j < n; ++j) {
        dd[j * ds] = ssrc[j * ss];
      }
    }
  }
}

// An N-byte element with alignment 1, for buffers not aligned to their element
// size (the blob format does not require an IO tensor's scratch offset to be a
// multiple of its element size): typed uint16_t/uint32_t access there is UB
// and can fault on the device.
template <size_t N>
struct Unaligned {
  uint8_t b[N];
};

template <typename T>
void copy_nd(T* dst, const T* src, const Dim* dims, int n) {
  // dims[0] outermost. n >= 2 here (callers pad with a size-1 dim).
  const Dim& outer = dims[n - 2];
  const Dim& inner = dims[n - 1];
  const int n_loop = n - 2;
  int64_t idx[kLayoutMaxRank] = {};
  int64_t d_off = 0;
  int64_t s_off = 0;
  for (;;) {
    copy_2d<T>(dst + d_off, src + s_off, outer, inner);
    // Odometer over the remaining outer dims, innermost first.
    int k = n_loop - 1;
    for (; k >= 0; --k) {
      if (++idx[k] < dims[k].size) {
        d_off += dims[k].dst;
        s_off += dims[k].src;
        break;
      }
      d_off -= (dims[k].size - 1) * dims[k].dst;
      s_off -= (dims[k].size - 1) * dims[k].src;
      idx[k] = 0;
    }
    if (k < 0) {
      return;
    }
  }
}

} // namespace

bool dense_strides(
    int rank,
    const int64_t* sizes,
    const uint8_t* dim_order,
    int64_t* strides) {
  if (rank < 0 || rank > kLayoutMaxRank) {
    return false;
  }
  bool seen[kLayoutMaxRank] = {};
  for (int i = 0; i < rank; ++i) {
    if (dim_order[i] >= rank || seen[dim_order[i]]) {
      return false;
    }
    seen[dim_order[i]] = true;
  }
  // With a zero-size dim there is nothing to stride over, and the other dims
  // may be huge (an IO entry [0, 97792, 32865, 44639, ...] is valid): their
  // product would overflow int64, so it is not formed.
  bool empty = false;
  for (int i = 0; i < rank; ++i) {
    empty = empty || sizes[i] == 0;
  }
  int64_t stride = 1;
  for (int i = rank - 1; i >= 0; --i) {
    const int d = dim_order[i];
    strides[d] = stride;
    if (!empty) {
      stride *= sizes[d] > 0 ? sizes[d] : 1;
    }
  }
  return true;
}

Error strided_copy(
    void* dst,
    const int64_t* dst_strides,
    const void* src,
    const int64_t* src_strides,
    const int64_t* sizes,
    int rank,
    size_t elem_size) {
  if (rank < 0 || rank > kLayoutMaxRank) {
    ET_LOG(Error, "ethosu_ng layout copy: rank %d outside 0..6", rank);
    return Error::InvalidArgument;
  }
  if (elem_size != 1 && elem_size != 2 && elem_size != 4) {
    ET_LOG(
        Error,
        "ethosu_ng layout copy: element size %lu not 1, 2 or 4",
        static_cast<unsigned long>(elem_size));
    return Error::InvalidArgument;
  }
  // Gather the non-trivial dims; a size-1 dim's stride never matters.
  Dim dims[kLayoutMaxRank + 1];
  int n = 0;
  for (int i = 0; i < rank; ++i) {
    if (sizes[i] < 0 || dst_strides[i] < 0 || src_strides[i] < 0) {
      ET_LOG(
          Error,
          "ethosu_ng layout copy: dim %d has size %lld, strides dst %lld "
          "src %lld (negative not supported)",
          i,
          static_cast<long long>(sizes[i]),
          static_cast<long long>(dst_strides[i]),
          static_cast<long long>(src_strides[i]));
      return Error::InvalidArgument;
    }
    if (sizes[i] == 0) {
      return Error::Ok; // no elements
    }
    if (sizes[i] != 1) {
      dims[n++] = Dim{sizes[i], dst_strides[i], src_strides[i]};
    }
  }
  if (dst == nullptr || src == nullptr) {
    ET_LOG(Error, "ethosu_ng layout copy: null buffer");
    return Error::InvalidArgument;
  }
  // Destination memory order: largest dst stride outermost. Insertion sort
  // (stable, at most 6 dims).
  for (int i = 1; i < n; ++i) {
    const Dim key = dims[i];
    int j = i - 1;
    while (j >= 0 && dims[j].dst < key.dst) {
      dims[j + 1] = dims[j];
      --j;
    }
    dims[j + 1] = key;
  }
  // Coalesce neighbours that are contiguous with each other in both buffers:
  // equal dense layouts end as one dim, NCHW->NHWC as (HW, C).
  int m = 0;
  for (int i = 0; i < n; ++i) {
    if (m > 0) {
      Dim& o = dims[m - 1];
      const Dim& in = dims[i];
      if (o.dst == in.dst * in.size && o.src == in.src * in.size) {
        o.size *= in.size;
        o.dst = in.dst;
        o.src = in.src;
        continue;
      }
    }
    dims[m++] = dims[i];
  }
  n = m;
  if (n == 0 || (n == 1 && dims[0].dst == 1 && dims[0].src == 1)) {
    // Same dense layout (or a single element).
    const size_t count = n == 0 ? 1 : static_cast<size_t>(dims[0].size);
    std::memcpy(dst, src, count * elem_size);
    return Error::Ok;
  }
  if (n == 1) {
    dims[1] = dims[0];
    dims[0] = Dim{1, 0, 0};
    n = 2;
  }
  const bool aligned =
      ((reinterpret_cast<uintptr_t>(dst) | reinterpret_cast<uintptr_t>(src)) %
       elem_size) == 0;
  if (!aligned) {
    if (elem_size == 2) {
      copy_nd(
          static_cast<Unaligned<2>*>(dst),
          static_cast<const Unaligned<2>*>(src),
          dims,
          n);
    } else {
      copy_nd(
          static_cast<Unaligned<4>*>(dst),
          static_cast<const Unaligned<4>*>(src),
          dims,
          n);
    }
    return Error::Ok;
  }
  switch (elem_size) {
    case 1:
      copy_nd(
          static_cast<uint8_t*>(dst),
          static_cast<const uint8_t*>(src),
          dims,
          n);
      break;
    case 2:
      copy_nd(
          static_cast<uint16_t*>(dst),
          static_cast<const uint16_t*>(src),
          dims,
          n);
      break;
    default:
      copy_nd(
          static_cast<uint32_t*>(dst),
          static_cast<const uint32_t*>(src),
          dims,
          n);
      break;
  }
  return Error::Ok;
}

Error copy_to_dim_order(
    void* dst,
    const uint8_t* dst_dim_order,
    const void* src,
    const int64_t* src_strides,
    const int64_t* sizes,
    int rank,
    size_t elem_size) {
  int64_t dst_strides[kLayoutMaxRank];
  if (!dense_strides(rank, sizes, dst_dim_order, dst_strides)) {
    ET_LOG(
        Error,
        "ethosu_ng layout copy: destination dim order is not a permutation "
        "of rank %d",
        rank);
    return Error::InvalidArgument;
  }
  return strided_copy(
      dst, dst_strides, src, src_strides, sizes, rank, elem_size);
}

Error copy_from_dim_order(
    void* dst,
    const int64_t* dst_strides,
    const void* src,
    const uint8_t* src_dim_order,
    const int64_t* sizes,
    int rank,
    size_t elem_size) {
  int64_t src_strides[kLayoutMaxRank];
  if (!dense_strides(rank, sizes, src_dim_order, src_strides)) {
    ET_LOG(
        Error,
        "ethosu_ng layout copy: source dim order is not a permutation of "
        "rank %d",
        rank);
    return Error::InvalidArgument;
  }
  return strided_copy(
      dst, dst_strides, src, src_strides, sizes, rank, elem_size);
}

const char* layout_name(char* buf, size_t cap, const uint8_t* dim_order, int rank) {
  static const uint8_t kNchw[4] = {0, 1, 2, 3};
  static const uint8_t kNhwc[4] = {0, 2, 3, 1};
  if (cap == 0) {
    return buf;
  }
  if (rank < 0 || rank > kLayoutMaxRank) {
    std::snprintf(buf, cap, "not a dim order (rank %d)", rank);
    return buf;
  }
  if (rank == 4 && std::memcmp(dim_order, kNchw, 4) == 0) {
    std::snprintf(buf, cap, "nchw");
    return buf;
  }
  if (rank == 4 && std::memcmp(dim_order, kNhwc, 4) == 0) {
    std::snprintf(buf, cap, "nhwc");
    return buf;
  }
  int n = std::snprintf(buf, cap, "dim order ");
  size_t pos = n > 0 ? static_cast<size_t>(n) : 0;
  for (int i = 0; i < rank && pos < cap; ++i) {
    n = std::snprintf(buf + pos, cap - pos, i == 0 ? "%u" : ",%u", static_cast<unsigned>(dim_order[i]));
    pos += n > 0 ? static_cast<size_t>(n) : 0;
  }
  return buf;
}

bool strides_follow(
    int rank,
    const int64_t* sizes,
    const int64_t* strides,
    const uint8_t* dim_order) {
  if (rank < 0 || rank > kLayoutMaxRank) {
    return false;
  }
  bool seen[kLayoutMaxRank] = {};
  bool empty = false;
  for (int i = 0; i < rank; ++i) {
    if (dim_order[i] >= rank || seen[dim_order[i]] || sizes[i] < 0 || strides[i] < 0) {
      return false;
    }
    seen[dim_order[i]] = true;
    empty = empty || sizes[i] == 0;
  }
  if (empty) {
    return true;
  }
  int64_t inner = 1; // elements spanned by the dims inside this one
  for (int i = rank - 1; i >= 0; --i) {
    const int d = dim_order[i];
    if (sizes[d] == 1) {
      continue;
    }
    if (strides[d] < inner || strides[d] > INT64_MAX / sizes[d]) {
      return false;
    }
    inner = strides[d] * sizes[d];
  }
  return true;
}

Error check_dim_order(
    const char* kind,
    size_t index,
    const uint8_t* want,
    int want_rank,
    const uint8_t* got,
    int got_rank) {
  if (want_rank == got_rank && want_rank >= 0 && want_rank <= kLayoutMaxRank &&
      std::memcmp(want, got, static_cast<size_t>(want_rank)) == 0) {
    return Error::Ok;
  }
  char want_s[40];
  char got_s[40];
  ET_LOG(
      Error,
      "ethosu_ng: %s %lu: laid out %s, the program takes %s",
      kind,
      static_cast<unsigned long>(index),
      layout_name(got_s, sizeof(got_s), got, got_rank),
      layout_name(want_s, sizeof(want_s), want, want_rank));
  return Error::InvalidArgument;
}

} // namespace ethosu_ng
