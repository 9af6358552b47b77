# SPDX-License-Identifier: BSD-3-Clause
# SPDX-License-Identifier: Apache-2.0
"""The rescale rewrites of the TOSA optimiser (tosa_optimize/rewrites, ``_rescale.py``): each is
bit-exact on the TOSA reference model over scales, zero points, shapes and consumer kinds, and
leaves Vela fewer standalone RESCALE layers and no more NPU cycles; on Ethos-U55 the command
stream Vela makes of the rewritten graph runs bit-exact to TOSA on the NPU model."""

import numpy as np
import pytest
from _tosa_builder import Builder
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ethosu_ng import EthosUNGCompileSpec
from ethosu_ng.tosa_graph import tosa_io
from ethosu_ng.tosa_optimize import graph as tosa_ir
from ethosu_ng.tosa_optimize.pipeline import optimize
from ethosu_ng.tosa_optimize.rewrites._rescale import absorbs_operand, read_rescale
from ethosu_ng.tosa_optimize.verify import check_bit_exact, random_inputs, run_reference

FAST = settings(
    max_examples=30, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck)
)
UNIT = (1 << 30, 30)


def rescale_readers(tosa: bytes):
    """Per RESCALE output: how many operator inputs (and graph outputs) read it."""
    g = tosa_ir.read(tosa)
    reads = {o.outputs[0]: 0 for o in g.ops if o.op == "RESCALE"}
    for o in g.ops:
        for t in o.inputs:
            if t in reads:
                reads[t] += 1
    for t in g.outputs:
        if t in reads:
            reads[t] += 1
    return g, reads


def folding_operands_have_one_reader(tosa: bytes) -> bool:
    """Every ADD/SUB/MUL operand that is a RESCALE Vela folds is read by that operand only."""
    g, reads = rescale_readers(tosa)
    producers = g.producers()
    for o in g.ops:
        for t in o.inputs[:2]:
            p = producers.get(t)
            r = read_rescale(g, p) if p is not None else None
            if r is not None and absorbs_operand(o, r) and reads[t] != 1:
                return False
    return True


# ---- SplitSharedRescale -------------------------------------------------------------------

CONSUMERS = ("square", "mul", "add", "sub", "reshape", "output")


@st.composite
def shared_rescale(draw):
    """A RESCALE of an 8/16-bit input to int32 read by 1-4 consumers of drawn kinds (a graph
    output at most once); each consumer's result rescaled back to int8. Scales at most 2, so
    that every int32 product stays in range (TOSA requires it)."""
    shape = [draw(st.integers(1, 4)) for _ in range(draw(st.integers(1, 4)))]
    in_dtype = draw(st.sampled_from(("INT8", "INT16")))
    unit = draw(st.booleans())
    mult, shift = (
        UNIT if unit else (draw(st.integers(1 << 29, (1 << 31) - 1)), draw(st.integers(30, 40)))
    )
    if in_dtype == "INT16" and not unit:
        shift += 8
    in_zp = draw(st.integers(-128, 127)) if in_dtype == "INT8" else 0
    kinds = draw(st.lists(st.sampled_from(CONSUMERS), min_size=1, max_size=4))
    if kinds.count("output") > 1:
        kinds = [k for k in kinds if k != "output"] + ["output"]
    return shape, in_dtype, mult, shift, in_zp, kinds


def build_shared(shape, in_dtype, mult, shift, in_zp, kinds) -> bytes:
    b = Builder()
    x = b.input(shape, in_dtype)
    y = b.rescale(x, "INT32", multiplier=mult, shift=shift, in_zp=in_zp)
    for kind in kinds:
        if kind == "output":
            b.output(y)
            continue
        if kind == "reshape":
            z = b.reshape(y, [int(np.prod(shape))])
        elif kind == "square":
            z = b.binary("MUL", y, y)
        else:
            other = b.rescale(b.input(shape, in_dtype), "INT32", *UNIT)
            z = b.binary(kind.upper(), y, other)
        b.output(b.rescale(z, "INT8", multiplier=1 << 30, shift=52 if kind == "square" else 38))
    return b.tosa()


