# SPDX-License-Identifier: BSD-3-Clause
"""NPU_OP_BRANCH on the Ethos-U85 model (runtime/ethosu_ng/npu_model/front_end.cpp) against the
TOSA reference model.

regor lowers a TOSA WHILE_LOOP to one command stream (HLCStreamGenerator, While): copy the loop
inputs to its outputs; COND: the cond graph's kernels, the last writing the one-element bool;
``BRANCH RF_TRUE`` to BODY and ``BRANCH ALWAYS`` to EXIT; BODY: the body graph's kernels, DMAs
copying the outputs back to the inputs, ``BRANCH ALWAYS`` to COND. A COND_IF is ``BRANCH
RF_TRUE`` to THEN and ``BRANCH ALWAYS`` to ELSE, each ending in ``BRANCH ALWAYS`` to EXIT. A
branch's payload is the target's byte offset in the stream. Upstream's while_loop and cond op
tests (tests/control_flow_graphs.py) are compiled by the installed Vela for Ethos-U85 and run on
the model with random inputs, compared with the TOSA reference model on the same graph bit for
bit. Malformed branches are errors naming the command; a loop that does not end stops at the
model's command limit.
"""

from __future__ import annotations

import functools
import struct

import numpy as np
import pytest
from control_flow_graphs import (
    COND_CASES,
    DTYPES,
    FIXTURES,
    TOSA_MAX_WHILE_ITERATIONS,
    WHILE_CASES,
    fixture_tosa,
    run_both,
    upstream_tosa,
)
from npu_payload import cmd0, cmd1, cmd_stream, commands
from test_npu_model_dma import u85_payload

from ethosu_ng import EthosUNGCompileSpec
from ethosu_ng import runtime as rt
from ethosu_ng.vela.compiler import compile_tosa

OP_BRANCH = 0x100
OP_STOP = 0x000
KERNELS = (0x002, 0x003, 0x005, 0x006, 0x007)  # CONV, DEPTHWISE, POOL, ELEMENTWISE, RESIZE
# Upper bounds of the random int8 inputs, one per seed: the loops run longest on small values.
HIGHS = (-126, -124, -120, -110, -100, -60, 0, 128)
LIMIT = "over the model's limit of 2^22 per stream"


@functools.cache
def _tosa(test: str, case: str, live: bool) -> bytes:
    return upstream_tosa(test, case) if live else fixture_tosa(test, case)


@functools.cache
def _compiled(test: str, case: str, target: str, live: bool = False):
    tosa = _tosa(test, case, live)
    return tosa, compile_tosa(tosa, EthosUNGCompileSpec(target))


def _branches(vela):
    """(command index, cond bit, target byte offset) of each NPU_OP_BRANCH in the stream."""
    _, words = cmd_stream(vela.command_stream)
    return [
        (k, param & 1, data)
        for k, _, op, c1, param, data in commands(words)
        if c1 and op == OP_BRANCH
    ]


def _ofm_dims(cmds):
    """OFM_WIDTH_M1, OFM_HEIGHT_M1, OFM_DEPTH_M1 as the commands ``cmds`` leave them."""
    dims = {0x111: 0, 0x112: 0, 0x113: 0}
    for _, _, op, c1, param, _ in cmds:
        if not c1 and op in dims:
            dims[op] = param
    return list(dims.values())


def _inputs(vela, rng, hi):
    return [
        rng.integers(-128, hi, int(np.prod(t.shape))).astype(DTYPES[t.elem_size])
        for t in vela.inputs
    ]


def _check(test, case, target, seeds, tmp_path, live=False):
    """Random inputs through model and TOSA reference, bit-exact; where the TOSA reference model
    stopped a loop at its iteration cap, the quantized loop does not end and the model must stop
    at its command limit. Returns (most commands one run executed, runs at the cap)."""
    tosa, vela = _compiled(test, case, target, live)
    conditional = [b[1] for b in _branches(vela)].count(1)
    assert conditional >= 1, _branches(vela)
    most = capped = 0
    for seed in seeds:
        rng = np.random.default_rng(seed)
        inputs = _inputs(vela, rng, HIGHS[seed % len(HIGHS)])
        got, want, stats, conds = run_both(tosa, vela, inputs, str(tmp_path))
        if conds >= TOSA_MAX_WHILE_ITERATIONS:
            assert isinstance(got, rt.NpuModelError) and LIMIT in str(got), (case, seed, got)
            capped += 1
            continue
        assert not isinstance(got, Exception), (case, seed, got)
        for g, w in zip(got, want):
            assert np.array_equal(g.astype(np.int64), w.astype(np.int64)), (case, seed, g, w)
        most = max(most, stats["commands"])
    return most, capped


@pytest.mark.parametrize("graph", FIXTURES, ids=[f"{t}-{c}" for t, c in FIXTURES])
def test_control_flow_bit_exact_to_tosa(graph, tmp_path):
    _, vela = _compiled(*graph, "ethos-u85-256")
    most, capped = _check(*graph, "ethos-u85-256", range(8), tmp_path)
    assert capped == 0
    if graph[0] == "test_while":
        # Some command ran twice: the inputs drive the loop through its body and back.
        static = len(list(commands(cmd_stream(vela.command_stream)[1])))
        assert most > static, (most, static)


@pytest.mark.slow
@pytest.mark.parametrize("target", ["ethos-u85-128", "ethos-u85-512", "ethos-u85-2048"])
@pytest.mark.parametrize(
    "graph", WHILE_CASES + COND_CASES, ids=[f"{t}-{c}" for t, c in WHILE_CASES + COND_CASES]
)
def test_upstream_control_flow_bit_exact_to_tosa(graph, target, tmp_path):
    _check(*graph, target, range(30), tmp_path, live=True)


