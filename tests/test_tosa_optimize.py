# SPDX-License-Identifier: BSD-3-Clause
"""The TOSA optimisation stage (ethosu_ng/tosa_optimize): every rewrite is bit-exact on the TOSA
reference model, keeps the graph's IO, removes what it claims to remove, and the checker that
proves it can fail."""

import itertools
from collections import Counter

import numpy as np
import pytest
from _tosa_builder import Builder
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from ethosu_ng.tosa_graph import tosa_io, tosa_ops
from ethosu_ng.tosa_optimize import graph as tosa_ir
from ethosu_ng.tosa_optimize import pipeline
from ethosu_ng.tosa_optimize.pipeline import (
    REWRITES,
    RewriteOrderError,
    optimize,
    rewrite_pipeline,
)
from ethosu_ng.tosa_optimize.rewrites import _layout
from ethosu_ng.tosa_optimize.rewrites.collapse_transpose_rank import (
    collapse,
    is_image_layout_transpose,
)
from ethosu_ng.tosa_optimize.rewrites.compose_transposes import ComposeTransposes
from ethosu_ng.tosa_optimize.rewrites.decompose_transpose import DecomposeTranspose
from ethosu_ng.tosa_optimize.rewrites.fuse_transpose_chain import fused_permutation, transpose_cost
from ethosu_ng.tosa_optimize.rewrites.slice_before_transpose import (
    SliceBeforeTranspose,
    window_before_transpose,
    window_through_unit_reshape,
)
from ethosu_ng.tosa_optimize.rewrites.unit_dim_transpose_to_reshape import moves_only_unit_dims
from ethosu_ng.tosa_optimize.verify import NotBitExact, check_bit_exact

FAST = settings(
    max_examples=25, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck)
)


def count(tosa: bytes) -> Counter:
    return Counter(o.op for o in tosa_ops(tosa))


def transposes(tosa: bytes):
    """(input shape, perm) of every TRANSPOSE."""
    g = tosa_ir.read(tosa)
    return [(g.shape_of(o.inputs[0]), _layout.perm_of(o)) for o in g.ops if o.op == "TRANSPOSE"]


def is_block_swap(shape_perm) -> bool:
    return len(shape_perm[0]) == 3 and tuple(shape_perm[1]) == (1, 0, 2)


def optimised(tosa: bytes, **kw):
    """Optimise, then prove it: same IO, same bits on random inputs, no transpose added but the
    rank-3 leading-block swaps DecomposeTranspose splits a transpose into (SliceBeforeTranspose's
    smaller transposes, one per slice, are checked by its own tests)."""
    result = optimize(tosa, **kw)
    assert tosa_io(result.tosa) == tosa_io(tosa)
    before, after = transposes(tosa), transposes(result.tosa)
    if not result.applied.get("SliceBeforeTranspose"):  # a smaller transpose per slice
        assert len(after) <= len(before) or result.applied.get("DecomposeTranspose")
        assert sum(not is_block_swap(t) for t in after) <= sum(not is_block_swap(t) for t in before)
    check_bit_exact(tosa, result.tosa, trials=2, seed=1)
    return result


@st.composite
def shape_and_perm(draw, min_rank=1, max_rank=5, dims=(1, 2, 3)):
    rank = draw(st.integers(min_rank, max_rank))
    shape = [draw(st.sampled_from(dims)) for _ in range(rank)]
    perm = draw(st.permutations(range(rank)))
    return shape, list(perm)


# ---- the IR ------------------------------------------------------------------------------


def test_a_graph_read_and_written_unchanged_is_byte_identical():
    b = Builder()
    x = b.input([2, 3, 4])
    y = b.rescale(b.transpose(x, [2, 0, 1]), "INT32", in_zp=3)
    y = b.binary("ADD", y, b.const(np.arange(4).reshape(4, 1, 1) * 1000, "INT32"))
    y = b.clamp(b.rescale(b.reshape(y, [4, 6]), "INT8", shift=40), -100, 100)
    b.output(y)
    tosa = b.tosa()
    assert tosa_ir.write(tosa_ir.read(tosa)) == tosa


def test_a_graph_no_rewrite_applies_to_comes_back_as_the_same_bytes():
    b = Builder()
    b.output(b.clamp(b.input([2, 3]), -5, 5))
    tosa = b.tosa()
    result = optimize(tosa)
    assert result.tosa is tosa and not result.changed


# ---- each rewrite, bit-exact ---------------------------------------------------------------


