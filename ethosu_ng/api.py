# SPDX-License-Identifier: BSD-3-Clause
# SPDX-License-Identifier: Apache-2.0
"""The command line's three verbs as Python functions: ``compile``, ``report``, ``verify``.

``ethosu_ng.compile(model, example_inputs, "ethos-u55-128")`` checks every option before any
work, quantizes, lowers, serializes and checks that the runtime can load the result; it returns a
``CompileResult`` (the .pte bytes, the report, the lowered program and the partitioner).
``ethosu_ng.report("m.pte")`` is the report of a .pte (its JSON when it matches the program);
``ethosu_ng.verify(result_or_path)`` runs the program on the host runtime against the eager
quantized model. ``ethosu-ng compile|report|verify`` call these.
"""

from __future__ import annotations

import hashlib
import json
import os
import warnings
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple, Union

import torch

from ethosu_ng.io_layout import Asked
from ethosu_ng.vela import config as vela_config

DEFAULT_TARGET = "ethos-u55-128"
DTYPES = {"int8": torch.int8, "uint8": torch.uint8, "int16": torch.int16}
PRECISIONS = ("int8", "int16", "auto")
# Ops the runtime supplies itself: the delegate call, and ops ExecuTorch executes without a
# registered kernel.
_NO_KERNEL_NEEDED = frozenset({"executorch_prim::et_view.default"})


class ProgramWarning(UserWarning):
    """Something the user should know about the program, which does not stop the command."""


class NotAProgramError(ValueError):
    """A file given as a .pte is not an ExecuTorch program."""


class MissingKernelError(RuntimeError):
    """An op left on the CPU has no kernel in the runtime the program targets."""


class VerifyError(RuntimeError):
    """An output of the program is further from the eager quantized model than allowed."""


class Report(dict):
    """A compile report (the JSON written next to the .pte); ``str()`` is the readable summary."""

    def __str__(self) -> str:
        from ethosu_ng.tools.report import format_text

        return format_text(self)

    def summary(self) -> str:
        return str(self)

    def to_json(self) -> str:
        return json.dumps(self, indent=1)


@dataclass
class CompileResult:
    """What ``compile`` built. ``report`` is the ``.report.json``; ``partitioner.report`` says
    which node went where and why; ``edge`` is the lowered program."""

    pte: bytes
    report: Report
    edge: Any
    partitioner: Any
    quantized: torch.nn.Module
    example_inputs: Tuple[torch.Tensor, ...]
    spec: Any

    def save(self, path: str, emit_c: Optional[str] = None) -> List[str]:
        """Write ``path`` and its ``.report.json`` (and with ``emit_c``, the program as C into
        that directory); returns the paths written."""
        with open(path, "wb") as f:
            f.write(self.pte)
        rep_path = report_path(path)
        with open(rep_path, "w") as f:
            f.write(self.report.to_json())
        written = [path, rep_path]
        if emit_c:
            from ethosu_ng.tools.emit_c import c_name
            from ethosu_ng.tools.emit_c import emit_c as write_c

            written += write_c(
                emit_c,
                c_name(path),
                self.pte,
                self.report["memory_plan"],
                os.path.basename(path),
                self.report["program_io"],
            )
        return written

    def __str__(self) -> str:
        return str(self.report)


def report_path(pte_path: str) -> str:
    return os.path.splitext(pte_path)[0] + ".report.json"


def pte_sha256(pte: bytes) -> str:
    return hashlib.sha256(bytes(pte)).hexdigest()


# ------------------------------------------------------------------ checks before any work
def vela_sections(kind: str) -> List[str]:
    """Names of Vela's ``System_Config`` or ``Memory_Mode`` sections in Arm/vela.ini."""
    return vela_config.sections(kind)


