# SPDX-License-Identifier: BSD-3-Clause
"""Verified compile: Vela's command stream is run on the NPU model and compared with the TOSA
reference model on the same partition, bit for bit, before a blob is written.

Inputs are deterministic (seeded by the partition's TOSA bytes), a mirrored pair: the first
uniform over each input's integer range with a fifth of the elements at one of its two ends, the
second the first mirrored about the middle of the range (``lo + hi - v``). For any linear
function of the inputs (a conv or matmul channel at any output position, before its bias), one
of the two puts it at or above its value on mid-range inputs; so a channel computed wrong (a
missing bias, a wrong depth slice) shows even where a relu or clamp hides it on one sample. NPU
scratch is filled with a poison byte before the model runs, so a command that reads memory no
command and no input wrote, or an output element no command wrote, shows up as a difference.

Where the TOSA reference model calls a sample unpredictable (an op's REQUIRE fails: a shift
amount outside [0, bits), an index outside its dimension), the pair is drawn again in the
narrower ``FALLBACK_RANGES``, in order; both links are verified on the first range the reference
runs. A partition no range verifies is ``Unverifiable``: contained as a deviation is, not
shipped unchecked.

A difference is an ``NpuDeviation``: a ``VelaError``, so the partitioner handles it as it handles
a Vela crash (culprit search, the ops responsible move to the CPU, the reason in the report) and
``strict`` makes it an export error. So is a stream the model refuses as invalid (an access
outside its region, a malformed command). Valid streams using a feature the model does not
implement (parts of Ethos-U85: docs/npu-model.md) are ``skipped`` with the model's reason.
"""

from __future__ import annotations

import hashlib
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Callable, List, Optional, Sequence, Tuple

import numpy as np

from ethosu_ng.compile_spec import EthosUNGCompileSpec
from ethosu_ng.numerics import tosa_fast
from ethosu_ng.tensor_spec import TensorSpec
from ethosu_ng.vela.compiler import VelaError, VelaResult

# Input samples per partition: the mirrored pair. Each costs a model run, a reference run and an
# exact evaluation (docs/benchmarks.md, "Verified compile: what it costs"). One full-range sample
# misses Vela's U85 conv written transposed into a concatenation where a relu hides the channel
# it computes wrong (tests/test_property_seed001.py, depthwise seed 1204); the pair does not.
SAMPLES = 2
# Integer ranges the pair is drawn from again, in order, when the reference calls the full-range
# one unpredictable: small nonnegative values are inside every shift's amount domain and inside
# index domains of 8, 2 and 1 elements.
FALLBACK_RANGES = ((0, 7), (0, 1), (0, 0))
# Draws of a sample pair per range for a partition that accepts only some samples.
ACCEPT_DRAWS = 8
# The poison byte of sample k is POISON[k % 2]: with more samples, an unwritten byte cannot
# match TOSA in each by chance.
POISON = (0xA5, 0x5A)
# executorch's Error::NotSupported: the model's code for a valid stream it does not implement
# (anything else it returns is a stream fault: out-of-region access, malformed command).
NOT_SUPPORTED = 0x10
# Families whose command streams the verified compile runs on the NPU model.
MODELLED_FAMILIES = ("ethos-u55", "ethos-u65", "ethos-u85")


class NpuDeviation(VelaError):
    """The NPU model, running Vela's command stream, differs from the TOSA reference model."""

    def __init__(self, partition: str, target: str, what: str, last_words: str):
        super().__init__(partition, target, what, last_words)
        RuntimeError.__init__(
            self,
            f"verified compile: partition {partition!r} for {target}: {what} on Vela's command "
            f"stream ({last_words})",
        )


class Unverifiable(NpuDeviation):
    """The TOSA reference model calls every verification sample unpredictable: nothing checks
    the partition, so it is contained as a deviation is (CPU fallback, or an error under
    ``strict``)."""

    def __init__(self, partition: str, target: str, last_words: str):
        what = "no verification sample inside the TOSA reference model's domain"
        VelaError.__init__(self, partition, target, what, last_words)
        RuntimeError.__init__(
            self, f"verified compile: partition {partition!r} for {target}: {what} ({last_words})"
        )


