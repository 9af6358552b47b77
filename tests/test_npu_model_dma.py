# SPDX-License-Identifier: BSD-3-Clause
"""The NPU model's DMA (runtime/ethosu_ng/npu_model/dma.cpp) against numpy references of the
register semantics regor emits by.

Ethos-U85 (EthosU85RCSGenerator::GenerateDMA): SIZE1 planes (3D) of SIZE0 rows of LEN bytes, row
r of plane p read at SRC + p*SRC_STRIDE1 + r*SRC_STRIDE0 and written at DST + p*DST_STRIDE1 +
r*DST_STRIDE0, planes outer, rows inner; with idx_mode on one side (gather: source, scatter:
destination) that side's r is the int32 index at IDX + (p*SIZE0 + r)*4 + p*IDX_SKIP1, in
0..IDX_MAX. Ethos-U65 (EthosU65RCSGenerator::GenerateDMA): 2D/3D writes from a contiguous
source, rows LEN + SKIP0 apart, planes SIZE0*LEN + SKIP1 apart.
"""

from __future__ import annotations

import struct
from typing import List

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from npu_payload import (
    DMA_DST,
    DMA_DST_REGION,
    DMA_LEN,
    DMA_SRC,
    DMA_SRC_REGION,
    OP_DMA_START,
    build_payload,
    cmd0,
    cmd1,
    cmd_stream,
)
from test_npu_model_registers import _seed

from ethosu_ng import runtime as rt

DMA_SIZE0, DMA_SIZE1 = 0x132, 0x133
SRC_STRIDE0, SRC_STRIDE1, DST_STRIDE0, DST_STRIDE1 = 0x033, 0x034, 0x035, 0x036
OP_STOP = 0x000
U85_256_CONFIG = (2 << 28) | 8  # optimizer config: product 2 (Ethos-U85), log2 MACs/cc 8
WEIGHTS = 256
SCRATCH = 512


def u85_payload(cmds: List[int]) -> bytes:
    """build_payload's stream under an Ethos-U85-256 optimizer config."""
    payload = bytearray(build_payload(cmds))
    payload[8:12] = struct.pack("<I", U85_256_CONFIG)
    return bytes(payload)


def strided_dma(mode, src_region, src, dst, length, size0, size1, s0, s1, d0, d1) -> List[int]:
    """A DMA_START in stride mode ``mode`` (0 1D, 1 2D, 2 3D) from region ``src_region`` to
    region 1, then STOP."""
    return [
        cmd0(DMA_SRC_REGION, src_region | (mode << 9)),
        *cmd1(DMA_SRC, src),
        cmd0(DMA_DST_REGION, 1),
        *cmd1(DMA_DST, dst),
        *cmd1(DMA_LEN, length),
        cmd0(DMA_SIZE0, size0),
        cmd0(DMA_SIZE1, size1),
        *cmd1(SRC_STRIDE0, s0, s0 >> 32),
        *cmd1(SRC_STRIDE1, s1, s1 >> 32),
        *cmd1(DST_STRIDE0, d0, d0 >> 32),
        *cmd1(DST_STRIDE1, d1, d1 >> 32),
        cmd0(OP_DMA_START),
        cmd0(OP_STOP, 0xFFFF),
    ]


def reference(mode, src_mem, dst_mem, src, dst, length, size0, size1, s0, s1, d0, d1):
    """numpy of the documented semantics; ``dst_mem`` updated in place (it may be src_mem)."""
    rows = 1 if mode == 0 else size0
    planes = size1 if mode == 2 else 1
    if mode == 0:
        s0 = d0 = 0
    if mode != 2:
        s1 = d1 = 0
    for p in range(planes):
        for r in range(rows):
            a, b = src + p * s1 + r * s0, dst + p * d1 + r * d0
            dst_mem[b : b + length] = src_mem[a : a + length].copy()


