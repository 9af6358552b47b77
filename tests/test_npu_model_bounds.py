# SPDX-License-Identifier: BSD-3-Clause
"""Bounded work and memory in the NPU model (docs/npu-model.md, "Bounded work").

Before the model allocates or writes anything for a kernel it checks every size the stream
announces against the regions and lengths the stream declares: each OFM/IFM tile inside its
region, no more elements than four tiles of the region hold, and a weight stream that decodes to
exactly the weights the kernel reads. A stream announcing a huge feature map or kernel with a
few-byte weight stream and a small scratch is an error naming the command, not an allocation,
and leaves scratch as it was.
"""

from __future__ import annotations

import re
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from npu_payload import build_payload, cmd0, cmd1

from ethosu_ng import runtime as rt

OP_CONV, OP_DEPTHWISE, OP_POOL, OP_ELEMENTWISE, OP_STOP = 0x002, 0x003, 0x005, 0x006, 0x000
INVALID_PROGRAM = 0x23  # executorch Error::InvalidProgram
POISON = 0xA5


def _kernel_stream(op: int, h: int, w: int, c: int, ifm_c: int, kernel: int) -> list:
    """One kernel over dense int8 NHWC maps at address 0 of scratch (region 1): OFM h x w x c,
    IFM depth ifm_c, a kernel x kernel window, stride 1, no padding; a 4-byte weight stream and
    a 10-byte scale stream at the start of region 0."""
    ifm_h, ifm_w = h + kernel - 1, w + kernel - 1
    words = [
        cmd0(0x11F, 1),  # OFM_REGION
        *cmd1(0x010, 0),  # OFM_BASE0
        *cmd1(0x014, c),  # OFM_STRIDE_X
        *cmd1(0x015, w * c),  # OFM_STRIDE_Y
        cmd0(0x111, w - 1),  # OFM_WIDTH_M1
        cmd0(0x112, h - 1),  # OFM_HEIGHT_M1
        cmd0(0x113, c - 1),  # OFM_DEPTH_M1
        cmd0(0x11A, w - 1),  # OFM_WIDTH0_M1
        cmd0(0x11B, h - 1),  # OFM_HEIGHT0_M1
        cmd0(0x11C, h - 1),  # OFM_HEIGHT1_M1
        cmd0(0x114, 0x0001),  # OFM_PRECISION: int8
        cmd0(0x10F, 1),  # IFM_REGION
        *cmd1(0x000, 0),  # IFM_BASE0
        *cmd1(0x004, ifm_c),  # IFM_STRIDE_X
        *cmd1(0x005, ifm_w * ifm_c),  # IFM_STRIDE_Y
        cmd0(0x104, ifm_c - 1),  # IFM_DEPTH_M1
        cmd0(0x10A, ifm_w - 1),  # IFM_WIDTH0_M1
        cmd0(0x10B, ifm_h - 1),  # IFM_HEIGHT0_M1
        cmd0(0x10C, ifm_h - 1),  # IFM_HEIGHT1_M1
        cmd0(0x105, 0x0001),  # IFM_PRECISION: int8
        cmd0(0x18F, 1),  # IFM2_REGION
        cmd0(0x185, 0x0001),  # IFM2_PRECISION
        cmd0(0x18A, w - 1),  # IFM2_WIDTH0_M1
        cmd0(0x18B, h - 1),  # IFM2_HEIGHT0_M1
        cmd0(0x18C, h - 1),  # IFM2_HEIGHT1_M1
        *cmd1(0x084, c),  # IFM2_STRIDE_X
        *cmd1(0x085, w * c),  # IFM2_STRIDE_Y
        cmd0(0x120, kernel - 1),  # KERNEL_WIDTH_M1
        cmd0(0x121, kernel - 1),  # KERNEL_HEIGHT_M1
        cmd0(0x117, 15),  # OFM_BLK_DEPTH_M1
        cmd0(0x128, 0),  # WEIGHT_REGION
        *cmd1(0x020, 0),  # WEIGHT_BASE
        *cmd1(0x021, 4),  # WEIGHT_LENGTH
        cmd0(0x129, 0),  # SCALE_REGION
        *cmd1(0x022, 0),  # SCALE_BASE
        *cmd1(0x023, 10),  # SCALE_LENGTH
        *cmd1(0x024, 1),  # OFM_SCALE
        cmd0(op, 1 if op == OP_ELEMENTWISE else 0),  # ELEMENTWISE ADD / POOL MAX
        cmd0(OP_STOP, 0xFFFF),
    ]
    return words


def _run(words: list, scratch_size: int):
    """(error message or "", error code or 0, seconds, scratch left unchanged)."""
    scratch = bytearray([POISON]) * scratch_size
    rt.load_host_runtime()  # built at first use: not part of the time measured
    t0 = time.perf_counter()
    try:
        rt.npu_model_run(build_payload(words), bytes(64), scratch)
        msg, code = "", 0
    except rt.NpuModelError as e:
        msg, code = str(e), e.code
    return msg, code, time.perf_counter() - t0, scratch == bytearray([POISON]) * scratch_size


