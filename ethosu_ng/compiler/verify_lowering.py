# SPDX-License-Identifier: BSD-3-Clause
"""Verified compile, first link: the partition's TOSA graph against the quantized partition it
replaces, before Vela's stream is accepted (``EthosUNGCompileSpec.verify_lowering``).

The quantized partition (the edge graph ``to_backend`` carves, before upstream's lowering edits
it) is evaluated exactly: every float op in float64 and each quantize rounding the float64 value
(``numerics.op_numerics.ExactEvaluator``), so float32 rounding noise, which deep partitions amplify
to many LSB, is not mistaken for a lowering defect. Its inputs are the verified compile's samples
(``verify_npu.Reference``), laid out logically; its outputs are compared with the TOSA reference
model's in LSB of each output's integer grid. Beyond the tolerance (``LSB_TOLERANCE``, widened
where near ties carry on) is a ``LoweringDeviation``: a ``VelaError``, handled as a deviation of
the stream is (CPU fallback of the ops responsible, or an error under ``strict``).
"""

from __future__ import annotations

import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass
from typing import Callable, List, NamedTuple, Optional, Sequence, Tuple

import numpy as np
import torch

from ethosu_ng.compile_spec import EthosUNGCompileSpec
from ethosu_ng.compiler.verify_npu import Reference, Unverifiable
from ethosu_ng.numerics.tosa_reference import logical_to_npu, npu_to_logical
from ethosu_ng.tensor_spec import TensorSpec
from ethosu_ng.vela.compiler import VelaError

# The exact evaluation rounds ties half up, as TOSA's RESCALE does. One step of difference is
# allowed for TOSA's fixed-point scales; a value within NEAR_TIE steps of a tie may round either
# way in them (a 31-bit multiplier is off by about 6e-8 steps at 128 steps; NEAR_TIE leaves
# room for a reciprocal's coarser one), and a later op (a subtraction into a finer grid, a
# conv) can carry that one step on as several. So each element may also differ by as much as a
# second exact run, with every near tie rounded the other way, moves it: the measured
# amplification of those ties. That run rounds every tie one way, and the TOSA graph may round
# any subset of them the other way (a matmul sums ties of both signs: swin's `q * scale @ k^T`
# is 2 steps from the exact run where the flipped run is 0); so an element beyond it is
# compared once more with the bound on what any subset can do (``numerics.tie_bound``).
LSB_TOLERANCE = 1
NEAR_TIE = 1e-3

# One partition at a time, beside Vela; PyTorch's kernels release the GIL.
_EXACT_POOL = ThreadPoolExecutor(max_workers=1, thread_name_prefix="exact_partition")


class LoweringDeviation(VelaError):
    """The TOSA graph differs from the quantized partition beyond the tolerance."""

    def __init__(self, partition: str, target: str, what: str, last_words: str):
        super().__init__(partition, target, what, last_words)
        RuntimeError.__init__(
            self, f"verified compile: partition {partition!r} for {target}: {what} ({last_words})"
        )


@dataclass
class LoweringVerdict:
    """Per partition, in the report: ``verified``, ``deviation`` or ``skipped``."""

    status: str
    reason: str = ""
    samples: int = 0
    max_lsb: int = 0  # largest |TOSA - exact| over outputs and samples, in integer steps
    # largest step a flipped near tie moved an output (added tolerance), measured on the samples
    # where the TOSA graph is more than a step from the exact run
    tie_amplified: int = 0
    # largest bound on how far any subset of near ties moves an output, where an element beyond
    # the flipped run was checked against it (numerics.tie_bound); -1 when the partition has an
    # op the bound does not model
    tie_bound: int = 0
    # int16: largest difference between the exact and the hardware reading (added tolerance)
    hardware_band: int = 0
    # int16: largest bound on how far near ties move the hardware reading (numerics.tie_bound);
    # -1 when the partition has an op the bound does not model
    hardware_tie_bound: int = 0
    # int16: the TOSA graph's lookup tables compared entry for entry with the partition's
    tables_checked: int = 0
    output: Optional[int] = None
    seconds: float = 0.0  # on the compile's critical path
    exact_seconds: float = 0.0  # the exact evaluation's own time, beside Vela
    exact_cpu_seconds: float = 0.0  # its CPU time
    reference_cpu_seconds: float = 0.0  # the TOSA reference run's (shared with verify_npu)
    sample_range: str = "full"  # the inputs' range (verify_npu.NpuVerdict.sample_range)

    def as_dict(self) -> dict:
        return asdict(self)