class NoSample(RuntimeError):
    """No verification sample the partition can be checked on (a while_loop that does not end)."""


class OutsideDomain(RuntimeError):
    """The reference run's failure when every range's pair is unpredictable."""


@dataclass
class NpuVerdict:
    """Per partition, in the report: ``verified``, ``deviation`` or ``skipped``."""

    status: str
    reason: str = ""
    samples: int = 0
    max_diff: int = 0  # largest |model - TOSA| over all outputs and samples, integer steps
    output: Optional[int] = None  # the output index of ``max_diff`` when it is not 0
    elements_differing: int = 0
    seconds: float = 0.0  # on the compile's critical path: waiting for the reference, the model
    reference_seconds: float = 0.0  # the TOSA reference model's own time, beside Vela
    reference_cpu_seconds: float = 0.0  # its CPU time (0 when no Vela zygote ran it)
    reference_engine: str = ""  # ``Reference.engine``: what computed the TOSA outputs
    model_cpu_seconds: float = 0.0  # the NPU model's CPU time
    retried_with: List[str] = field(default_factory=list)  # Vela flags that made it verify
    sample_range: str = "full"  # the inputs' range: "full", or the fallback range as "[lo, hi]"

    def as_dict(self) -> dict:
        return asdict(self)


def sample_inputs(
    dtypes: Sequence,
    shapes: Sequence[tuple],
    seed: int,
    count: int = SAMPLES,
    within: Optional[Tuple[int, int]] = None,
) -> List[List[np.ndarray]]:
    """Per sample, per input: an array of that dtype and shape (the NPU buffer's memory order).
    Even samples are uniform over the dtype's range (``within`` it, clipped to the dtype's, when
    given) with a fifth of the elements at one of its two ends (saturation paths); each odd one is
    the sample before it mirrored about the middle of that range."""
    rng = np.random.default_rng(seed)
    samples: List[List[np.ndarray]] = [[] for _ in range(count)]
    for dtype, shape in zip(dtypes, shapes):
        dt = _np_dtype(dtype)
        lo, hi = (0, 1) if dt == np.bool_ else (int(np.iinfo(dt).min), int(np.iinfo(dt).max))
        if within is not None:
            lo, hi = max(lo, within[0]), min(hi, within[1])
        for k, sample in enumerate(samples):
            if k % 2:
                sample.append((lo + hi - samples[k - 1][-1].astype(np.int64)).astype(dt))
                continue
            v = rng.integers(lo, hi, size=shape, endpoint=True)
            ends = np.where(rng.random(shape) < 0.5, lo, hi)
            sample.append(np.where(rng.random(shape) < 0.2, ends, v).astype(dt))
    return samples


def _np_dtype(dtype) -> np.dtype:
    import torch

    return np.dtype(torch.empty((), dtype=dtype).numpy().dtype)


# The reference runs one partition at a time beside Vela (which runs in its own process).
_REFERENCE_POOL = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tosa_reference")


