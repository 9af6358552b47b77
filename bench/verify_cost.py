"""What the verified compile (``EthosUNGCompileSpec.verify_npu``) costs: compile time with the
check on and off, side by side, and each partition's verdict.

    python bench/verify_cost.py timm:mobilenetv2_100 timm:resnet18 --target ethos-u55-128
    python bench/verify_cost.py torchvision:mobilenet_v3_small --target ethos-u65-256 --off-too

Each compile (quantize + lower + to_executorch) runs in its own *spawned* child, one after the
other, with the same calibration batches. Without ``--off-too`` only the verified compile runs
and "off s" is its time less the verification's own seconds (the verdicts time themselves); with
it, the unverified compile is measured too. Prints a markdown table: model, target, partitions,
verdicts, compile s on, verification s on the compile's critical path (waiting for the reference,
running the model, comparing), the TOSA reference model's own s (in a child process beside Vela),
off s, and the share of the compile the check costs.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))


def _compile(model_spec: str, target: str, verify: bool, q) -> None:
    try:
        import torch

        from ethosu_ng import EthosUNGCompileSpec
        from ethosu_ng.export import lower, quantize
        from ethosu_ng.tools.model_source import load_model

        m = load_model(model_spec)
        g = torch.Generator().manual_seed(1)
        calib = [
            tuple(torch.randn(t.shape, generator=g) for t in m.example_inputs) for _ in range(2)
        ]
        spec = EthosUNGCompileSpec(target, verify_npu=verify)
        t0 = time.perf_counter()
        qm = quantize(m.model, m.example_inputs, spec, calibration=calib)
        edge, part = lower(qm, m.example_inputs, spec)
        edge.to_executorch()
        total = time.perf_counter() - t0
        verdicts = []
        for _, mod in edge.exported_program().graph_module.named_children():
            info = (getattr(mod, "meta", None) or {}).get("_delegate_info_meta")
            v = getattr(info, "npu_verification", None)
            if v is not None:
                verdicts.append((v.status, v.seconds, v.max_diff, v.reason, v.reference_seconds))
        q.put(
            dict(
                total=total,
                verdicts=verdicts,
                partitions=len(part.report.partitions),
                moved=len(part.report.compiler_fallback),
            )
        )
    except BaseException as e:  # noqa: BLE001 - reported in the table
        q.put(dict(error=f"{type(e).__name__}: {e}"[:200]))


def run(model_spec: str, target: str, verify: bool) -> dict:
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=_compile, args=(model_spec, target, verify, q))
    p.start()
    r = q.get()
    p.join()
    return r


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="+")
    ap.add_argument("--target", default="ethos-u55-128")
    ap.add_argument("--off-too", action="store_true", help="also time the unverified compile")
    args = ap.parse_args()
    print(
        "| model | target | partitions | verdicts | moved to CPU | compile s (verified) "
        "| verification s (critical path) | TOSA reference s (beside Vela) | compile s (off) "
        "| share |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for model in args.models:
        on = run(model, args.target, True)
        if "error" in on:
            print(f"| {model} | {args.target} | error: {on['error']} ||||||")
            continue
        vs = sum(v[1] for v in on["verdicts"])
        off = run(model, args.target, False)["total"] if args.off_too else on["total"] - vs
        kinds = {}
        for v in on["verdicts"]:
            kinds[v[0]] = kinds.get(v[0], 0) + 1
        share = (on["total"] - off) / off if args.off_too else vs / off
        print(
            f"| {model} | {args.target} | {on['partitions']} "
            f"| {', '.join(f'{n} {k}' for k, n in sorted(kinds.items()))} | {on['moved']} "
            f"| {on['total']:.1f} | {vs:.1f} | {sum(v[4] for v in on['verdicts']):.1f} "
            f"| {off:.1f}{'' if args.off_too else ' (derived)'} "
            f"| {100 * share:.1f}% |",
            flush=True,
        )


if __name__ == "__main__":
    main()