@FAST
@given(shape_and_perm(), st.data())
def test_transpose_pairs_compose_and_cancel(sp, data):
    shape, p1 = sp
    p2 = data.draw(st.permutations(range(len(shape))))
    b = Builder()
    b.output(b.clamp(b.transpose(b.transpose(b.input(shape), p1), p2), -50, 50))
    result = optimised(b.tosa())
    left = count(result.tosa)["TRANSPOSE"]
    if _layout.is_identity(_layout.compose(p1, p2)):
        assert left == 0
    else:
        assert left <= 1


@FAST
@given(shape_and_perm())
def test_a_transpose_of_unit_dimensions_becomes_a_reshape(sp):
    shape, perm = sp
    b = Builder()
    b.output(b.clamp(b.transpose(b.input(shape), perm), -50, 50))
    result = optimised(b.tosa())
    if moves_only_unit_dims(shape, perm):
        assert count(result.tosa)["TRANSPOSE"] == 0
    else:
        assert count(result.tosa)["TRANSPOSE"] >= 1


@FAST
@given(shape_and_perm(min_rank=2, max_rank=6, dims=(1, 2, 3)))
def test_a_transpose_runs_at_its_lowest_rank(sp):
    shape, perm = sp
    b = Builder()
    b.output(b.clamp(b.transpose(b.input(shape), perm), -50, 50))
    result = optimised(b.tosa())
    ranks = [
        len(tosa_ir.read(result.tosa).tensors[o.inputs[0]].shape)
        for o in tosa_ops(result.tosa)
        if o.op == "TRANSPOSE"
    ]
    collapsed = collapse(shape, perm)
    if is_image_layout_transpose(shape, perm):
        assert ranks in ([], [4])  # left to Vela, which folds it into its neighbour
    elif collapsed is not None and _layout.swap_plan(collapsed[1]) is None:
        assert ranks == [len(collapsed[0])]
    else:  # split into rank-3 block swaps (below)
        assert set(ranks) <= {3, len(shape)}


# ---- DecomposeTranspose ---------------------------------------------------------------------


@pytest.mark.parametrize("rank", [4, 5, 6])
def test_block_swap_plans_reach_every_permutation_that_keeps_the_last_dim(rank):
    """Exhaustive over the perms of rank 4-6 whose last dim stays: the swaps, applied to views
    of an array, give np.transpose's element order; a perm that moves the last dim has none."""
    shape = [2, 3, 4, 5, 6, 7][:rank]
    x = np.arange(int(np.prod(shape))).reshape(shape)
    for perm in itertools.permutations(range(rank)):
        plan = _layout.swap_plan(perm)
        if perm[-1] != rank - 1:
            assert plan is None
            continue
        assert len(plan) <= rank - 1, (perm, plan)
        y = x
        for view in _layout.swap_views(shape, plan):
            y = y.reshape(view).transpose(1, 0, 2)
        assert np.array_equal(y.reshape(x.transpose(perm).shape), x.transpose(perm)), perm


@FAST
@given(shape_and_perm(min_rank=4, max_rank=6, dims=(1, 2, 3, 4)))
def test_a_high_rank_transpose_becomes_rank3_block_swaps(sp):
    shape, perm = sp
    b = Builder()
    b.output(b.clamp(b.transpose(b.input(shape), perm), -50, 50))
    result = optimised(b.tosa())  # bit-exact on the reference model
    after = transposes(result.tosa)
    collapsed = collapse(shape, perm) or (shape, perm)
    unsplit = is_image_layout_transpose(shape, perm) or moves_only_unit_dims(shape, perm)
    if unsplit or _layout.swap_plan(collapsed[1]) is None:
        assert not result.applied.get("DecomposeTranspose")
    else:
        assert result.applied.get("DecomposeTranspose") == 1
        assert all(is_block_swap(t) for t in after), after
        assert len(after) == len(_layout.swap_plan(collapsed[1]))


@pytest.mark.parametrize("target", ["ethos-u55-128", "ethos-u85-256"])
def test_block_swaps_cost_vela_fewer_cycles(target):
    """What the rewrite is for, checked against Vela's own estimate: timm's qkv permute and the
    heads-back transpose, alone in a graph."""
    from ethosu_ng import EthosUNGCompileSpec
    from ethosu_ng.vela.compiler import compile_tosa

    spec = EthosUNGCompileSpec(target)
    for shape, perm in [([64, 16, 3, 4, 24], [2, 0, 3, 1, 4]), ([64, 16, 4, 24], [0, 2, 1, 3])]:
        b = Builder()
        b.output(b.transpose(b.input(shape), perm))
        tosa = b.tosa()
        split = optimised(tosa).tosa
        cycles = [
            float(compile_tosa(t, spec, "transpose").summary["cycles_npu"]) for t in (tosa, split)
        ]
        assert cycles[1] < 0.5 * cycles[0], (shape, perm, cycles)