@dataclass
class Reference:
    """The TOSA reference model's outputs on the verification inputs, computed while Vela runs:
    inputs depend only on the TOSA graph and the declared dtypes, not on Vela's placement."""

    # The samples ``outputs`` holds the reference's answers for: the full-range pair, or (set
    # before ``outputs`` completes) the first fallback range's pair the reference ran.
    samples: List[List[np.ndarray]]
    # (List[List[np.ndarray]] per sample, seconds the reference model took, its CPU seconds);
    # ``OutsideDomain`` when every range's pair is unpredictable.
    outputs: Future
    ranges: List[str] = field(default_factory=lambda: ["full"])  # each pair's range, in order
    pairs: List[List[List[np.ndarray]]] = field(default_factory=list)  # each range's samples
    sample_range: str = "full"  # the range of ``samples``
    # what computed ``outputs``: "numpy" (numerics.tosa_fast), "reference model", or both (a
    # sample the evaluator left to the reference); why the evaluator did not cover the graph
    engine: str = ""

    @classmethod
    def start(
        cls,
        tosa: bytes,
        dtypes: Sequence,
        shapes: Sequence[tuple],
        accept: Optional[Callable[[List[np.ndarray]], bool]] = None,
    ) -> Reference:
        """``accept``: a sample the checks can use (a partition with a while_loop: one on which
        the loop ends); others are replaced by fresh draws, at most ``ACCEPT_DRAWS`` pairs per
        range. A range with no accepted sample is dropped; with none at all, ``outputs`` raises
        ``NoSample``."""
        seed = int.from_bytes(hashlib.sha256(tosa).digest()[:8], "little")
        ranges = ["full"] + [f"[{lo}, {hi}]" for lo, hi in FALLBACK_RANGES]
        pairs = [sample_inputs(dtypes, shapes, seed)]
        pairs += [sample_inputs(dtypes, shapes, seed, within=r) for r in FALLBACK_RANGES]
        if accept is not None:
            kept = []
            for name, within in zip(ranges, (None, *FALLBACK_RANGES)):
                pair = [
                    s
                    for k in range(ACCEPT_DRAWS)
                    for s in sample_inputs(dtypes, shapes, seed + k, within=within)
                    if accept(s)
                ][:SAMPLES]
                if pair:
                    kept.append((name, pair))
            if not kept:
                ref = cls([], Future())
                ref.outputs.set_exception(
                    NoSample(
                        f"none of {ACCEPT_DRAWS * SAMPLES} samples per range is one the "
                        "partition's while_loop ends on within its iteration bound"
                    )
                )
                return ref
            ranges, pairs = [n for n, _ in kept], [p for _, p in kept]
        ref = cls(pairs[0], Future(), ranges, pairs)
        ref.outputs = _REFERENCE_POOL.submit(_run_tosa_all, tosa, pairs, ref)
        return ref

    def result(self, partition: str, target: str):
        """``outputs``' result; ``Unverifiable`` (a deviation) when no range is in the
        reference's domain. Other failures of the run raise as they are."""
        try:
            return self.outputs.result()
        except OutsideDomain as e:
            raise Unverifiable(partition, target, str(e)) from None


def start_reference(
    tosa: bytes, declared_inputs, tosa_inputs, spec, accept=None
) -> Optional[Reference]:
    """``Reference.start`` for a partition either check of the verified compile needs (the
    stream on the model, or the lowering against the quantized partition); None otherwise."""
    npu = spec.verify_npu and spec.family in MODELLED_FAMILIES
    if not (npu or spec.verify_lowering):
        return None
    if len(declared_inputs) != len(tosa_inputs):
        return None  # check_io names this mismatch
    return Reference.start(
        tosa, [d.dtype for d in declared_inputs], [tuple(t.shape) for t in tosa_inputs], accept
    )


