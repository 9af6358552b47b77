# SPDX-License-Identifier: BSD-3-Clause
# SPDX-License-Identifier: Apache-2.0
"""``MoveRescaleThroughDataMovement`` over every kind of data movement it moves through
(TRANSPOSE, RESHAPE, SLICE, TILE, REVERSE, PAD, CONCAT), toward the writer and toward the reader:
bit-exact on the TOSA reference model over drawn scales, zero points, shapes, padding values and
consumer kinds; the data movement then moves 8-bit data; a second reader keeps it where it is."""

import numpy as np
import pytest
from _tosa_builder import Builder
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_rescale_rewrites import UNIT, _vela

from ethosu_ng.tosa_optimize import graph as tosa_ir
from ethosu_ng.tosa_optimize.graph import ShapeValue
from ethosu_ng.tosa_optimize.pipeline import REWRITES, optimize
from ethosu_ng.tosa_optimize.rewrites.move_rescale_through_data_movement import (
    MoveRescaleThroughDataMovement,
)
from ethosu_ng.tosa_optimize.verify import check_bit_exact

FAST = settings(
    max_examples=40, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck)
)
KINDS = ("TRANSPOSE", "RESHAPE", "SLICE", "TILE", "REVERSE", "PAD", "CONCAT")
ONLY_MOVE = [r for r in REWRITES if r is not MoveRescaleThroughDataMovement]


def _shape_const(b: Builder, values) -> str:
    s = b._name("shape")
    vals = np.asarray(values, dtype="<i8")
    b.g.shapes[s] = ShapeValue(s, len(vals), list(vals.tobytes()))
    b.g.ops.append(tosa_ir.Operator("CONST_SHAPE", [], [s], source=s))
    return s