@st.composite
def reshape_chain(draw):
    shape = [draw(st.sampled_from((1, 2, 3, 4))) for _ in range(draw(st.integers(1, 4)))]
    total = int(np.prod(shape))
    chain = []
    for _ in range(draw(st.integers(1, 3))):
        dims, rest = [], total
        while rest > 1:
            d = draw(st.sampled_from([k for k in range(1, rest + 1) if rest % k == 0]))
            dims.append(d)
            rest //= d
        if draw(st.booleans()):
            dims.insert(draw(st.integers(0, len(dims))), 1)
        chain.append(dims or [1])
    return shape, chain


@FAST
@given(reshape_chain())
def test_reshape_chains_merge_and_identity_reshapes_go(sc):
    shape, chain = sc
    b = Builder()
    y = b.input(shape)
    for dims in chain:
        y = b.reshape(y, dims)
    b.output(b.clamp(y, -50, 50))
    result = optimised(b.tosa())
    expected = 0 if list(chain[-1]) == list(shape) else 1
    assert count(result.tosa)["RESHAPE"] == expected


@FAST
@given(shape_and_perm(min_rank=2, max_rank=4, dims=(1, 2, 3, 4)), st.data())
def test_a_transpose_sinks_through_elementwise_ops_and_cancels(sp, data):
    """T -> RESCALE -> ADD(broadcast constant) -> MUL(T(z)) -> RESCALE -> CLAMP -> T^-1."""
    shape, perm = sp
    inv = _layout.inverse(perm)
    bshape = [data.draw(st.sampled_from((1, d))) for d in _layout.permuted(shape, perm)]
    rng = np.random.default_rng(0)
    b = Builder()
    x, z = b.input(shape), b.input(shape)
    y = b.rescale(b.transpose(x, perm), "INT32", in_zp=3)
    y = b.binary("ADD", y, b.const(rng.integers(-999, 999, bshape), "INT32"))
    y = b.binary("MUL", y, b.transpose(b.rescale(z, "INT32"), perm))
    y = b.clamp(b.rescale(y, "INT8", shift=38, out_zp=-5), -100, 100)
    b.output(b.transpose(y, inv))
    result = optimised(b.tosa())
    assert count(result.tosa)["TRANSPOSE"] == 0


@FAST
@given(shape_and_perm(min_rank=2, max_rank=4, dims=(2, 3, 4)))
def test_a_transpose_meets_one_behind_unary_ops_on_the_other_operand(sp):
    """T^-1(RESCALE(ADD(RESCALE(T(x)), RESCALE(T(z))))): all three transposes go."""
    shape, perm = sp
    if _layout.is_identity(perm):
        return
    b = Builder()
    x, z = b.input(shape), b.input(shape)
    y = b.binary(
        "ADD", b.rescale(b.transpose(x, perm), "INT32"), b.rescale(b.transpose(z, perm), "INT32")
    )
    b.output(b.transpose(b.rescale(y, "INT8", shift=31), _layout.inverse(perm)))
    result = optimised(b.tosa())
    assert count(result.tosa)["TRANSPOSE"] == 0


@FAST
@given(st.integers(1, 4), st.integers(1, 4), st.integers(2, 5), st.booleans())
def test_a_transpose_sinks_through_a_reshape_that_splits_tokens(h, w, c, residual):
    """tokens (1, H*W, C) -> transpose(1, 2) -> reshape (1, C, H, W) -> NCHW->NHWC transpose: the
    transposes cancel. With ``residual`` the NCHW tensor has a second reader that needs it, so
    the transpose would have to stay there: nothing moves (no transpose is ever added)."""
    b = Builder()
    t = b.reshape(b.transpose(b.input([1, h * w, c]), [0, 2, 1]), [1, c, h, w])
    y = b.clamp(b.transpose(t, [0, 2, 3, 1]), -20, 20)
    if residual:
        y = b.rescale(
            b.binary(
                "ADD", b.rescale(b.transpose(y, [0, 3, 1, 2]), "INT32"), b.rescale(t, "INT32")
            ),
            "INT8",
            shift=31,
        )
    b.output(y)
    result = optimised(b.tosa())
    assert count(result.tosa)["TRANSPOSE"] <= (3 if residual else 0)


def test_a_transpose_is_not_moved_where_it_would_stay():
    """T -> RESCALE -> graph output: moving T below the RESCALE removes nothing."""
    b = Builder()
    b.output(b.rescale(b.transpose(b.input([2, 3, 4]), [2, 0, 1]), "INT32"))
    assert "SinkTransposeToCancel" not in optimize(b.tosa()).applied


