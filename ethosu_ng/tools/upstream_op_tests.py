# SPDX-License-Identifier: BSD-3-Clause
"""Upstream's own Arm operator tests as a yardstick: every Ethos-U INT case of executorch's
``backends/arm/test/ops/test_*.py``, quantized and lowered with ethosu_ng, run on the host
runtime and compared with the eager quantized model in LSB.

    OMP_NUM_THREADS=1 python bench/upstream_op_tests.py --ops add,avg_pool2d --targets u55,u85
    python bench/upstream_op_tests.py --list --ops add        # the cases a run would run
    python bench/upstream_op_tests.py --table                 # per-op markdown table of the results

Collecting. Each upstream test function is called for real, with upstream's pipeline classes
(``EthosU55PipelineINT``, ``EthosU65PipelineINT``, ``EthosU85PipelineINT`` and, for
``*_u55_*``/``*_u85_*`` functions, ``OpNotSupportedPipeline`` and ``ArmTester``) replaced in the
test module by a recorder that keeps ``(module, test_data)`` and the pipeline's keyword
arguments and runs nothing. Parsing the files instead would have to re-implement what each test
does between its test data and its pipeline (``test_data()`` lambdas,
``Module().get_inputs()``, tuples unpacked into module arguments, one test building several
pipelines); calling the function gets exactly the module and inputs upstream would lower. A test
that inspects its pipeline's results afterwards fails on the recorder's dummies; what it built
is kept. The parametrization is read from the ``pytest.mark.parametrize`` that upstream's
``common.parametrize`` attaches: each ``pytest.param`` carries its id and marks, so an expected
failure is a ``xfail`` mark on the param (or on the function, except the ``XfailIfNoCorstone*``
marks, which only say an FVP is missing).

A case is ``file::function[param]`` on one target (u55, u65 or u85): the pipeline class's
target where it has one, as upstream would lower it (``test_acosh_u85_INT_xfail`` builds a U55
pipeline), else the function name's. Each case has an upstream expectation: ``pass``, ``xfail``
(marked expected failure), ``not_delegated`` (upstream asserts the op is *not* delegated:
``OpNotSupportedPipeline``, or an ``ArmTester`` test named so) or ``skip``; and a variant:
``int8`` (upstream's default symmetric int8), ``a16w8`` (16-bit activations), ``a8w4`` (4-bit
weights), ``custom`` (the test sets its own quantizer config) or ``dynamic`` (dynamic shapes).
ethosu_ng quantizes int8 with its own quantizer whatever the variant, so only ``int8`` cases run
unless ``--all-variants``: the others would repeat an int8 case's module and inputs.

Running. Each case runs in a *spawned* worker (a fresh interpreter: never forked from a process
in which torch ran ops, whose OpenMP pool the child would wait on forever). The parent gives a
worker one case at a time with a time limit (``--timeout``, default 300 s); a case that hangs or
kills its worker is recorded (``timeout``/``crash``) and a new worker is spawned. A worker
serves ``--cases-per-worker`` cases (default 20; 1 gives each case its own interpreter) so the
few seconds of importing torch and executorch are not paid per case. In the worker a case is
re-collected from upstream's file (seeded, so the inputs are the same every run), quantized with
``ethosu_ng.export.quantize`` (calibrated on the example inputs), lowered with
``ethosu_ng.export.lower`` (``EthosUNGCompileSpec(target, embed_tosa=True)``), serialized and
run with ``ethosu_ng.runtime.run_pte`` (U55/U65: Vela's stream on the NPU model; U85: the TOSA
reference model), and each output is compared with the quantized GraphModule's output on the
same inputs: ``|pte - eager quantized| / scale`` counted in whole grid steps, the scale being
the output's quantization grid
(``io_quantization(edge).outputs[k].grid_scale``, as ``ethosu-ng verify`` measures it); an
output without one (integer, bool, float computed on the CPU) is compared in absolute units.
Non-tensor test inputs (``dim``, ``index`` ...) are bound into the module as constants.

Results are JSON lines appended to ``--results`` (default bench/results/upstream_op_tests.jsonl);
a rerun skips the cases already there, so an interrupted run resumes (``--redo REGEX`` runs
matching cases again; the newest record of a case is the one counted).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import dataclasses
import importlib
import io
import itertools
import json
import multiprocessing as mp
import os
import queue as queue_mod
import random
import re
import sys
import time
import traceback
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
# Where results go unless --results says otherwise (bench/upstream_op_tests.py: bench/results/).
DEFAULT_RESULTS = "upstream_op_tests.jsonl"
UPSTREAM_OPS = "executorch.backends.arm.test.ops"
TARGETS = {"u55": "ethos-u55-128", "u65": "ethos-u65-256", "u85": "ethos-u85-128"}
PIPELINES = {
    "EthosU55PipelineINT": "u55",
    "EthosU65PipelineINT": "u65",
    "EthosU85PipelineINT": "u85",
    "OpNotSupportedPipeline": None,  # target from the function name
    "ArmTester": None,  # a test driving upstream's tester itself (dynamic-shape checks)
}
# A test function that builds an Ethos-U pipeline: test_<op>..._u55_INT..., _u85_..., _u65_...
_FUNCTION = re.compile(r"^test_.*_(u55|u65|u85)_")
_SEED = 0


@dataclasses.dataclass
class Case:
    file: str  # test module name, e.g. "test_avg_pool2d"
    function: str
    param: str  # pytest id of the parametrization
    target: str  # "u55" | "u65" | "u85"
    call: int  # which pipeline the function builds (most build one)
    expect: str  # "pass" | "xfail" | "not_delegated" | "skip"
    variant: str  # "int8" | "a16w8" | "custom"
    pipeline: str
    reason: str = ""  # upstream's xfail/skip reason
    module: str = ""  # class name of the module upstream lowers
    # Shape perturbation (op_test_shapes.py): the seed and which draw; None runs upstream's shapes.
    perturb_seed: Optional[int] = None
    perturb_index: int = 0

    @property
    def op(self) -> str:
        return self.file[len("test_") :]

    @property
    def base_key(self) -> str:
        """The case at upstream's shapes."""
        suffix = f"#{self.call}" if self.call else ""
        return f"{self.file}::{self.function}[{self.param}]{suffix}@{self.target}"

    @property
    def key(self) -> str:
        if self.perturb_seed is None:
            return self.base_key
        return f"{self.base_key}~shapes{self.perturb_seed}.{self.perturb_index}"


