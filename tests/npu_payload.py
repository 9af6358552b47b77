# SPDX-License-Identifier: BSD-3-Clause
"""Reading Vela driver payloads (``cmd_data``): the command stream, its commands, and the
weight and scale streams its kernels read (tests/test_npu_model.py, bench/zoo_table.py); and
writing small ones from raw command words (the malformed-stream tests)."""

from __future__ import annotations

import struct
from typing import Dict, List, Optional, Tuple


def cmd_stream(payload: bytes) -> Tuple[int, List[int]]:
    """(word offset of the command stream, its words) inside a Vela driver payload."""
    words = list(struct.unpack(f"<{len(payload) // 4}I", payload))
    i = 1
    while i < len(words):
        tag = words[i] & 0xFF
        if tag == 1:
            i += 3
        elif tag == 5:
            i += 1
        elif tag == 2:
            n = (words[i] >> 16) | (((words[i] >> 8) & 0xFF) << 16)
            return i + 1, words[i + 1 : i + 1 + n]
        else:
            raise AssertionError(f"unexpected driver action {words[i]:#x}")
    raise AssertionError("no command stream")


def commands(words: List[int]):
    """Yield (index, word offset, opcode, is_cmd1, param, payload) for each command."""
    i = k = 0
    while i < len(words):
        w = words[i]
        op, param = w & 0x3FF, w >> 16
        if (w >> 14) & 3 == 1:
            yield k, i, op, True, param, words[i + 1]
            i += 2
        else:
            yield k, i, op, False, param, None
            i += 1
        k += 1


WEIGHT_REGION, WEIGHT_BASE, WEIGHT_LENGTH = 0x128, 0x020, 0x021
SCALE_REGION, SCALE_BASE, SCALE_LENGTH = 0x129, 0x022, 0x023
DMA_SRC_REGION, DMA_DST_REGION, DMA_SRC, DMA_DST, DMA_LEN = 0x130, 0x131, 0x030, 0x031, 0x032
OP_CONV, OP_DEPTHWISE, OP_DMA_START = 0x002, 0x003, 0x010


def streams(payload: bytes, weights_len: int, untraced: Optional[list] = None):
    """Weight and scale streams the kernels read, as (kind, offset in region 0, length).

    Streams Vela DMAs into scratch first are traced back to their source in region 0; a stream
    that cannot be traced there is left out (and appended to ``untraced`` as (kind, length)).
    """
    _, words = cmd_stream(payload)
    r0: Dict[int, int] = {}
    r1: Dict[int, int] = {}
    copies = []  # (region, dst address, weights-region address, length) of each DMA, in order
    out = []
    for _, _, op, is1, param, data in commands(words):
        if is1:
            r1[op] = data
        elif op == OP_DMA_START:
            dst_region = r0.get(DMA_DST_REGION, 0) & 0x1FF
            if r0.get(DMA_SRC_REGION, 0) & 0xFF == 0 and dst_region in (1, 2):
                copies.append((dst_region, r1[DMA_DST], r1[DMA_SRC], r1[DMA_LEN]))
        elif op in (OP_CONV, OP_DEPTHWISE):
            for kind, reg, base, length in (
                ("weights", WEIGHT_REGION, WEIGHT_BASE, WEIGHT_LENGTH),
                ("scales", SCALE_REGION, SCALE_BASE, SCALE_LENGTH),
            ):
                addr, n = r1[base], r1[length]
                region = r0[reg] & 7
                if region != 0:
                    # The latest DMA that wrote the whole stream: buffers are reused.
                    addr = next(
                        (
                            src + addr - dst
                            for r, dst, src, ln in reversed(copies)
                            if r == region and dst <= addr and addr + n <= dst + ln
                        ),
                        None,
                    )
                if addr is not None and addr + n <= weights_len:
                    out.append((kind, addr, n))
                elif untraced is not None:
                    untraced.append((kind, n))
        else:
            r0[op] = param
    return out


def build_payload(cmds: List[int], length: Optional[int] = None) -> bytes:
    """A COP1 driver payload around raw command words (U55-128 optimizer config); ``length``
    overrides the command-stream length the header announces."""
    head = [0x31504F43, 0x00000001 | (1 << 20), (0 << 28) | (24 << 8) | 7, 0]
    while (len(head) + 1) % 4:
        head.append(0x5)
    n = len(cmds) if length is None else length
    head.append(0x2 | ((n >> 16) & 0xFF) << 8 | (n & 0xFFFF) << 16)
    return struct.pack(f"<{len(head) + len(cmds)}I", *(head + cmds))


def cmd0(op: int, param: int = 0) -> int:
    return op | (param << 16)


def cmd1(op: int, data: int, param: int = 0) -> List[int]:
    return [op | 0x4000 | (param << 16), data & 0xFFFFFFFF]