def _logical(arr: np.ndarray, spec: TensorSpec) -> torch.Tensor:

    return npu_to_logical(np.ascontiguousarray(arr).reshape(-1), spec)


def _has_int16(gm) -> bool:
    from ethosu_ng.ops import QUANTIZE_OPS, op_name

    return any(
        n.op == "call_function" and op_name(n.target) in QUANTIZE_OPS and n.args[-1] is torch.int16
        for n in gm.graph.nodes
    )


def _exact_all(gm, samples: List[List[torch.Tensor]]):
    """Per sample: (exact outputs; those with near ties flipped, which are the exact outputs where
    the run saw no near tie and else None, left to ``verify`` to evaluate where it needs them; the
    int16 hardware reading or None). An int16 partition is also evaluated as the hardware defines
    it: lookups as interpolated tables, 48-bit accumulators requantized with 16-bit multipliers
    (``numerics.int16_table``), intermediates saturated as each RESCALE saturates them, and once
    more unclamped, as a fused lowering keeps them in its 32-bit accumulator (int16's range holds
    activations far beyond the calibrated ones, so a sum that the quantized model saturates is in
    range for TOSA). The hardware reading is ``HardwareReading``: the reading farthest from the
    exact one per element, and the saturated reading with how far its near ties can move it."""
    from ethosu_ng.numerics.int16_table import with_int48_requantization
    from ethosu_ng.numerics.op_numerics import ExactEvaluator
    from ethosu_ng.numerics.tie_bound import Unbounded

    t0, cpu0 = time.perf_counter(), time.thread_time()
    outs = []
    int16 = _has_int16(gm)
    evaluator = ExactEvaluator(gm)
    hardware_evaluator = ExactEvaluator(with_int48_requantization(gm)) if int16 else None
    with torch.no_grad():
        for inputs in samples:
            base = evaluator.run(inputs, rounding="half_up", count_within=NEAR_TIE)
            # The flipped run differs from the base run only where a quantize's value lies
            # within NEAR_TIE of a tie (``op_numerics._round``). With none in the base run, the
            # first quantize of the flipped run sees the base run's values and rounds them the
            # same, and so, node by node in graph order, does every later op: its outputs are
            # the base run's. With some, it is run only where the TOSA graph is more than a
            # step from the base run (on most partitions it is nowhere, and the run is saved).
            flipped = None if base.near_ties else base.outputs
            hardware = None
            if int16:
                try:
                    saturated = hardware_evaluator.run(
                        inputs, rounding="half_up", int16_tables=True, tie_bound_within=NEAR_TIE
                    )
                except Unbounded:
                    saturated = hardware_evaluator.run(
                        inputs, rounding="half_up", int16_tables=True
                    )
                unclamped = hardware_evaluator.run(
                    inputs, rounding="half_up", int16_tables=True, saturate_intermediates=False
                )
                hardware = HardwareReading(
                    _farthest(base.outputs, [saturated.outputs, unclamped.outputs]),
                    saturated.outputs,
                    saturated.tie_bounds,
                )
            outs.append((base.outputs, flipped, hardware))
    return outs, time.perf_counter() - t0, time.thread_time() - cpu0


@dataclass
class HardwareReading:
    """An int16 partition's outputs as the hardware computes them, per output."""

    farthest: list  # per element, the reading (saturated or unclamped) farthest from the exact
    saturated: list  # the reading with intermediates saturated as each RESCALE saturates them
    # how far the saturated reading's near ties can move each element (``numerics.tie_bound``),
    # or None when an op of the partition has no bound
    tie_bounds: Optional[list]