def check_vela_config(spec) -> None:
    """The target, system config and memory mode as Vela will take them (Vela's own check, on
    Arm/vela.ini); ValueError naming the option and the valid names otherwise. A spec whose
    extra Vela flags bring their own ``--config`` is left to Vela."""
    if spec.extra_vela_flags:
        check_extra_vela_flags(spec.extra_vela_flags)
    if any(f.startswith("--config") for f in spec.extra_vela_flags):
        return
    for option, kind, name in (
        ("system config", "System_Config", spec.system_config),
        ("memory mode", "Memory_Mode", spec.memory_mode),
    ):
        valid = vela_sections(kind)
        if name not in valid:
            raise ValueError(f"{option} {name!r} is not in Vela's Arm/vela.ini; valid: {valid}")
    why = _vela_refuses(spec.target, spec.system_config, spec.memory_mode)
    if why:
        modes = [
            m
            for m in vela_sections("Memory_Mode")
            if not _vela_refuses(spec.target, spec.system_config, m)
        ]
        raise ValueError(
            f"memory mode {spec.memory_mode} with system config {spec.system_config} on "
            f"{spec.target}: Vela refuses it ({why}); memory modes it takes there: {modes}"
        )


def check_extra_vela_flags(flags: Sequence[str]) -> None:
    """Vela's own argument parser on the flags: ValueError naming an option Vela does not have
    or a value it refuses."""
    import contextlib
    import difflib
    import io

    parser = _vela_parser()
    err = io.StringIO()
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
            _, unknown = parser.parse_known_args(["network.tosa", *flags])
    except SystemExit:
        why = (err.getvalue().strip().splitlines() or ["refused"])[-1].split("error: ", 1)[-1]
        raise ValueError(f"extra Vela flags {list(flags)}: Vela says: {why}") from None
    except Exception as e:  # a value Vela's option type rejects with other than ValueError
        raise ValueError(
            f"extra Vela flags {list(flags)}: Vela cannot parse them ({type(e).__name__}: {e})"
        ) from None
    if unknown:
        options = [o for a in parser._actions for o in a.option_strings]
        close = difflib.get_close_matches(unknown[0].split("=")[0], options, n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise ValueError(f"extra Vela flag {unknown[0]!r}: Vela has no such option{hint}")


def _vela_parser():
    """Vela's command-line parser, as ``vela.main`` builds it (it builds it inline: taken at its
    ``parse_args`` call)."""
    import argparse

    from ethosu.vela import vela

    class Taken(Exception):
        pass

    def take(self, *args, **kwargs):
        raise Taken(self)

    original = argparse.ArgumentParser.parse_args
    argparse.ArgumentParser.parse_args = take
    try:
        vela.main([])
    except Taken as t:
        return t.args[0]
    finally:
        argparse.ArgumentParser.parse_args = original
    raise RuntimeError("Vela's main returned without parsing its arguments")


def _vela_refuses(target: str, system_config: str, memory_mode: str) -> Optional[str]:
    """Why Vela's own configuration check refuses this combination, or None."""
    import contextlib
    import io

    from ethosu.vela.architecture_features import ArchitectureFeatures

    try:
        with contextlib.redirect_stdout(io.StringIO()):  # Vela prints "Info:" lines
            ArchitectureFeatures(
                vela_config_files=[vela_config.vela_ini()],
                system_config=system_config,
                memory_mode=memory_mode,
                accelerator_config=target,
                max_blockdep=3,
                verbose_config=False,
                arena_cache_size=None,
            )
    except Exception as e:  # Vela's CliOptionError / ConfigOptionError
        return " ".join(str(e).strip("'\" ").split()).removeprefix("Error: ")
    return None


def make_spec(target: str = DEFAULT_TARGET, **options):
    """An ``EthosUNGCompileSpec`` checked against Vela's configuration."""
    from ethosu_ng.compile_spec import EthosUNGCompileSpec

    spec = EthosUNGCompileSpec(target, **options)
    check_vela_config(spec)
    return spec


def check_arguments(target, cpu_ops, input_layout, output_layout, spec_options):
    """What can be checked before the model is loaded: the spec against Vela's configuration,
    the CPU ops, the layout names. Returns the spec."""
    from ethosu_ng import io_layout
    from ethosu_ng.partitioner import EthosUNGPartitioner

    spec = make_spec(target, **spec_options)
    EthosUNGPartitioner(spec, cpu_ops=cpu_ops)
    for asked, what in ((input_layout, "input"), (output_layout, "output")):
        if asked is not None:
            for e in asked.split(",") if isinstance(asked, str) else list(asked):
                io_layout.check_name(e, what)
    return spec


def _dtype(d) -> Optional[torch.dtype]:
    if d is None or d in ("float", "none"):
        return None
    if isinstance(d, str):
        if d not in DTYPES:
            raise ValueError(f"IO dtype {d!r}: expected float, int8, uint8 or int16")
        return DTYPES[d]
    if d not in DTYPES.values():
        raise ValueError(f"IO dtype {d}: expected None, torch.int8, torch.uint8 or torch.int16")
    return d


# ------------------------------------------------------------------ kernels
def missing_host_kernels(pte: bytes) -> List[str]:
    """The program's CPU operators without a kernel in the host runtime."""
    from ethosu_ng.adapters.exir import pte_operators, registered_kernels

    have = registered_kernels() | _NO_KERNEL_NEEDED
    return [op for op in pte_operators(pte) if op not in have]


# ------------------------------------------------------------------ compile
def load(model: Union[str, torch.nn.Module], example_inputs=None, seed: int = 0):
    """(model, example inputs) from a ``timm:NAME`` / ``torchvision:NAME`` / ``file.py:factory``
    spec, or the module and inputs given."""
    from ethosu_ng.tools.model_source import load_model

    if isinstance(model, str):
        if example_inputs is not None:
            raise ValueError("example_inputs are for an nn.Module; a model spec brings its own")
        loaded = load_model(model, seed)
        return loaded.model, loaded.example_inputs
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"model must be an nn.Module or a model spec, not {type(model).__name__}")
    if example_inputs is None:
        raise ValueError("example_inputs are needed to compile an nn.Module")
    if isinstance(example_inputs, torch.Tensor):
        example_inputs = (example_inputs,)
    return model.eval(), tuple(example_inputs)


