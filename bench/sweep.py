# SPDX-License-Identifier: BSD-3-Clause
"""A family-wide sweep, side by side with upstream: every model, every target, both backends.

    OMP_NUM_THREADS=1 python bench/sweep.py --results bench/results/sweep.jsonl \\
        [--models timm:resnet18 ...] [--targets ethos-u85-256] [--table]

Per model and target, the model is quantized once (``EthosUNGQuantizer``, two random calibration
batches, ``pretrained=False`` weights) and the same quantized program is lowered by upstream's
``EthosUPartitioner`` and by ours, each in a spawned child (``bench/compare_upstream.py``: a
crash or a hang is a row, not the end of the sweep). Per lowering: partitions, CPU compute ops,
Vela NPU cycles, data-movement NPU cycles, SRAM, .pte bytes, lowering CPU seconds, and the
estimated end-to-end time of the whole program on a Cortex-M55 + Ethos-U at the system config's
clock (``ethosu_ng.cost_model``: Vela's per-delegate time plus every CPU kernel call, boundary
quantize/dequantize included, from instructions counted on the emulated M55).

Resumable: each finished lowering is one JSON line in ``--results``; a rerun skips it.
``--table`` prints the table from the results without lowering anything. The default model list
spans CNNs, mobile CNNs, hybrid CNN-transformers, ViTs, MLP-style and attention-free models; the
CNN half also runs on ethos-u55-128 and ten models on ethos-u65-256 (``PLAN``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import compare_upstream as cu  # noqa: E402

CNNS = [
    "torchvision:mobilenet_v3_small",
    "torchvision:shufflenet_v2_x0_5",
    "torchvision:squeezenet1_1",
    "torchvision:mnasnet0_5",
    "timm:mobilenetv2_100",
    "timm:mobilenetv4_conv_small",
    "timm:regnetx_002",
    "timm:efficientnet_b0",
    "timm:resnet18",
    "timm:ghostnet_100",
    "timm:lcnet_050",
    "timm:tinynet_e",
    "timm:convnext_atto",
    "timm:repvgg_a0",
    "timm:mixnet_s",
]
TRANSFORMERS = [
    "timm:levit_128s",
    "timm:mobilevit_xxs",
    "timm:efficientvit_m0",
    "timm:edgenext_xx_small",
    "timm:fastvit_t8",
    "timm:repvit_m0_9",
    "timm:deit_tiny_patch16_224",
    "timm:vit_tiny_patch16_224",
    "timm:poolformerv2_s12",
    "timm:resmlp_12_224",
    "timm:mixer_s32_224",
    "timm:gmlp_ti16_224",
    "timm:convmixer_768_32",
    "timm:tiny_vit_5m_224",
    "timm:coat_lite_tiny",
]
PLAN = {
    "ethos-u85-256": CNNS + TRANSFORMERS,
    "ethos-u55-128": CNNS,
    "ethos-u65-256": CNNS[:5] + TRANSFORMERS[:5],
}
COLUMNS = (
    "partitions",
    "cpu_ops",
    "cycles",
    "data_movement",
    "sram_kib",
    "pte",
    "lower_cpu_s",
    "e2e_ms",
)


def _child(which, program_path, target, force_cpu, queue):
    """compare_upstream's lowering plus the end-to-end estimate of the lowered program."""
    try:
        import ethosu_ng.ops  # noqa: F401 - the quantized_decomposed ops the program calls
        from ethosu_ng import EthosUNGCompileSpec, cost_model

        ep = torch.export.load(program_path)
        if which == "upstream":
            edge, t, summaries, moved = cu.lower_upstream(ep, target, force_cpu)
        else:
            edge, t, summaries, moved = cu.lower_ours(ep, target, force_cpu)
        metrics = cu.measure(edge, t, summaries, moved)
        gm = edge.exported_program().graph_module
        npu_s = [float(s["inference_time"]) if s.get("inference_time") else None for s in summaries]
        est = cost_model.estimate(
            gm, npu_s, cost_model.system_clock_hz(EthosUNGCompileSpec(target))
        )
        metrics["e2e_ms"] = None if est.total_s is None else est.total_s * 1e3
        metrics["cpu_ms"] = None if est.cpu_s is None else est.cpu_s * 1e3
        metrics["pte"] = len(edge.to_executorch().buffer)
        queue.put(("ok", metrics))
    except BaseException as e:  # report, never hang the parent
        queue.put(
            ("error", f"{type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}")
        )


