# SPDX-License-Identifier: BSD-3-Clause
"""What the verified compile (``verify_lowering`` + ``verify_npu``) costs: compile time with the
checks on and off, side by side, and each partition's verdicts.

    python bench/verify_cost.py timm:mobilenetv2_100 timm:resnet18 --target ethos-u55-128
    python bench/verify_cost.py torchvision:mobilenet_v3_small --target ethos-u85-256

Each compile (quantize + lower + to_executorch) runs in its own *spawned* child, the verified
and the unverified one alternating, ``--repeat`` times each, with the same calibration batches;
the fastest of each is kept (a shared machine only ever adds time). Compile cost is CPU seconds
of the child, its finished children and the Vela zygotes with theirs (the TOSA reference runs
there): a figure a busy machine distorts less than wall time; wall time is printed too.
"critical path s" is what the verdicts themselves waited for and ran after Vela (the reference
and the exact evaluation run beside Vela). "checks CPU s" is the verified compile's own CPU time,
measured where it is spent: the TOSA reference model's child process, the exact evaluation's
thread and the NPU model runs, summed over partitions ("ref / exact / model"); unlike the
difference of two whole compiles, a busy machine barely moves it. Prints a markdown table.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))


def _cpu_s() -> float:
    from ethosu_ng.vela import process as vela_process

    t = os.times()
    return t.user + t.system + t.children_user + t.children_system + vela_process.cpu_seconds()


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
        spec = EthosUNGCompileSpec(target, verify_npu=verify, verify_lowering=verify)
        c0, t0 = _cpu_s(), time.perf_counter()
        qm = quantize(m.model, m.example_inputs, spec, calibration=calib)
        edge, part = lower(qm, m.example_inputs, spec)
        edge.to_executorch()
        wall, cpu = time.perf_counter() - t0, _cpu_s() - c0
        verdicts = []
        for _, mod in edge.exported_program().graph_module.named_children():
            info = (getattr(mod, "meta", None) or {}).get("_delegate_info_meta")
            for which in ("lowering_verification", "npu_verification"):
                v = getattr(info, which, None)
                if v is not None:
                    verdicts.append((which.split("_")[0], v.status, v.seconds, v.as_dict()))
        q.put(
            dict(
                wall=wall,
                cpu=cpu,
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
    ap.add_argument("--repeat", type=int, default=1)
    args = ap.parse_args()
    print(
        "| model | target | partitions | verdicts | moved to CPU | CPU s verified | CPU s off "
        "| CPU share | checks CPU s (ref / exact / model) | checks share | wall s verified "
        "| wall s off | critical path s |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for model in args.models:
        on, off = None, None
        for _ in range(args.repeat):
            a, b = run(model, args.target, True), run(model, args.target, False)
            if "error" in a or "error" in b:
                on = a if "error" in a else b
                break
            on = a if on is None or a["cpu"] < on["cpu"] else on
            off = b if off is None or b["cpu"] < off["cpu"] else off
        if "error" in on:
            print(f"| {model} | {args.target} | error: {on['error']} |||||||||")
            continue
        kinds = {}
        for which, status, _, _ in on["verdicts"]:
            kinds[f"{which} {status}"] = kinds.get(f"{which} {status}", 0) + 1
        crit = sum(s for _, _, s, _ in on["verdicts"])
        # One reference run serves both links: counted once, from the lowering verdicts.
        by = {w: [d for ww, _, _, d in on["verdicts"] if ww == w] for w in ("lowering", "npu")}
        ref = sum(d.get("reference_cpu_seconds", 0.0) for d in by["lowering"])
        exact = sum(d.get("exact_cpu_seconds", 0.0) for d in by["lowering"])
        model_cpu = sum(d.get("model_cpu_seconds", 0.0) for d in by["npu"])
        checks = ref + exact + model_cpu
        print(
            f"| {model} | {args.target} | {on['partitions']} "
            f"| {', '.join(f'{n} {k}' for k, n in sorted(kinds.items()))} | {on['moved']} "
            f"| {on['cpu']:.1f} | {off['cpu']:.1f} | {100 * (on['cpu'] / off['cpu'] - 1):.1f}% "
            f"| {checks:.1f} ({ref:.1f} / {exact:.1f} / {model_cpu:.1f}) "
            f"| {100 * checks / off['cpu']:.1f}% "
            f"| {on['wall']:.1f} | {off['wall']:.1f} | {crit:.1f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