@st.composite
def dmas(draw):
    """In-bounds DMAs: sizes first, then strides and addresses that keep every row inside."""
    mode = draw(st.sampled_from([0, 1, 2]))
    from_weights = draw(st.booleans())
    src_size = WEIGHTS if from_weights else SCRATCH
    length = draw(st.integers(0, 24))
    size0 = draw(st.integers(1, 6))
    size1 = draw(st.integers(1, 5))
    rows = size0 if mode else 1
    planes = size1 if mode == 2 else 1

    def layout(size):
        s0 = draw(st.integers(0, 40))
        s1 = draw(st.integers(0, 120))
        extent = (planes - 1) * s1 * (mode == 2) + (rows - 1) * s0 * (mode > 0) + length
        start = draw(st.integers(0, size - extent)) if extent <= size else None
        return s0, s1, start

    s0, s1, src = layout(src_size)
    d0, d1, dst = layout(SCRATCH)
    if src is None or dst is None:
        mode, s0, s1, d0, d1, src, dst = 0, 0, 0, 0, 0, 0, 0
    return (mode, 0 if from_weights else 1, src, dst, length, size0, size1, s0, s1, d0, d1)


@settings(max_examples=120, deadline=None)
@given(dmas(), st.integers(0, 2**32 - 1))
def test_strided_dma_matches_reference(dma, seed):
    mode, src_region, src, dst, length, size0, size1, s0, s1, d0, d1 = dma
    rng = np.random.default_rng(seed)
    weights = rng.integers(0, 256, WEIGHTS, dtype=np.uint8)
    scratch = rng.integers(0, 256, SCRATCH, dtype=np.uint8)
    args = (length, size0, size1, s0, s1, d0, d1)
    out = bytearray(scratch.tobytes())
    rt.npu_model_run(
        u85_payload(strided_dma(mode, src_region, src, dst, *args)), weights.tobytes(), out
    )
    expect = scratch.copy()
    reference(mode, weights if src_region == 0 else expect, expect, src, dst, *args)
    assert np.array_equal(np.frombuffer(bytes(out), np.uint8), expect)


def _error(cmds) -> str:
    with pytest.raises(rt.NpuModelError) as info:
        rt.npu_model_run(u85_payload(cmds), bytes(WEIGHTS), bytearray(SCRATCH))
    return str(info.value)


# (stride mode, src region, src, dst, len, size0, size1, s0, s1, d0, d1, culprit in the message)
OUT_OF_BOUNDS = [
    # Last source row (2 * 100 + 16 bytes past 48) leaves the 256-byte weights region.
    (1, 0, 48, 0, 16, 3, 1, 100, 0, 16, 0, "source"),
    # Last destination plane starts at 3 * 150 = 450 and its rows run past 512.
    (2, 1, 0, 0, 8, 4, 4, 0, 0, 20, 150, "destination"),
    # A stride near 2^40 (a 40-bit register) with the largest SIZE0.
    (1, 1, 0, 0, 1, 0xFFFF, 1, (1 << 40) - 1, 0, 1, 0, "source"),
    # SIZE1 is ignored in 2D mode but not in 3D: a huge plane stride.
    (2, 1, 0, 0, 4, 1, 2, 0, (1 << 39), 0, 0, "source"),
]


@pytest.mark.parametrize(
    "case", OUT_OF_BOUNDS, ids=[c[-1] + str(i) for i, c in enumerate(OUT_OF_BOUNDS)]
)
def test_strided_dma_outside_region_is_an_error_naming_the_command(case):
    *regs, culprit = case
    msg = _error(strided_dma(*regs))
    assert "command 11" in msg and "NPU_OP_DMA_START" in msg, msg
    assert f"{regs[0] + 1}D DMA {culprit}" in msg and "outside region" in msg, msg


def test_strided_dma_work_is_bounded():
    """Rows may overlap (stride 0), so the bytes moved are bounded apart from the region."""
    msg = _error(strided_dma(2, 1, 0, 0, 512, 0xFFFF, 0xFFFF, 0, 0, 0, 0))
    assert "command 11" in msg and "exceeds the model's limit" in msg, msg