def _calibration(calibration, example, seed: int) -> List[Tuple[torch.Tensor, ...]]:
    if isinstance(calibration, bool) or calibration is None:
        raise ValueError("calibration must be a number of random batches or a list of batches")
    if isinstance(calibration, int):
        if calibration < 1:
            raise ValueError(f"calibration {calibration}: at least 1 batch")
        g = torch.Generator().manual_seed(seed)
        return [
            tuple(torch.randn(e.shape, generator=g) for e in example) for _ in range(calibration)
        ]
    batches = [tuple(b) if isinstance(b, (list, tuple)) else (b,) for b in calibration]
    if not batches:
        raise ValueError("calibration: no batches")
    return batches


def _quiet(name, fn, *args, **kwargs):
    return fn(*args, **kwargs)


def build(
    model: torch.nn.Module,
    example_inputs: Tuple[torch.Tensor, ...],
    spec,
    calibration: Sequence[Tuple[torch.Tensor, ...]],
    input_dtype=None,
    output_dtype=None,
    input_layout: Asked = None,
    output_layout: Asked = None,
    cpu_ops: Sequence = (),
    stage=_quiet,
    activation_dtype: torch.dtype = torch.int8,
    module_dtypes: Optional[Dict] = None,
):
    """Quantize and lower with the IO dtypes, layouts and activation precision asked; the
    layouts are checked on the lowered program. Returns (edge, partitioner, quantized, example
    inputs as laid out)."""
    from ethosu_ng import io_layout
    from ethosu_ng.export import lower, quantize

    in_layouts = io_layout.resolve(input_layout, [tuple(t.shape) for t in example_inputs], "input")
    out_layouts = io_layout.resolve(
        output_layout, io_layout.output_shapes(model, example_inputs), "output"
    )
    x = io_layout.apply_input_layouts(example_inputs, in_layouts)
    # Calibration runs on the batches as given, whatever the layout asked: a float conv on
    # channels-last data sums in another order, and an observer's range an ulp apart moves a
    # scale, so the NHWC program would not be bit-exact to the NCHW one.
    calib = list(calibration)
    if any(out_layouts):
        model = io_layout.OutputLayouts(model, out_layouts).eval()
    quantized = stage(
        "calibrate + quantize",
        quantize,
        model,
        x,
        spec,
        calib,
        _dtype(input_dtype),
        _dtype(output_dtype),
        activation_dtype,
        module_dtypes,
    )
    edge, part = stage("partition + Vela", lower, quantized, x, spec, cpu_ops)
    io_layout.check_program_layouts(edge, in_layouts, out_layouts)
    check_program_dtypes(edge, _dtype(input_dtype), _dtype(output_dtype))
    return edge, part, quantized, x


