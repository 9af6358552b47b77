# SPDX-License-Identifier: BSD-3-Clause
"""The NPU model's Ethos-U85 2D/3D DMA (runtime/ethosu_ng/npu_model/dma.cpp) against a numpy
reference of the register semantics regor's GenerateDMA emits by: SIZE1 planes (3D) of SIZE0
rows of LEN bytes, row r of plane p read at SRC + p*SRC_STRIDE1 + r*SRC_STRIDE0 and written at
DST + p*DST_STRIDE1 + r*DST_STRIDE0, planes outer, rows inner."""

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


@pytest.mark.parametrize("mode", [0, 1, 2])
def test_indexed_dma_is_refused_in_every_stride_mode(mode):
    """regor's scatter/gather (index_put, gather) set idx_mode (bit 11) beside a 2D/3D stride
    mode; the model does not implement indexing, so it must refuse rather than copy rows."""
    for offset in (3, 0):  # DMA0_DST_REGION, DMA0_SRC_REGION
        cmds = strided_dma(mode, 1, 0, 0, 4, 2, 2, 4, 8, 4, 8)
        cmds[offset] |= (1 << 11) << 16
        msg = _error(cmds)
        assert "indexed (gather/scatter) DMA not modelled" in msg and "command 11" in msg, msg


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