def test_strided_dma_reserved_fields_are_errors():
    msg = _error(strided_dma(3, 1, 0, 0, 4, 1, 1, 0, 0, 0, 0))
    assert "stride mode 3 is reserved" in msg and "command 11" in msg, msg
    msg = _error(strided_dma(1, 1, 0, 0, 4, 0, 1, 0, 0, 0, 0))
    assert "DMA0_SIZE0 0" in msg, msg
    cmds = strided_dma(0, 1, 0, 0, 4, 1, 1, 0, 0, 0, 0)
    cmds[3] = cmd0(DMA_DST_REGION, 1 | (1 << 9))
    assert "DMA0_DST_REGION 0x0201: bits 9..10 are reserved" in _error(cmds)


DMA_SKIP0, DMA_SKIP1 = 0x033, 0x034  # Ethos-U55/U65 cmd1 numbers (U85: SRC_STRIDE0/1)
U65_256_CONFIG = (1 << 28) | (48 << 8) | 8  # product 1 (Ethos-U65), 48 KiB SHRAM, 256 MACs/cc


def u65_payload(cmds: List[int]) -> bytes:
    """build_payload's stream under an Ethos-U65-256 optimizer config."""
    payload = bytearray(build_payload(cmds))
    payload[8:12] = struct.pack("<I", U65_256_CONFIG)
    return bytes(payload)


def u65_dma(mode, src_region, src, dst, length, size0, size1, skip0, skip1) -> List[int]:
    """An Ethos-U65 DMA_START writing region 1 in stride mode ``mode`` (DMA0_DST_REGION bits
    9..10) from a contiguous source, then STOP."""
    return [
        cmd0(DMA_SRC_REGION, src_region),
        *cmd1(DMA_SRC, src),
        cmd0(DMA_DST_REGION, 1 | (mode << 9)),
        *cmd1(DMA_DST, dst),
        *cmd1(DMA_LEN, length),
        cmd0(DMA_SIZE0, size0),
        cmd0(DMA_SIZE1, size1),
        *cmd1(DMA_SKIP0, skip0, skip0 >> 32),
        *cmd1(DMA_SKIP1, skip1, skip1 >> 32),
        cmd0(OP_DMA_START),
        cmd0(OP_STOP, 0xFFFF),
    ]


def u65_reference(mode, src_mem, dst_mem, src, dst, length, size0, size1, skip0, skip1):
    """numpy of regor's Ethos-U65 DMA writes (EthosU65RCSGenerator::GenerateDMA: SKIP0 = row
    stride - LEN, SKIP1 = plane stride - SIZE0 * LEN): row r of plane p read at
    SRC + (p * SIZE0 + r) * LEN, written at DST + p * (SIZE0 * LEN + SKIP1) + r * (LEN + SKIP0),
    each row before the next (overlapping copies included)."""
    rows = 1 if mode == 0 else size0
    planes = size1 if mode == 2 else 1
    for p in range(planes):
        for r in range(rows):
            a = src + (p * rows + r) * length
            b = dst + p * (rows * length + skip1) + r * (length + skip0)
            dst_mem[b : b + length] = src_mem[a : a + length].copy()


@st.composite
def u65_dmas(draw):
    """In-bounds Ethos-U65 DMA writes in every stride mode (3D with SKIP0 0, as regor writes)."""
    mode = draw(st.sampled_from([0, 1, 2]))
    from_weights = draw(st.booleans())
    length = draw(st.integers(0, 16))
    size0 = draw(st.integers(1, 6))
    size1 = draw(st.integers(1, 5))
    rows = size0 if mode else 1
    planes = size1 if mode == 2 else 1
    skip0 = draw(st.integers(0, 24)) if mode == 1 else 0
    skip1 = draw(st.integers(0, 60)) if mode == 2 else 0
    src_extent = rows * planes * length
    dst_extent = (planes - 1) * (rows * length + skip1) + (rows - 1) * (length + skip0) + length
    src_size = WEIGHTS if from_weights else SCRATCH
    if src_extent > src_size or dst_extent > SCRATCH:
        mode, length, size0, size1, skip0, skip1, src_extent, dst_extent = 0, 4, 1, 1, 0, 0, 4, 4
    src = draw(st.integers(0, src_size - src_extent))
    dst = draw(st.integers(0, SCRATCH - dst_extent))
    return (mode, 0 if from_weights else 1, src, dst, length, size0, size1, skip0, skip1)