def check_program_dtypes(edge, input_dtype, output_dtype) -> None:
    """ValueError naming the first program input or output whose dtype is not the one asked."""
    from ethosu_ng.io_quantization import io_quantization

    io = io_quantization(edge)
    for what, asked, got in (
        ("input", input_dtype, io.inputs),
        ("output", output_dtype, io.outputs),
    ):
        for k, p in enumerate(got):
            if asked is not None and p.dtype != asked:
                raise ValueError(
                    f"{what} {k} ({p.name}): asked for {str(asked).split('.')[-1]}, the program "
                    f"{'takes' if what == 'input' else 'gives'} {str(p.dtype).split('.')[-1]}"
                )


def compile(  # noqa: A001 - the verb of the command line
    model: Union[str, torch.nn.Module],
    example_inputs: Optional[Sequence[torch.Tensor]] = None,
    target: str = DEFAULT_TARGET,
    *,
    input_dtype=None,
    output_dtype=None,
    input_layout: Asked = None,
    output_layout: Asked = None,
    cpu_ops: Sequence = (),
    calibration: Union[int, Iterable] = 4,
    seed: int = 0,
    allow_missing_kernels: bool = False,
    precision: str = "int8",
    int16_modules: Sequence[str] = (),
    int8_modules: Sequence[str] = (),
    precision_budget: float = 1.25,
    stage=_quiet,
    **spec_options,
) -> CompileResult:
    """Compile ``model`` (an nn.Module with ``example_inputs``, or ``timm:NAME``,
    ``torchvision:NAME``, ``path/to/file.py:factory``) for ``target``.

    ``input_dtype`` / ``output_dtype``: None (float, quantized inside the program), ``"int8"``,
    ``"uint8"`` or the torch dtypes. ``input_layout`` / ``output_layout``: ``"nchw"`` or
    ``"nhwc"`` for every rank-4 tensor, or one entry per tensor (``-`` / None: as the model gives
    it). ``calibration``: a number of random batches or a list of batches. ``spec_options``: the
    ``EthosUNGCompileSpec`` fields (``system_config``, ``memory_mode``, ``extra_vela_flags``,
    ``sram_budget``, ``embed_tosa``, ``verify_npu``, ...). A CPU op without a kernel in the host
    runtime raises ``MissingKernelError`` unless ``allow_missing_kernels`` (firmware that links
    its own kernels). ``precision``: activations ``"int8"``, ``"int16"`` (a16w8) or ``"auto"``
    (``ethosu_ng.precision.advise`` picks the modules' precision within ``precision_budget``
    times the int8 NPU cycles; its table is the report's ``precision``); ``int16_modules``:
    module names made int16 in an int8 model; ``int8_modules``: made int8 in an int16 model.
    ``stage(name, fn, *args)`` runs each stage (the CLI prints progress).
    """
    from ethosu_ng import io_layout
    from ethosu_ng.adapters import exir
    from ethosu_ng.export import serialize
    from ethosu_ng.memory_plan import memory_plan
    from ethosu_ng.tools import report as report_mod
    from ethosu_ng.tools.model_source import check_model_spec

    # Everything that can be wrong with the arguments, before the first stage.
    spec = check_arguments(target, cpu_ops, input_layout, output_layout, spec_options)
    input_dtype, output_dtype = _dtype(input_dtype), _dtype(output_dtype)
    if isinstance(model, str):
        check_model_spec(model)
    if isinstance(calibration, int) and not isinstance(calibration, bool) and calibration < 1:
        raise ValueError(f"calibration {calibration}: at least 1 batch")
    if precision not in PRECISIONS:
        raise ValueError(f"precision {precision!r}: expected one of {', '.join(PRECISIONS)}")
    if precision != "int8" and int16_modules:
        raise ValueError(f"int16 modules are for an int8 model, not precision {precision!r}")
    if precision != "int16" and int8_modules:
        raise ValueError(f"int8 modules are for an int16 model, not precision {precision!r}")
    if not precision_budget >= 1:
        raise ValueError(f"precision budget {precision_budget}: at least 1 (the int8 cycles)")

    net, x = stage("load", load, model, example_inputs, seed)
    calib = _calibration(calibration, x, seed)
    activation_dtype = torch.int16 if precision == "int16" else torch.int8
    module_dtypes = {m: torch.int16 for m in int16_modules}
    module_dtypes.update({m: torch.int8 for m in int8_modules})
    advice = None
    if precision == "auto":
        from ethosu_ng.precision import advise

        advice = stage(
            "precision advisor", advise, net, x, spec, calib, cycle_budget=precision_budget
        )
        activation_dtype, module_dtypes = advice.activation_dtype, advice.module_dtypes
    edge, part, quantized, x = build(
        net,
        x,
        spec,
        calib,
        input_dtype,
        output_dtype,
        input_layout,
        output_layout,
        cpu_ops,
        stage,
        activation_dtype,
        module_dtypes,
    )
    name = model if isinstance(model, str) else type(model).__name__
    # From the lowered program, before serialization rewrites it (memory planning).
    rep = Report(report_mod.build_report(edge, part, b"", spec, name))
    pte, _ = stage("serialize", serialize, edge, spec)
    rep["cpu_kernels"] = exir.pte_operators(pte)
    missing = missing_host_kernels(pte)
    if missing:
        # Kernel aten::sort.values_stable <- report op aten.sort.stable: matched on aten.sort.
        node = {c["op"].rsplit(".", 1)[0]: c["node"] for c in rep["cpu_ops"]}
        text = ", ".join(
            f"{op} (node {node[base]})"
            if (base := op.split(".")[0].replace("::", ".")) in node
            else op
            for op in missing
        )
        msg = (
            f"no kernel in ExecuTorch's portable or quantized library for {text}: the host "
            "runtime cannot load this program; firmware must link a kernel for it"
        )
        if not allow_missing_kernels:
            raise MissingKernelError(msg + " (allow_missing_kernels / --allow-missing-kernels)")
        warnings.warn(msg, ProgramWarning, stacklevel=2)
    rep["missing_host_kernels"] = missing
    rep["memory_plan"] = stage("memory plan", memory_plan, pte)
    rep["totals"]["pte_bytes"] = len(pte)
    rep["pte_sha256"] = pte_sha256(pte)
    rep["compile_args"] = {
        "model": model if isinstance(model, str) else None,
        "target": spec.target,
        "seed": seed,
        "calibration": calibration if isinstance(calibration, int) else None,
        "input_dtype": None if input_dtype is None else str(input_dtype).split(".")[-1],
        "output_dtype": None if output_dtype is None else str(output_dtype).split(".")[-1],
        "input_layout": _layout_arg(input_layout),
        "output_layout": _layout_arg(output_layout),
        "cpu_op": [str(op) for op in cpu_ops],
        "system_config": spec.system_config,
        "memory_mode": spec.memory_mode,
        "extra_vela_flags": list(spec.extra_vela_flags),
        "sram_budget": spec.sram_budget,
        "precision": precision,
        # the activation dtype built (what --precision auto chose), for verify's rebuild
        "activation_dtype": str(activation_dtype).split(".")[-1],
        "int16_modules": sorted(m for m, d in module_dtypes.items() if d == torch.int16),
        "int8_modules": sorted(m for m, d in module_dtypes.items() if d == torch.int8),
    }
    if advice is not None:
        rep["precision"] = advice.as_dict()
        rep["precision"]["table"] = advice.table()
    rep["io_transposes"] = [
        dict(delegate=d["name"], **io_layout.io_transposes(d)) for d in rep["delegates"]
    ]
    return CompileResult(pte, rep, edge, part, quantized, x, spec)