def _farthest(base, readings):
    """Per output, each element of the reading farthest from ``base`` (in ``base``'s dtype
    range, where the comparison happens)."""
    out = []
    for j, b in enumerate(base):
        if not isinstance(b, torch.Tensor) or b.is_floating_point() or b.dtype == torch.bool:
            out.append(readings[0][j])
            continue
        lo, hi = _int_range(b.dtype)
        best = readings[0][j].to(torch.int64).clamp(lo, hi)
        for r in readings[1:]:
            v = r[j].to(torch.int64).clamp(lo, hi)
            best = torch.where((v - b).abs() > (best - b).abs(), v, best)
        out.append(best)
    return out


class ExactEvaluation(NamedTuple):
    """What ``start_exact``'s future gives ``verify``: the runs on ``samples`` and the functions
    that evaluate more where the comparison needs it (each on one sample in NPU order)."""

    runs: list  # per sample, ``_exact_all``'s (exact, flipped or None, hardware reading)
    seconds: float
    cpu_seconds: float
    samples: list  # the samples ``runs`` are of
    evaluate: Optional[Callable]  # other samples (a fallback range), as ``runs``, seconds, CPU
    flipped: Callable  # the exact outputs with every near tie rounded the other way
    bounds: Callable  # per output, the tie bound, or None where an op has no rule
    tables: Tuple[int, list]  # int16: lookup tables checked, and those that differ


def start_exact(
    gm, reference: Optional[Reference], inputs: Sequence[TensorSpec], *, tosa: bytes = b""
) -> Optional[Future]:
    """Evaluate the quantized partition ``gm`` exactly on ``reference``'s full-range samples
    (``inputs``: the specs that lay each sample out, with the NPU dim order), in a thread: an
    ``ExactEvaluation``, with, for an int16 partition, where the TOSA graph ``tosa``'s lookup
    tables are not the ones ``gm`` asks for (``int16_table.table_mismatches``)."""
    if gm is None or reference is None:
        return None
    evaluator = None  # one for the on-demand runs, which keeps the dequantized constants

    def run(sample, **mode):
        nonlocal evaluator
        from ethosu_ng.numerics.op_numerics import ExactEvaluator

        evaluator = evaluator or ExactEvaluator(gm)
        logical = [_logical(a, s) for a, s in zip(sample, inputs)]
        with torch.no_grad():
            return evaluator.run(logical, rounding="half_up", **mode)

    def evaluate(samples):
        return _exact_all(
            gm, [[_logical(a, s) for a, s in zip(sample, inputs)] for sample in samples]
        )

    def flipped(sample):
        return run(sample, flip_ties_within=NEAR_TIE).outputs

    def bounds(sample):
        from ethosu_ng.numerics.tie_bound import Unbounded

        try:
            result = run(sample, tie_bound_within=NEAR_TIE)
        except Unbounded:
            return None
        if result.tie_bounds is None:  # NEAR_TIE 0: no tie to bound
            return None
        return [d.expand(o.shape) for d, o in zip(result.tie_bounds, result.outputs)]

    def tables():
        from ethosu_ng.numerics.int16_table import graph_tables, table_mismatches

        if not tosa or not _has_int16(gm):
            return 0, []
        return len(graph_tables(tosa)), table_mismatches(gm, tosa)

    samples = reference.samples

    def first():
        runs, seconds, cpu = evaluate(samples)
        return ExactEvaluation(runs, seconds, cpu, samples, evaluate, flipped, bounds, tables())

    return _EXACT_POOL.submit(first)


# A verification sample on which a partition's while_loop runs longer is not used: the eager
# model would loop as long, and the checks need an answer.
SAMPLE_LOOP_ITERATIONS = 256