@settings(max_examples=100, deadline=None)
@given(u65_dmas(), st.integers(0, 2**32 - 1))
def test_u65_strided_dma_matches_reference(dma, seed):
    mode, src_region, src, dst, *args = dma
    rng = np.random.default_rng(seed)
    weights = rng.integers(0, 256, WEIGHTS, dtype=np.uint8)
    scratch = rng.integers(0, 256, SCRATCH, dtype=np.uint8)
    out = bytearray(scratch.tobytes())
    rt.npu_model_run(
        u65_payload(u65_dma(mode, src_region, src, dst, *args)), weights.tobytes(), out
    )
    expect = scratch.copy()
    u65_reference(mode, weights if src_region == 0 else expect, expect, src, dst, *args)
    assert np.array_equal(np.frombuffer(bytes(out), np.uint8), expect)


def _u65_error(cmds, payload=u65_payload) -> str:
    with pytest.raises(rt.NpuModelError) as info:
        rt.npu_model_run(payload(cmds), bytes(WEIGHTS), bytearray(SCRATCH))
    return str(info.value)


# (mode, src region, src, dst, len, size0, size1, skip0, skip1, culprit in the message)
U65_OUT_OF_BOUNDS = [
    # 5 rows of 16 bytes with 90-byte skips from 100: the last row ends at 100 + 4 * 106 + 16.
    (1, 1, 0, 100, 16, 5, 1, 90, 0, "2D DMA destination"),
    # The contiguous source: 3 planes x 4 rows x 32 bytes = 384 bytes of the 256-byte weights.
    (2, 0, 0, 0, 32, 4, 3, 0, 0, "3D DMA source"),
    # A 40-bit plane skip.
    (2, 1, 0, 0, 1, 1, 2, 0, (1 << 40) - 1, "3D DMA destination"),
]


@pytest.mark.parametrize("case", U65_OUT_OF_BOUNDS, ids=[c[-1] for c in U65_OUT_OF_BOUNDS])
def test_u65_strided_dma_outside_region_is_an_error_naming_the_command(case):
    *regs, culprit = case
    msg = _u65_error(u65_dma(*regs))
    assert "command 9" in msg and "NPU_OP_DMA_START" in msg, msg
    assert culprit in msg and "outside region" in msg, msg


def test_u65_strided_dma_refusals():
    """What regor's Ethos-U65 DMA does not pin down is refused, not guessed: strided reads, 3D
    writes with row skips, Ethos-U55 stride modes; stride mode 3 is reserved."""
    cmds = u65_dma(1, 1, 0, 0, 4, 2, 1, 0, 0)
    cmds[0] = cmd0(DMA_SRC_REGION, 1 | (1 << 9))
    assert "2D DMA reads not modelled" in _u65_error(cmds)
    msg = _u65_error(u65_dma(2, 1, 0, 0, 4, 2, 2, 4, 0))
    assert "3D DMA with DMA0_SKIP0 4: the plane step beside row skips not modelled" in msg, msg
    msg = _u65_error(u65_dma(1, 1, 0, 0, 4, 2, 1, 0, 0), build_payload)
    assert "Ethos-U55 2D/3D DMA not modelled" in msg, msg
    cmds = u65_dma(1, 1, 0, 0, 4, 2, 1, 0, 0)
    cmds[0] = cmd0(DMA_SRC_REGION, 1 | (1 << 8))
    assert "reads from internal memory" in _u65_error(cmds)
    msg = _u65_error(u65_dma(3, 1, 0, 0, 4, 2, 1, 0, 0))
    assert "stride mode 3 is reserved" in msg and "command 9" in msg, msg
    msg = _u65_error(u65_dma(1, 1, 0, 0, 4, 0, 1, 0, 0))
    assert "DMA0_SIZE0 0" in msg, msg
    msg = _u65_error(u65_dma(1, 1, 0, 0, 1 << 20, 0xFFFF, 1, 0, 0))
    assert "exceeds the model's limit" in msg, msg