# ----------------------------------------------------------------------------- collecting


class _Sink:
    """Whatever a test does with its pipeline after building it (``run``, ``pop_stage``,
    ``quantizer.set_global`` ...): accepted and ignored."""

    def __init__(self, log: List[str], path: str):
        object.__setattr__(self, "_log", log)
        object.__setattr__(self, "_path", path)

    def __getattr__(self, name):
        return _Sink(self._log, f"{self._path}.{name}")

    def __setattr__(self, name, value):
        self._log.append(f"{self._path}.{name}=")

    def __call__(self, *args, **kwargs):
        self._log.append(self._path)
        return _Sink(self._log, f"{self._path}()")

    def __iter__(self):
        return iter(())

    def __getitem__(self, item):
        return _Sink(self._log, f"{self._path}[]")


@dataclasses.dataclass
class _Recorded:
    pipeline: str
    module: Any
    test_data: Any
    kwargs: Dict[str, Any]
    log: List[str]


def _recorder(name: str, calls: List[_Recorded]):
    class Recorder:
        def __class_getitem__(cls, item):  # EthosU55PipelineINT[input_t](...)
            return cls

        def __init__(self, module=None, test_data=None, *args, **kwargs):
            kwargs = dict(kwargs)
            if module is None:
                module = kwargs.pop("module", None)
            if test_data is None:
                test_data = kwargs.pop("test_data", kwargs.pop("example_inputs", None))
            log: List[str] = []
            object.__setattr__(self, "_log", log)
            calls.append(_Recorded(name, module, test_data, kwargs, log))

        def __getattr__(self, attr):
            return getattr(_Sink(self._log, ""), attr)

        def __setattr__(self, attr, value):
            self._log.append(f".{attr}=")

    Recorder.__name__ = name
    return Recorder


_BIT_WIDTHS = re.compile(r"16a8w|a16w8|int16|a8w4", re.IGNORECASE)


def _variant(rec: _Recorded, func_name: str) -> str:
    """What upstream quantizes with. Per-channel/per-tensor weights and symmetric IO are int8
    choices ethosu_ng's quantizer makes for itself; other bit widths, or a quantizer config the
    test sets itself, are not int8 cases."""
    m = _BIT_WIDTHS.search(func_name)
    if rec.kwargs.get("a16w8_quantization") or (m and m.group(0).lower() != "a8w4"):
        return "a16w8"
    if m:
        return "a8w4"
    if any(".quantizer." in entry or entry.startswith(".quantizer") for entry in rec.log):
        return "custom"
    if rec.kwargs.get("dynamic_shapes") is not None:
        return "dynamic"  # ethosu_ng lowers static shapes
    return "int8"


def _marks_of(obj) -> List[Any]:
    return list(getattr(obj, "pytestmark", []) or [])