# The reference model holds the GIL while it runs (measured: a waiting thread got 4 turns in
# 6 s), which would stall the lowering of the next partition; so it runs in a child process
# forked from the Vela zygote, like Vela.
# Each range's pair in turn, until every sample of one runs (exit 0, its index in the output);
# exit 4 when every pair has an unpredictable sample. A graph ``numerics.tosa_fast`` covers is
# evaluated there (loaded by its path: the package's import would bring torch into the child);
# a sample it cannot decide (a REQUIRE fails) goes to the reference model, which decides.
_REFERENCE_MAIN = r"""
import importlib.util
import sys
import numpy as np
import tosa_reference_model as ref
with open(sys.argv[1], "rb") as f:
    graph = f.read()
ins = np.load(sys.argv[2])
spec = importlib.util.spec_from_file_location("tosa_fast", sys.argv[4])
fast = importlib.util.module_from_spec(spec)
spec.loader.exec_module(fast)
try:
    parsed, why = fast.load(graph), ""
except fast.NotCovered as e:
    parsed, why = None, str(e)
engines = set()
for r in range(int(ins["ranges"])):
    outs = {"range": np.int64(r)}
    for s in range(int(ins["samples"])):
        arrays = [np.ascontiguousarray(ins[f"r{r}_s{s}_{k}"]) for k in range(int(ins["inputs"]))]
        got = None
        if parsed is not None:
            try:
                got = fast.run_graph(parsed, arrays)
                engines.add("numpy")
            except fast.OutsideSpec as e:  # this sample only: the reference decides
                why = f"sample {s}: {e}"
            except fast.NotCovered as e:
                parsed, why = None, str(e)
            except Exception as e:  # a fault of the evaluator: the reference model answers
                parsed, why = None, f"numpy evaluator raised {type(e).__name__}: {e}"
        if got is None:
            got, status = ref.run(graph, arrays, initialize_variable_tensor_from_numpy=True)
            engines.add("reference model")
            if status == ref.GraphStatus.TOSA_UNPREDICTABLE:
                outs = None
                break
            if status != ref.GraphStatus.TOSA_VALID:
                print(f"TOSA reference model rejected the graph: {status}")
                sys.exit(3)
        outs.update({f"s{s}_{j}": np.asarray(a) for j, a in enumerate(got)})
    if outs is not None:
        outs["engine"] = np.array(" + ".join(sorted(engines)) + (f" ({why})" if why else ""))
        np.savez(sys.argv[3], **outs)
        sys.exit(0)
sys.exit(4)
"""
# A reference run longer than this is abandoned (the verdict says so) rather than stall export.
REFERENCE_TIMEOUT_S = 900.0


def _run_tosa_all(tosa: bytes, pairs, reference: Optional[Reference] = None):
    """The reference's outputs on the first of ``pairs`` (per range, per sample, per input) it
    runs every sample of; sets ``reference.samples`` and ``sample_range`` to that pair's."""
    import os
    import tempfile

    from ethosu_ng.vela.process import run_vela

    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="ethosu_ng_verify_") as tmp:
        graph, ins, outs = (os.path.join(tmp, n) for n in ("g.tosa", "in.npz", "out.npz"))
        with open(graph, "wb") as f:
            f.write(tosa)
        arrays = {
            f"r{r}_s{s}_{k}": a
            for r, samples in enumerate(pairs)
            for s, sample in enumerate(samples)
            for k, a in enumerate(sample)
        }
        n_samples = len(pairs[0])
        n_in = len(pairs[0][0]) if n_samples else 0
        np.savez(ins, ranges=len(pairs), samples=n_samples, inputs=n_in, **arrays)
        run = run_vela(
            _REFERENCE_MAIN, [graph, ins, outs, tosa_fast.__file__], tmp, REFERENCE_TIMEOUT_S
        )
        if run.returncode == 4:
            ranges = reference.ranges if reference is not None else []
            raise OutsideDomain(
                "the TOSA reference model calls a sample of every range unpredictable "
                f"(ranges {', '.join(ranges)}: an op's REQUIRE fails on them)"
            )
        if run.returncode != 0:
            last = " | ".join(run.output.strip().splitlines()[-3:]) or "no output"
            raise RuntimeError(f"exit {run.returncode}: {last}")
        with np.load(outs) as got:
            used = int(got["range"])
            engine = str(got["engine"])
            n_out = sum(1 for k in got.files if k.startswith("s0_"))
            result = [[got[f"s{s}_{j}"] for j in range(n_out)] for s in range(n_samples)]
    if reference is not None:
        reference.samples = pairs[used]
        reference.sample_range = reference.ranges[used]
        reference.engine = engine
    return result, time.perf_counter() - t0, run.cpu_seconds or 0.0