DMA_IDX_REGION, DMA_IDX, DMA_IDX_MAX, DMA_IDX_SKIP1 = 0x134, 0x037, 0x038, 0x039
IDX_MEMORY = 256  # region 2 (fast scratch) holds the indices, apart from what the DMA writes


def indexed_dma(
    mode,
    scatter,
    src,
    dst,
    length,
    size0,
    size1,
    s0,
    s1,
    d0,
    d1,
    idx_max,
    skip1,
    idx_region=2,
    idx=0,
) -> List[int]:
    """A gather (source indexed) or scatter (destination indexed) from region 1 to region 1
    in stride mode ``mode``, with indices at ``idx`` in ``idx_region``, then STOP."""
    cmds = strided_dma(mode, 1, src, dst, length, size0, size1, s0, s1, d0, d1)
    side = 3 if scatter else 0  # DMA0_DST_REGION / DMA0_SRC_REGION
    cmds[side] |= (1 << 11) << 16
    return [
        *cmds[:-2],
        cmd0(DMA_IDX_REGION, idx_region),
        *cmd1(DMA_IDX_MAX, idx_max),
        *cmd1(DMA_IDX, idx),
        *cmd1(DMA_IDX_SKIP1, skip1),
        *cmds[-2:],
    ]


def indexed_reference(
    mode, scatter, mem, indices, src, dst, length, size0, size1, s0, s1, d0, d1, idx_max, skip1
):
    """numpy of the documented semantics on ``mem`` (region 1) in place: the indexed side's
    row r of plane p is the int32 at byte (p * SIZE0 + r) * 4 + p * IDX_SKIP1 of ``indices``."""
    rows = 1 if mode == 0 else size0
    planes = size1 if mode == 2 else 1
    if mode != 2:
        s1 = d1 = 0
    for p in range(planes):
        for r in range(rows):
            at = (p * rows + r) * 4 + p * skip1
            i = int(np.frombuffer(indices[at : at + 4].tobytes(), "<i4")[0])
            assert 0 <= i <= idx_max
            a = src + p * s1 + (r if scatter else i) * s0
            b = dst + p * d1 + (i if scatter else r) * d0
            mem[b : b + length] = mem[a : a + length].copy()


@st.composite
def indexed_dmas(draw):
    """In-bounds gathers and scatters, indices (repeats likely) within 0..IDX_MAX, and random
    bytes in the IDX_SKIP1 gaps (an index read from a gap would be out of range)."""
    mode = draw(st.sampled_from([0, 1, 2]))
    scatter = draw(st.booleans())
    length = draw(st.integers(1, 12))
    size0 = draw(st.integers(1, 5))
    size1 = draw(st.integers(1, 4))
    rows = size0 if mode else 1
    planes = size1 if mode == 2 else 1
    idx_max = draw(st.integers(0, 6))
    skip1 = draw(st.integers(0, 3)) * 4 if mode == 2 else draw(st.integers(0, 8))
    if planes * rows * 4 + (planes - 1) * skip1 > IDX_MEMORY:
        skip1 = 0

    def layout(indexed):
        s0 = draw(st.integers(0, 24))
        s1 = draw(st.integers(0, 80)) if mode == 2 else 0
        last_row = idx_max if indexed else rows - 1
        extent = (planes - 1) * s1 + last_row * s0 + length
        start = draw(st.integers(0, SCRATCH - extent)) if extent <= SCRATCH else None
        return s0, s1, start

    s0, s1, src = layout(not scatter)
    d0, d1, dst = layout(scatter)
    if src is None or dst is None:
        mode, size0, size1, s0, s1, d0, d1, src, dst, length = 0, 1, 1, 0, 0, 0, 0, 0, 0, 1
        planes = rows = 1
    values = draw(st.lists(st.integers(0, idx_max), min_size=planes * rows, max_size=planes * rows))
    return (mode, scatter, src, dst, length, size0, size1, s0, s1, d0, d1, idx_max, skip1), values