def _layout_arg(asked: Asked):
    if asked is None or isinstance(asked, str):
        return asked
    return [None if a in (None, "-") else a for a in asked]


# ------------------------------------------------------------------ report
def _read_pte(pte) -> Tuple[bytes, Optional[str]]:
    if isinstance(pte, (bytes, bytearray, memoryview)):
        return bytes(pte), None
    path = os.fspath(pte)
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path}: no such file")
    if os.path.isdir(path):
        raise NotAProgramError(f"{path} is a directory, not a .pte")
    with open(path, "rb") as f:
        return f.read(), path


def check_program(pte: bytes, where: str = "the file") -> None:
    """NotAProgramError unless ``pte`` parses as an ExecuTorch program."""
    if len(pte) < 8 or pte[4:6] != b"ET":
        raise NotAProgramError(f"{where} is not an ExecuTorch program (no ET file identifier)")
    from ethosu_ng.adapters.exir import pte_delegate_payloads

    try:
        pte_delegate_payloads(pte)
    except Exception as e:  # a truncated or corrupted flatbuffer fails anywhere inside
        raise NotAProgramError(
            f"{where} is not a valid ExecuTorch program (truncated or corrupted: "
            f"{type(e).__name__})"
        ) from None


def report(pte) -> Report:
    """The report of a .pte (path or bytes): its ``.report.json`` when that was written for
    exactly this program (same SHA-256), else what the program itself carries (with a warning
    when a report JSON is there but stale). A ``.report.json`` path is read as it is."""
    from ethosu_ng.tools.report import from_pte

    if isinstance(pte, (str, os.PathLike)) and os.fspath(pte).endswith(".json"):
        path = os.fspath(pte)
        if not os.path.exists(path):
            raise FileNotFoundError(f"{path}: no such file")
        try:
            with open(path) as f:
                rep = json.load(f)
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise NotAProgramError(f"{path}: not a report JSON ({e})") from None
        if not isinstance(rep, dict) or not {"delegates", "totals"} <= set(rep):
            raise NotAProgramError(f"{path}: not a report JSON that ethosu-ng compile wrote")
        return Report(rep)
    data, path = _read_pte(pte)
    check_program(data, path or "the bytes")
    if path:
        side = report_path(path)
        if os.path.exists(side):
            try:
                with open(side) as f:
                    rep = json.load(f)
            except (OSError, json.JSONDecodeError):
                rep = {}
            if rep.get("pte_sha256") == pte_sha256(data):
                return Report(rep)
            warnings.warn(
                f"{side} was not written for {path} as it is now (SHA-256 differs): ignored; "
                "reporting what the .pte carries",
                ProgramWarning,
                stacklevel=2,
            )
    return Report(from_pte(data))