def _function_expectation(func) -> Tuple[str, str]:
    for m in _marks_of(func):
        reason = str(m.kwargs.get("reason", ""))
        if m.name == "xfail" and not reason.startswith("Did not find"):
            return "xfail", reason
        if m.name == "skip":
            return "skip", reason
    return "pass", ""


def _param_sets(func) -> List[Tuple[str, Dict[str, Any], str, str]]:
    """(id, kwargs, expectation, reason) for each parametrization of ``func`` (the product of its
    parametrize marks, as pytest forms it)."""
    axes = []
    for m in reversed(_marks_of(func)):
        if m.name != "parametrize":
            continue
        names = [n.strip() for n in m.args[0].split(",")] if isinstance(m.args[0], str) else []
        axis = []
        for p in m.args[1]:
            values = getattr(p, "values", (p,))
            pid = getattr(p, "id", None) or str(len(axis))
            expect, reason = "pass", ""
            for mark in getattr(p, "marks", ()):
                if mark.name == "xfail":
                    expect, reason = "xfail", str(mark.kwargs.get("reason", ""))
                elif mark.name == "skip":
                    expect, reason = "skip", str(mark.kwargs.get("reason", ""))
            axis.append((pid, dict(zip(names, values)), expect, reason))
        axes.append(axis)
    out = []
    for combo in itertools.product(*axes):
        ids = "-".join(c[0] for c in combo)
        kwargs: Dict[str, Any] = {}
        for c in combo:
            kwargs.update(c[1])
        marked = [c for c in combo if c[2] != "pass"]
        expect, reason = (marked[0][2], marked[0][3]) if marked else ("pass", "")
        out.append((ids, kwargs, expect, reason))
    return out


def _import_test_module(name: str):
    import torch

    # Some upstream files `import conftest`, pytest's rootdir-relative import of
    # backends/arm/test/conftest.py: their directory's parent on sys.path, as pytest has it.
    test_dir = os.path.dirname(list(importlib.import_module(UPSTREAM_OPS).__path__)[0])
    if test_dir not in sys.path:
        sys.path.append(test_dir)
    torch.manual_seed(_SEED)  # module-level test data is drawn at import
    return importlib.import_module(f"{UPSTREAM_OPS}.{name}")


def test_files(ops: Optional[Sequence[str]] = None) -> List[str]:
    """Upstream's test module names (``test_add`` ...), filtered by op (``add``) or file name."""
    pkg = importlib.import_module(UPSTREAM_OPS)
    d = list(pkg.__path__)[0]  # a namespace package: no __init__.py
    names = sorted(f[:-3] for f in os.listdir(d) if f.startswith("test_") and f.endswith(".py"))
    if ops:
        wanted = {o if o.startswith("test_") else f"test_{o}" for o in ops}
        names = [n for n in names if n in wanted]
    return names


def _trace(mod, func_name: str, kwargs: Dict[str, Any]) -> List[_Recorded]:
    """Call ``mod.func_name(**kwargs)`` with the pipelines replaced by recorders."""
    import pytest
    import torch

    calls: List[_Recorded] = []
    saved = {}
    for name in PIPELINES:
        if hasattr(mod, name):
            saved[name] = getattr(mod, name)
            setattr(mod, name, _recorder(name, calls))
    torch.manual_seed(_SEED)
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            getattr(mod, func_name)(**kwargs)
    except pytest.skip.Exception:
        pass
    except Exception:
        # A test that inspects its (recorded) pipeline's results after building it fails on
        # the recorder's dummies: what it built is still what it would have lowered.
        if not calls:
            raise
    finally:
        for name, value in saved.items():
            setattr(mod, name, value)
    return calls


def _target_of(rec: _Recorded, func_name: str) -> Optional[str]:
    target = PIPELINES[rec.pipeline]
    if target is None:
        m = _FUNCTION.match(func_name)
        # OpNotSupportedPipeline checks the U55 subset of TOSA or plain TOSA INT: a u85 function
        # asserting non-delegation is an Ethos-U85 expectation too.
        quantized = rec.kwargs.get("quantize") or rec.pipeline == "ArmTester"
        target = m.group(1) if m and quantized else None
    return target