@FAST
@given(shared_rescale())
def test_a_shared_rescale_is_given_to_each_reader_that_folds_it_bit_exactly(case):
    tosa = build_shared(*case)
    result = optimize(tosa)
    check_bit_exact(tosa, result.tosa, trials=2, seed=3)
    assert folding_operands_have_one_reader(result.tosa)
    copies = _count(result.tosa, "RESCALE") - _count(tosa, "RESCALE")
    shape, in_dtype, mult, shift, in_zp, kinds = case
    unit = (mult, shift) == UNIT
    folding = [k for k in kinds if k in ("add", "sub") or (unit and k in ("square", "mul"))]
    # One copy per folding operand beyond the original's one reader, none for other readers.
    slots = len(folding) + folding.count("square")
    shared = len(kinds) + kinds.count("square") > 1
    everyone_folds = len(folding) == len(kinds)
    assert copies == (0 if not shared or not folding else slots - everyone_folds)


@st.composite
def shared_rescales_read_together(draw):
    """2-3 shared RESCALEs of int8 inputs, each pair of operands of 1-4 binary readers drawn
    among them (so that a reader's other operand may be a copy an earlier split made), and a
    reshape reading some of them (a reader that does not fold)."""
    shape = [draw(st.integers(1, 3)) for _ in range(draw(st.integers(1, 3)))]
    n = draw(st.integers(2, 3))
    units = [draw(st.booleans()) for _ in range(n)]
    pairs = draw(
        st.lists(
            st.tuples(st.sampled_from(("ADD", "SUB", "MUL")), st.integers(0, n - 1)).flatmap(
                lambda kp: st.tuples(st.just(kp[0]), st.just(kp[1]), st.integers(0, n - 1))
            ),
            min_size=1,
            max_size=4,
        )
    )
    reshaped = draw(st.lists(st.integers(0, n - 1), max_size=2, unique=True))
    return shape, units, pairs, reshaped


def build_read_together(shape, units, pairs, reshaped) -> bytes:
    b = Builder()
    ys = [
        b.rescale(b.input(shape), "INT32", *(UNIT if unit else (1 << 30, 31)), in_zp=3)
        for unit in units
    ]
    for op, i, j in pairs:
        z = b.binary(op, ys[i], ys[j])
        b.output(b.rescale(z, "INT8", multiplier=1 << 30, shift=52 if op == "MUL" else 38))
    for i in reshaped:
        b.output(b.reshape(ys[i], [int(np.prod(shape))]))
    return b.tosa()


@FAST
@given(shared_rescales_read_together())
def test_shared_rescales_read_by_the_same_operators_are_each_split(case):
    """The split keeps its map of writers current as it goes: in one pass (the pipeline would
    run it again), a binary reader whose other operand an earlier split already gave a copy
    still gets its own."""
    from ethosu_ng.tosa_optimize.rewrites.split_shared_rescale import SplitSharedRescale

    tosa = build_read_together(*case)
    graph = tosa_ir.read(tosa)
    SplitSharedRescale().apply(graph)
    split = tosa_ir.write(graph)
    check_bit_exact(tosa, split, trials=2, seed=3)
    g, reads = rescale_readers(split)
    producers = g.producers()
    for o in g.ops:
        if o.op not in ("ADD", "SUB", "MUL"):
            continue
        operands = [
            read_rescale(g, producers.get(t)) if t in producers else None for t in o.inputs[:2]
        ]
        if all(r is not None and absorbs_operand(o, r) for r in operands):
            assert [reads[t] for t in o.inputs[:2]] == [1, 1], (o.op, o.inputs[:2])


def _count(tosa: bytes, op: str) -> int:
    return sum(o.op == op for o in tosa_ir.read(tosa).ops)