def test_a_per_channel_rescale_stops_a_transpose():
    b = Builder()
    y = b.rescale(b.transpose(b.input([2, 3, 4]), [0, 2, 1]), "INT32", channels=3)
    b.output(b.transpose(y, [0, 2, 1]))
    result = optimised(b.tosa())
    assert count(result.tosa)["TRANSPOSE"] == 2


def test_graph_outputs_keep_their_names_shapes_and_order():
    b = Builder()
    x = b.input([2, 3])
    t = b.transpose(b.transpose(x, [1, 0]), [1, 0])  # identity, but a graph output
    b.output(t)
    b.output(b.transpose(x, [1, 0]))
    tosa = b.tosa()
    result = optimised(tosa)
    assert tosa_io(result.tosa) == tosa_io(tosa)


# ---- the checker can fail ------------------------------------------------------------------


def test_the_checker_catches_a_wrong_permutation():
    b = Builder()
    b.output(b.clamp(b.transpose(b.input([2, 3, 4]), [2, 0, 1]), -50, 50))
    tosa = b.tosa()
    g = tosa_ir.read(tosa)
    g.ops[0].attr["perms"] = [2, 1, 0]  # same output shape only if dims agree: pick them so
    g.tensors[g.ops[0].outputs[0]].shape = [4, 3, 2]
    g.tensors[g.outputs[0]].shape = [4, 3, 2]
    with pytest.raises(NotBitExact, match="IO differs"):
        check_bit_exact(tosa, tosa_ir.write(g))
    b = Builder()
    b.output(b.clamp(b.transpose(b.input([3, 3]), [1, 0]), -50, 50))
    tosa = b.tosa()
    g = tosa_ir.read(tosa)
    g.ops[0].attr["perms"] = [0, 1]  # same shape, wrong elements
    with pytest.raises(NotBitExact, match="differs at"):
        check_bit_exact(tosa, tosa_ir.write(g))


def test_a_rewrite_that_changes_a_bit_is_named(monkeypatch):
    from ethosu_ng.tosa_optimize.rewrites import compose_transposes

    # Composing in the wrong order: a valid graph (cubic shape), the wrong elements.
    monkeypatch.setattr(
        compose_transposes, "compose", lambda first, second: _layout.compose(second, first)
    )
    b = Builder()
    b.output(b.clamp(b.transpose(b.transpose(b.input([3, 3, 3]), [1, 2, 0]), [1, 0, 2]), -9, 9))
    with pytest.raises(NotBitExact, match="on their own: \\['ComposeTransposes'\\]"):
        optimize(b.tosa(), verify=True)


# ---- the driver ----------------------------------------------------------------------------


def test_rewrite_order_is_declared_and_checked(monkeypatch):
    assert rewrite_pipeline() == REWRITES
    assert ComposeTransposes not in rewrite_pipeline(disabled=[ComposeTransposes])
    with pytest.raises(RewriteOrderError, match="names no TOSA rewrite"):
        rewrite_pipeline(disabled=[int])
    monkeypatch.setattr(pipeline, "REWRITES", tuple(reversed(REWRITES)))
    with pytest.raises(RewriteOrderError, match="must run after"):
        rewrite_pipeline()


@pytest.mark.parametrize("target", ["ethos-u55-128", "ethos-u65-256", "ethos-u85-256"])
def test_a_rewrite_runs_only_on_the_target_families_it_names(target):
    family = pipeline.target_family(target)
    kept = rewrite_pipeline(target=target)
    for r in REWRITES:
        assert (r in kept) == (r.families is None or family in r.families), r.__name__
    assert rewrite_pipeline(target=None) == REWRITES


def test_disabled_rewrites_do_not_run():
    b = Builder()
    b.output(b.clamp(b.transpose(b.transpose(b.input([2, 3]), [1, 0]), [1, 0]), -9, 9))
    tosa = b.tosa()
    assert not optimize(tosa, disabled=REWRITES).changed
    assert optimize(tosa).applied.get("ComposeTransposes") == 1


def test_op_sources_follow_the_rewritten_operators():
    b = Builder()
    x = b.input([1, 4, 6])
    t = b.reshape(b.transpose(x, [0, 2, 1]), [1, 6, 2, 2])
    b.output(b.clamp(b.transpose(t, [0, 2, 3, 1]), -20, 20))
    tosa = b.tosa()
    sources = [
        {"tosa_output": o.outputs[0], "node": f"node_{k}", "nn_module_stack": None}
        for k, o in enumerate(tosa_ops(tosa))
    ]
    result = optimised(tosa, op_sources=sources)
    mapped = {s["tosa_output"]: s["node"] for s in result.op_sources}
    before = {s["tosa_output"]: s["node"] for s in sources}
    for op in tosa_ops(result.tosa):
        assert op.outputs[0] in mapped, op  # every operator still has its source
    assert set(mapped.values()) <= set(before.values())
    clamp = next(o for o in tosa_ops(result.tosa) if o.op == "CLAMP")
    assert mapped[clamp.outputs[0]] == before[clamp.outputs[0]]