def collect(
    ops: Optional[Sequence[str]] = None, errors: Optional[Dict[str, str]] = None
) -> List[Case]:
    """Every Ethos-U INT case of upstream's op tests (all variants and expectations)."""
    cases: List[Case] = []
    for name in test_files(ops):
        try:
            mod = _import_test_module(name)
        except Exception as e:  # an upstream file that does not import here
            if errors is not None:
                errors[name] = f"import: {type(e).__name__}: {e}".splitlines()[0]
            continue
        for func_name in sorted(vars(mod)):
            if not _FUNCTION.match(func_name) or "INT" not in func_name:
                continue
            func = getattr(mod, func_name)
            if not callable(func):
                continue
            f_expect, f_reason = _function_expectation(func)
            for pid, kwargs, expect, reason in _param_sets(func):
                try:
                    calls = _trace(mod, func_name, kwargs)
                except Exception as e:
                    if errors is not None:
                        errors[f"{name}::{func_name}[{pid}]"] = (
                            f"{type(e).__name__}: {e}".splitlines()[0]
                        )
                    continue
                for k, rec in enumerate(calls):
                    target = _target_of(rec, func_name)
                    if target is None:
                        continue
                    e, r = (expect, reason) if expect != "pass" else (f_expect, f_reason)
                    asserts_cpu = rec.pipeline == "OpNotSupportedPipeline" or (
                        rec.pipeline == "ArmTester" and "not_delegated" in func_name
                    )
                    if asserts_cpu and e == "pass":
                        e = "not_delegated"
                    cases.append(
                        Case(
                            file=name,
                            function=func_name,
                            param=pid,
                            target=target,
                            call=k,
                            expect=e,
                            variant=_variant(rec, func_name),
                            pipeline=rec.pipeline,
                            reason=r,
                            module=type(rec.module).__name__,
                        )
                    )
    return cases