# ------------------------------------------------------------------ verify
@dataclass
class VerifyResult:
    """Per output, the largest difference from the eager quantized model in LSB (and, with
    ``npu="both"``, between the NPU model and the TOSA reference); top-1 agreement for a
    classifier."""

    npu: str
    lsb_budget: float
    max_lsb: Dict[int, float] = field(default_factory=dict)
    model_vs_tosa_lsb: Dict[int, float] = field(default_factory=dict)
    top1: Optional[Tuple[int, int]] = None

    @property
    def passed(self) -> bool:
        return all(v <= self.lsb_budget for v in self.max_lsb.values())

    def failures(self) -> List[str]:
        return [
            f"output {k}: {v:.2f} LSB from the eager quantized model, above the budget of "
            f"{self.lsb_budget:g} LSB"
            for k, v in self.max_lsb.items()
            if v > self.lsb_budget
        ]

    def __str__(self) -> str:
        lines = [
            f"output {k}: max |pte - eager quantized| = {v:.2f} LSB"
            for k, v in self.max_lsb.items()
        ]
        lines += [
            f"output {k}: max |NPU model - TOSA reference| = {v:.2f} LSB"
            for k, v in self.model_vs_tosa_lsb.items()
        ]
        if self.top1:
            lines.append(f"top-1 agreement: {self.top1[0]}/{self.top1[1]}")
        return "\n".join(lines)