def _run_model(
    vela: VelaResult, ins: Sequence[TensorSpec], outs: Sequence[TensorSpec], arrays, poison: int
) -> List[np.ndarray]:
    from ethosu_ng import runtime as rt

    scratch = bytearray([poison]) * vela.scratch_size
    fast = bytearray([poison]) * vela.fast_scratch_size if vela.fast_scratch_size else None
    for s, a in zip(ins, arrays):
        data = np.ascontiguousarray(a).tobytes()  # row-major bytes of the NPU buffer
        scratch[s.offset : s.offset + len(data)] = data
    rt.npu_model_run(vela.command_stream, vela.weights, scratch, fast)
    got = []
    for s in outs:
        dt = _np_dtype(s.dtype)
        raw = bytes(scratch[s.offset : s.offset + s.numel * dt.itemsize])
        got.append(np.frombuffer(raw, dtype=dt))
    return got


def verify(
    name: str,
    reference: Optional[Reference],
    vela: VelaResult,
    inputs: Sequence[TensorSpec],
    outputs: Sequence[TensorSpec],
    spec: EthosUNGCompileSpec,
) -> NpuVerdict:
    """Run the stream on the NPU model and compare with ``reference``; raise ``NpuDeviation``
    naming the output and the difference, or return the verdict."""
    t0 = time.perf_counter()
    if spec.family not in MODELLED_FAMILIES:
        return NpuVerdict("skipped", f"{spec.family} command streams are not modelled")
    if reference is None:
        return NpuVerdict("skipped", "no reference run for this partition")
    from ethosu_ng import runtime as rt

    verdict = NpuVerdict("verified")
    worst = (0, None, 0, "")  # max diff, output, elements differing, where
    try:
        tosa_runs, verdict.reference_seconds, verdict.reference_cpu_seconds = reference.result(
            name, spec.target
        )
    except Unverifiable:
        raise
    except Exception as e:  # noqa: BLE001 - a graph the reference rejects cannot be checked
        return NpuVerdict("skipped", f"TOSA reference model: {type(e).__name__}: {e}")
    verdict.sample_range = reference.sample_range
    verdict.reference_engine = reference.engine
    for k, (arrays, want) in enumerate(zip(reference.samples, tosa_runs)):
        cpu0 = time.thread_time()
        try:
            got = _run_model(vela, inputs, outputs, arrays, POISON[k % len(POISON)])
        except rt.NpuModelError as e:
            if e.code == NOT_SUPPORTED:
                # A gap of the model, not a fault of the stream: ship it, and say so.
                return NpuVerdict("skipped", f"the NPU model does not implement: {e}")
            raise NpuDeviation(name, spec.target, "invalid command stream", str(e)) from None
        verdict.model_cpu_seconds += time.thread_time() - cpu0
        for j, (g, w) in enumerate(zip(got, want)):
            w = np.asarray(w)
            if w.dtype != g.dtype and w.dtype.itemsize == g.dtype.itemsize:
                w = w.view(g.dtype)  # an int8 graph tensor for a uint8 entry: the same bits
            w = w.astype(np.int64).reshape(-1)
            g = g.astype(np.int64).reshape(-1)
            if w.size != g.size:
                raise NpuDeviation(
                    name,
                    spec.target,
                    "output size differs",
                    f"output {j}: TOSA gives {w.size} elements, the blob declares {g.size}",
                )
            d = np.abs(g - w)
            m = int(d.max()) if d.size else 0
            if m > worst[0]:
                i = int(d.argmax())
                where = f"element {i}: model {int(g[i])}, TOSA {int(w[i])}"
                worst = (m, j, int((d > 0).sum()), where)
        verdict.samples += 1
    verdict.seconds = time.perf_counter() - t0
    if worst[0]:
        verdict.status, verdict.max_diff, verdict.output, verdict.elements_differing = (
            "deviation",
            worst[0],
            worst[1],
            worst[2],
        )
        err = NpuDeviation(
            name,
            spec.target,
            f"NPU model differs from TOSA by {worst[0]} at output {worst[1]}",
            f"{worst[2]} element(s) differ; {worst[3]}",
        )
        raise err
    return verdict