# ---- FuseTransposeChain ---------------------------------------------------------------------


@st.composite
def data_movement_chain(draw):
    """An input shape and 2-5 steps of ("TRANSPOSE", perm) / ("RESHAPE", shape) on it."""
    shape = [draw(st.sampled_from((1, 2, 3, 4, 6))) for _ in range(draw(st.integers(2, 4)))]
    steps, cur = [], list(shape)
    for _ in range(draw(st.integers(2, 5))):
        if draw(st.booleans()):
            perm = list(draw(st.permutations(range(len(cur)))))
            steps.append(("TRANSPOSE", perm))
            cur = [cur[p] for p in perm]
        else:  # regroup the prime factors of the size into 1-4 dims (units included)
            factors = [f for d in cur for f in _prime_factors(d)]
            factors = draw(st.permutations(factors)) if factors else []
            cuts = sorted(draw(st.lists(st.integers(0, len(factors)), max_size=3)))
            bounds = [0, *cuts, len(factors)]
            cur = [int(np.prod(factors[a:b], dtype=int)) for a, b in zip(bounds, bounds[1:])]
            steps.append(("RESHAPE", list(cur)))
    return shape, steps


def _prime_factors(n):
    out, p = [], 2
    while n > 1:
        while n % p == 0:
            out.append(p)
            n //= p
        p += 1
    return out


def _run_chain(x, steps):
    for kind, arg in steps:
        x = x.transpose(arg) if kind == "TRANSPOSE" else x.reshape(arg)
    return x


@settings(max_examples=300, deadline=None, derandomize=True)
@given(data_movement_chain())
def test_a_chain_is_one_permutation_of_its_atoms(chain):
    """Pure arithmetic, many examples: the fused permutation moves every element where the
    chain does, or the chain is declared not fusable."""
    shape, steps = chain
    x = np.arange(int(np.prod(shape))).reshape(shape)
    want = _run_chain(x, steps)
    fused = fused_permutation(shape, steps)
    if fused is None:
        return
    atoms, perm = fused
    assert all(a > 1 for a in atoms)
    got = x.reshape(atoms).transpose(perm).reshape(want.shape)
    assert np.array_equal(got, want), (shape, steps, atoms, perm)


@FAST
@given(data_movement_chain())
def test_a_data_movement_chain_fuses_bit_exactly_and_never_costs_more(chain):
    shape, steps = chain
    b = Builder()
    y = b.input(shape)
    for kind, arg in steps:
        y = b.transpose(y, arg) if kind == "TRANSPOSE" else b.reshape(y, arg)
    b.output(b.clamp(y, -50, 50))
    tosa = b.tosa()
    result = optimised(tosa)  # bit-exact on the reference model

    def cost(t):
        return sum(transpose_cost(s, p) for s, p in transposes(t))

    assert cost(result.tosa) <= cost(tosa)


def test_mobilevit_unfold_keeps_the_channels_innermost():
    """NHWC -> NCHW, ``[C*nh, ph, nw, pw]`` ``(0, 2, 1, 3)``, ``[B, C, N, P]`` ``(0, 3, 2, 1)``:
    one permutation that keeps the channels innermost, run as rank-3 block swaps."""
    b = Builder()
    y = b.transpose(b.input([1, 8, 8, 6]), [0, 3, 1, 2])
    y = b.transpose(b.reshape(y, [24, 2, 4, 2]), [0, 2, 1, 3])
    y = b.transpose(b.reshape(y, [1, 6, 16, 4]), [0, 3, 2, 1])
    b.output(b.clamp(b.reshape(y, [4, 16, 6]), -50, 50))
    result = optimised(b.tosa())
    assert result.applied.get("FuseTransposeChain") == 1
    after = transposes(result.tosa)
    assert after and all(is_block_swap(t) and t[0][-1] % 6 == 0 for t in after), after


def test_a_constant_is_not_split_or_fused():
    """Vela moves constant data at compile time; the rewrites leave transposes of constants."""
    b = Builder()
    c = b.const(np.arange(2 * 3 * 4 * 5).reshape(2, 3, 4, 5) % 100, "INT8")
    t = b.transpose(b.reshape(b.transpose(c, [0, 2, 1, 3]), [2, 4, 15]), [1, 0, 2])
    b.output(b.binary("ADD", b.rescale(b.input([4, 2, 15]), "INT32"), b.rescale(t, "INT32")))
    result = optimize(b.tosa())
    assert not {"DecomposeTranspose", "FuseTransposeChain"} & set(result.applied)