@pytest.mark.slow
def test_while_loop_that_never_ends_is_an_error(tmp_path):
    """x = x + x while sum(x) < limit, from x = 0: eager PyTorch never returns. The model stops
    at its command limit with an error naming it; the TOSA reference model stops silently after
    its MAX_WHILE_LOOP_ITERATION (10000) evaluations of the condition and reports the graph
    valid."""
    tosa, vela = _compiled(*FIXTURES[0], "ethos-u85-256")
    zeros = np.full(int(np.prod(vela.inputs[0].shape)), -128, np.int8)
    got, _, _, conds = run_both(tosa, vela, [zeros], str(tmp_path))
    assert conds == TOSA_MAX_WHILE_ITERATIONS
    assert isinstance(got, rt.NpuModelError), got
    assert "NPU_OP_BRANCH" in str(got) and LIMIT in str(got), str(got)


def _error(cmds) -> str:
    with pytest.raises(rt.NpuModelError) as info:
        rt.npu_model_run(u85_payload(cmds), bytes(256), bytearray(512))
    return str(info.value)


def test_branch_that_never_ends_stops_at_the_command_limit():
    """An error with executorch's OutOfResources (0x25), not NotSupported (0x10): whether a loop
    ends depends on the data, and the trial run on zeroed scratch that decides whether a program
    runs on the model (runtime.model_unsupported) takes only NotSupported as a gap."""
    with pytest.raises(rt.NpuModelError) as info:
        cmds = [cmd0(0x012), *cmd1(OP_BRANCH, 0), cmd0(OP_STOP, 0xFFFF)]
        rt.npu_model_run(u85_payload(cmds), bytes(256), bytearray(512))
    msg = str(info.value)
    assert "over the model's limit of 2^22" in msg and "NPU_OP_BRANCH" in msg, msg
    assert info.value.code == 0x25, info.value.code


@pytest.mark.parametrize(
    "target, what",
    [(8, "payload word"), (6, "unaligned"), (16, "past the end"), (1 << 31, "far past")],
)
def test_branch_target_must_be_a_command(target, what):
    msg = _error([cmd0(0x012), *cmd1(OP_BRANCH, target), cmd0(OP_STOP)])
    assert f"branch target 0x{target:08x}: not the first word of a command" in msg, (what, msg)
    assert "command 1 (NPU_OP_BRANCH" in msg, msg


def test_branch_reserved_bits_are_errors():
    msg = _error([*cmd1(OP_BRANCH, 0, 2), cmd0(OP_STOP)])
    assert "NPU_OP_BRANCH 0x0002: reserved bits 0x0002 set" in msg, msg


def test_conditional_branch_needs_a_one_element_kernel_result():
    """The model takes COND_STATUS from the kernel before the branch writing one element; a
    conditional branch after no kernel, after a DMA, or after a kernel writing several elements
    is refused, not guessed."""
    msg = _error([*cmd1(OP_BRANCH, 0, 1), cmd0(OP_STOP)])
    assert "COND_STATUS after no kernel not modelled" in msg, msg
    _, vela = _compiled(*FIXTURES[0], "ethos-u85-256")
    start, words = cmd_stream(vela.command_stream)
    cmds = list(commands(words))
    cond = [off for k, off, op, c1, param, _ in cmds if c1 and op == OP_BRANCH and param & 1][0]
    # A 1-D DMA of one byte in scratch just before the conditional branch.
    dma = [cmd0(0x130, 1), *cmd1(0x030, 0), cmd0(0x131, 1), *cmd1(0x031, 1), *cmd1(0x032, 1)]
    dma += [cmd0(0x010), cmd0(0x011)]
    patched = words[:cond] + dma + words[cond:]
    # The branch targets are byte offsets: those past the insertion move with it.
    shift = 4 * len(dma)
    out = []
    i = 0
    while i < len(patched):
        w = patched[i]
        if (w >> 14) & 3 == 1:
            data = patched[i + 1]
            if w & 0x3FF == OP_BRANCH and data >= 4 * cond:
                data += shift
            out += [w, data]
            i += 2
        else:
            out.append(w)
            i += 1
    head = list(struct.unpack(f"<{start}I", vela.command_stream[: 4 * start]))
    n = len(out)
    head[-1] = head[-1] & 0xFF | ((n >> 16) & 0xFF) << 8 | (n & 0xFFFF) << 16
    payload = struct.pack(f"<{start + n}I", *head, *out)
    with pytest.raises(rt.NpuModelError) as info:
        rt.npu_model_run(payload, vela.weights, bytearray(vela.scratch_size))
    assert "COND_STATUS after a DMA not modelled" in str(info.value), str(info.value)
    # The stream cut after its first kernel with an OFM of several elements, then a conditional
    # branch.
    first = next(
        off for k, off, op, c1, *_ in cmds if not c1 and op in KERNELS and any(_ofm_dims(cmds[:k]))
    )
    cut = words[: first + 1] + [cmd0(0x012), *cmd1(OP_BRANCH, 0, 1), cmd0(OP_STOP)]
    n = len(cut)
    head[-1] = head[-1] & 0xFF | ((n >> 16) & 0xFF) << 8 | (n & 0xFFFF) << 16
    payload = struct.pack(f"<{start + n}I", *head, *cut)
    with pytest.raises(rt.NpuModelError) as info:
        rt.npu_model_run(payload, vela.weights, bytearray(vela.scratch_size))
    msg = str(info.value)
    assert "COND_STATUS after a kernel writing several elements not modelled" in msg, msg