def _rebuild(pte: bytes, path: str):
    """(quantized model, lowered program, example inputs) from the compile arguments the
    program's matching report JSON holds."""
    side = report_path(path)
    rep = {}
    if os.path.exists(side):
        with open(side) as f:
            rep = json.load(f)
    ca = rep.get("compile_args")
    if not ca or not ca.get("model"):
        raise ValueError(
            f"{path}: no {side} with the model it was compiled from; verify needs it to rebuild "
            "the eager quantized model (or pass the CompileResult)"
        )
    if rep.get("pte_sha256") != pte_sha256(pte):
        raise ValueError(f"{side} was not written for {path} as it is now (SHA-256 differs)")
    spec = make_spec(
        ca["target"],
        **{k: ca[k] for k in ("system_config", "memory_mode") if ca.get(k)},
        extra_vela_flags=ca.get("extra_vela_flags") or (),
    )
    net, x = load(ca["model"], None, ca["seed"])
    calib = _calibration(ca.get("calibration") or 4, x, ca["seed"])
    edge, _, quantized, x = build(
        net,
        x,
        spec,
        calib,
        ca.get("input_dtype"),
        ca.get("output_dtype"),
        ca.get("input_layout"),
        ca.get("output_layout"),
        ca.get("cpu_op") or (),
        activation_dtype=DTYPES[ca.get("activation_dtype") or "int8"],
        module_dtypes={
            **{m: torch.int16 for m in ca.get("int16_modules") or ()},
            **{m: torch.int8 for m in ca.get("int8_modules") or ()},
        },
    )
    return quantized, edge, x