def _index_memory(values, rows, skip1, rng) -> np.ndarray:
    """IDX_MEMORY random bytes with ``values`` (int32, plane after plane of ``rows``) at 0."""
    mem = rng.integers(0, 256, IDX_MEMORY, dtype=np.uint8)
    for k, v in enumerate(values):
        p, r = divmod(k, rows)
        at = (p * rows + r) * 4 + p * skip1
        mem[at : at + 4] = np.frombuffer(struct.pack("<i", v), np.uint8)
    return mem


@settings(max_examples=120, deadline=None)
@given(indexed_dmas(), st.integers(0, 2**32 - 1))
def test_indexed_dma_matches_reference(dma, seed):
    regs, values = dma
    mode, scatter, size0, skip1 = regs[0], regs[1], regs[5], regs[12]
    rng = np.random.default_rng(seed)
    scratch = rng.integers(0, 256, SCRATCH, dtype=np.uint8)
    indices = _index_memory(values, size0 if mode else 1, skip1, rng)
    out = bytearray(scratch.tobytes())
    rt.npu_model_run(
        u85_payload(indexed_dma(*regs)), bytes(WEIGHTS), out, bytearray(indices.tobytes())
    )
    expect = scratch.copy()
    indexed_reference(mode, scatter, expect, indices, *regs[2:])
    assert np.array_equal(np.frombuffer(bytes(out), np.uint8), expect)


def test_scatter_with_repeated_indices_writes_in_order():
    """index_put without accumulate on repeated indices: the last row written wins."""
    scratch = bytearray(range(64))
    indices = struct.pack("<3i", 1, 1, 1) + bytes(IDX_MEMORY - 12)
    # Rows 0..2 of 4 bytes at 32 scattered into rows of 4 bytes at 0: all to row 1.
    regs = (1, True, 32, 0, 4, 3, 1, 4, 0, 4, 0, 3, 0)
    rt.npu_model_run(u85_payload(indexed_dma(*regs)), bytes(WEIGHTS), scratch, bytearray(indices))
    assert bytes(scratch[4:8]) == bytes([40, 41, 42, 43]), list(scratch[:16])
    assert bytes(scratch[0:4]) == bytes([0, 1, 2, 3]) and bytes(scratch[8:12]) == bytes(
        range(8, 12)
    )


def _indexed_error(regs, indices: bytes) -> str:
    with pytest.raises(rt.NpuModelError) as info:
        rt.npu_model_run(
            u85_payload(indexed_dma(*regs)),
            bytes(WEIGHTS),
            bytearray(SCRATCH),
            bytearray(indices + bytes(IDX_MEMORY - len(indices))),
        )
    return str(info.value)


@pytest.mark.parametrize("scatter", [False, True])
@pytest.mark.parametrize("bad", [4, -1, 2**31 - 1])
def test_indexed_dma_index_out_of_range_is_an_error_naming_it(scatter, bad):
    """The third index (plane 0, row 2) is past IDX_MAX 3 or negative: an error naming the
    command and the index, and nothing of the bad row is copied."""
    regs = (1, scatter, 0, 64, 4, 4, 1, 4, 0, 4, 0, 3, 0)
    msg = _indexed_error(regs, struct.pack("<4i", 0, 3, bad, 1))
    assert "command 15" in msg and "NPU_OP_DMA_START" in msg, msg
    assert f"index {bad} (plane 0, row 2" in msg and "outside 0..DMA0_IDX_MAX 3" in msg, msg


