// SPDX-License-Identifier: BSD-3-Clause
// N-D tensor copy between two memory layouts of the same logical shape.
//
// The delegate boundary needs this twice per tensor: an ExecuTorch tensor
// (sizes, dim order, strides; possibly padded) is copied into the NPU's dense
// buffer whose memory order is the blob entry's dim_order, and back for
// outputs. Layouts that agree collapse to one memcpy; otherwise the copy walks
// the destination in memory order so writes are sequential, with contiguous
// source runs done by memcpy.
//
// No allocation, no exceptions; rank 0..6, element size 1, 2 or 4.
#pragma once

#include <cstddef>
#include <cstdint>

#include <executorch/runtime/core/error.h>

namespace ethosu_ng {

using executorch::runtime::Error;

constexpr int kLayoutMaxRank = 6;

// Strides (in elements) of a dense buffer of `sizes` stored in `dim_order`
// (dim_order[0] outermost). Returns false, leaving `strides` unspecified, if
// rank is out of range or dim_order is not a permutation of [0, rank).
bool dense_strides(
    int rank,
    const int64_t* sizes,
    const uint8_t* dim_order,
    int64_t* strides);

// Copies every element of the logical tensor `sizes` from `src` (strides
// `src_strides`, in elements) to `dst` (strides `dst_strides`). Strides must be
// non-negative; the buffers must not overlap. Returns InvalidArgument (and
// logs) for rank > 6, a negative size or stride, or an element size other than
// 1, 2 or 4. A tensor with zero elements copies nothing.
Error strided_copy(
    void* dst,
    const int64_t* dst_strides,
    const void* src,
    const int64_t* src_strides,
    const int64_t* sizes,
    int rank,
    size_t elem_size);

// src (any strides) -> dst dense in dst_dim_order.
Error copy_to_dim_order(
    void* dst,
    const uint8_t* dst_dim_order,
    const void* src,
    const int64_t* src_strides,
    const int64_t* sizes,
    int rank,
    size_t elem_size);

// src dense in src_dim_order -> dst (any strides).
Error copy_from_dim_order(
    void* dst,
    const int64_t* dst_strides,
    const void* src,
    const uint8_t* src_dim_order,
    const int64_t* sizes,
    int rank,
    size_t elem_size);

// The layout of a dim order, into buf: "nchw" or "nhwc" for those rank-4
// orders, otherwise the order itself ("dim order 1,0"); "not a dim order" for
// a rank out of range (truncated, always terminated).
const char* layout_name(char* buf, size_t cap, const uint8_t* dim_order, int rank);

// Do `strides` (in elements) lay a tensor of `sizes` out in the order
// `dim_order` says (dim_order[0] outermost), each dim's elements clear of the
// dims inside it (padding allowed)? `dim_order` must be a permutation of
// [0, rank); size-1 dims may have any stride (they address nothing), and a
// tensor with a zero-size dim holds nothing to misplace.
bool strides_follow(
    int rank,
    const int64_t* sizes,
    const int64_t* strides,
    const uint8_t* dim_order);

// Ok when `got` is the dim order `want`; otherwise logs one line naming
// `<kind> <index>`, the layout it has and the one it must have, and returns
// InvalidArgument. `kind` is e.g. "input".
Error check_dim_order(
    const char* kind,
    size_t index,
    const uint8_t* want,
    int want_rank,
    const uint8_t* got,
    int got_rank);

} // namespace ethosu_ng