def _load_results(path):
    return {(r["model"], r["target"], r["who"]): r for r in cu.read_jsonl(path)}


def _cell(r, k):
    v = r.get(k)
    if v is None:
        return "-"
    if k == "cpu_ops":
        return str(len(v))
    if k in ("cycles", "data_movement", "pte"):
        return f"{v:,.0f}"
    if k == "e2e_ms":
        return f"{v:.3f}"
    return f"{v:.1f}" if isinstance(v, float) else str(v)


def print_table(done, plan):
    print(
        "| model | target | backend | partitions | CPU ops | NPU cycles | data movement | "
        "SRAM KiB | .pte B | lowering CPU s | end-to-end ms (est.) |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for target, models in plan.items():
        for model in models:
            rows = {who: done.get((model, target, who)) for who in ("upstream", cu.OURS)}
            for who, r in rows.items():
                if r is None:
                    continue
                if "error" in r:
                    print(f"| {model} | {target} | {who} | {r['error']} |" + " |" * 7)
                    continue
                cells = " | ".join(_cell(r["metrics"], k) for k in COLUMNS)
                print(f"| {model} | {target} | {who} | {cells} |")
            up, ours = rows["upstream"], rows[cu.OURS]
            if up and ours and "metrics" in up and "metrics" in ours:
                u, o = up["metrics"], ours["metrics"]

                def ratio(k, u=u, o=o):
                    return f"{o[k] / u[k]:.3f}" if u.get(k) and o.get(k) is not None else "-"

                print(
                    f"| {model} | {target} | ratio | | | {ratio('cycles')} | "
                    f"{ratio('data_movement')} | {ratio('sram_kib')} | {ratio('pte')} | "
                    f"{ratio('lower_cpu_s')} | {ratio('e2e_ms')} |"
                )


def main():
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--models", nargs="*", help="only these (default: the plan's)")
    ap.add_argument("--targets", nargs="*", default=list(PLAN), choices=list(PLAN))
    ap.add_argument("--results", default=os.path.join(HERE, "results", "sweep.jsonl"))
    ap.add_argument("--calibration", type=int, default=2)
    ap.add_argument("--timeout", type=int, default=1800)
    ap.add_argument("--table", action="store_true", help="print the table, lower nothing")
    args = ap.parse_args()

    plan = {t: [m for m in PLAN[t] if not args.models or m in args.models] for t in args.targets}
    if args.models:
        for t in plan:
            plan[t] += [
                m for m in args.models if m not in plan[t] and m not in sum(PLAN.values(), [])
            ]
    done = _load_results(args.results)
    if not args.table:
        from ethosu_ng import EthosUNGCompileSpec
        from ethosu_ng.export import quantize

        workdir = tempfile.mkdtemp(prefix="sweep_")
        try:
            for target, models in plan.items():
                for model in models:
                    todo = [w for w in ("upstream", cu.OURS) if (model, target, w) not in done]
                    if not todo:
                        continue
                    t0 = time.time()
                    try:
                        m, x, _ = cu.load(model)
                        g = torch.Generator().manual_seed(1)
                        calib = [
                            tuple(torch.randn(t.shape, generator=g) for t in x)
                            for _ in range(args.calibration)
                        ]
                        q = quantize(m, x, EthosUNGCompileSpec(target), calibration=calib)
                        path = os.path.join(workdir, f"{len(os.listdir(workdir))}.pt2")
                        torch.export.save(torch.export.export(q, x), path)
                        results = {
                            w: cu.run_isolated(w, path, target, [], args.timeout, child=_child)
                            for w in todo
                        }
                    except Exception as e:  # noqa: BLE001 - a model that will not quantize
                        msg = f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"
                        results = {w: ("error", f"quantize: {msg}") for w in todo}
                    for who, (status, r) in results.items():
                        row = {"model": model, "target": target, "who": who}
                        row.update({"metrics": r} if status == "ok" else {"error": str(r)})
                        row["wall_s"] = time.time() - t0
                        done[(model, target, who)] = row
                        os.makedirs(os.path.dirname(os.path.abspath(args.results)), exist_ok=True)
                        with open(args.results, "a") as f:
                            f.write(json.dumps(row) + "\n")
                        print(f"{model} {target} {who}: {status}", file=sys.stderr, flush=True)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
    print_table(done, plan)


if __name__ == "__main__":
    main()
