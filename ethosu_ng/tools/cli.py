"""``ethosu-ng``: compile a model to a .pte, report on it, verify it on the host.

ethosu-ng compile timm:mobilenetv2_100 --target ethos-u55-128 -o mobilenetv2.pte
ethosu-ng report mobilenetv2.pte [--html report.html]
ethosu-ng verify mobilenetv2.pte
"""

from __future__ import annotations

import argparse
import glob
import json
import logging
import os
import sys
import time
import traceback
from typing import Dict, List, Optional, Sequence, Tuple

EXIT_BAD_INPUT = 2
EXIT_FAILED = 1


class CliError(Exception):
    """A one-line, user-facing error."""


class Stages:
    """Prints each stage with its elapsed time; keeps the timings for the report."""

    def __init__(self, names: Sequence[str], stream=sys.stderr):
        self.names, self.stream, self.times = list(names), stream, {}
        self._k = 0

    def run(self, name: str, fn, *args, **kwargs):
        self._k += 1
        print(f"[{self._k}/{len(self.names)}] {name} ...", file=self.stream, flush=True)
        t0 = time.time()
        out = fn(*args, **kwargs)
        self.times[name] = round(time.time() - t0, 2)
        print(
            f"[{self._k}/{len(self.names)}] {name} done in {self.times[name]:.1f} s",
            file=self.stream,
            flush=True,
        )
        return out


class _VelaProgress(logging.Handler):
    def emit(self, record):
        print(f"      {record.getMessage()}", file=sys.stderr, flush=True)


def _dtype(name: Optional[str]):
    import torch

    return (
        None
        if name in (None, "float", "none")
        else {"int8": torch.int8, "uint8": torch.uint8}[name]
    )


def _calibration(args, example) -> List[Tuple]:
    import torch

    if args.calibration_dir:
        files = sorted(
            glob.glob(os.path.join(args.calibration_dir, "*.pt"))
            + glob.glob(os.path.join(args.calibration_dir, "*.npy"))
        )
        if not files:
            raise CliError(f"{args.calibration_dir}: no .pt or .npy calibration files")
        batches = []
        for f in files:
            if f.endswith(".npy"):
                import numpy as np

                t = torch.from_numpy(np.load(f))
            else:
                t = torch.load(f)
            batch = tuple(t) if isinstance(t, (list, tuple)) else (t,)
            for k, (b, e) in enumerate(zip(batch, example)):
                if tuple(b.shape) != tuple(e.shape):
                    raise CliError(
                        f"{f}: input {k} has shape {list(b.shape)}, the model takes {list(e.shape)}"
                    )
            batches.append(tuple(b.float() for b in batch))
        return batches
    g = torch.Generator().manual_seed(args.seed)
    return [
        tuple(torch.randn(e.shape, generator=g) for e in example) for _ in range(args.calibration)
    ]