def loop_ends(gm, inputs: Sequence[TensorSpec]) -> Callable[[List[np.ndarray]], bool]:
    """Whether ``gm``'s while_loops end on a sample (NPU order, laid out by ``inputs``) within
    ``SAMPLE_LOOP_ITERATIONS``: ``Reference.start``'s ``accept`` for such a partition."""
    from ethosu_ng.numerics.op_numerics import ExactEvaluator, LoopBoundExceeded

    evaluator = ExactEvaluator(gm)

    def ends(sample) -> bool:
        logical = [_logical(a, s) for a, s in zip(sample, inputs)]
        try:
            with torch.no_grad():
                evaluator.run(
                    logical, rounding="half_up", max_loop_iterations=SAMPLE_LOOP_ITERATIONS
                )
        except LoopBoundExceeded:
            return False
        return True

    return ends


def worst_bound(current: int, new: int) -> int:
    """The verdict's tie bound after one more output: -1 (an op the bound does not model) stays."""
    return -1 if current == -1 or new == -1 else max(current, new)


def _npu(t: torch.Tensor, spec: TensorSpec) -> np.ndarray:
    """An integer reading of an output, saturated to its dtype, flat in the NPU's layout."""
    lo, hi = _int_range(spec.dtype)
    return logical_to_npu(t.to(torch.int64).clamp(lo, hi), spec).reshape(-1)


def _int_range(dtype):
    info = torch.iinfo(dtype)
    return info.min, info.max


