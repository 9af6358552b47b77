# SPDX-License-Identifier: BSD-3-Clause
# SPDX-License-Identifier: Apache-2.0
"""Precision side by side: SQNR and NPU cycles of int8 and a16w8, ours and upstream's, in one run.

    python bench/precision.py timm:deit_tiny_patch16_224 timm:mobilevit_xxs \
        --target ethos-u85-256 [--configs ours-int8 ours-a16w8 upstream-int8 upstream-a16w8]

Each model gets the same calibration batches and the same held-out test batches (random, seeded).
Per configuration:

- ``eager SQNR``: the quantized model (after ``convert_pt2e``) against the float model on the
  test batches (``--tests``), in dB (10 log10 of signal power over error power, over all outputs);
- ``program SQNR``: the lowered program against the float model. Ours: the ``.pte`` on the host
  runtime (the NPU model for Ethos-U55/U65 programs, the TOSA reference for U85). Upstream's
  ``.pte`` carries a backend the host cannot run, so its lowered program runs with each delegate
  call replaced by the TOSA graph Vela compiled it from, on the TOSA reference model (the same
  stage our U85 figure is taken at);
- partitions, CPU compute ops and Vela's NPU cycles of the lowered program.

``ours-*`` quantize with ``EthosUNGQuantizer(activation_dtype=...)``; ``upstream-*`` with
upstream's ``EthosUQuantizer`` and its ``get_symmetric_quantization_config`` /
``get_symmetric_a16w8_quantization_config`` defaults, lowered by ``EthosUPartitioner``. Every
lowering runs in a spawned child (bench/compare_upstream.py), so a crash is a result.
``--resume FILE`` keeps finished rows in a JSON file and skips them on the next run.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

CONFIGS = ("ours-int8", "ours-a16w8", "upstream-int8", "upstream-a16w8")


def _observer(kind, grid_scale):
    """The int16 activation observer class for ``--int16-observer`` / ``--int16-grid-scale``."""
    from torchao.quantization.pt2e.observer import HistogramObserver, MinMaxObserver

    base = HistogramObserver if kind == "histogram" else MinMaxObserver
    if grid_scale is None:
        return base

    class Scaled(base):
        def calculate_qparams(self):
            scale, zero_point = super().calculate_qparams()
            return scale * grid_scale, zero_point

    return Scaled


def quantize_for(config: str, model, x, calib, target: str):
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    who, precision = config.split("-")
    gm = torch.export.export(model, x).module(check_guards=False)
    if who == "ours":
        from ethosu_ng import EthosUNGCompileSpec, EthosUNGQuantizer

        dtype = torch.int16 if precision == "a16w8" else torch.int8
        quantizer = EthosUNGQuantizer(EthosUNGCompileSpec(target), activation_dtype=dtype)
    else:
        from executorch.backends.arm.ethosu import EthosUCompileSpec
        from executorch.backends.arm.quantizer import (
            EthosUQuantizer,
            get_symmetric_a16w8_quantization_config,
            get_symmetric_quantization_config,
        )

        quantizer = EthosUQuantizer(EthosUCompileSpec(target))
        quantizer.set_global(
            get_symmetric_a16w8_quantization_config()
            if precision == "a16w8"
            else get_symmetric_quantization_config()
        )
    prepared = prepare_pt2e(gm, quantizer)
    with torch.no_grad():
        for batch in calib:
            prepared(*batch)
    return convert_pt2e(prepared)


def _child(which, program_path, target, force_cpu, queue):
    """Lower in a spawned child; ours also runs the .pte on the test batches saved beside it."""
    try:
        from compare_upstream import lower_ours, lower_upstream, measure

        import ethosu_ng.ops  # noqa: F401 - the quantized_decomposed ops the program calls

        ep = torch.export.load(program_path)
        tosa_by_blob = {}
        if which == "upstream":
            edge, t, summaries, moved = lower_upstream(ep, target, force_cpu, tosa_by_blob)
        else:
            # The TOSA graph rides along: the host runs what the NPU model does not cover.
            edge, t, summaries, moved = lower_ours(ep, target, force_cpu, embed_tosa=True)
        metrics = measure(edge, t, summaries, moved)
        tests = torch.load(program_path + ".test.pt")
        if which == "upstream":
            from compare_upstream import run_on_tosa_reference

            metrics["outputs"] = [
                o.numpy().copy()
                for t in tests
                for o in run_on_tosa_reference(edge, tosa_by_blob, t)
            ]
        pte = edge.to_executorch().buffer
        metrics["pte"] = len(pte)
        if which != "upstream":
            from ethosu_ng.runtime import run_pte

            # numpy arrays travel by value: a tensor would be a file descriptor of this child,
            # gone once it exits.
            metrics["outputs"] = [o.numpy().copy() for t in tests for o in run_pte(pte, list(t))]
        queue.put(("ok", metrics))
    except BaseException as e:  # report, never hang the parent
        queue.put(
            ("error", f"{type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}")
        )


def main():
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("models", nargs="+")
    ap.add_argument("--target", default="ethos-u85-256")
    ap.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=CONFIGS)
    ap.add_argument("--calibration", type=int, default=4)
    ap.add_argument(
        "--tests", type=int, default=1, help="held-out batches SQNR is measured over (together)"
    )
    ap.add_argument("--timeout", type=int, default=2400)
    ap.add_argument("--no-lower", action="store_true", help="eager SQNR only")
    ap.add_argument(
        "--int16-scale-floor",
        type=float,
        help="ours-a16w8 with this smallest int16 scale (quantizer.INT16_SCALE_FLOOR); "
        "upstream's default is 2**-12",
    )
    ap.add_argument(
        "--int16-observer",
        choices=("minmax", "histogram"),
        help="ours-a16w8 observing int16 activations this way (quantizer.INT16_OBSERVER); "
        "upstream's is the histogram",
    )
    ap.add_argument(
        "--int16-grid-scale",
        type=float,
        help="ours-a16w8 with every int16 activation's grid this many times the observed range",
    )
    ap.add_argument("--resume", metavar="FILE", help="JSON file of finished rows")
    args = ap.parse_args()

    from compare_upstream import load, run_isolated

    import ethosu_ng.quantizer as ours_quantizer
    from ethosu_ng.precision import batch_outputs, sqnr_db

    if args.int16_scale_floor is not None:
        ours_quantizer.INT16_SCALE_FLOOR = args.int16_scale_floor
    if args.int16_observer is not None or args.int16_grid_scale is not None:
        ours_quantizer.INT16_OBSERVER = _observer(args.int16_observer, args.int16_grid_scale)
    ours_variant = "".join(
        f"|{name} {value}"
        for name, value in (
            ("floor", args.int16_scale_floor),
            ("observer", args.int16_observer),
            ("grid", args.int16_grid_scale),
        )
        if value is not None
    )

    done = {}
    if args.resume and os.path.exists(args.resume):
        with open(args.resume) as f:
            done = json.load(f)
    print(
        f"target {args.target}; {args.calibration} calibration batches; torch {torch.__version__}"
    )
    print(
        "\n| model | config | eager SQNR dB | program SQNR dB | partitions | CPU ops | "
        "NPU cycles | lowering s |"
    )
    print("|---|---|---|---|---|---|---|---|")
    workdir = tempfile.mkdtemp(prefix="precision_")
    for spec_str in args.models:
        model, x, _ = load(spec_str)
        model = model.eval()
        g = torch.Generator().manual_seed(1)
        calib = [
            tuple(torch.randn(t.shape, generator=g) for t in x) for _ in range(args.calibration)
        ]
        tests = [tuple(torch.randn(t.shape, generator=g) for t in x) for _ in range(args.tests)]
        with torch.no_grad():
            want = batch_outputs(model, tests)
        for config in args.configs:
            key = f"{spec_str}|{args.target}|{config}|{args.no_lower}"
            key += f"|tests {args.tests}" if args.tests != 1 else ""
            if config == "ours-a16w8":
                key += ours_variant
            if key not in done or "error" in done[key]:  # a failed row is run again
                t0 = time.time()
                q = quantize_for(config, model, x, calib, args.target)
                with torch.no_grad():
                    got = batch_outputs(q, tests)
                    eager = sqnr_db(got, want)
                    per = len(want) // len(tests)  # outputs per batch
                    each = [
                        sqnr_db(got[k : k + per], want[k : k + per])
                        for k in range(0, len(want), per)
                    ]
                r = {"eager": eager, "eager_each": each, "quantize_s": time.time() - t0}
                if not args.no_lower:
                    path = os.path.join(workdir, f"{len(os.listdir(workdir))}.pt2")
                    torch.export.save(torch.export.export(q, x), path)
                    torch.save(tests, path + ".test.pt")
                    who = "upstream" if config.startswith("upstream") else "ethosu_ng"
                    status, m = run_isolated(who, path, args.target, [], args.timeout, child=_child)
                    if status != "ok":
                        r["error"] = m
                    else:
                        outs = m.pop("outputs", None)
                        outs = None if outs is None else [torch.from_numpy(o) for o in outs]
                        r.update(
                            program=None if outs is None else sqnr_db(outs, want),
                            partitions=m["partitions"],
                            cpu_ops=len(m["cpu_ops"]),
                            cycles=m["cycles"],
                            lower_s=m["lower_s"],
                        )
                done[key] = r
                if args.resume:
                    with open(args.resume, "w") as f:
                        json.dump(done, f, indent=1)
            r = done[key]
            prog = r.get("program")
            cells = (
                [r["error"], "", "", "", ""]
                if "error" in r
                else [
                    "-" if prog is None else f"{prog:.2f}",
                    str(r.get("partitions", "-")),
                    str(r.get("cpu_ops", "-")),
                    f"{r['cycles']:,.0f}" if "cycles" in r else "-",
                    f"{r['lower_s']:.0f}" if "lower_s" in r else "-",
                ]
            )
            eager = f"{r['eager']:.2f}"
            if len(r.get("eager_each", [])) > 1:
                eager += " (" + " / ".join(f"{v:.2f}" for v in r["eager_each"]) + ")"
            print(f"| {spec_str} | {config} | {eager} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