def _bound(module, test_data) -> Tuple[Any, Tuple[Any, ...]]:
    """(module, tensor inputs): the tensors of ``test_data`` (also those inside tuples and lists:
    ``cat``'s ``((x, y), dim)``, ``index_put``'s indices) become the program's inputs, anything
    else is bound into the module as a constant."""
    import torch
    from torch.utils._pytree import tree_flatten, tree_unflatten

    data = test_data if isinstance(test_data, tuple) else (test_data,)
    if all(isinstance(t, torch.Tensor) for t in data):
        return module, data
    leaves, spec = tree_flatten(data)
    slots = [isinstance(t, torch.Tensor) for t in leaves]

    class Bound(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = module

        def forward(self, *tensors):
            it = iter(tensors)
            args = tree_unflatten([next(it) if s else c for s, c in zip(slots, leaves)], spec)
            return self.inner(*args)

    return Bound(), tuple(t for t in leaves if isinstance(t, torch.Tensor))


def materialize(case: Case) -> Tuple[Any, Tuple[Any, ...]]:
    """The module and tensor inputs upstream's test lowers for ``case`` (seeded: the same every
    call in a fresh interpreter)."""
    mod = _import_test_module(case.file)
    func = getattr(mod, case.function)
    for pid, kwargs, _, _ in _param_sets(func):
        if pid == case.param:
            calls = _trace(mod, case.function, kwargs)
            rec = calls[case.call]
            return _bound(rec.module, rec.test_data)
    raise KeyError(f"{case.key}: parametrization not found")


# ----------------------------------------------------------------------------- running one case


def _one_line(e: BaseException) -> str:
    lines = [s.strip() for s in str(e).splitlines() if s.strip()]
    msg = lines[0] if lines else ""
    if len(lines) > 1 and (msg.endswith(":") or len(msg) < 20):  # a heading: add what follows
        msg = f"{msg} {lines[1]}"
    return f"{type(e).__name__}: {msg}"[:300]


@contextlib.contextmanager
def _native_stderr():
    """Capture what native code writes to fd 2 (ExecuTorch's log) while the block runs; yields a
    function returning it. Still echoed afterwards, so a run's log keeps it."""
    import tempfile

    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile(mode="w+b") as f:
        os.dup2(f.fileno(), 2)
        text: List[str] = []

        def said() -> str:
            if not text:
                f.flush()
                f.seek(0)
                text.append(f.read().decode(errors="replace"))
            return text[0]

        try:
            yield said
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            os.write(2, said().encode())


def _first_failure(log: str) -> str:
    """The line of an ExecuTorch log that names the cause (a failed check or a delegate's own
    error), without its source-location prefix."""
    lines = [re.sub(r"^\[[^\]]*\]\s*", "", s).strip() for s in log.splitlines()]
    for pattern in ("Check failed", "callback failed", "failed", "rror"):
        for s in lines:
            if pattern in s:
                return s[:160]
    return ""


def _outputs(x) -> List[Any]:
    import torch
    from torch.utils._pytree import tree_leaves

    return [t for t in tree_leaves(x) if isinstance(t, torch.Tensor)]


def compare(got: Sequence[Any], want: Sequence[Any], ioq) -> Tuple[float, str]:
    """(max difference over outputs, unit): in LSB of each output's quantization grid where it
    has one, else in absolute units (integer/bool outputs: any difference is >= 1)."""
    import torch

    worst, units = 0.0, set()
    if len(got) != len(want):
        raise ValueError(f"{len(got)} outputs from the .pte, {len(want)} from the eager model")
    for k, (g, w) in enumerate(zip(got, want)):
        if tuple(g.shape) != tuple(w.shape):
            raise ValueError(f"output {k}: shape {tuple(g.shape)} != eager {tuple(w.shape)}")
        io_k = ioq.outputs[k] if k < len(ioq.outputs) else None
        scale = io_k.grid_scale if io_k is not None else None
        gf = io_k.dequantize(g) if io_k is not None and io_k.scale is not None else g
        gf, w = gf.double(), w.double()
        if scale:
            # Both lie on the output's grid: count grid steps as integers, so float rounding of
            # the dequantized values does not turn 1 LSB into 1.000003.
            gf, w = torch.round(gf / scale), torch.round(w / scale)
            units.add("lsb")
        else:
            units.add("abs")
        d = (gf - w).abs().max().item() if g.numel() else 0.0
        worst = max(worst, d if d == d else float("inf"))  # NaN: as far off as it gets
    return worst, "+".join(sorted(units))


def run_case(case: Case, timings: bool = True) -> Dict[str, Any]:
    """One case, in this process: quantize, lower, serialize, run on the host, compare.
    Never raises; the failing stage and a one-line reason are in the record."""
    import torch

    from ethosu_ng import EthosUNGCompileSpec, io_quantization
    from ethosu_ng.export import lower, quantize
    from ethosu_ng.ops import is_compute
    from ethosu_ng.runtime import run_pte

    rec = _blank_record(case)
    t0 = time.monotonic()
    stage = "collect"
    try:
        model, inputs = materialize(case)
        spec = EthosUNGCompileSpec(TARGETS[case.target], embed_tosa=True)
        upstream_inputs = inputs
        if case.perturb_seed is not None:
            stage = "perturb"
            inputs = _perturbed_inputs(case, model, inputs, rec)
        stage = "quantize"
        q = quantize(model, inputs, spec, calibration=[inputs])
        stage = "lower"
        edge, partitioner = lower(q, inputs, spec)
        rec["lowered"] = True
        report = partitioner.report
        rec["partitions"] = len(report.partitions)
        rec["delegated"] = bool(report.partitions)
        cpu = sorted({op for op in report.cpu_targets.values() if is_compute(op)})
        rec["cpu_ops"] = cpu
        # Why each CPU op stayed there (the partitioner's first reason for a node of that op).
        why: Dict[str, str] = {}
        for node, op in report.cpu_targets.items():
            if is_compute(op) and op not in why:
                why[op] = str(report.cpu_reasons.get(node, ""))[:200]
        rec["cpu_reasons"] = why
        rec["fully_delegated"] = rec["delegated"] and not cpu
        rec["compiler_fallback"] = len(report.compiler_fallback)
        ioq = io_quantization(edge)
        stage = "serialize"
        pte = edge.to_executorch().buffer
        stage = "run"
        with _native_stderr() as said:
            try:
                got = _outputs(run_pte(pte, list(inputs)))
            except Exception as e:
                # The runtime's exception says only "failed with error 0x12"; its log says why.
                msg = _one_line(e).split(": ", 1)[-1]
                raise RuntimeError(f"{msg} [{_first_failure(said())}]") from e
        rec["host_run"] = True
        stage = "compare"
        with torch.no_grad():
            want = _outputs(q(*inputs))
        worst, unit = compare(got, want, ioq)
        rec.update(max_lsb=worst, unit=unit, bit_exact=worst == 0, within_1lsb=worst <= 1)
        stage = None
    except Exception as e:
        rec["reason"] = _one_line(e)
        rec["traceback"] = traceback.format_exc()[-2000:]
    rec["stage"] = stage
    if case.perturb_seed is not None and rec["lowered"] and not rec["fully_delegated"]:
        # Left on the CPU at these shapes: is it at upstream's? (lowered again to know)
        try:
            q0 = quantize(model, upstream_inputs, spec, calibration=[upstream_inputs])
            report0 = lower(q0, upstream_inputs, spec)[1].report
            cpu0 = sorted({op for op in report0.cpu_targets.values() if is_compute(op)})
            rec["upstream_shapes_cpu_ops"] = cpu0
            rec["upstream_shapes_fully_delegated"] = bool(report0.partitions) and not cpu0
        except Exception as e:
            rec["upstream_shapes_error"] = _one_line(e)
    rec["seconds"] = round(time.monotonic() - t0, 2)
    return rec


class NoValidPerturbation(Exception):
    """Every draw of new shapes made the float eager module fail: the case is skipped."""


def _perturbed_inputs(case: Case, model, inputs, rec: Dict[str, Any]) -> Tuple[Any, ...]:
    from ethosu_ng.tools.op_test_shapes import perturb

    new, info = perturb(model, inputs, case.perturb_seed, f"{case.base_key}#{case.perturb_index}")
    rec.update(info)
    if new is None:
        last = info["refused"][-1] if info["refused"] else "no size to change"
        raise NoValidPerturbation(f"no valid perturbation ({len(info['refused'])} refused: {last})")
    return new


# ----------------------------------------------------------------------------- workers


def _worker(tasks, results) -> None:
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import logging
    import warnings

    import torch

    torch.set_num_threads(1)
    logging.disable(logging.WARNING)
    warnings.filterwarnings("ignore")
    commit = _commit()
    while True:
        item = tasks.get()
        if item is None:
            return
        results.put({**run_case(Case(**item)), "commit": commit})


def _commit() -> str:
    """The checkout's HEAD when the worker imported ethosu_ng (the code a record measured)."""
    import subprocess

    try:
        out = subprocess.run(
            ["git", "-C", HERE, "rev-parse", "--short", "HEAD"], capture_output=True, text=True
        )
        return out.stdout.strip()
    except OSError:
        return ""


class _Pool:
    """One spawned worker at a time; replaced after ``per_worker`` cases, a timeout or a crash."""

    def __init__(self, per_worker: int):
        self.ctx = mp.get_context("spawn")
        self.per_worker = max(1, per_worker)
        self.proc = None
        self.served = 0

    def _start(self):
        self.tasks, self.results = self.ctx.Queue(), self.ctx.Queue()
        self.proc = self.ctx.Process(target=_worker, args=(self.tasks, self.results), daemon=True)
        self.proc.start()
        self.served = 0

    def stop(self):
        if self.proc is None:
            return
        if self.proc.is_alive():
            self.tasks.put(None)
            self.proc.join(10)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join()
        self.proc = None

    def run(self, case: Case, timeout: float) -> Dict[str, Any]:
        if self.proc is None or self.served >= self.per_worker:
            self.stop()
            self._start()
        self.served += 1
        t0 = time.monotonic()
        self.tasks.put(dataclasses.asdict(case))
        while True:
            try:
                return self.results.get(timeout=1.0)
            except queue_mod.Empty:
                pass
            waited = time.monotonic() - t0
            if not self.proc.is_alive():
                code = self.proc.exitcode
                self.proc = None
                return _failed(case, "crash", f"worker died (exit code {code})", waited)
            if waited > timeout:
                _kill_descendants(self.proc.pid)
                self.proc.kill()
                self.proc.join()
                self.proc = None
                return _failed(case, "timeout", f"no result in {timeout:.0f} s", waited)


def _kill_descendants(pid: int) -> None:
    """SIGKILL every process below ``pid`` (Linux ``/proc``): a killed worker would otherwise
    leave its Vela process (and the compile it runs) orphaned and running."""
    import signal

    children: Dict[int, List[int]] = collections.defaultdict(list)
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else ():
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children[ppid].append(int(entry))
    todo, below = [pid], []
    while todo:
        for c in children.get(todo.pop(), ()):
            below.append(c)
            todo.append(c)
    for c in below:
        with contextlib.suppress(OSError):
            os.kill(c, signal.SIGKILL)


def _blank_record(case: Case) -> Dict[str, Any]:
    """A case's record before any stage has run."""
    return {
        "key": case.key,
        **dataclasses.asdict(case),
        "op": case.op,
        "target_name": TARGETS[case.target],
        "lowered": False,
        "delegated": False,
        "fully_delegated": False,
        "host_run": False,
        "bit_exact": False,
        "within_1lsb": False,
        "max_lsb": None,
        "unit": None,
        "partitions": 0,
        "cpu_ops": [],
        "stage": None,
        "reason": "",
    }


def _failed(case: Case, stage: str, reason: str, seconds: float) -> Dict[str, Any]:
    return {**_blank_record(case), "stage": stage, "reason": reason, "seconds": round(seconds, 2)}


# ----------------------------------------------------------------------------- results


def load_results(path: str) -> Dict[str, Dict[str, Any]]:
    out: Dict[str, Dict[str, Any]] = {}
    if not os.path.exists(path):
        return out
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:  # a line cut short by an interrupted run
                continue
            out[rec["key"]] = rec
    return out


def _append(path: str, rec: Dict[str, Any]) -> None:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "a") as f:
        f.write(json.dumps(rec, sort_keys=True) + "\n")