# ---- SliceBeforeTranspose -------------------------------------------------------------------


def transposed_elements(tosa: bytes) -> int:
    return sum(int(np.prod(shape)) for shape, _ in transposes(tosa))


READERS = ("clamp", "reshape", "output")  # clamp reads a slice in place, the others copy it


@st.composite
def slices_of_a_transpose(draw):
    """x -> TRANSPOSE -> [a RESHAPE adding or dropping unit dims] -> 1-3 SLICEs, each read by a
    clamp, a reshape or the graph output, and maybe a reader of the transpose that is not a
    slice."""
    shape, perm = draw(shape_and_perm(min_rank=2, max_rank=4, dims=(1, 2, 3, 4)))
    t_shape = _layout.permuted(shape, perm)
    view = list(t_shape)
    if draw(st.booleans()):  # drop the unit dims, then insert some
        view = [d for d in t_shape if d != 1]
        for _ in range(draw(st.integers(0, 2))):
            view.insert(draw(st.integers(0, len(view))), 1)
        view = view or [1]
    windows = []
    for _ in range(draw(st.integers(1, 3))):
        start = [draw(st.integers(0, d - 1)) for d in view]
        size = [draw(st.integers(1, d - a)) for a, d in zip(start, view)]
        windows.append((start, size, draw(st.sampled_from(READERS))))
    return shape, perm, view, windows, draw(st.booleans())


def _window(a, start, size):
    return a[tuple(slice(s, s + n) for s, n in zip(start, size))]


@settings(max_examples=300, deadline=None, derandomize=True)
@given(slices_of_a_transpose())
def test_a_window_of_a_transpose_is_the_transpose_of_a_window(case):
    """Pure arithmetic, many examples: the window mapped back through the unit-dim view and the
    permutation, taken from the input and transposed, holds the elements the slice reads."""
    shape, perm, view, windows, _ = case
    x = np.arange(int(np.prod(shape))).reshape(shape)
    t = x.transpose(perm)
    for start, size, _ in windows:
        want = _window(t.reshape(view), start, size)
        x_start, x_size = window_before_transpose(
            perm, window_through_unit_reshape(t.shape, view, (start, size))
        )
        got = _window(x, x_start, x_size).transpose(perm).reshape(want.shape)
        assert np.array_equal(got, want), (shape, perm, view, start, size)


def _slices_of_a_transpose(shape, perm, view, windows, other_reader) -> bytes:
    b = Builder()
    t = b.transpose(b.input(shape), perm)
    v = b.reshape(t, view) if view != _layout.permuted(shape, perm) else t
    for start, size, reader in windows:
        s = b.slice(v, start, size)
        if reader == "clamp":
            b.output(b.clamp(s, -50, 50))
        elif reader == "reshape":
            b.output(b.clamp(b.reshape(s, [int(np.prod(size))]), -50, 50))
        else:
            b.output(s)
    if other_reader:
        b.output(b.clamp(t, -9, 9))
    return b.tosa()


@FAST
@given(slices_of_a_transpose(), st.sampled_from(["ethos-u55-128", "ethos-u85-256"]))
@example(([2, 3], [1, 0], [3, 2], [([0, 0], [3, 2], "clamp")], False), "ethos-u85-256")  # all
@example(
    (
        [2, 3],
        [1, 0],
        [1, 3, 2],
        [([0, 0, 0], [1, 2, 2], "clamp"), ([0, 1, 0], [1, 2, 2], "output")],
        False,
    ),
    "ethos-u85-256",
)
@example(([4, 4], [1, 0], [4, 4], [([0, 0], [4, 3], "clamp")], False), "ethos-u55-128")  # stays
@example(([4, 4], [1, 0], [4, 4], [([0, 0], [4, 3], "output")], False), "ethos-u55-128")  # stays
@example(([4, 4], [1, 0], [4, 4], [([0, 0], [4, 1], "output")], False), "ethos-u55-128")  # moves
def test_slices_of_a_transpose_become_transposes_of_slices(case, target):
    """Bit-exact for every permutation, window, unit-dim view and reader; applied exactly where
    the transpose goes and fewer elements are moved: before, the transpose moves all of them and
    each slice not read in place (by a reshape, the graph output) copies its part; after, each
    slice is copied and transposed, in one pass on Ethos-U85; on Ethos-U55 in two, only where no
    slice is read in place and the slices keep under half. Where the slices keep fewer elements
    than the transpose writes, the transposes then move fewer."""
    shape, perm, view, windows, other_reader = case
    tosa = _slices_of_a_transpose(*case)
    # Without the block swaps, so that transposed elements count the bytes moved.
    result = optimised(tosa, disabled=[DecomposeTranspose], target=target)  # bit-exact
    kept = sum(int(np.prod(size)) for _, size, _ in windows)
    copied = sum(int(np.prod(size)) for _, size, reader in windows if reader != "clamp")
    if target.startswith("ethos-u85"):
        fewer = kept < int(np.prod(shape)) + copied
    else:  # two passes, and a slice read in place stays
        fewer = copied == kept and 2 * kept < int(np.prod(shape))
    # A transpose that only moves unit dims is a reshape (UnitDimTransposeToReshape) first.
    moves_data = not moves_only_unit_dims(shape, perm)
    applies = moves_data and not other_reader and fewer
    assert bool(result.applied.get("SliceBeforeTranspose")) == applies, result.applied
    if applies and kept < int(np.prod(shape)):
        assert transposed_elements(result.tosa) < transposed_elements(tosa)