def cmd_compile(args) -> int:
    from ethosu_ng import EthosUNGCompileSpec
    from ethosu_ng.export import lower, quantize
    from ethosu_ng.tools import report
    from ethosu_ng.tools.model_source import check_model_spec, load_model

    check_model_spec(args.model)  # a bad MODEL is an error before any stage starts
    try:
        spec = EthosUNGCompileSpec(
            args.target,
            system_config=args.system_config,
            memory_mode=args.memory_mode,
            embed_tosa=args.embed_tosa,
            sram_budget=args.sram_budget,
            tosa_optimize=not args.no_tosa_optimize,
            tosa_optimize_verify=args.verify_tosa_optimize,
            verify_npu=not args.no_verify_npu,
            verify_lowering=not args.no_verify_lowering,
            strict=args.strict,
        )
    except (ValueError, TypeError) as e:
        raise CliError(str(e)) from None
    from ethosu_ng.partitioner import EthosUNGPartitioner

    try:
        EthosUNGPartitioner(spec, cpu_ops=args.cpu_op or ())
    except (ValueError, TypeError) as e:
        raise CliError(str(e)) from None
    out = args.output or (args.model.split(":")[-1].replace("/", "_") + ".pte")
    stages = Stages(
        ["load", "calibrate + quantize", "partition + Vela", "serialize", "memory plan"]
    )
    loaded = stages.run("load", load_model, args.model, args.seed)
    calib = _calibration(args, loaded.example_inputs)
    quantized = stages.run(
        "calibrate + quantize",
        quantize,
        loaded.model,
        loaded.example_inputs,
        spec,
        calib,
        _dtype(args.input_dtype),
        _dtype(args.output_dtype),
    )
    handler = _VelaProgress()
    backend_log = logging.getLogger("ethosu_ng.compiler.pipeline")
    backend_log.addHandler(handler)
    backend_log.setLevel(logging.INFO)
    backend_log.propagate = False
    try:
        edge, part = stages.run(
            "partition + Vela", lower, quantized, loaded.example_inputs, spec, args.cpu_op or ()
        )
    finally:
        backend_log.removeHandler(handler)
        backend_log.propagate = True
    # Report from the lowered program before serialization rewrites it (memory planning).
    rep = report.build_report(edge, part, b"", spec, args.model, stages.times)
    from ethosu_ng.export import serialize

    pte, _ = stages.run("serialize", serialize, edge, spec)
    from ethosu_ng.memory_plan import memory_plan

    rep["memory_plan"] = stages.run("memory plan", memory_plan, pte)
    rep["totals"]["pte_bytes"] = len(pte)
    rep["stages_s"] = dict(stages.times)
    with open(out, "wb") as f:
        f.write(pte)
    emitted = []
    if args.emit_c:
        from ethosu_ng.tools.emit_c import c_name, emit_c

        emitted = emit_c(args.emit_c, c_name(out), pte, rep["memory_plan"], os.path.basename(out))
    rep["compile_args"] = {
        "model": args.model,
        "target": args.target,
        "seed": args.seed,
        "calibration": args.calibration,
        "calibration_dir": args.calibration_dir,
        "input_dtype": args.input_dtype,
        "output_dtype": args.output_dtype,
        "cpu_op": args.cpu_op or [],
        "sram_budget": args.sram_budget,
    }
    rep_path = os.path.splitext(out)[0] + ".report.json"
    with open(rep_path, "w") as f:
        json.dump(rep, f, indent=1)
    print(report.format_text(rep))
    print(f"\nwrote {out} and {rep_path}" + "".join(f", {p}" for p in emitted))
    return 0


def cmd_report(args) -> int:
    from ethosu_ng.tools import html_report, report

    if not os.path.exists(args.file):
        raise CliError(f"{args.file}: no such file")
    try:
        rep = report.load(args.file)
    except (ValueError, json.JSONDecodeError) as e:
        raise CliError(f"{args.file}: not an ethosu_ng .pte or report: {e}") from None
    print(report.format_text(rep))
    if args.by_module:
        from ethosu_ng.module_profile import format_table

        if "by_module" not in rep:
            raise CliError(
                f"{args.file}: no per-module profile (it lives in the .report.json that "
                "ethosu-ng compile writes next to the .pte)"
            )
        print()
        print(format_table(rep["by_module"], args.depth, args.top))
    if args.html:
        with open(args.html, "w") as f:
            f.write(html_report.render(rep))
        print(f"wrote {args.html}")
    return 0