# (regs, culprit in the message)
INDEXED_OUT_OF_BOUNDS = [
    # A gather's source spans rows 0..IDX_MAX: IDX_MAX 200 of 4-byte rows leaves the 512 bytes.
    ((1, False, 0, 0, 4, 2, 1, 4, 0, 4, 0, 200, 0), "indexed DMA source"),
    # A scatter's destination likewise, with a stride near 2^40.
    ((0, True, 0, 0, 4, 1, 1, 4, 0, (1 << 40) - 1, 0, 1, 0), "indexed DMA destination"),
    # The indices (4 planes of 5 int32 with a 64-byte skip) run past the 256-byte region 2.
    ((2, False, 0, 0, 1, 5, 4, 1, 1, 1, 8, 0, 64), "indexed DMA indices"),
    # A huge IDX_SKIP1 (40-bit) between planes.
    ((2, True, 0, 0, 1, 1, 2, 1, 1, 1, 1, 0, (1 << 40) - 4), "indexed DMA indices"),
]


@pytest.mark.parametrize(
    "case", INDEXED_OUT_OF_BOUNDS, ids=[str(i) for i in range(len(INDEXED_OUT_OF_BOUNDS))]
)
def test_indexed_dma_outside_region_is_an_error_naming_the_command(case):
    regs, culprit = case
    msg = _indexed_error(regs, b"")
    assert "command 15" in msg and culprit in msg and "outside region" in msg, msg


def test_indexed_dma_reserved_fields_are_errors():
    regs = (1, False, 0, 0, 4, 2, 1, 4, 0, 4, 0, 3, 0)
    cmds = indexed_dma(*regs)
    cmds[3] |= (1 << 11) << 16  # DMA0_DST_REGION idx_mode beside the source's
    with pytest.raises(rt.NpuModelError, match="idx_mode .bit 11. set on both sides"):
        rt.npu_model_run(u85_payload(cmds), bytes(WEIGHTS), bytearray(SCRATCH), bytearray(256))
    msg = _indexed_error((*regs[:11], 1 << 31, 0), b"")
    assert "DMA0_IDX_MAX 0x80000000: bit 31 is reserved" in msg, msg
    cmds = indexed_dma(*regs, idx_region=5)
    with pytest.raises(rt.NpuModelError, match="indexed DMA indices.*region 5 is not provided"):
        rt.npu_model_run(u85_payload(cmds), bytes(WEIGHTS), bytearray(SCRATCH), bytearray(256))


@pytest.mark.parametrize("mode", [1, 2])
def test_strided_dma_rows_reach_the_hazard_check(mode):
    """A 2D/3D DMA whose first row (byte 3071) no kernel touches but whose second row (byte
    3072) the first kernel of a real Ethos-U85 stream reads, started without a DMA_WAIT, is a
    hazard naming both commands: every row of the DMA is recorded, not only the first."""
    payload, weights, scratch_size, _ = _seed("conv_wide_ethos-u85-256_0.bin")
    start, words = cmd_stream(payload)
    head = list(struct.unpack(f"<{start}I", payload[: 4 * start]))

    def run_after(dma: List[int]) -> None:
        """The stream with ``dma`` (its STOP dropped) in front."""
        cmds = dma[:-1] + words
        n = len(cmds)
        tag = head[-1] & 0xFF | ((n >> 16) & 0xFF) << 8 | (n & 0xFFFF) << 16
        stream = struct.pack(f"<{start + n}I", *head[:-1], tag, *cmds)
        rt.npu_model_run(stream, weights, bytearray(scratch_size))

    args = (2, 1, 0, 0, 1, 0) if mode == 1 else (1, 2, 0, 0, 0, 1)
    with pytest.raises(rt.NpuModelError) as info:
        run_after(strided_dma(mode, 0, 0, 3071, 1, *args))
    msg = str(info.value)
    assert "hazard: it reads bytes [0xc00, 0xc01) of region 1" in msg, msg
    assert "command 11 (NPU_OP_DMA_START), still in flight" in msg, msg
    # The first row alone is no hazard: the stream is otherwise clean.
    run_after(strided_dma(0, 0, 0, 3071, 1, 1, 1, 0, 0, 0, 0))