def _vela(tosa: bytes, target: str):
    """(standalone RESCALE layers, NPU cycles, VelaResult) of ``tosa`` compiled by Vela."""
    from ethosu_ng.tosa_graph import tosa_ops
    from ethosu_ng.vela.compiler import compile_tosa

    r = compile_tosa(tosa, EthosUNGCompileSpec(target), "t")
    ops = tosa_ops(tosa)
    rescales = sum(1 for layer in r.layers if ops[layer.tosa_index].op == "RESCALE")
    return rescales, int(float(r.summary["cycles_npu"])), r


def square(shape, zp=4):
    """``(x - zp) ** 2`` requantized to int8 as upstream lowers it: one RESCALE read twice."""
    b = Builder()
    x = b.input(shape)
    y = b.rescale(x, "INT32", *UNIT, in_zp=zp)
    b.output(b.rescale(b.binary("MUL", y, y), "INT8", 2000467631, 37, out_zp=-128))
    return b.tosa()


@pytest.mark.parametrize("target", ["ethos-u85-256", "ethos-u55-128"])
def test_a_square_has_no_standalone_rescale(target):
    tosa = square([1, 16, 16, 16])
    before = _vela(tosa, target)
    result = optimize(tosa)
    assert result.applied == {"SplitSharedRescale": 1}
    after = _vela(result.tosa, target)
    assert before[0] == 2 if target == "ethos-u85-256" else before[0] == 3
    assert after[0] == 0
    assert after[1] < before[1] / 4  # measured 17,024 -> 1,024 (U85), 21,504 -> 4,096 (U55)


def run_npu_model(vela, arrays):
    from ethosu_ng import runtime as rt

    scratch = bytearray(vela.scratch_size)
    for t, a in zip(vela.inputs, arrays):
        data = np.ascontiguousarray(a).tobytes()
        scratch[t.offset : t.offset + len(data)] = data
    rt.npu_model_run(vela.command_stream, vela.weights, scratch, None)
    return [
        np.frombuffer(bytes(scratch[t.offset : t.offset + t.numel * t.elem_size]), np.int8)
        for t in vela.outputs
    ]


@pytest.mark.parametrize("zp", [0, 4, -128, 127])
def test_the_folded_square_runs_bit_exact_on_the_npu_model(zp):
    """Vela's stream for the rewritten square (the RESCALEs folded into the MUL's operand
    zero points) computes what TOSA does, on the U55 NPU model, at the int8 extremes."""
    from ethosu_ng.tosa_graph import tosa_io

    tosa = optimize(square([1, 8, 8, 16], zp)).tosa
    rescales, _, vela = _vela(tosa, "ethos-u55-128")
    assert rescales == 0
    ins, _ = tosa_io(tosa)
    rng = np.random.default_rng(0)
    for arrays in [random_inputs(ins, rng), [np.full(ins[0].shape, v, np.int8) for v in (-128,)]]:
        (want,) = run_reference(tosa, arrays)
        (got,) = run_npu_model(vela, arrays)
        assert np.array_equal(got, want.reshape(-1)), (zp, np.abs(got - want.reshape(-1)).max())


# ---- AddOperandShiftToResult ----------------------------------------------------------------


def add_sub(op, shape, k_a, k_b, zp_a, zp_b, out_mult, out_shift, out_zp=0) -> bytes:
    """``op(x_a, x_b)`` as upstream lowers it: operand RESCALEs shifting left by ``2**k``, the
    result RESCALE back to int8."""
    b = Builder()
    a = b.rescale(b.input(shape), "INT32", 1 << 30, 30 - k_a, in_zp=zp_a)
    c = b.rescale(b.input(shape), "INT32", 1 << 30, 30 - k_b, in_zp=zp_b)
    b.output(b.rescale(b.binary(op, a, c), "INT8", out_mult, out_shift, out_zp=out_zp))
    return b.tosa()