def cmd_verify(args) -> int:
    import torch

    from ethosu_ng import EthosUNGCompileSpec, io_quantization
    from ethosu_ng.export import lower, quantize
    from ethosu_ng.tools import report
    from ethosu_ng.tools.model_source import load_model

    if not os.path.exists(args.pte):
        raise CliError(f"{args.pte}: no such file")
    rep = report.load(args.pte)
    ca = rep.get("compile_args")
    if not ca:
        raise CliError(
            f"{args.pte}: no {os.path.splitext(args.pte)[0]}.report.json with compile "
            "arguments next to it; verify needs it to rebuild the eager quantized model"
        )
    with open(args.pte, "rb") as f:
        pte = f.read()
    from ethosu_ng.adapters import exir
    from ethosu_ng.blob import DelegateBlob
    from ethosu_ng.compile_spec import BACKEND_ID
    from ethosu_ng.runtime import default_npu_for

    npu = getattr(args, "npu", None) or default_npu_for(pte)
    chosen = "" if getattr(args, "npu", None) else "default, "
    for backend, data in exir.pte_delegate_payloads(pte):
        if npu != "model" and backend == BACKEND_ID and DelegateBlob.from_bytes(data).tosa is None:
            raise CliError(
                f"{args.pte}: delegates carry no TOSA graph; compile with --embed-tosa "
                "to verify on the host with the TOSA reference model, or use --npu model"
            )
    print(
        {
            "tosa": f"delegates run on the TOSA reference model ({chosen}--npu tosa)",
            "model": f"delegates run on the Ethos-U NPU model ({chosen}--npu model)",
            "both": "delegates run on the Ethos-U NPU model, checked against the TOSA "
            "reference model (--npu both)",
        }[npu]
    )
    ns = argparse.Namespace(**ca)
    loaded = load_model(ca["model"], ca["seed"])
    spec = EthosUNGCompileSpec(ca["target"])
    quantized = quantize(
        loaded.model,
        loaded.example_inputs,
        spec,
        _calibration(ns, loaded.example_inputs),
        _dtype(ca["input_dtype"]),
        _dtype(ca["output_dtype"]),
    )
    edge, _ = lower(quantized, loaded.example_inputs, spec, ca["cpu_op"])
    ioq = io_quantization(edge)
    if args.inputs:
        import numpy as np

        with np.load(args.inputs) as d:
            inputs = [tuple(torch.from_numpy(d[k]) for k in d.files)]
    else:
        g = torch.Generator().manual_seed(1234)
        inputs = [
            tuple(torch.randn(e.shape, generator=g) for e in loaded.example_inputs)
            for _ in range(args.n)
        ]
    from ethosu_ng.runtime import run_pte

    worst: Dict[int, float] = {}
    model_vs_tosa: Dict[int, float] = {}
    agree = 0
    for batch in inputs:
        fed = [io.quantize(t) for io, t in zip(ioq.inputs, batch)]
        got = run_pte(pte, fed, npu="model" if npu == "both" else npu)
        if npu == "both":
            ref = run_pte(pte, fed, npu="tosa")
            for k, (g_, r_, io) in enumerate(zip(got, ref, ioq.outputs)):
                d = (g_.double() - r_.double()).abs().max().item()
                if io.scale is not None and g_.is_floating_point():
                    d /= io.grid_scale
                model_vs_tosa[k] = max(model_vs_tosa.get(k, 0.0), d)
        want = quantized(*batch)
        want = list(want) if isinstance(want, (list, tuple)) else [want]
        for k, (g_, w, io) in enumerate(zip(got, want, ioq.outputs)):
            scale = io.grid_scale
            gf = io.dequantize(g_) if io.scale is not None else g_.float()
            lsb = float((gf - w).abs().max() / scale) if scale else float((gf - w).abs().max())
            worst[k] = max(worst.get(k, 0.0), lsb)
        if want[0].dim() == 2 and want[0].shape[-1] > 1:
            agree += int(
                torch.argmax(
                    got[0] if ioq.outputs[0].scale is None else ioq.outputs[0].dequantize(got[0])
                )
                == torch.argmax(want[0])
            )
    for k, v in worst.items():
        print(f"output {k}: max |pte - eager quantized| = {v:.2f} LSB")
    for k, v in model_vs_tosa.items():
        print(f"output {k}: max |NPU model - TOSA reference| = {v:.2f} LSB")
    if want[0].dim() == 2 and want[0].shape[-1] > 1:
        print(f"top-1 agreement: {agree}/{len(inputs)}")
    return 0 if all(v <= args.lsb_budget for v in worst.values()) else EXIT_FAILED


_UNITS = {"": 1, "b": 1, "k": 1024, "kib": 1024, "kb": 1000, "m": 1 << 20, "mib": 1 << 20}


def _bytes_arg(text: str) -> int:
    """``393216``, ``384KiB``, ``2MiB``, ``512k`` -> bytes."""
    import re

    m = re.fullmatch(r"\s*(\d+)\s*([A-Za-z]*)\s*", text)
    unit = m and _UNITS.get(m.group(2).lower())
    if not m or unit is None or int(m.group(1)) <= 0:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a positive byte count (e.g. 393216, 384KiB, 2MiB)"
        )
    return int(m.group(1)) * unit