def verify(
    name: str,
    reference: Optional[Reference],
    exact: Optional[Future],
    outputs: Sequence[TensorSpec],
    spec: EthosUNGCompileSpec,
) -> LoweringVerdict:
    """Compare the TOSA reference model's outputs with the exact evaluation; raise
    ``LoweringDeviation`` beyond the tolerance (``verify_npu.Unverifiable`` when no sample is in
    the reference's domain), else return the verdict."""
    t0 = time.perf_counter()
    if reference is None or exact is None:
        return LoweringVerdict("skipped", "no reference run for this partition")
    try:
        tosa_runs, _, reference_cpu = reference.result(name, spec.target)
    except Unverifiable:
        raise
    except Exception as e:  # noqa: BLE001 - a graph the reference rejects cannot be checked
        return LoweringVerdict("skipped", f"TOSA reference model: {type(e).__name__}: {e}")
    try:
        evaluation: ExactEvaluation = exact.result()
        exact_runs, exact_s, exact_cpu = evaluation[:3]
        if evaluation.samples is not reference.samples:
            # The reference ran a fallback range: evaluate that pair (on the critical path).
            exact_runs, more_s, more_cpu = evaluation.evaluate(reference.samples)
            exact_s, exact_cpu = exact_s + more_s, exact_cpu + more_cpu
    except Exception as e:  # noqa: BLE001 - an op the exact evaluation cannot run
        return LoweringVerdict("skipped", f"exact evaluation: {type(e).__name__}: {e}")
    checked, mismatches = evaluation.tables
    if mismatches:
        raise LoweringDeviation(
            name,
            spec.target,
            "TOSA graph's int16 lookup is not the quantized partition's",
            "; ".join(mismatches),
        )
    verdict = LoweringVerdict(
        "verified",
        tables_checked=checked,
        exact_seconds=exact_s,
        exact_cpu_seconds=exact_cpu,
        reference_cpu_seconds=reference_cpu,
        sample_range=reference.sample_range,
    )
    worst = (0, None, "")  # difference, output, where: the largest beyond its tolerance
    for k, ((want_all, flipped_all, hardware), got_all) in enumerate(zip(exact_runs, tosa_runs)):
        sample_bounds: Optional[list] = None  # computed for this sample when first needed
        for j, (e, t, s) in enumerate(zip(want_all, got_all, outputs)):
            if not isinstance(e, torch.Tensor) or e.is_floating_point():
                return LoweringVerdict("skipped", f"output {j} of the partition is not integer")
            want_npu = logical_to_npu(e.to(s.dtype), s)
            want = want_npu.astype(np.int64).reshape(-1)
            got = np.asarray(t).reshape(-1)
            if got.dtype != want_npu.dtype and got.dtype.itemsize == want_npu.dtype.itemsize:
                got = got.view(want_npu.dtype)  # an int8 graph tensor for a uint8 entry
            got = got.astype(np.int64)
            if got.size != want.size:
                return LoweringVerdict(
                    "skipped", f"output {j}: TOSA {got.size} elements, partition {want.size}"
                )
            if not got.size:
                continue
            d = np.abs(got - want)
            # A bool or a plain integer (no scale: a shift, an index, a count) has no grid step
            # to be off by: one apart is another answer.
            exact = s.dtype == torch.bool or s.scale is None
            step = 0 if exact else LSB_TOLERANCE
            right = np.zeros(d.shape, dtype=bool)
            amplified = np.zeros(d.shape, dtype=np.int64)
            if hardware is not None:
                # An int16 partition: anything between the exact and the hardware reading
                # (interpolated lookups, unclamped intermediates) is right, plus the usual step;
                # so is anything the hardware reading's own near ties can reach.
                hw = _npu(hardware.farthest[j], s)
                band = np.abs(hw - want)
                verdict.hardware_band = max(verdict.hardware_band, int(band.max()))
                amplified = np.maximum(amplified, band)
                if hardware.tie_bounds is None:
                    verdict.hardware_tie_bound = -1
                else:
                    saturated = hardware.saturated[j]
                    # Steps, not values: up to the dtype's whole span, so not clamped to it.
                    reach = torch.ceil(hardware.tie_bounds[j].expand(saturated.shape))
                    reach = logical_to_npu(reach.clamp(max=1 << 20).to(torch.int64), s)
                    reach = reach.reshape(-1)
                    verdict.hardware_tie_bound = worst_bound(
                        verdict.hardware_tie_bound, int(reach.max())
                    )
                    right = np.abs(got - _npu(saturated, s)) <= step + reach
            verdict.max_lsb = max(verdict.max_lsb, int(d.max()))
            if ((d > step + amplified) & ~right).any():
                if flipped_all is None:
                    t1 = time.thread_time()
                    flipped_all = evaluation.flipped(reference.samples[k])
                    verdict.exact_cpu_seconds += time.thread_time() - t1
                moved = logical_to_npu(flipped_all[j].to(s.dtype), s).astype(np.int64)
                moved = np.abs(moved.reshape(-1) - want)
                verdict.tie_amplified = max(verdict.tie_amplified, int(moved.max()))
                amplified = np.maximum(amplified, moved)
            tol = step + amplified
            over = np.flatnonzero((d > tol) & ~right)
            if over.size and hardware is None:
                if sample_bounds is None:
                    sample_bounds = evaluation.bounds(reference.samples[k]) or []
                if not sample_bounds:
                    verdict.tie_bound = -1
                else:
                    reach = torch.ceil(sample_bounds[j]).clamp(max=1 << 20).to(torch.int64)
                    reach = logical_to_npu(reach, s).astype(np.int64).reshape(-1)
                    verdict.tie_bound = worst_bound(verdict.tie_bound, int(reach[over].max()))
                    over = over[d[over] > step + reach[over]]
                    tol = np.maximum(tol, step + reach)
            if over.size:
                i = int(over[np.argmax(d[over])])
                if int(d[i]) > worst[0]:
                    worst = (
                        int(d[i]),
                        j,
                        f"element {i}: TOSA {int(got[i])}, quantized partition {int(want[i])} "
                        f"(tolerance {int(tol[i])} LSB)",
                    )
        verdict.samples += 1
    verdict.seconds = time.perf_counter() - t0
    if worst[1] is not None:
        raise LoweringDeviation(
            name,
            spec.target,
            f"TOSA graph differs from the quantized partition by {worst[0]} LSB at output "
            f"{worst[1]}",
            worst[2],
        )
    return verdict