dims = st.integers(1, 65536)


@settings(max_examples=60, deadline=None)
@given(
    op=st.sampled_from([OP_CONV, OP_DEPTHWISE, OP_POOL, OP_ELEMENTWISE]),
    h=dims,
    w=dims,
    c=dims,
    scratch_size=st.integers(1, 1 << 16),
)
def test_a_feature_map_larger_than_its_region_is_refused_before_any_work(op, h, w, c, scratch_size):
    """An OFM of up to 2^48 elements against a scratch of at most 64 KiB: whenever it does not
    fit, the kernel is refused as an invalid program naming the command and the region, at
    once, with scratch untouched."""
    if h * w * c <= scratch_size:
        return  # fits: not this property's concern
    msg, code, secs, untouched = _run(_kernel_stream(op, h, w, c, c, 1), scratch_size)
    assert code == INVALID_PROGRAM, msg
    assert re.search(r"command \d+ \(NPU_OP_", msg), msg
    assert "region 1" in msg and ("past region" in msg or "four tiles" in msg), msg
    assert untouched, f"scratch written before the error: {msg}"
    assert secs < 1.0, (secs, msg)


@settings(max_examples=30, deadline=None)
@given(
    op=st.sampled_from([OP_CONV, OP_DEPTHWISE]),
    ifm_c=st.integers(1, 65536),
    kernel=st.integers(1, 64),
    c=st.integers(1, 64),
)
def test_a_kernel_larger_than_its_weight_stream_is_refused_before_any_work(op, ifm_c, kernel, c):
    """A 1 x 1 OFM that fits scratch, with a kernel of up to 64 x 64 x 65536 x 64 weights and a
    4-byte weight stream: refused as a weight stream that cannot hold the kernel's weights,
    before the weights or the IFM are allocated, scratch untouched."""
    if op == OP_DEPTHWISE:
        ifm_c = c
    words = _kernel_stream(op, 1, 1, c, ifm_c, kernel)
    msg, code, secs, untouched = _run(words, 1 << 16)
    assert code == INVALID_PROGRAM, msg
    assert "weight stream" in msg and "NPU_OP_" in msg, msg
    assert untouched, msg
    assert secs < 1.0, (secs, msg)


@pytest.mark.parametrize("op", [OP_CONV, OP_POOL, OP_ELEMENTWISE])
def test_the_issue_case_2_pow_34_ofm_elements(op):
    """The issue's case: an OFM of 2^34 elements (65536 x 65536 x 4) and a 4-byte weight stream."""
    msg, code, secs, untouched = _run(_kernel_stream(op, 65536, 65536, 4, 4, 1), 4096)
    assert code == INVALID_PROGRAM and "OFM tile 0" in msg and "past region 1" in msg, msg
    assert untouched and secs < 1.0


# Stride registers (cmd1) of the OFM, IFM and IFM2, x and y; precision registers (cmd0) with
# their int8 and int16 codes (ethos_u55_regs.py's ``ofm_precision`` / ``ifm_precision``).
_STRIDES_XY = (0x014, 0x015, 0x004, 0x005, 0x084, 0x085)
_PRECISION = {0x114: {1: 0x1, 2: 0x3}, 0x105: {1: 0x1, 2: 0x5}, 0x185: {1: 0x1, 2: 0x5}}


def _aliased(words: list, esize: int) -> list:
    """``words`` with every x and y stride zero (each element of a map aliases the first pixel's
    channels) and the maps in signed ``8 * esize``-bit precision."""
    out, i = [], 0
    while i < len(words):
        op = words[i] & 0x3FF
        if (words[i] >> 14) & 3 == 1:  # cmd1: the payload word follows
            out += [words[i], 0 if op in _STRIDES_XY else words[i + 1]]
            i += 2
        else:
            out.append(op | (_PRECISION[op][esize] << 16) if op in _PRECISION else words[i])
            i += 1
    return out


@settings(max_examples=60, deadline=None)
@given(
    op=st.sampled_from([OP_POOL, OP_ELEMENTWISE]),
    esize=st.sampled_from([1, 2]),
    rows=st.integers(1, 9),
    cols=st.integers(1, 9),
    c=st.integers(1, 64),
    spare=st.integers(0, 300),
)
def test_a_map_whose_pixels_alias_runs_up_to_four_times_its_region(op, esize, rows, cols, c, spare):
    """Zero x and y strides put every pixel of an int8 or int16 map on its first pixel's c
    channels, inside a scratch of that size plus ``spare`` bytes: every tile is inside the
    region, so only the element bound stops the work. A map of at most four times the elements
    the region holds runs (tiles may alias each other); one larger is refused naming the bound."""
    size = c * esize + spare
    msg, code, secs, _ = _run(_aliased(_kernel_stream(op, rows, cols, c, c, 1), esize), size)
    if rows * cols * c <= 4 * (size // esize):
        assert code == 0, msg
    else:
        assert code == INVALID_PROGRAM and "more than four tiles of region 1" in msg, msg
    assert secs < 1.0, (secs, msg)