def _positive_int(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive integer")
    return int(text)


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="ethosu-ng", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--debug", action="store_true", help="show tracebacks")
    sub = ap.add_subparsers(dest="command", required=True)

    c = sub.add_parser("compile", help="compile a model to a .pte")
    c.add_argument("model", help="timm:NAME, torchvision:NAME or path/to/file.py:factory")
    c.add_argument("--target", default="ethos-u55-128")
    c.add_argument("-o", "--output")
    c.add_argument("--input-dtype", choices=["float", "int8", "uint8"], default="float")
    c.add_argument("--output-dtype", choices=["float", "int8", "uint8"], default="float")
    c.add_argument(
        "--cpu-op", action="append", metavar="OP", help="keep this op on the CPU (repeatable)"
    )
    g = c.add_mutually_exclusive_group()
    g.add_argument(
        "--calibration", type=int, default=4, metavar="N", help="N random calibration batches"
    )
    g.add_argument("--calibration-dir", metavar="DIR", help="calibration samples (.pt / .npy)")
    c.add_argument("--system-config")
    c.add_argument("--memory-mode")
    c.add_argument("--embed-tosa", action="store_true", help="embed TOSA for host execution")
    c.add_argument(
        "--no-tosa-optimize", action="store_true", help="hand upstream's TOSA to Vela unchanged"
    )
    c.add_argument(
        "--verify-tosa-optimize",
        action="store_true",
        help="check each optimised TOSA graph bit for bit against the original (reference model)",
    )
    c.add_argument(
        "--no-verify-npu",
        action="store_true",
        help="skip running each command stream on the NPU model against TOSA at compile time",
    )
    c.add_argument(
        "--no-verify-lowering",
        action="store_true",
        help="skip checking each TOSA graph against the quantized partition at compile time",
    )
    c.add_argument(
        "--strict",
        action="store_true",
        help="a command stream the verified compile finds wrong is an error, not a CPU fallback",
    )
    c.add_argument("--seed", type=int, default=0)
    c.add_argument(
        "--sram-budget",
        type=_bytes_arg,
        metavar="BYTES",
        help="fail when the SRAM pools exceed this (e.g. 393216, 384KiB, 2MiB)",
    )
    c.add_argument(
        "--emit-c", metavar="DIR", help="also write the .pte and pool sizes as C (.h + .c)"
    )
    c.set_defaults(func=cmd_compile)

    r = sub.add_parser("report", help="summarize a .pte or its report JSON")
    r.add_argument("file")
    r.add_argument("--html", metavar="OUT")
    r.add_argument("--by-module", action="store_true", help="NPU cycles by nn.Module")
    r.add_argument(
        "--depth", type=_positive_int, metavar="N", help="with --by-module: sum to N path levels"
    )
    r.add_argument(
        "--top", type=_positive_int, default=20, metavar="N", help="with --by-module: N rows"
    )
    r.set_defaults(func=cmd_report)

    v = sub.add_parser(
        "verify", help="run the .pte on the host and compare with the eager quantized model"
    )
    v.add_argument("pte")
    v.add_argument("--inputs", metavar="NPZ")
    v.add_argument("-n", type=int, default=4, help="random inputs when --inputs is not given")
    v.add_argument("--lsb-budget", type=float, default=2.0)
    v.add_argument(
        "--npu",
        choices=["tosa", "model", "both"],
        default=None,
        help="what runs the delegates: Vela's command stream on the Ethos-U55/U65 NPU model "
        "(default; Ethos-U85 programs default to tosa), the embedded TOSA graph on the "
        "reference model, or both (model results, plus the largest model-vs-TOSA difference "
        "per output)",
    )
    v.set_defaults(func=cmd_verify)
    return ap


def _quiet_third_party() -> None:
    """Hide what the libraries we import say on their own (torch logs _pytree deprecation
    warnings when torchao registers its enums; deprecation notices): not actionable for a user
    of this command. ``--debug`` shows them."""
    import warnings

    import torch  # noqa: F401 - torch sets its loggers' levels on import; ours must come after

    for name in ("torch", "torchao", "executorch", "timm", "torchvision"):
        logging.getLogger(name).setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    warnings.filterwarnings("ignore", category=FutureWarning)


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = build_parser()
    args = ap.parse_args(argv)
    if not args.debug:
        logging.getLogger().setLevel(logging.ERROR)
        _quiet_third_party()
    try:
        return args.func(args)
    except CliError as e:
        print(f"ethosu-ng: error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        return 130
    except Exception as e:  # anything else: one line unless --debug
        from ethosu_ng.tools.model_source import ModelSourceError

        if args.debug:
            traceback.print_exc()
        code = EXIT_BAD_INPUT if isinstance(e, ModelSourceError) else EXIT_FAILED
        print(
            f"ethosu-ng: error: {type(e).__name__}: {e}"
            if code == EXIT_FAILED
            else f"ethosu-ng: error: {e}",
            file=sys.stderr,
        )
        return code


if __name__ == "__main__":
    sys.exit(main())