def verify(
    program,
    inputs: Optional[Sequence[Sequence[torch.Tensor]]] = None,
    n: int = 4,
    npu: Optional[str] = None,
    lsb_budget: float = 2.0,
) -> VerifyResult:
    """Run ``program`` (a ``CompileResult``, or a .pte path with its report JSON) on the host
    runtime and compare each output with the eager quantized model, in LSB of the output's
    quantization grid. ``inputs``: batches of float tensors (default: ``n`` random batches).
    ``npu``: what runs the delegates (``"model"``, ``"tosa"``, ``"both"``; None: the program's
    default). ``VerifyResult.passed`` says whether every output is within ``lsb_budget``."""
    from ethosu_ng.adapters import exir
    from ethosu_ng.blob import DelegateBlob
    from ethosu_ng.compile_spec import BACKEND_ID
    from ethosu_ng.io_quantization import io_quantization
    from ethosu_ng.runtime import default_npu_for, load_pte, run_pte

    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ValueError(f"n={n!r}: at least 1 input batch")
    if (
        isinstance(lsb_budget, bool)
        or not isinstance(lsb_budget, (int, float))
        or not (lsb_budget >= 0)
    ):
        raise ValueError(f"lsb_budget={lsb_budget!r}: must be a number >= 0")
    if npu not in (None, "tosa", "model", "both"):
        raise ValueError(f"npu={npu!r}: expected tosa, model or both")
    if isinstance(program, CompileResult):
        pte, quantized, edge, x = (
            program.pte,
            program.quantized,
            program.edge,
            program.example_inputs,
        )
        where = "the program"
    else:
        pte, path = _read_pte(program)
        where = path or "the program"
        check_program(pte, where)
        if path is None:
            raise ValueError("verify needs a CompileResult or a .pte path (with its report JSON)")
        quantized = None
    chosen = npu or default_npu_for(pte)
    for backend, data in exir.pte_delegate_payloads(pte):
        if (
            chosen != "model"
            and backend == BACKEND_ID
            and DelegateBlob.from_bytes(data).tosa is None
        ):
            raise ValueError(
                f"{where}: delegates carry no TOSA graph; compile with --embed-tosa "
                "(embed_tosa=True) to verify on the host with the TOSA reference model, or use "
                "npu='model'"
            )
    if quantized is None:
        quantized, edge, x = _rebuild(pte, path)
    ioq = io_quantization(edge)
    if inputs is None:
        g = torch.Generator().manual_seed(1234)
        inputs = [tuple(torch.randn(e.shape, generator=g) for e in x) for _ in range(n)]
    result = VerifyResult(chosen, float(lsb_budget))
    host = load_pte(pte).method()
    agree = 0
    classifier = False
    for batch in inputs:
        batch = tuple(batch) if isinstance(batch, (list, tuple)) else (batch,)
        for k, (t, e) in enumerate(zip(batch, x)):
            if tuple(t.shape) != tuple(e.shape):
                raise ValueError(
                    f"input {k} has shape {list(t.shape)}, the program takes {list(e.shape)}"
                )
        if len(batch) != len(ioq.inputs):
            raise ValueError(
                f"an input batch has {len(batch)} tensors, the program takes {len(ioq.inputs)}"
            )
        # Logical tensors, laid out as the program takes its inputs (its IO contract).
        fed = host.lay_out([io.quantize(t) for io, t in zip(ioq.inputs, batch)])
        got = run_pte(pte, fed, npu="model" if chosen == "both" else chosen)
        if chosen == "both":
            ref = run_pte(pte, fed, npu="tosa")
            for k, (g_, r_, io) in enumerate(zip(got, ref, ioq.outputs)):
                d = (g_.double() - r_.double()).abs().max().item()
                if io.scale is not None and g_.is_floating_point():
                    d /= io.grid_scale
                result.model_vs_tosa_lsb[k] = max(result.model_vs_tosa_lsb.get(k, 0.0), d)
        with torch.no_grad():
            want = quantized(*batch)
        want = list(want) if isinstance(want, (list, tuple)) else [want]
        for k, (g_, w, io) in enumerate(zip(got, want, ioq.outputs)):
            scale = io.grid_scale
            gf = io.dequantize(g_) if io.scale is not None else g_.float()
            diff = float((gf - w).abs().max())
            lsb = diff / scale if scale else diff
            result.max_lsb[k] = max(result.max_lsb.get(k, 0.0), lsb)
        classifier = want[0].dim() == 2 and want[0].shape[-1] > 1
        if classifier:
            out0 = got[0] if ioq.outputs[0].scale is None else ioq.outputs[0].dequantize(got[0])
            agree += int(torch.argmax(out0) == torch.argmax(want[0]))
    if classifier:
        result.top1 = (agree, len(inputs))
    return result