def move(b: Builder, kind: str, xs, pad_value: int):
    """``kind`` applied to ``xs`` (two tensors for CONCAT, one otherwise)."""
    x = xs[0]
    shape, dtype = b.shape(x), b.dtype(x)
    rank = len(shape)
    if kind == "TRANSPOSE":
        return b.transpose(x, list(range(rank))[::-1])
    if kind == "RESHAPE":
        return b.reshape(x, [int(np.prod(shape))])
    if kind == "SLICE":
        start = [d // 2 for d in shape]
        size = [d - s for d, s in zip(shape, start)]
        return b._op("SLICE", [x, _shape_const(b, start), _shape_const(b, size)], size, dtype)
    if kind == "TILE":
        mult = [2] + [1] * (rank - 1)
        out = [d * m for d, m in zip(shape, mult)]
        return b._op("TILE", [x, _shape_const(b, mult)], out, dtype)
    if kind == "REVERSE":
        return b._op("REVERSE", [x], shape, dtype, {"axis": rank - 1})
    if kind == "PAD":
        padding = [1, 0] + [0, 1] * (rank - 1)
        out = [d + padding[2 * k] + padding[2 * k + 1] for k, d in enumerate(shape)]
        pad = b.const([pad_value], dtype)
        return b._op("PAD", [x, _shape_const(b, padding), pad], out, dtype)
    out = [shape[0] + b.shape(xs[1])[0], *shape[1:]]
    return b._op("CONCAT", list(xs), out, dtype, {"axis": 0})


@st.composite
def rescale_and_data_movement(draw, side=None, kind=None):
    shape = [draw(st.integers(1, 4)) for _ in range(draw(st.integers(2, 4)))]
    side = side or draw(st.sampled_from(("writer", "reader")))
    kind = kind or draw(st.sampled_from(KINDS))
    zp = draw(st.integers(-128, 127))
    scale = (draw(st.integers(1 << 30, (1 << 31) - 1)), draw(st.integers(31, 45)))
    writer = draw(st.sampled_from(("ADD", "SUB", "MUL")))
    # toward the reader the padding value is an int32 one; some have no int8 preimage
    pad = draw(st.integers(-(1 << 22), 1 << 22)) if side == "reader" else draw(st.integers(-9, 9))
    if side == "reader" and draw(st.booleans()):
        pad = (draw(st.integers(-128, 127)) - zp) << 10  # the RESCALE's image of an int8 value
    # a CONCAT's second input rescaled with another zero point: one RESCALE cannot replace both
    zp2 = draw(st.sampled_from((zp, zp ^ 1)))
    return side, kind, shape, (zp, zp2), scale, writer, pad


def build(side, kind, shape, zps, scale, writer, pad, second_reader=False) -> bytes:
    b = Builder()
    zp = zps[0]
    n_in = 2 if kind == "CONCAT" else 1
    if side == "writer":  # op(int8, int8) -> int32 -> DM -> RESCALE -> int8
        xs = [
            b.binary(writer, *(b.rescale(b.input(shape), "INT32", *UNIT, in_zp=zp) for _ in "ab"))
            for _ in range(n_in)
        ]
        moved = move(b, kind, xs, pad)
        b.output(b.rescale(moved, "INT8", *scale, out_zp=zp))
    else:  # int8 -> RESCALE -> int32 -> DM -> ADD(., RESCALE(int8)) -> RESCALE -> int8
        xs = [b.rescale(b.input(shape), "INT32", 1 << 30, 20, in_zp=z) for z in zps[:n_in]]
        moved = move(b, kind, xs, pad)
        other = b.rescale(b.input(b.shape(moved)), "INT32", 1 << 30, 20)
        b.output(b.rescale(b.binary("ADD", moved, other), "INT8", *scale))
    if second_reader:
        b.output(moved)
    return b.tosa()


def moved_in_int8(tosa: bytes, kind: str) -> bool:
    g = tosa_ir.read(tosa)
    return all(g.tensors[o.outputs[0]].dtype == "INT8" for o in g.ops if o.op == kind)


def check_move(case, second_reader):
    side, kind, shape, (zp, zp2), scale, writer, pad = case
    tosa = build(*case, second_reader=second_reader)
    result = optimize(tosa, disabled=ONLY_MOVE)
    check_bit_exact(tosa, result.tosa, trials=2, seed=13)
    moved = result.applied.get("MoveRescaleThroughDataMovement", 0)
    # toward the reader through a PAD: only if the padding value has an int8 preimage
    preimage = any(((v - zp) << 10) == pad for v in range(-128, 128))
    blocked = second_reader or (side == "reader" and kind == "PAD" and not preimage)
    blocked |= side == "reader" and kind == "CONCAT" and zp2 != zp
    assert moved == (0 if blocked else 1), (moved, blocked)
    if moved:
        assert moved_in_int8(result.tosa, kind)


@pytest.mark.parametrize("side", ["writer", "reader"])
@pytest.mark.parametrize("kind", KINDS)
def test_a_rescale_moves_through_each_data_movement_bit_exactly(kind, side):
    @settings(FAST, max_examples=5)
    @given(rescale_and_data_movement(side, kind))
    def check(case):
        check_move(case, second_reader=False)

    check()


@FAST
@given(rescale_and_data_movement())
def test_a_second_reader_of_the_moved_tensor_keeps_the_rescale(case):
    check_move(case, second_reader=True)


@pytest.mark.parametrize(
    "kind,target",
    [
        ("CONCAT", "ethos-u85-256"),
        *(
            pytest.param(k, t, marks=pytest.mark.slow)
            for k in ("SLICE", "PAD", "CONCAT")
            for t in ("ethos-u85-256", "ethos-u55-128")
            if (k, t) != ("CONCAT", "ethos-u85-256")
        ),
    ],
)
def test_a_result_rescale_moved_before_slice_pad_or_concat_is_no_layer_of_its_own(kind, target):
    tosa = build("writer", kind, [1, 24, 24, 32], (-3, -3), (1 << 30, 31), "ADD", 0)
    without = optimize(tosa, disabled=(MoveRescaleThroughDataMovement,), target=target).tosa
    result = optimize(tosa, target=target)
    assert result.applied.get("MoveRescaleThroughDataMovement") == 1
    before, after = _vela(without, target), _vela(result.tosa, target)
    assert after[0] < before[0] and after[1] < before[1], (before[:2], after[:2])
