# SPDX-License-Identifier: BSD-3-Clause
"""``ethosu-ng``: compile a model to a .pte, report on it, verify it on the host.

ethosu-ng compile timm:mobilenetv2_100 --target ethos-u55-128 -o mobilenetv2.pte
ethosu-ng report mobilenetv2.pte [--html report.html]
ethosu-ng verify mobilenetv2.pte
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import logging
import os
import sys
import time
import traceback
import warnings
from typing import List, Optional, Sequence, Tuple

EXIT_BAD_INPUT = 2
EXIT_FAILED = 1


class CliError(Exception):
    """A one-line, user-facing error."""

    code = EXIT_BAD_INPUT


class CheckFailed(CliError):
    """The program ran but failed the check asked for (verify beyond its LSB budget)."""

    code = EXIT_FAILED


class Stages:
    """Prints each stage with its elapsed time; keeps the timings for the report."""

    def __init__(self, names: Sequence[str], stream=None):
        # sys.stderr when a stage runs, not when this module was imported (it may be redirected)
        self.names, self.stream, self.times = list(names), stream or sys.stderr, {}
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


def _calibration_dir(directory: str, example) -> List[Tuple]:
    import torch

    if not os.path.isdir(directory):
        raise CliError(f"--calibration-dir {directory}: no such directory")
    files = sorted(
        glob.glob(os.path.join(directory, "*.pt")) + glob.glob(os.path.join(directory, "*.npy"))
    )
    if not files:
        raise CliError(f"{directory}: no .pt or .npy calibration files")
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


def cmd_compile(args) -> int:
    from ethosu_ng import api
    from ethosu_ng.io_layout import LayoutError
    from ethosu_ng.tools.model_source import check_model_spec

    check_model_spec(args.model)  # a bad MODEL is an error before any stage starts
    spec_options = dict(
        system_config=args.system_config,
        memory_mode=args.memory_mode,
        extra_vela_flags=args.extra_vela_flag or (),
        embed_tosa=args.embed_tosa,
        sram_budget=args.sram_budget,
        tosa_optimize=not args.no_tosa_optimize,
        tosa_optimize_verify=args.verify_tosa_optimize,
        verify_npu=not args.no_verify_npu,
        verify_lowering=not args.no_verify_lowering,
        strict=args.strict,
    )
    try:
        api.check_arguments(
            args.target, args.cpu_op or (), args.input_layout, args.output_layout, spec_options
        )
    except (ValueError, TypeError) as e:
        raise CliError(str(e)) from None
    if args.emit_c and os.path.isfile(args.emit_c):
        raise CliError(f"--emit-c {args.emit_c}: is a file, not a directory")
    out = args.output or (args.model.split(":")[-1].replace("/", "_") + ".pte")
    if os.path.isdir(out):
        raise CliError(f"-o {out}: is a directory")
    out_dir = os.path.dirname(os.path.abspath(out))
    if not os.path.isdir(out_dir):
        raise CliError(f"-o {out}: no directory {out_dir}")
    stages = Stages(
        ["load"]
        + (["precision advisor"] if args.precision == "auto" else [])
        + ["calibrate + quantize", "partition + Vela", "serialize", "memory plan"]
    )
    calibration = args.calibration
    if args.calibration_dir:
        from ethosu_ng.tools.model_source import load_model

        example = load_model(args.model, args.seed).example_inputs
        calibration = _calibration_dir(args.calibration_dir, example)
    handler = _VelaProgress()
    progress_logs = [
        logging.getLogger(n)
        for n in ("ethosu_ng.compiler.pipeline", "ethosu_ng.partitioner", "ethosu_ng.precision")
    ]
    for log in progress_logs:
        log.addHandler(handler)
        log.setLevel(logging.INFO)
        log.propagate = False
    try:
        with _program_warnings():
            result = api.compile(
                args.model,
                target=args.target,
                input_dtype=args.input_dtype,
                output_dtype=args.output_dtype,
                input_layout=args.input_layout,
                output_layout=args.output_layout,
                cpu_ops=args.cpu_op or (),
                calibration=calibration,
                seed=args.seed,
                allow_missing_kernels=args.allow_missing_kernels,
                precision=args.precision,
                int16_modules=args.int16_module or (),
                int8_modules=args.int8_module or (),
                precision_budget=args.precision_budget,
                stage=stages.run,
                **spec_options,
            )
    except (LayoutError, api.MissingKernelError) as e:
        raise CliError(str(e)) from None
    finally:
        for log in progress_logs:
            log.removeHandler(handler)
            log.propagate = True
    result.report["stages_s"] = dict(stages.times)
    if args.calibration_dir:
        result.report["compile_args"]["calibration_dir"] = args.calibration_dir
    written = result.save(out, emit_c=args.emit_c)
    if "precision" in result.report:
        print(result.report["precision"]["table"] + "\n")
    print(result.report.summary())
    print(f"\nwrote {', '.join(written)}")
    return 0


@contextlib.contextmanager
def _program_warnings():
    """What ethosu_ng warns about the program, as ``ethosu-ng: warning:`` lines."""
    from ethosu_ng.api import ProgramWarning

    def show(message, category, *args, **kwargs):
        if issubclass(category, ProgramWarning):
            print(f"ethosu-ng: warning: {message}", file=sys.stderr, flush=True)

    with warnings.catch_warnings():
        warnings.simplefilter("always", ProgramWarning)
        warnings.showwarning = show
        yield


def cmd_report(args) -> int:
    from ethosu_ng import api
    from ethosu_ng.tools import html_report

    try:
        with _program_warnings():
            rep = api.report(args.file)
    except (FileNotFoundError, api.NotAProgramError) as e:
        raise CliError(str(e)) from None
    print(rep.summary())
    if args.by_module:
        from ethosu_ng.module_profile import format_table

        if "by_module" not in rep:
            raise CliError(
                f"{args.file}: no per-module profile (it lives in the .report.json that "
                "ethosu-ng compile writes next to the .pte, for the program as compiled)"
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

    from ethosu_ng import api

    if not os.path.exists(args.pte):
        raise CliError(f"{args.pte}: no such file")
    inputs = None
    if args.inputs:
        import numpy as np

        try:
            with np.load(args.inputs) as d:
                inputs = [tuple(torch.from_numpy(d[k]) for k in d.files)]
        except (OSError, ValueError) as e:
            raise CliError(f"--inputs {args.inputs}: not a readable .npz ({e})") from None
    with open(args.pte, "rb") as f:
        pte = f.read()
    try:
        api.check_program(pte, args.pte)
        from ethosu_ng.runtime import default_npu_for, model_unsupported, npu_model_name

        npu = args.npu or default_npu_for(pte)
        chosen = "" if args.npu else "default, "
        which = npu_model_name(pte)
        print(
            {
                "tosa": f"delegates run on the TOSA reference model ({chosen}--npu tosa)",
                "model": f"delegates run on the {which} NPU model ({chosen}--npu model)",
                "both": f"delegates run on the {which} NPU model, checked against the TOSA "
                "reference model (--npu both)",
            }[npu]
        )
        if npu == "tosa" and not args.npu and model_unsupported(pte):
            print(f"  (the {which} NPU model does not run it: {model_unsupported(pte)})")
        if args.on == "m55":
            _verify_on_m55(args, pte)
        result = api.verify(
            args.pte, inputs=inputs, n=args.n, npu=args.npu, lsb_budget=args.lsb_budget
        )
    except ValueError as e:
        raise CliError(str(e)) from None
    print(result)
    if not result.passed:
        raise CheckFailed("; ".join(result.failures()))
    return 0


def _verify_on_m55(args, pte: bytes) -> None:
    """``verify --on m55``: the program in a Cortex-M55 image under QEMU, bit-exact to the host
    run; the pools measured there go into the report's memory plan."""
    import json

    from ethosu_ng import api
    from ethosu_ng.tools import firmware

    try:
        res = firmware.verify_on_m55(pte, args.executorch_src, n=args.n, timeout_s=args.timeout)
    except firmware.FirmwareError as e:
        raise CheckFailed(f"--on m55: {e}") from None
    print(res)
    report = api.report_path(args.pte)
    if os.path.exists(report):
        with open(report) as f:
            rep = json.load(f)
        rep["memory_plan"] = res.plan
        with open(report, "w") as f:
            json.dump(rep, f, indent=1)
        print(f"memory plan in {report}: pools measured on the Cortex-M55")
    if not res.passed:
        raise CheckFailed("--on m55: " + "; ".join(res.mismatches or ["a pool one byte short ran"]))


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