@FAST
@given(
    st.sampled_from(("ADD", "SUB")),
    st.lists(st.integers(1, 5), min_size=1, max_size=4),
    st.integers(1, 21),
    st.integers(-2, 2),
    st.integers(-128, 127),
    st.integers(-128, 127),
    st.integers(1, (1 << 31) - 1),
    st.integers(10, 40),
    st.integers(-128, 127),
)
def test_an_equal_operand_shift_moves_to_the_result_bit_exactly(
    op, shape, k, dk, zp_a, zp_b, mult, extra_shift, out_zp
):
    # TOSA requires a RESCALE's input below 2**(shift - 1) in magnitude, and |sum| <= 510 * 2**k:
    # a result shift of k + 10 or more; the product stays inside int32.
    mult = min(mult, (1 << (31 + extra_shift)) // 1024)
    k_b = min(21, max(1, k + dk))
    tosa = add_sub(op, shape, k, k_b, zp_a, zp_b, mult, max(k, k_b) + extra_shift, out_zp)
    result = optimize(tosa)
    check_bit_exact(tosa, result.tosa, trials=2, seed=5)
    moved = result.applied.get("AddOperandShiftToResult", 0)
    assert moved == (1 if k_b == k else 0)
    if moved:
        g = tosa_ir.read(result.tosa)
        operands = [read_rescale(g, o) for o in g.ops if o.op == "RESCALE"][:2]
        assert all(r.is_unit_scale for r in operands)


@pytest.mark.parametrize("target", ["ethos-u55-128", "ethos-u85-256"])
def test_pool_minus_x_has_no_standalone_rescale(target):
    """PoolFormer's token mixer ``pool(x) - x``: equal input scales, both operands ``<< 19``."""
    tosa = add_sub("SUB", [1, 16, 16, 16], 19, 19, 6, 6, 2061775431, 50, -1)
    before = _vela(tosa, target)
    result = optimize(tosa)
    assert result.applied == {"AddOperandShiftToResult": 1}
    after = _vela(result.tosa, target)
    assert after[0] == 0 and after[1] <= before[1]
    if target == "ethos-u55-128":
        assert before[0] == 5  # each operand RESCALE is two layers (Add, Mul), the result one


@pytest.mark.parametrize("zps", [(6, 6), (-128, 127), (127, -128)])
def test_the_folded_sub_runs_bit_exact_on_the_npu_model(zps):
    from ethosu_ng.tosa_graph import tosa_io

    tosa = optimize(add_sub("SUB", [1, 8, 8, 16], 19, 19, *zps, 2061775431, 50, -1)).tosa
    rescales, _, vela = _vela(tosa, "ethos-u55-128")
    assert rescales == 0
    ins, _ = tosa_io(tosa)
    rng = np.random.default_rng(0)
    extremes = [[np.full(i.shape, v, np.int8) for i, v in zip(ins, (-128, 127))]]
    for arrays in [random_inputs(ins, rng), *extremes]:
        (want,) = run_reference(tosa, arrays)
        (got,) = run_npu_model(vela, arrays)
        assert np.array_equal(got, want.reshape(-1)), np.abs(got - want.reshape(-1)).max()


# ---- SplitSharedAddResult -------------------------------------------------------------------

RESULT_READERS = ("rescale", "rescale_transpose", "add", "output")


@st.composite
def shared_add_result(draw):
    """``op(RESCALE(x_a), RESCALE(x_b))`` with an int32 result read by 2-4 readers of drawn
    kinds: a pure-shift RESCALE to int8 (alone or into a transpose), an ADD taking the sum
    unrequantized (a residual chain), the graph output. Operand scales: a left shift (equal on
    both operands or not) or any multiplier, at most ``2**20`` so every int32 sum stays in
    range."""
    op = draw(st.sampled_from(("ADD", "SUB")))
    shape = [draw(st.integers(1, 4)) for _ in range(draw(st.integers(2, 4)))]
    scales = []
    for _ in range(2):
        k = draw(st.integers(0, 20))
        if draw(st.booleans()):
            scales.append((1 << 30, 30 - k))
        else:
            scales.append((draw(st.integers(1 << 30, (1 << 31) - 1)), 31 - k))
    zps = [draw(st.integers(-128, 127)) for _ in range(2)]
    kinds = draw(st.lists(st.sampled_from(RESULT_READERS), min_size=2, max_size=4))
    if kinds.count("output") > 1:
        kinds = [k for k in kinds if k != "output"] + ["output"]
    out_shift = draw(st.integers(31, 52))
    return op, shape, scales, zps, kinds, out_shift


def build_shared_add(op, shape, scales, zps, kinds, out_shift) -> bytes:
    b = Builder()
    a, c = (b.rescale(b.input(shape), "INT32", m, s, in_zp=zp) for (m, s), zp in zip(scales, zps))
    y = b.binary(op, a, c)
    for kind in kinds:
        if kind == "output":
            b.output(y)
        elif kind == "add":
            other = b.rescale(b.input(shape), "INT32", 1 << 30, 11, in_zp=3)
            b.output(b.rescale(b.binary("ADD", other, y), "INT8", 1 << 30, out_shift, out_zp=-2))
        else:
            z = b.rescale(y, "INT8", 1 << 30, out_shift, out_zp=-2)
            b.output(b.transpose(z, list(range(len(shape)))[::-1]) if kind != "rescale" else z)
    return b.tosa()


@FAST
@given(shared_add_result())
def test_a_shared_add_result_is_recomputed_for_each_result_rescale_bit_exactly(case):
    op, shape, scales, zps, kinds, out_shift = case
    tosa = build_shared_add(*case)
    result = optimize(tosa)
    check_bit_exact(tosa, result.tosa, trials=2, seed=7)
    copies = _count(result.tosa, op) - _count(tosa, op)
    folding = sum(k.startswith("rescale") for k in kinds)
    want = 0 if not folding else folding - (folding == len(kinds))
    assert copies == want, (copies, want)
    if want:  # each result RESCALE reads an ADD/SUB only it reads, whose operands fold
        assert folding_operands_have_one_reader(result.tosa)
        g = tosa_ir.read(result.tosa)
        consumers = g.consumers()
        sums = [o for o in g.ops if o.op == op]
        shared = [o for o in sums if len(consumers.get(o.outputs[0], [])) > 1]
        assert not any(c.op == "RESCALE" for o in shared for c in consumers.get(o.outputs[0], []))


def residual_chain(shape):
    """Two residual ADDs as upstream lowers ConvNeXt's: the first's int32 sum read by its
    RESCALE to int8 (into a transpose) and, unrequantized, by the second ADD."""
    b = Builder()
    x, s, t = b.input(shape), b.input(shape), b.input(shape)
    y1 = b.binary(
        "ADD",
        b.rescale(x, "INT32", 1427042540, 22, in_zp=-128),
        b.rescale(s, "INT32", 1 << 30, 11, in_zp=-2),
    )
    b.output(b.transpose(b.rescale(y1, "INT8", 1 << 30, 49, out_zp=-2), [0, 3, 1, 2]))
    y2 = b.binary("ADD", b.rescale(t, "INT32", 1331826505, 22, in_zp=-128), y1)
    b.output(b.rescale(y2, "INT8", 1 << 30, 49, out_zp=-2))
    return b.tosa()


@pytest.mark.parametrize("target", ["ethos-u85-256", "ethos-u55-128"])
def test_a_residual_sum_read_twice_has_its_result_rescale_folded_where_it_pays(target):
    """On U85 the RESCALE of the first sum, a layer of its own, folds into the copy and the
    program is cheaper; on U55 the copy would cost more than the RESCALE, so none is made."""
    from ethosu_ng.tosa_optimize.pipeline import RESCALE_REWRITES
    from ethosu_ng.tosa_optimize.rewrites.split_shared_add_result import SplitSharedAddResult

    tosa = residual_chain([1, 56, 56, 40])
    assert optimize(tosa, disabled=RESCALE_REWRITES).tosa == tosa
    without = optimize(tosa, disabled=(SplitSharedAddResult,), target=target)
    result = optimize(tosa, target=target)
    if target == "ethos-u55-128":
        assert "SplitSharedAddResult" not in result.applied and result.tosa == without.tosa
        return
    assert result.applied.get("SplitSharedAddResult") == 1
    before, after = _vela(without.tosa, target), _vela(result.tosa, target)
    assert after[0] == before[0] - 1
    assert after[1] < before[1] / 2  # measured 455,068 -> 196,674


@pytest.mark.parametrize("zps", [(-128, -2, -128), (127, 127, -128), (0, -128, 127)])
def test_the_split_residual_runs_bit_exact_on_the_npu_model(zps):
    from ethosu_ng.tosa_graph import tosa_io

    tosa = residual_chain([1, 8, 8, 16])
    result = optimize(tosa)
    assert result.applied.get("SplitSharedAddResult") == 1
    _, _, vela = _vela(result.tosa, "ethos-u55-128")
    ins, _ = tosa_io(result.tosa)
    rng = np.random.default_rng(1)
    extremes = [[np.full(i.shape, v, np.int8) for i, v in zip(ins, zps)]]
    for arrays in [random_inputs(ins, rng), *extremes]:
        want = run_reference(tosa, arrays)  # the graph as upstream made it
        got = run_npu_model(vela, arrays)
        for w, g_ in zip(want, got):
            assert np.array_equal(g_, w.reshape(-1)), np.abs(g_ - w.reshape(-1)).max()


# ---- MergeConsecutiveRescales ---------------------------------------------------------------

DOMAIN = {
    "INT8": np.arange(-128, 128, dtype=np.int8),
    "INT16": np.arange(-32768, 32768).astype(np.int16),
}


@st.composite
def rescale_pair(draw):
    """``x -> RESCALE -> RESCALE`` over an 8/16-bit ``x`` laid out as its whole input domain,
    each RESCALE of drawn output type, scale and zero points (TOSA's rules: a nonzero zero point
    only on int8), ranges that keep every intermediate valid; read by a drawn consumer."""
    in_dtype = draw(st.sampled_from(("INT8", "INT16")))
    mid_dtype = draw(st.sampled_from(("INT8", "INT16", "INT32")))
    out_dtype = draw(st.sampled_from(("INT8", "INT16", "INT32")))

    def zp(dtype):
        return draw(st.integers(-128, 127)) if dtype == "INT8" else 0

    shift_left = mid_dtype == "INT32" and draw(st.booleans())
    if shift_left:  # an exact left shift into int32: the merge must happen
        k = draw(st.integers(0, 14))
        first = (1 << 30, 30 - k)
    else:
        first = (draw(st.integers(1, (1 << 31) - 1)), draw(st.integers(17, 40)))
    lo = 32 if mid_dtype == "INT32" else 17
    second = (draw(st.integers(1, (1 << 31) - 1)), draw(st.integers(lo, lo + 20)))
    izp, mzp_out, mzp_in, ozp = zp(in_dtype), zp(mid_dtype), zp(mid_dtype), zp(out_dtype)
    consumer = draw(st.sampled_from(("output", "transpose", "add")))
    if consumer == "add":
        out_dtype, ozp = "INT32", 0
    return (
        in_dtype,
        mid_dtype,
        out_dtype,
        first,
        second,
        (izp, mzp_out, mzp_in, ozp),
        shift_left,
        consumer,
    )


def build_pair(in_dtype, mid_dtype, out_dtype, first, second, zps, shift_left, consumer):
    izp, mzp_out, mzp_in, ozp = zps
    b = Builder()
    x = b.input([len(DOMAIN[in_dtype])], in_dtype)
    mid = b.rescale(x, mid_dtype, *first, in_zp=izp, out_zp=mzp_out)
    y = b.rescale(mid, out_dtype, *second, in_zp=mzp_in, out_zp=ozp)
    if consumer == "transpose":
        y = b.transpose(b.reshape(y, [1, len(DOMAIN[in_dtype])]), [1, 0])
    elif consumer == "add":
        y = b.rescale(
            b.binary("ADD", y, b.rescale(b.input(b.shape(x), in_dtype), "INT32")),
            "INT8",
            1 << 30,
            40,
        )
    b.output(y)
    return b.tosa()


@FAST
@given(rescale_pair())
def test_consecutive_rescales_merge_only_where_exact_over_the_whole_input_domain(case):
    in_dtype, shift_left = case[0], case[6]
    tosa = build_pair(*case)
    result = optimize(tosa)
    merged = result.applied.get("MergeConsecutiveRescales", 0)
    ins = tosa_io(tosa)[0]
    rng = np.random.default_rng(0)
    domain = [DOMAIN[in_dtype]] + [random_inputs(ins[1:], rng)[k] for k in range(len(ins) - 1)]
    check_bit_exact(tosa, result.tosa, inputs=[domain])  # every value of the input type
    assert _count(result.tosa, "RESCALE") == _count(tosa, "RESCALE") - merged
    if shift_left:
        assert merged == 1


def shift_then_requantize(shape, zp=-3):
    """An int8 tensor shifted left into int32, then requantized to int8: two RESCALEs whose
    composition is one (the first loses nothing)."""
    b = Builder()
    mid = b.rescale(b.input(shape), "INT32", 1 << 30, 11, in_zp=zp)
    b.output(b.rescale(mid, "INT8", 1518500250, 50, out_zp=5))
    return b.tosa()


@pytest.mark.parametrize("target", ["ethos-u85-256", "ethos-u55-128"])
def test_merged_rescales_are_one_layer(target):
    from ethosu_ng.tosa_optimize.rewrites.merge_consecutive_rescales import (
        MergeConsecutiveRescales,
    )

    tosa = shift_then_requantize([1, 56, 56, 40])
    without = optimize(tosa, disabled=(MergeConsecutiveRescales,), target=target).tosa
    result = optimize(tosa, target=target)
    assert result.applied == {"MergeConsecutiveRescales": 1}
    before, after = _vela(without, target), _vela(result.tosa, target)
    assert after[0] < before[0] and after[1] < before[1]


@pytest.mark.parametrize("zp", [-128, -3, 0, 127])
def test_the_merged_rescale_runs_bit_exact_on_the_npu_model(zp):
    tosa = shift_then_requantize([1, 1, 16, 16], zp)
    result = optimize(tosa)
    assert result.applied == {"MergeConsecutiveRescales": 1}
    _, _, vela = _vela(result.tosa, "ethos-u55-128")
    every_int8 = DOMAIN["INT8"].reshape(1, 1, 16, 16)
    (want,) = run_reference(tosa, [every_int8])  # the graph as upstream made it
    (got,) = run_npu_model(vela, [every_int8])
    assert np.array_equal(got, want.reshape(-1)), np.abs(got - want.reshape(-1)).max()


# ---- MoveRescaleThroughDataMovement ---------------------------------------------------------


@st.composite
def rescale_beside_data_movement(draw):
    """A RESCALE separated by a TRANSPOSE or RESHAPE from the operator that folds it: toward
    the writer (an ADD/SUB/MUL's int32 result moved, then rescaled to int8) or toward the reader
    (an int8 operand rescaled to int32, moved, then added). A second reader of the moved
    tensor (``build_beside``) keeps the RESCALE where it is."""
    shape = [draw(st.integers(1, 4)) for _ in range(draw(st.integers(2, 4)))]
    return (
        draw(st.sampled_from(("writer", "reader"))),
        draw(st.sampled_from(("ADD", "SUB", "MUL"))),
        draw(st.sampled_from(("TRANSPOSE", "RESHAPE"))),
        shape,
        draw(st.integers(-128, 127)),
        (draw(st.integers(1 << 30, (1 << 31) - 1)), draw(st.integers(33, 45))),
    )


def build_beside(side, op, dm, shape, zp, scale, second_reader):
    b = Builder()

    def move(t):
        if dm == "TRANSPOSE":
            return b.transpose(t, list(range(len(shape)))[::-1])
        return b.reshape(t, [int(np.prod(shape))])

    if side == "writer":
        s = b.binary(op, *(b.rescale(b.input(shape), "INT32", *UNIT, in_zp=zp) for _ in "ab"))
        moved = move(s)
        b.output(b.rescale(moved, "INT8", *scale, out_zp=zp))
    else:
        moved = move(b.rescale(b.input(shape), "INT32", 1 << 30, 20, in_zp=zp))
        other = b.rescale(b.input(b.shape(moved)), "INT32", 1 << 30, 20)
        b.output(b.rescale(b.binary("ADD", moved, other), "INT8", *scale))
    if second_reader:
        b.output(moved)
    return b.tosa()


@pytest.mark.parametrize("second_reader", [False, True])
@FAST
@given(rescale_beside_data_movement())
def test_a_rescale_moves_through_data_movement_to_the_operator_that_folds_it(second_reader, case):
    from ethosu_ng.tosa_optimize.pipeline import REWRITES
    from ethosu_ng.tosa_optimize.rewrites.move_rescale_through_data_movement import (
        MoveRescaleThroughDataMovement,
    )

    tosa = build_beside(*case, second_reader)
    # Alone: the transpose rewrites would turn a unit-dimension transpose into a reshape.
    result = optimize(
        tosa, disabled=[r for r in REWRITES if r is not MoveRescaleThroughDataMovement]
    )
    check_bit_exact(tosa, result.tosa, trials=2, seed=11)
    moved = result.applied.get("MoveRescaleThroughDataMovement", 0)
    assert moved == (0 if second_reader else 1)
    if moved:  # the data movement now moves 8-bit data
        g = tosa_ir.read(result.tosa)
        dm = next(o for o in g.ops if o.op == case[2])
        assert g.tensors[dm.outputs[0]].dtype == "INT8"


def add_then_transpose(shape):
    b = Builder()
    s = b.binary("ADD", *(b.rescale(b.input(shape), "INT32", *UNIT, in_zp=-3) for _ in "ab"))
    b.output(b.rescale(b.transpose(s, [0, 3, 1, 2]), "INT8", 1 << 30, 31, out_zp=4))
    return b.tosa()


@pytest.mark.parametrize("target", ["ethos-u85-256", "ethos-u55-128"])
def test_a_result_rescale_moved_before_a_transpose_folds(target):
    from ethosu_ng.tosa_optimize.rewrites.move_rescale_through_data_movement import (
        MoveRescaleThroughDataMovement,
    )

    tosa = add_then_transpose([1, 56, 56, 40])
    without = optimize(tosa, disabled=(MoveRescaleThroughDataMovement,), target=target).tosa
    result = optimize(tosa, target=target)
    assert result.applied.get("MoveRescaleThroughDataMovement") == 1
    before, after = _vela(without, target), _vela(result.tosa, target)
    assert after[0] < before[0] and after[1] < before[1]


@pytest.mark.parametrize("zps", [(-128, 127), (0, 0), (127, -128)])
def test_the_moved_rescale_runs_bit_exact_on_the_npu_model(zps):
    tosa = add_then_transpose([1, 8, 8, 16])
    result = optimize(tosa)
    assert result.applied.get("MoveRescaleThroughDataMovement") == 1
    _, _, vela = _vela(result.tosa, "ethos-u55-128")
    ins, _ = tosa_io(tosa)
    rng = np.random.default_rng(2)
    extremes = [[np.full(i.shape, v, np.int8) for i, v in zip(ins, zps)]]
    for arrays in [random_inputs(ins, rng), *extremes]:
        (want,) = run_reference(tosa, arrays)  # the graph as upstream made it
        (got,) = run_npu_model(vela, arrays)
        assert np.array_equal(got, want.reshape(-1)), np.abs(got - want.reshape(-1)).max()