_NUMBERS = re.compile(r"0x[0-9a-f]+|\d+(\.\d+)?")


def failure_class(rec: Dict[str, Any]) -> str:
    """The stage and the reason with node names and numbers blurred, so that like failures
    group."""
    if rec.get("stage") is None:
        if not rec.get("within_1lsb"):
            return "compare: > 1 LSB"
        if rec.get("upstream_shapes_fully_delegated") and rec.get("cpu_ops"):
            # A perturbed case on the CPU whose op upstream's shapes delegate.
            return f"delegation: {', '.join(rec.get('cpu_ops', []))} on the CPU"[:90]
        return ""
    reason = _NUMBERS.sub("N", rec.get("reason", ""))
    reason = re.sub(r"'[^']*'|\"[^\"]*\"", "'…'", reason)
    return f"{rec['stage']}: {reason[:90]}"


def _frac(n: int, d: int) -> str:
    return f"{n}/{d}" if d else "-"


COLUMNS = (
    ("lowered", "lowered"),
    ("delegated", "delegated"),
    ("fully_delegated", "fully deleg."),
    ("host_run", "host run"),
    ("bit_exact", "bit-exact"),
    ("within_1lsb", "<=1 LSB"),
)


def _row(label: str, recs: List[Dict[str, Any]]) -> str:
    n = len(recs)
    cells = [label, str(n)] + [_frac(sum(bool(r.get(k)) for r in recs), n) for k, _ in COLUMNS]
    fails = collections.Counter(failure_class(r) for r in recs if failure_class(r))
    common = ""
    if fails:
        cls, count = fails.most_common(1)[0]
        common = f"{cls.replace('|', '/')} ({count})"
    return "| " + " | ".join(cells + [common]) + " |"