@pytest.mark.parametrize("reader", ["add", "max_pool"])
@pytest.mark.parametrize("hw", [(64, 64), (98, 62)])
def test_a_slice_read_in_place_keeps_the_layout_transpose_on_u55(reader, hw):
    """A valid stride-2 layer on a network's NCHW input: its TOSA slices the last row and
    column off after the layout transpose, and the reader takes the slice in place. Moved
    before the transpose on Ethos-U55, the slice would be a MemoryCopy of its own and the
    transpose a second pass (squeezenet1_1's first layer: 151,600 cycles more on
    ethos-u55-128); on Ethos-U85 Vela does the slice and the transpose in one pass. Checked
    against Vela's estimate both ways."""
    from ethosu_ng import EthosUNGCompileSpec
    from ethosu_ng.vela.compiler import compile_tosa

    h, w = hw
    b = Builder()
    s = b.slice(
        b.transpose(b.input([1, 3, h, w]), [0, 2, 3, 1]), [0, 0, 0, 0], [1, h - 1, w - 1, 3]
    )
    if reader == "add":
        other = b.rescale(b.input([1, h - 1, w - 1, 3]), "INT32")
        b.output(b.binary("ADD", b.rescale(s, "INT32"), other))
    else:
        oh, ow = (h - 1 - 3) // 2 + 1, (w - 1 - 3) // 2 + 1
        b.output(
            b.op(
                "MAX_POOL2D",
                [s],
                [1, oh, ow, 3],
                "INT8",
                kernel=[3, 3],
                stride=[2, 2],
                pad=[0, 0, 0, 0],
                nan_mode=1,
            )
        )
    tosa = b.tosa()
    for target, moved in (("ethos-u55-128", False), ("ethos-u85-256", True)):
        spec = EthosUNGCompileSpec(target)
        kept = optimize(tosa, disabled=[SliceBeforeTranspose], target=target).tosa
        result = optimised(tosa, target=target)
        assert bool(result.applied.get("SliceBeforeTranspose")) == moved, (target, result.applied)
        moved_first = SliceBeforeTranspose("ethos-u85")  # the rule that moves it anywhere
        g = tosa_ir.read(kept)
        assert moved_first.apply(g) == 1
        cycles = {
            name: float(compile_tosa(t, spec, name).summary["cycles_npu"])
            for name, t in (("kept", kept), ("moved", tosa_ir.write(g)))
        }
        if moved:
            assert cycles["moved"] <= cycles["kept"], (target, cycles)
        else:
            assert cycles["moved"] > cycles["kept"], (target, cycles)