def _non_negative_int(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer >= 0")
    return int(text)


def _non_negative_float(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        v = float("nan")
    if not v >= 0 or v == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} is not a number >= 0")
    return v


def _positive_float(text: str) -> float:
    v = _non_negative_float(text)
    if v == 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number > 0")
    return v


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("ethosu_ng")
    except PackageNotFoundError:
        return "unknown (not installed)"


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="ethosu-ng", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--debug", action="store_true", help="show tracebacks")
    ap.add_argument("--version", action="version", version=f"ethosu-ng {_version()}")
    # The global options are accepted after the subcommand too.
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--debug", action="store_true", default=argparse.SUPPRESS, help="show tracebacks"
    )
    sub = ap.add_subparsers(dest="command", required=True)

    c = sub.add_parser("compile", help="compile a model to a .pte", parents=[common])
    c.add_argument("model", help="timm:NAME, torchvision:NAME or path/to/file.py:factory")
    c.add_argument("--target", default="ethos-u55-128")
    c.add_argument("-o", "--output")
    c.add_argument("--input-dtype", choices=["float", "int8", "uint8", "int16"], default="float")
    c.add_argument("--output-dtype", choices=["float", "int8", "uint8", "int16"], default="float")
    c.add_argument(
        "--precision",
        choices=["int8", "int16", "auto"],
        default="int8",
        help="activations int8, int16 (a16w8), or auto: the modules' precision the precision "
        "advisor picks (docs/accuracy.md)",
    )
    c.add_argument(
        "--int16-module",
        action="append",
        metavar="NAME",
        help="a module (qualified name) with int16 activations in an int8 model (repeatable)",
    )
    c.add_argument(
        "--int8-module",
        action="append",
        metavar="NAME",
        help="a module (qualified name) with int8 activations in an int16 model (repeatable)",
    )
    c.add_argument(
        "--precision-budget",
        type=float,
        default=1.25,
        metavar="X",
        help="--precision auto: at most X times the int8 NPU cycles (default 1.25)",
    )
    c.add_argument(
        "--cpu-op", action="append", metavar="OP", help="keep this op on the CPU (repeatable)"
    )
    g = c.add_mutually_exclusive_group()
    g.add_argument(
        "--calibration",
        type=_positive_int,
        default=4,
        metavar="N",
        help="N random calibration batches",
    )
    g.add_argument("--calibration-dir", metavar="DIR", help="calibration samples (.pt / .npy)")
    c.add_argument("--system-config", help="a System_Config section of Vela's Arm/vela.ini")
    c.add_argument("--memory-mode", help="a Memory_Mode section of Vela's Arm/vela.ini")
    c.add_argument(
        "--extra-vela-flag",
        action="append",
        metavar="FLAG",
        help="pass to Vela verbatim, e.g. --extra-vela-flag=--optimise=Size (repeatable)",
    )
    for what in ("input", "output"):
        c.add_argument(
            f"--{what}-layout",
            metavar="LAYOUT",
            help=f"nchw or nhwc for every rank-4 {what}, or one per {what} (nhwc,-): the "
            f"memory layout the application {'feeds' if what == 'input' else 'reads'}; nhwc "
            "spares the NPU a transpose (default: as the model gives it)",
        )
    c.add_argument(
        "--allow-missing-kernels",
        action="store_true",
        help="write the program although a CPU op has no kernel in ExecuTorch's portable or "
        "quantized library (firmware that links its own)",
    )
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
    c.add_argument("--seed", type=_non_negative_int, default=0)
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

    r = sub.add_parser("report", help="summarize a .pte or its report JSON", parents=[common])
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
        "verify",
        help="run the .pte on the host and compare with the eager quantized model",
        parents=[common],
    )
    v.add_argument("pte")
    v.add_argument("--inputs", metavar="NPZ")
    v.add_argument(
        "-n", type=_positive_int, default=4, help="random inputs when --inputs is not given"
    )
    v.add_argument(
        "--lsb-budget",
        type=_non_negative_float,
        default=2.0,
        help="largest allowed difference from the eager quantized model, in LSB (default 2)",
    )
    v.add_argument(
        "--npu",
        choices=["tosa", "model", "both"],
        default=None,
        help="what runs the delegates: Vela's command stream on the Ethos-U55/U65 NPU model "
        "(default; Ethos-U85 programs default to tosa), the embedded TOSA graph on the "
        "reference model, or both (model results, plus the largest model-vs-TOSA difference "
        "per output)",
    )
    v.add_argument(
        "--on",
        choices=["host", "m55"],
        default="host",
        help="m55: also build a Cortex-M55 image for the program (cached) and run it under "
        "qemu-system-arm -M mps3-an547 with the NPU model in place of the NPU: outputs "
        "bit-exact to the host run, pools measured on the target (docs/deploying.md)",
    )
    v.add_argument(
        "--executorch-src",
        metavar="DIR",
        default=None,
        help="with --on m55: the ExecuTorch source tree (or .tar.gz) the image's runtime is "
        "built from (default: the repository's ../shared/vendor copy)",
    )
    v.add_argument(
        "--timeout",
        type=_positive_float,
        default=120.0,
        metavar="S",
        help="with --on m55: seconds one QEMU run may take (default 120)",
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
        return e.code
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