def table(results: Iterable[Dict[str, Any]]) -> str:
    recs = sorted(results, key=lambda r: (r["op"], r["target"], r["key"]))
    head = (
        "| op / target | cases | " + " | ".join(t for _, t in COLUMNS) + " | most common failure |"
    )
    sep = "|" + "---|" * (len(COLUMNS) + 3)
    lines = [head, sep]
    by = collections.defaultdict(list)
    for r in recs:
        by[(r["op"], r["target"])].append(r)
    for (op, target), rs in sorted(by.items()):
        lines.append(_row(f"{op} {target}", rs))
    lines.append(_row("**all**", recs))
    for target in sorted({r["target"] for r in recs}):
        lines.append(_row(f"**all {target}**", [r for r in recs if r["target"] == target]))
    for expect in ("pass", "xfail", "not_delegated", "skip"):
        rs = [r for r in recs if r["expect"] == expect]
        if rs:
            lines.append(_row(f"**upstream expects {expect}**", rs))
    return "\n".join(lines)


def failure_classes(results: Iterable[Dict[str, Any]]) -> List[Tuple[str, int, str, str]]:
    """(class, count, example key, example reason), most frequent first."""
    groups: Dict[str, List[Dict[str, Any]]] = collections.defaultdict(list)
    for r in results:
        cls = failure_class(r)
        if cls:
            groups[cls].append(r)
    out = []
    for cls, rs in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        ex = rs[0]
        why = ex.get("reason") or f"max {ex.get('max_lsb')} {ex.get('unit')}"
        out.append((cls, len(rs), ex["key"], why))
    return out


# ----------------------------------------------------------------------------- command line


def _select(
    cases: List[Case], targets: Sequence[str], all_variants: bool, expects: Sequence[str]
) -> List[Case]:
    return [
        c
        for c in cases
        if c.target in targets and (all_variants or c.variant == "int8") and c.expect in expects
    ]


def _interleave(cases: List[Case]) -> List[Case]:
    """Round-robin over ops, so a limited run covers every selected op."""
    by_op: Dict[str, List[Case]] = collections.defaultdict(list)
    for c in cases:
        by_op[c.op].append(c)
    queues = [by_op[k] for k in sorted(by_op)]
    out = []
    for k in range(max((len(q) for q in queues), default=0)):
        out.extend(q[k] for q in queues if k < len(q))
    return out