@st.composite
def layout_transpose_slice(draw):
    """A network's NCHW input, its layout transpose, one window of it and the window's reader,
    for one target: the class squeezenet1_1's first layer is in."""
    c = draw(st.sampled_from([3, 4, 8]))
    h, w = draw(st.integers(16, 96)), draw(st.integers(16, 96))
    top, left = draw(st.integers(0, 2)), draw(st.integers(0, 2))
    sh, sw = draw(st.integers(h // 3, h - top)), draw(st.integers(w // 3, w - left))
    reader = draw(st.sampled_from(["add", "max_pool", "clamp", "reshape", "output"]))
    if reader == "max_pool":  # a valid 3x3 stride-2 window count
        sh, sw = sh - (sh - 3) % 2, sw - (sw - 3) % 2
    target = draw(st.sampled_from(["ethos-u55-128", "ethos-u85-256"]))
    return c, h, w, (top, left, sh, sw), reader, target


@settings(max_examples=20, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(layout_transpose_slice())
def test_a_slice_of_the_layout_transpose_never_costs_more(case):
    """Over windows, readers, sizes and both families, the pipeline's program never costs Vela
    more NPU cycles than the same pipeline without SliceBeforeTranspose."""
    from ethosu_ng import EthosUNGCompileSpec
    from ethosu_ng.vela.compiler import compile_tosa

    c, h, w, (top, left, sh, sw), reader, target = case
    b = Builder()
    t = b.transpose(b.input([1, c, h, w]), [0, 2, 3, 1])
    s = b.slice(t, [0, top, left, 0], [1, sh, sw, c])
    if reader == "add":
        b.output(
            b.binary("ADD", b.rescale(s, "INT32"), b.rescale(b.input([1, sh, sw, c]), "INT32"))
        )
    elif reader == "max_pool":
        out = [1, (sh - 3) // 2 + 1, (sw - 3) // 2 + 1, c]
        b.output(
            b.op(
                "MAX_POOL2D",
                [s],
                out,
                "INT8",
                kernel=[3, 3],
                stride=[2, 2],
                pad=[0, 0, 0, 0],
                nan_mode=1,
            )
        )
    elif reader == "clamp":
        b.output(b.clamp(s, -50, 50))
    elif reader == "reshape":
        b.output(b.clamp(b.reshape(s, [sh * sw, c]), -50, 50))
    else:
        b.output(s)
    tosa = b.tosa()
    spec = EthosUNGCompileSpec(target)
    ours = optimize(tosa, target=target)
    kept = optimize(tosa, target=target, disabled=[SliceBeforeTranspose])
    if not ours.applied.get("SliceBeforeTranspose"):
        return  # the same program as without it
    check_bit_exact(tosa, ours.tosa, trials=1, seed=3)
    cycles = [float(compile_tosa(g.tosa, spec, "p").summary["cycles_npu"]) for g in (ours, kept)]
    assert cycles[0] <= cycles[1], (case, cycles)


def test_levit_qkv_split_transposes_only_what_each_head_part_keeps():
    """levit's ``qkv.view(1, N, heads, 64).split([16, 16, 32], 3)``, q and v permuted
    ``(0, 2, 1, 3)`` (one transpose), k ``(0, 2, 3, 1)`` (another), each read through the
    reshape that drops the batch: three transposes of a third, a quarter and a half of the
    tensor instead of two of all of it."""
    n, heads = 16, 4
    b = Builder()
    x = b.reshape(b.input([n, heads * 64]), [1, n, heads, 64])
    qv = b.reshape(b.transpose(x, [0, 2, 1, 3]), [heads, n, 64])
    k = b.reshape(b.transpose(x, [0, 2, 3, 1]), [heads, 64, n])
    b.output(b.clamp(b.slice(qv, [0, 0, 0], [heads, n, 16]), -9, 9))
    b.output(b.clamp(b.slice(k, [0, 16, 0], [heads, 16, n]), -9, 9))
    b.output(b.clamp(b.slice(qv, [0, 0, 32], [heads, n, 32]), -9, 9))
    tosa = b.tosa()
    result = optimised(tosa, disabled=[DecomposeTranspose], target="ethos-u85-256")
    assert result.applied.get("SliceBeforeTranspose") == 2
    assert transposed_elements(result.tosa) == n * heads * 64
    assert transposed_elements(tosa) == 2 * n * heads * 64


def test_no_rank5_slice_is_made():
    """A rank-5 transpose that keeps its rank (no two dims stay adjacent) is left to its slices:
    Vela 5.1 crashes on some rank-5 slices for ethos-u55."""
    b = Builder()
    t = b.transpose(b.input([2, 3, 2, 3, 2]), [4, 3, 2, 1, 0])
    b.output(b.clamp(b.slice(t, [0, 0, 0, 0, 0], [1, 3, 2, 3, 2]), -9, 9))
    assert "SliceBeforeTranspose" not in optimised(b.tosa()).applied


def test_a_slice_before_a_transpose_is_not_made_for_a_constant():
    b = Builder()
    c = b.const(np.arange(24).reshape(2, 3, 4) % 100, "INT8")
    s = b.slice(b.transpose(c, [2, 0, 1]), [0, 0, 0], [2, 2, 3])
    b.output(b.binary("ADD", b.rescale(b.input([2, 2, 3]), "INT32"), b.rescale(s, "INT32")))
    assert "SliceBeforeTranspose" not in optimize(b.tosa()).applied
    assert SliceBeforeTranspose in REWRITES
