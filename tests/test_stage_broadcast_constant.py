# SPDX-License-Identifier: BSD-3-Clause
"""StageBroadcastConstant (tosa_optimize/rewrites/stage_broadcast_constant.py): a constant an
ADD/SUB/MUL broadcasts is copied into the arena at run time where Vela keeps constants in flash.
The copy is exact for every value of the constant's type; it is made only where Vela estimates
the operator cheaper with it (never more cycles, over drawn shapes, operators, positions and
types), only under a memory mode that keeps constants apart from the feature maps, and the
stream Vela makes of a staged graph runs bit-exact to TOSA on the U55 NPU model."""

import numpy as np
import pytest
from _tosa_builder import Builder
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from ethosu_ng import EthosUNGCompileSpec
from ethosu_ng.tosa_graph import tosa_io
from ethosu_ng.tosa_optimize import graph as tosa_ir
from ethosu_ng.tosa_optimize.pipeline import optimize
from ethosu_ng.tosa_optimize.rewrites import stage_broadcast_constant as sbc
from ethosu_ng.tosa_optimize.rewrites._rescale import read_rescale
from ethosu_ng.tosa_optimize.verify import check_bit_exact, random_inputs, run_reference
from ethosu_ng.vela.compiler import compile_tosa


def _settings(n):
    return settings(
        max_examples=n, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck)
    )


U55 = EthosUNGCompileSpec("ethos-u55-128")  # Shared_Sram: constants in flash
RANGE = {"INT8": (-128, 127), "INT16": (-32768, 32767)}


def build(op, out, keep, pos, dtype, zp_x, zp_c, values=None, unit=True):
    """``op(RESCALE(x), RESCALE(c))`` (constant ``c`` at operand ``pos``, broadcast over the
    dimensions ``keep`` leaves out) requantized to int8, as upstream lowers a batch norm's or a
    layer scale's per-channel arithmetic."""
    b = Builder()
    cshape = [d if k else 1 for d, k in zip(out, keep)]
    if values is None:
        lo, hi = RANGE[dtype]
        values = np.random.default_rng(len(out) + sum(out)).integers(lo, hi, cshape, endpoint=True)
    mult, shift = (1 << 30, 30) if unit or op == "MUL" else (1518500250, 31)
    if dtype == "INT16":
        zp_x = zp_c = 0
    x = b.rescale(b.input(out, dtype), "INT32", mult, shift, in_zp=zp_x)
    c = b.rescale(
        b.const(np.asarray(values).reshape(cshape), dtype), "INT32", mult, shift, in_zp=zp_c
    )
    y = b.binary(op, *((c, x) if pos == 0 else (x, c)))
    b.output(b.rescale(y, "INT8", 1 << 30, 45 if op == "MUL" else 38, out_zp=-3))
    return b.tosa()


def staged_all(tosa: bytes) -> bytes:
    """Every constant operand staged, whatever Vela would say (the transformation alone)."""
    g = tosa_ir.read(tosa)
    producers = g.producers()
    for o in list(g.ops):
        if o.op in ("ADD", "SUB", "MUL"):
            for t in o.inputs[:2]:
                r = read_rescale(g, producers[t])
                if g.is_constant(r.op.inputs[0]):
                    sbc.stage(g, r)
    g.check_order()
    return tosa_ir.write(g)


def cycles(tosa: bytes, spec=U55) -> float:
    return float(compile_tosa(tosa, spec, "t").summary["cycles_total"])


OPS = st.sampled_from(("ADD", "SUB", "MUL"))
DTYPES = st.sampled_from(("INT8", "INT16"))
KEEP = st.sampled_from(((0, 0, 0, 1), (0, 1, 0, 0), (0, 1, 1, 0), (0, 0, 1, 1), (0, 1, 0, 1)))


@_settings(40)
@given(
    op=OPS,
    dtype=DTYPES,
    out=st.lists(st.integers(1, 6), min_size=4, max_size=4).map(lambda s: [1, *s[1:]]),
    keep=KEEP,
    pos=st.sampled_from((0, 1)),
    zp_x=st.integers(-128, 127),
    zp_c=st.integers(-128, 127),
    extreme=st.sampled_from(("random", "min", "max")),
    unit=st.booleans(),
)
def test_the_staged_copy_is_exact_for_every_constant(
    op, dtype, out, keep, pos, zp_x, zp_c, extreme, unit
):
    cshape = [d if k else 1 for d, k in zip(out, keep)]
    lo, hi = RANGE[dtype]
    values = None if extreme == "random" else np.full(cshape, lo if extreme == "min" else hi)
    tosa = build(op, out, keep, pos, dtype, zp_x, zp_c, values, unit)
    staged = staged_all(tosa)
    assert sum(o.op == "ADD" for o in tosa_ir.read(staged).ops) == (op == "ADD") + 1
    check_bit_exact(tosa, staged, trials=2, seed=1)


