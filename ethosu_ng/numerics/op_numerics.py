# SPDX-License-Identifier: BSD-3-Clause
"""Which side of a TOSA-vs-reference difference is wrong: the lowering, or the float32 reference?

``tosa_reference.check_delegates`` judges each delegate's TOSA graph against the eager quantized
model, which computes every float op between a dequantize and a quantize in float32. Where the
real value lies within ~1e-5 LSB of a rounding boundary (x.5), float32 can round the wrong way,
while TOSA (exact integer accumulation, 31-bit rescale multiplier) rounds correctly. One such
flipped element early in a deep partition is amplified by every later conv, most by a conv whose
input scale is coarse. Measured on timm mobilevit_s (ethos-u85-256, seed 0, softmax on CPU):
the 18-conv stem partition is 8 LSB off the eager model (1086 of 147456 elements > 1 LSB) but
0 LSB off, on every element, the same quantized graph evaluated in float64. Over all 61
delegates, 412 quantize ops, each given identical integer inputs, differ between float32 and
float64 by at most 1 LSB, on 62 of 47.8 M elements; TOSA vs float64 is 0 LSB on 60 delegates
and 1 LSB on the head (avg_pool2d over 8x8, see ties below).

``check_ops`` evaluates each delegate's partition graph twice in lockstep: "eager" (float32, as
the quantized model runs) and "exact" (every float op in float64, each quantize rounding the
float64 value). After every quantize both paths continue from the exact integer tensor, so per
op the two evaluations see identical integer inputs. It reports per delegate TOSA vs exact and
eager vs exact (whole partition, per output) and, per quantize, the float32-vs-float64
difference of that op alone. A lowering defect shows as TOSA vs exact > 1 LSB; float32 noise in
the reference shows as eager vs exact > 0 with TOSA vs exact == 0. At a true tie float64 is no
arbiter: TOSA rounds half up, ``torch.round`` half to even. avg_pool2d hits a tie whenever a
window's sum is an odd multiple of half its size (measured on conv -> silu -> avg_pool2d(8): two
of 64 outputs, sums/64 = 14.5 and 12.5, TOSA 15 and 13, reference 14 and 12), so TOSA vs exact
may be 1 there.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Optional, Sequence

import torch
from torch.fx import Interpreter
from torch.utils._pytree import tree_map

from ethosu_ng.numerics.tosa_reference import DelegateNumerics, _DelegateChecker, _module
from ethosu_ng.ops import (
    CALL_DELEGATE,
    CONTROL_FLOW_OPS,
    DEQUANTIZE_OPS,
    DEQUANTIZE_PER_TENSOR_OPS,
    QUANTIZE_OPS,
    QUANTIZE_PER_TENSOR_OPS,
    op_name,
)


@dataclass
class OpNumerics:
    node: str  # the quantize node
    op: str  # what it quantizes (its input's op)
    max_lsb: int  # float32 vs float64 evaluation, identical integer inputs
    elements_off: int
    numel: int


@dataclass
class DelegateExactNumerics:
    name: str
    tosa_vs_exact: List[Optional[int]]  # per output, max LSB (None: float output)
    eager_vs_exact: List[Optional[int]]
    tosa_vs_eager: List[Optional[int]]
    ops: List[OpNumerics] = field(default_factory=list)
    outputs_exact: List[torch.Tensor] = field(repr=False, default_factory=list)

    @property
    def lowering_worst(self) -> int:
        return max((v for v in self.tosa_vs_exact if v is not None), default=0)


class _Pair:
    """A float value in both evaluations."""

    __slots__ = ("f32", "f64")

    def __init__(self, f32, f64):
        self.f32, self.f64 = f32, f64


def _base(target):
    """The ATen/quantized_decomposed overload behind an edge-dialect op (or the op itself)."""
    op = getattr(target, "_op", None)
    return op if isinstance(op, torch._ops.OpOverload) else target


def _scalar(v) -> float:
    return float(v.item()) if isinstance(v, torch.Tensor) else float(v)


def _near_tie(v: torch.Tensor, within: float) -> torch.Tensor:
    """Where ``v`` lies within ``within`` of a rounding tie (x.5)."""
    return (v - torch.floor(v) - 0.5).abs() < within


def _round(v: torch.Tensor, rounding: str, flip_ties_within: Optional[float]) -> torch.Tensor:
    """``half_even`` (torch.round, as the eager model) or ``half_up`` (as TOSA's RESCALE);
    ``flip_ties_within``: values that close to a tie round the other way (a sensitivity run)."""
    r = torch.round(v) if rounding == "half_even" else torch.floor(v + 0.5)
    if flip_ties_within:
        lo = torch.floor(v)
        r = torch.where(_near_tie(v, flip_ties_within), torch.where(r == lo, lo + 1, lo), r)
    return r


def _exact_quantize(
    op, x64, args, rounding="half_even", flip_ties_within=None, saturate=True, count_within=None
):
    """(the integers, how many values lay within ``count_within`` of a tie: 0 when None).
    ``saturate=False``: rounded but not clamped, as int64 (a value a fused lowering keeps in a
    wider accumulator)."""
    if op_name(op) in QUANTIZE_PER_TENSOR_OPS:
        scale, zp, qmin, qmax, dtype = _scalar(args[1]), int(_scalar(args[2])), *args[3:6]
        v = x64 / scale
        q = _round(v, rounding, flip_ties_within) + zp
    else:
        scales, zps, axis, qmin, qmax, dtype = args[1:7]
        shape = [1] * x64.dim()
        shape[axis] = -1
        v = x64 / scales.to(torch.float64).view(shape)
        q = _round(v, rounding, flip_ties_within) + zps.to(torch.float64).view(shape)
    near = int(_near_tie(v, count_within).sum()) if count_within else 0
    if not saturate:
        return q.to(torch.int64), near
    return torch.clamp(q, qmin, qmax).to(dtype), near


def _exact_dequantize(op, q, args):
    if op_name(op) in DEQUANTIZE_PER_TENSOR_OPS:
        return (q.to(torch.float64) - int(_scalar(args[2]))) * _scalar(args[1])
    scales, zps, axis = args[1:4]
    shape = [1] * q.dim()
    shape[axis] = -1
    zp = zps.to(torch.float64).view(shape) if zps is not None else 0.0
    return (q.to(torch.float64) - zp) * scales.to(torch.float64).view(shape)


def _lsb(a: torch.Tensor, b: torch.Tensor) -> Optional[int]:
    if a.is_floating_point() or b.is_floating_point():
        return None
    if a.numel() == 0:
        return 0
    return int((a.to(torch.int64) - b.to(torch.int64)).abs().max().item())


def _feeds_output_directly(q: torch.fx.Node) -> bool:
    """Whether ``q``'s integers reach the graph's output with no dequantize in between."""
    todo, seen = list(q.users), set()
    while todo:
        n = todo.pop()
        if n in seen:
            continue
        seen.add(n)
        if n.op == "output":
            return True
        if n.op == "call_function" and op_name(_base(n.target)) not in DEQUANTIZE_OPS:
            todo.extend(n.users)
    return False


def _per_tensor_qparams(node) -> Optional[tuple]:
    """(scale, zero point, qmin, qmax, dtype) of a per-tensor Q/DQ node, else None."""
    if not isinstance(node, torch.fx.Node) or node.op != "call_function":
        return None
    name = op_name(_base(node.target))
    if name not in QUANTIZE_PER_TENSOR_OPS and name not in DEQUANTIZE_PER_TENSOR_OPS:
        return None
    a = node.args
    if not all(isinstance(v, (int, float)) for v in a[1:5]):
        return None
    return float(a[1]), int(a[2]), int(a[3]), int(a[4]), a[5]


def _dequantizes_a_constant(n: torch.fx.Node) -> bool:
    """A dequantize of a stored tensor (a weight): no input, no rounding mode can change it."""
    return (
        n.op == "call_function"
        and op_name(_base(n.target)) in DEQUANTIZE_OPS
        and isinstance(n.args[0], torch.fx.Node)
        and n.args[0].op == "get_attr"
    )


# A while_loop the exact evaluation runs longer than this is an error, not a hang.
MAX_LOOP_ITERATIONS = 1 << 16


class LoopBoundExceeded(RuntimeError):
    """A while_loop that did not end within the evaluation's iteration bound."""


class _Lockstep(Interpreter):
    """``eager=False``: the exact evaluation alone (no float32 path, no per-quantize records);
    ``constants``: a dict that keeps each dequantized constant (a weight) across runs;
    ``count_within``: ``near_ties`` counts the quantized values within that of a tie."""

    def __init__(
        self,
        gm,
        rounding: str = "half_even",
        flip_ties_within: Optional[float] = None,
        saturate_intermediates: bool = True,
        int16_tables: bool = False,
        eager: bool = True,
        constants: Optional[dict] = None,
        count_within: Optional[float] = None,
        tie_bound=None,
        max_loop_iterations: int = MAX_LOOP_ITERATIONS,
    ):
        super().__init__(gm)
        self.max_loop_iterations = max_loop_iterations
        self.tie_bound = tie_bound  # a ``tie_bound.TieBound`` that follows every op, or None
        self._table = None
        self.ops: List[OpNumerics] = []
        self.rounding, self.flip_ties_within = rounding, flip_ties_within
        self.int16_tables, self.saturate_intermediates = int16_tables, saturate_intermediates
        self.eager, self.constants = eager, constants
        self.count_within, self.near_ties = count_within, 0
        self.unsaturated = (
            set()
            if saturate_intermediates
            else {
                n
                for n in gm.graph.nodes
                if n.op == "call_function"
                and op_name(_base(n.target)) in QUANTIZE_OPS
                and not _feeds_output_directly(n)
            }
        )

    def _pair(self, v):
        return (
            _Pair(v if self.eager else None, v.to(torch.float64))
            if isinstance(v, torch.Tensor) and v.is_floating_point()
            else v
        )

    def placeholder(self, target, args, kwargs):
        return self._pair(super().placeholder(target, args, kwargs))

    def get_attr(self, target, args, kwargs):
        return self._pair(super().get_attr(target, args, kwargs))

    def run_node(self, n):
        self._current = n
        if self.constants is None or not _dequantizes_a_constant(n):
            return super().run_node(n)
        # Its value depends on the constant alone, not on the run's rounding or inputs.
        if n not in self.constants:
            self.constants[n] = super().run_node(n)
        return self.constants[n]

    def call_function(self, target, args, kwargs):
        self._table = None
        if target in CONTROL_FLOW_OPS:
            return self._control_flow(target, args)
        out = self._evaluate(target, args, kwargs)
        if self.tie_bound is not None:
            a64 = [v.f64 if isinstance(v, _Pair) else v for v in args]
            a64 = [
                [w.f64 if isinstance(w, _Pair) else w for w in v]
                if isinstance(v, (list, tuple))
                else v
                for v in a64
            ]
            result = out.f64 if isinstance(out, _Pair) else out
            self.tie_bound.step(self._current, a64, result, self._table)
        return out

    def _run_graph(self, gm, values) -> list:
        """``gm`` (a control-flow graph) on ``values``, evaluated as this run evaluates."""
        sub = _Lockstep(
            gm,
            self.rounding,
            self.flip_ties_within,
            self.saturate_intermediates,
            self.int16_tables,
            self.eager,
            self.constants,
            self.count_within,
            max_loop_iterations=self.max_loop_iterations,
        )
        out = sub.run(*values)
        self.near_ties += sub.near_ties
        self.ops += sub.ops
        return list(out) if isinstance(out, (list, tuple)) else [out]

    def _control_flow(self, target, args):
        if self.tie_bound is not None:
            from ethosu_ng.numerics.tie_bound import Unbounded

            raise Unbounded(f"{self._current.name}: no tie bound through control flow")
        if target is torch.ops.higher_order.cond:
            pred, on_true, on_false, operands = args
            return tuple(self._run_graph(on_true if bool(pred) else on_false, list(operands)))
        cond_gm, body_gm, carried, extra = args
        carried, extra = list(carried), list(extra)
        for _ in range(self.max_loop_iterations):
            if not bool(self._run_graph(cond_gm, carried + extra)[0]):
                return tuple(carried)
            carried = self._run_graph(body_gm, carried + extra)
        raise LoopBoundExceeded(
            f"{self._current.name}: while_loop still running after "
            f"{self.max_loop_iterations} iterations"
        )

    def _evaluate(self, target, args, kwargs):
        op = _base(target)
        a32 = tree_map(lambda v: v.f32 if isinstance(v, _Pair) else v, args)
        a64 = tree_map(lambda v: v.f64 if isinstance(v, _Pair) else v, args)
        k32 = tree_map(lambda v: v.f32 if isinstance(v, _Pair) else v, kwargs)
        k64 = tree_map(lambda v: v.f64 if isinstance(v, _Pair) else v, kwargs)
        if op_name(op) in QUANTIZE_OPS:
            saturate = self._current not in self.unsaturated
            exact, near = _exact_quantize(
                op, a64[0], a64, self.rounding, self.flip_ties_within, saturate, self.count_within
            )
            self.near_ties += near
            if not self.eager:
                return exact
            eager = target(*a32, **k32)
            diff = (eager.to(torch.int64) - exact.to(torch.int64)).abs()
            src = self._current.args[0]
            self.ops.append(
                OpNumerics(
                    self._current.name,
                    str(_base(src.target)) if isinstance(src, torch.fx.Node) else "?",
                    int(diff.max().item()) if diff.numel() else 0,
                    int((diff > 0).sum().item()),
                    diff.numel(),
                )
            )
            return exact  # both paths continue from the exact integers
        if op_name(op) in DEQUANTIZE_OPS:
            exact = _exact_dequantize(op, a64[0], a64)
            if not self.eager:
                return _Pair(None, exact)
            if a64[0].dtype == torch.int64:  # unsaturated integers, wider than the dtype
                return _Pair(exact.float(), exact)
            return _Pair(target(*a32, **k32), exact)
        if self.int16_tables:
            looked_up = self._int16_table(a64)
            if looked_up is not None:
                return _Pair(looked_up.float() if self.eager else None, looked_up)

        def up(v):
            if isinstance(v, torch.Tensor) and v.dtype == torch.float32:
                return v.to(torch.float64)
            return v

        r64 = target(*tree_map(up, a64), **tree_map(up, k64))
        if not self.eager:
            return tree_map(
                lambda y: (
                    _Pair(None, y) if isinstance(y, torch.Tensor) and y.is_floating_point() else y
                ),
                r64,
            )
        r32 = target(*a32, **k32)
        # float results carry both evaluations; anything else continues from the exact one
        return tree_map(
            lambda x, y: (
                _Pair(x, y) if isinstance(x, torch.Tensor) and x.is_floating_point() else y
            ),
            r32,
            r64,
        )

    def _int16_table(self, a64) -> Optional[torch.Tensor]:
        """The current node as the int16 TABLE upstream lowers it to (dequantized), or None when
        it is not one: a table op between an int16 dequantize and an int16 quantize."""
        from ethosu_ng.adapters.arm import int16_table
        from ethosu_ng.numerics.int16_table import table_lookup

        n = self._current
        src = n.args[0] if n.args else None
        users = list(n.users)
        qin = _per_tensor_qparams(src)
        qout = _per_tensor_qparams(users[0]) if len(users) == 1 else None
        if qin is None or qout is None or qin[4] != torch.int16 or qout[4] != torch.int16:
            return None
        if op_name(_base(users[0].target)) not in QUANTIZE_PER_TENSOR_OPS:
            return None
        found = int16_table(n, qin[:4], qout[:4])
        if found is None:
            return None
        table, lshift = found
        scale, zp = qin[0], qin[1]
        codes = torch.round(a64[0] / scale).to(torch.int64) + zp
        # A TABLE reads an int16 tensor: its input is saturated even where an unclamped
        # intermediate feeds it.
        codes = codes.clamp(qin[2], qin[3])
        out = table_lookup(codes, table, lshift)
        self._table = (codes, table, lshift, scale, qout[0])
        return (out.to(torch.float64) - qout[1]) * qout[0]


def exact_outputs(
    gm: torch.fx.GraphModule,
    inputs: Sequence[torch.Tensor],
    rounding: str = "half_even",
    flip_ties_within: Optional[float] = None,
    saturate_intermediates: bool = True,
    int16_tables: bool = False,
):
    """Run a quantized graph in lockstep: (its exactly evaluated outputs, per-quantize records).
    ``rounding`` and ``flip_ties_within``: how each quantize rounds (``_round``).
    ``saturate_intermediates=False``: quantizes whose integers are dequantized again inside the
    graph round but do not clamp. ``int16_tables``: an int16 op upstream lowers to a TABLE is
    evaluated as that table (``numerics.int16_table``)."""
    lock = _Lockstep(gm, rounding, flip_ties_within, saturate_intermediates, int16_tables)
    return _outputs(lock.run(*inputs)), lock.ops


def _outputs(out) -> list:
    out = list(out) if isinstance(out, (list, tuple)) else [out]
    return [o.f64 if isinstance(o, _Pair) else o for o in out]


@dataclass
class ExactRun:
    outputs: list  # as ``exact_outputs``
    near_ties: int  # quantized values, over all quantizes, within ``count_within`` of a tie
    # per output, how far near ties can move it (``tie_bound``), when asked for
    tie_bounds: Optional[list] = None


class ExactEvaluator:
    """``exact_outputs`` for repeated runs of one graph, the exact evaluation alone: no float32
    path, no per-quantize records (what the verified compile needs), and each dequantized
    constant computed once. Its outputs equal ``exact_outputs``' bit for bit."""

    def __init__(self, gm: torch.fx.GraphModule):
        self.gm = gm
        self.constants: dict = {}

    def run(
        self,
        inputs: Sequence[torch.Tensor],
        rounding: str = "half_even",
        flip_ties_within: Optional[float] = None,
        saturate_intermediates: bool = True,
        int16_tables: bool = False,
        count_within: Optional[float] = None,
        tie_bound_within: Optional[float] = None,
        max_loop_iterations: int = MAX_LOOP_ITERATIONS,
    ) -> ExactRun:
        """``tie_bound_within``: also bound, per output element, how far roundings within that
        of a tie can move it (``tie_bound``)."""
        from ethosu_ng.numerics.tie_bound import TieBound

        bound = TieBound(tie_bound_within) if tie_bound_within else None
        lock = _Lockstep(
            self.gm,
            rounding,
            flip_ties_within,
            saturate_intermediates,
            int16_tables,
            eager=False,
            constants=self.constants,
            count_within=count_within,
            tie_bound=bound,
            max_loop_iterations=max_loop_iterations,
        )
        out = _outputs(lock.run(*inputs))
        if bound is None:
            return ExactRun(out, lock.near_ties)
        (returned,) = [n for n in self.gm.graph.nodes if n.op == "output"]
        results = (
            returned.args[0] if isinstance(returned.args[0], (list, tuple)) else [returned.args[0]]
        )
        deltas = [bound.of(r) if bound.of(r) is not None else torch.zeros(()) for r in results]
        return ExactRun(out, lock.near_ties, deltas)


class _ExactChecker(_DelegateChecker):
    def __init__(self, gm):
        super().__init__(gm, continue_with="reference")
        self.exact: List[DelegateExactNumerics] = []

    def call_function(self, target, args, kwargs):
        out = super().call_function(target, args, kwargs)
        if target is not CALL_DELEGATE:
            return out
        lowered, *inputs = args
        r: DelegateNumerics = self.results[-1]
        exact, ops = exact_outputs(lowered.original_module.module(), inputs)
        self.exact.append(
            DelegateExactNumerics(
                r.name,
                [_lsb(t, e) for t, e in zip(r.outputs_tosa, exact)],
                [_lsb(g, e) for g, e in zip(r.outputs_ref, exact)],
                list(r.max_lsb),
                ops,
                exact,
            )
        )
        return out


def check_ops(program_or_manager, inputs: Sequence[torch.Tensor]) -> List[DelegateExactNumerics]:
    """Per delegate: TOSA vs the exactly evaluated quantized graph, eager vs exact, and per op the
    float32-vs-float64 difference from identical integer inputs. Delegates run on the eager
    reference's inputs, as in ``check_delegates``."""
    checker = _ExactChecker(_module(program_or_manager))
    checker.run(*inputs)
    return checker.exact