def main(argv: Optional[Sequence[str]] = None, default_results: str = DEFAULT_RESULTS) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ops", help="comma-separated ops or test files (add,avg_pool2d)")
    ap.add_argument("--targets", default="u55,u85", help="comma-separated: u55,u65,u85")
    ap.add_argument("--limit", type=int, help="run at most N cases (new ones)")
    ap.add_argument("--per-op", type=int, help="run at most N new cases per op and target")
    ap.add_argument("--table", action="store_true", help="print the table of the results")
    ap.add_argument("--list", action="store_true", help="print the cases to run; run nothing")
    ap.add_argument("--results", default=None, help=f"JSON lines (default {default_results})")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per case")
    ap.add_argument("--cases-per-worker", type=int, default=20)
    ap.add_argument("--all-variants", action="store_true", help="also a16w8 and custom cases")
    ap.add_argument(
        "--expect",
        default="pass,xfail,not_delegated",
        help="upstream expectations to run, or to table (pass,xfail,not_delegated,skip)",
    )
    ap.add_argument("--order", choices=("file", "spread"), default="spread")
    ap.add_argument(
        "--redo", help="regex: run the matching cases again although recorded (the newest counts)"
    )
    ap.add_argument("--match", help="regex: only the cases whose key matches")
    ap.add_argument(
        "--perturb-shapes",
        type=int,
        default=0,
        metavar="N",
        help="run each case at N drawn shapes instead of upstream's (op_test_shapes.py); "
        "results default to upstream_op_tests_shapes.jsonl beside the default results",
    )
    ap.add_argument("--seed", type=int, default=0, help="seed of --perturb-shapes")
    args = ap.parse_args(argv)
    if args.results is None:
        args.results = default_results
        if args.perturb_shapes:
            root, ext = os.path.splitext(default_results)
            args.results = f"{root}_shapes{ext}"
    ops = [o.strip() for o in args.ops.split(",")] if args.ops else None
    targets = [t.strip() for t in args.targets.split(",")]
    for t in targets:
        if t not in TARGETS:
            ap.error(f"unknown target {t!r}: one of {', '.join(TARGETS)}")

    if args.table:
        results = load_results(args.results).values()
        if ops:
            results = [r for r in results if r["op"] in ops or r["file"] in ops]
        expects = args.expect.split(",")
        results = [r for r in results if r["target"] in targets and r["expect"] in expects]
        if args.match:
            results = [r for r in results if re.search(args.match, r["key"])]
        # A perturbed case without valid shapes did not run: counted, not tabled.
        skipped = [r for r in results if r.get("stage") == "perturb"]
        results = [r for r in results if r.get("stage") != "perturb"]
        print(table(results))
        if skipped:
            print(f"\n{len(skipped)} cases had no valid perturbation (not in the table)")
        print()
        for cls, n, key, why in failure_classes(results):
            print(f"- {n} x {cls} -- e.g. {key}: {why}")
        return 0

    os.environ.setdefault("OMP_NUM_THREADS", "1")
    errors: Dict[str, str] = {}
    cases = collect(ops, errors)
    for where, why in errors.items():
        print(f"not collected: {where}: {why}", file=sys.stderr)
    selected = _select(cases, targets, args.all_variants, args.expect.split(","))
    if args.perturb_shapes:
        # Cases in a seeded order (a limited run is not every op's first parametrization, often
        # zeros or ones), and draw k of every case before draw k+1 of any.
        random.Random(args.seed).shuffle(selected)
        selected = [
            dataclasses.replace(c, perturb_seed=args.seed, perturb_index=k)
            for k in range(args.perturb_shapes)
            for c in selected
        ]
    if args.match:
        selected = [c for c in selected if re.search(args.match, c.key)]
    done = load_results(args.results)
    redo = re.compile(args.redo) if args.redo else None
    todo = [c for c in selected if c.key not in done or (redo and redo.search(c.key))]
    recorded = len(selected) - len(todo)
    if args.order == "spread":
        todo = _interleave(todo)
    if args.per_op:
        counts: Dict[Tuple[str, str], int] = collections.Counter()
        kept = []
        for c in todo:
            if counts[(c.op, c.target)] < args.per_op:
                counts[(c.op, c.target)] += 1
                kept.append(c)
        todo = kept
    if args.limit is not None:
        todo = todo[: args.limit]
    print(
        f"{len(cases)} cases collected, {len(selected)} selected, {recorded} already recorded, "
        f"{len(todo)} to run",
        file=sys.stderr,
    )
    if args.list:
        for c in todo:
            print(f"{c.key}  expect={c.expect} variant={c.variant} module={c.module}")
        return 0
    pool = _Pool(args.cases_per_worker)
    try:
        for k, case in enumerate(todo):
            rec = pool.run(case, args.timeout)
            _append(args.results, rec)
            verdict = (
                f"max {rec['max_lsb']:.3g} {rec['unit']}"
                if rec["stage"] is None
                else f"{rec['stage']}: {rec['reason'][:120]}"
            )
            shapes = f" shapes={rec['shapes']}" if rec.get("shapes") else ""
            print(
                f"[{k + 1}/{len(todo)}] {case.key}{shapes} {rec['seconds']:.1f}s {verdict}",
                flush=True,
            )
    finally:
        pool.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