@_settings(16)
@given(
    op=OPS,
    dtype=DTYPES,
    h=st.sampled_from((1, 2, 7, 14, 28, 56)),
    w=st.sampled_from((1, 2, 7, 14, 28, 56)),
    c=st.sampled_from((1, 3, 8, 16, 48, 96)),
    keep=KEEP,
    pos=st.sampled_from((0, 1)),
)
@example(op="MUL", dtype="INT8", h=28, w=56, c=48, keep=(0, 0, 1, 1), pos=1)
@example(op="SUB", dtype="INT8", h=14, w=7, c=48, keep=(0, 0, 0, 1), pos=0)
def test_staged_only_where_vela_estimates_it_cheaper(op, dtype, h, w, c, keep, pos):
    tosa = build(op, [1, h, w, c], keep, pos, dtype, 3, -5)
    result = optimize(tosa, spec=U55)
    before, after = cycles(tosa), cycles(result.tosa)
    if result.applied:
        assert result.applied == {"StageBroadcastConstant": 1}
        assert after < before
        check_bit_exact(tosa, result.tosa, trials=1)
    else:
        assert after == before


def test_a_flash_bound_per_channel_scale_is_staged():
    """The measured case: a ``[1, 1, 56, 48]`` constant MUL over ``[1, 28, 56, 48]``, flash-bound
    in Vela's estimate (602,112 cycles; 75,264 of NPU work); staged, 79,296."""
    tosa = build("MUL", [1, 28, 56, 48], (0, 0, 1, 1), 1, "INT8", 3, -5)
    result = optimize(tosa, spec=U55)
    assert result.applied == {"StageBroadcastConstant": 1}
    assert cycles(result.tosa) < cycles(tosa) / 4


@pytest.mark.parametrize(
    "target, memory_mode",
    [
        ("ethos-u55-128", "Sram_Only"),
        ("ethos-u65-256", "Dedicated_Sram_384KB"),
        ("ethos-u85-256", "Sram_Only"),
    ],
)
def test_not_staged_where_constants_share_the_feature_maps_memory(target, memory_mode):
    tosa = build("MUL", [1, 28, 56, 48], (0, 0, 1, 1), 1, "INT8", 3, -5)
    spec = EthosUNGCompileSpec(target, memory_mode=memory_mode)
    assert optimize(tosa, spec=spec).applied == {}


@pytest.mark.parametrize(
    "keep, why",
    [((0, 0, 0, 0), "a scalar is an immediate"), ((0, 1, 1, 1), "not broadcast")],
)
def test_not_staged_where_nothing_is_read_again(keep, why):
    tosa = build("MUL", [1, 28, 56, 48], keep, 1, "INT8", 3, -5)
    assert optimize(tosa, spec=U55).applied == {}, why


@_settings(20)
@given(
    op=OPS,
    dtype=DTYPES,
    h=st.sampled_from((4, 14, 28)),
    c=st.sampled_from((8, 24, 48)),
    keep=KEEP,
    pos=st.sampled_from((0, 1)),
    zp_x=st.integers(-128, 127),
    zp_c=st.integers(-128, 127),
)
@example(op="SUB", dtype="INT8", h=16, c=24, keep=(0, 0, 0, 1), pos=1, zp_x=7, zp_c=-11)
def test_the_staged_stream_runs_bit_exact_on_the_npu_model(op, dtype, h, c, keep, pos, zp_x, zp_c):
    """Vela's command stream for a staged graph (the copy an ADD of the constant's few elements,
    the broadcast read from the arena), run on the U55 NPU model, gives what TOSA gives on the
    graph before staging, over operators, input types, broadcast shapes, operand positions and
    zero points, on random inputs and at either end of the input's range. Every drawn graph is
    staged (whatever Vela's estimate would choose), so every example runs a staged stream."""
    from ethosu_ng import runtime as rt

    tosa = build(op, [1, h, h, c], keep, pos, dtype, zp_x, zp_c)
    staged = staged_all(tosa)
    assert sum(o.op == "ADD" for o in tosa_ir.read(staged).ops) == (op == "ADD") + 1
    vela = compile_tosa(staged, U55, "t")
    ins, _ = tosa_io(staged)
    np_dtype = np.int8 if dtype == "INT8" else np.int16
    rng = np.random.default_rng(0)
    for arrays in (
        random_inputs(ins, rng),
        *([np.full(ins[0].shape, end, np_dtype)] for end in RANGE[dtype]),
    ):
        (want,) = run_reference(tosa, arrays)
        scratch = bytearray(vela.scratch_size)
        for t, a in zip(vela.inputs, arrays):
            data = np.ascontiguousarray(a).tobytes()
            scratch[t.offset : t.offset + len(data)] = data
        rt.npu_model_run(vela.command_stream, vela.weights, scratch, None)
        out = vela.outputs[0]
        got = np.frombuffer(bytes(scratch[out.offset : out.offset + out.numel]), np.int8)
        assert np.array_equal(got, want.reshape(-1)), (op, dtype, h, c, keep, pos)
