# SPDX-License-Identifier: BSD-3-Clause
"""The zoo compiled under two installs of ethos-u-vela, side by side (docs/vela-version.md).

    pip install --no-deps --target /work/vela52 ethos-u-vela==5.2.0   # beside the venv's Vela
    python bench/vela_versions.py --vela 5.1.0= --vela 5.2.0=/work/vela52
    python bench/vela_versions.py --table                              # markdown from the results

``--vela VERSION=DIR``: DIR goes first on PYTHONPATH (empty: the Vela the venv has). Each compile
(quantize + lower + to_executorch, default compile spec: the verified compile on) runs in a fresh
interpreter started with that PYTHONPATH, so the exporter, the Vela zygote it forks compiles from
and the fresh-interpreter fallback all import the same Vela; the child checks the version both in
process and through a zygote-run Vela child, and a row whose Vela is not VERSION is an error.

One JSON line per (model, target, Vela) in ``--out``; a row already there is not run again, so an
interrupted run resumes. Per row: partitions, Vela's NPU cycles and SRAM, the verified compile's
verdicts (lowering and stream), the ops moved to the CPU, the compile's CPU seconds (the child,
its children and the Vela zygotes with theirs) and a hash of each delegate's command stream and
weights (equal hashes: Vela emitted the same program).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
# Cheapest first, so an interrupted run has whole pairs of the small models.
ZOO = [
    "torchvision:mobilenet_v3_small",
    "timm:resnet18",
    "timm:mobilenetv2_100",
    "timm:deit_tiny_patch16_224",
    "timm:swin_tiny_patch4_window7_224",
    "timm:convnext_atto",
    "timm:mobilevit_s",
]
TARGETS = ["ethos-u55-128", "ethos-u85-256"]
OUT = os.path.join(HERE, "results", "vela_versions.jsonl")


def _cpu_s() -> float:
    from ethosu_ng.vela import process as vela_process

    t = os.times()
    return t.user + t.system + t.children_user + t.children_system + vela_process.cpu_seconds()


def compile_one(model_spec: str, target: str) -> dict:
    """Runs in the child: one default compile, its figures."""
    import ethosu.vela
    import torch

    from ethosu_ng import DelegateBlob, EthosUNGCompileSpec
    from ethosu_ng.export import lower, quantize
    from ethosu_ng.tools import report
    from ethosu_ng.tools.model_source import load_model
    from ethosu_ng.vela.process import run_vela

    with tempfile.TemporaryDirectory() as tmp:
        seen = run_vela("import ethosu.vela as v; print(v.__version__)", [], tmp, 120)
    m = load_model(model_spec)
    g = torch.Generator().manual_seed(1)
    calib = [tuple(torch.randn(t.shape, generator=g) for t in m.example_inputs) for _ in range(2)]
    spec = EthosUNGCompileSpec(target)
    c0, t0 = _cpu_s(), time.perf_counter()
    q = quantize(m.model, m.example_inputs, spec, calibration=calib)
    edge, part = lower(q, m.example_inputs, spec)
    c1, t1 = _cpu_s(), time.perf_counter()
    # Before to_executorch, which rewrites the graph in place (memory planning's alloc nodes and
    # out-variants would read as CPU ops); the report's own time is left out.
    rep = report.build_report(edge, part, b"", spec, model_spec)
    gm = edge.exported_program().graph_module
    blobs = {
        d["name"]: DelegateBlob.from_bytes(getattr(gm, d["name"]).processed_bytes)
        for d in rep["delegates"]
    }
    c2, t2 = _cpu_s(), time.perf_counter()
    pte = edge.to_executorch().buffer
    wall = (t1 - t0) + (time.perf_counter() - t2)
    cpu = (c1 - c0) + (_cpu_s() - c2)
    delegates = []
    for d in rep["delegates"]:
        blob = blobs[d["name"]]
        program = hashlib.sha256(blob.command_stream + b"|" + blob.weights).hexdigest()[:16]
        delegates.append(
            {
                "npu_cycles": d["vela"]["npu_cycles"],
                "sram_kib": d["vela"]["sram_kib"],
                "lowering": (d["lowering_verification"] or {}).get("status"),
                "stream": (d["npu_verification"] or {}).get("status"),
                "stream_max_diff": (d["npu_verification"] or {}).get("max_diff"),
                "program_sha": program,
            }
        )
    t = rep["totals"]
    return {
        "vela_in_process": ethosu.vela.__version__,
        "vela_in_zygote": seen.output.strip().splitlines()[-1] if seen.output.strip() else "",
        "partitions": t["partitions"],
        "npu_cycles": t["npu_cycles"],
        "sram_kib": t["sram_kib_max"],
        "cpu_ops": sorted(c["op"] for c in rep["cpu_ops"]),
        "moved_by_compiler": [c["reason"][:200] for c in rep["compiler_fallback"]],
        "compile_cpu_s": round(cpu, 1),
        "compile_wall_s": round(wall, 1),
        "pte_bytes": len(pte),
        "delegates": delegates,
    }


def _child_main(model_spec: str, target: str, result: str) -> None:
    sys.path.insert(0, ROOT)
    try:
        r = {"ok": True, **compile_one(model_spec, target)}
    except BaseException as e:  # noqa: BLE001 - the row says why
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        r = {"ok": False, "why": f"{type(e).__name__}: {first}"[:300]}
    with open(result, "w") as f:
        json.dump(r, f)


def run(model_spec: str, target: str, version: str, vela_dir: str, timeout: float) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env.pop("PYTHONPATH", None)
    if vela_dir:
        env["PYTHONPATH"] = vela_dir
    row = {"model": model_spec, "target": target, "vela": version}
    with tempfile.TemporaryDirectory() as tmp:
        result = os.path.join(tmp, "result.json")
        argv = [sys.executable, os.path.abspath(__file__), "--child", model_spec, target, result]
        t0 = time.time()
        try:
            p = subprocess.run(argv, env=env, cwd=ROOT, timeout=timeout)
        except subprocess.TimeoutExpired:
            return {**row, "ok": False, "why": f"timed out after {timeout:g} s"}
        if not os.path.exists(result):
            return {**row, "ok": False, "why": f"child died (exit {p.returncode})"}
        with open(result) as f:
            r = {**row, **json.load(f), "elapsed_s": round(time.time() - t0, 1)}
    if r["ok"] and not (r["vela_in_process"] == r["vela_in_zygote"] == version):
        r = {**r, "ok": False, "why": f"ran Vela {r['vela_in_process']}/{r['vela_in_zygote']}"}
    return r


def _rows(path: str) -> list:
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def _verdicts(r: dict) -> str:
    counts: dict = {}
    for d in r["delegates"]:
        for kind in ("lowering", "stream"):
            key = f"{kind} {d[kind]}"
            counts[key] = counts.get(key, 0) + 1
    return ", ".join(f"{n} {k}" for k, n in sorted(counts.items()))


def _cell(r: dict) -> dict:
    if r is None:
        return {}
    if not r["ok"]:
        return {"failed": r["why"]}
    return {
        "partitions": str(r["partitions"]),
        "cycles": f"{r['npu_cycles']:,.0f}" if r["npu_cycles"] else "-",
        "sram": f"{r['sram_kib']:,.1f}",
        "verdicts": _verdicts(r),
        "cpu": f"{len(r['cpu_ops'])} / {len(r['moved_by_compiler'])}",
        "cpu_s": f"{r['compile_cpu_s']:.1f}",
    }


def table(rows: list, versions: list) -> str:
    """One line per (model, target): each figure as ``first / second`` Vela."""
    a, b = versions[:2]
    out = [
        f"| model | target | partitions | NPU cycles ({a} / {b}) | change | SRAM KiB "
        "| verdicts (lowering, stream) | CPU ops / moved by the compiler | compile CPU s "
        "| same program |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    targets = [t for t in TARGETS + ["ethos-u65-256"] if any(r["target"] == t for r in rows)]
    for model in ZOO:
        for target in targets:
            by = {r["vela"]: r for r in rows if r["model"] == model and r["target"] == target}
            if a not in by and b not in by:
                continue
            ca, cb = _cell(by.get(a)), _cell(by.get(b))

            def pair(key, ca=ca, cb=cb):
                x = ca.get(key, ca.get("failed", "not run"))
                y = cb.get(key, cb.get("failed", "not run"))
                return x if x == y else f"{x} / {y}"

            change = same = "-"
            ra, rb = by.get(a), by.get(b)
            if ra and rb and ra["ok"] and rb["ok"]:
                if ra["npu_cycles"] and rb["npu_cycles"]:
                    change = f"{100 * (rb['npu_cycles'] / ra['npu_cycles'] - 1):+.1f}%"
                sa = [d["program_sha"] for d in ra["delegates"]]
                same = "yes" if sa == [d["program_sha"] for d in rb["delegates"]] else "no"
            out.append(
                f"| {model} | {target} | {pair('partitions')} | "
                f"{ca.get('cycles', 'failed')} / {cb.get('cycles', 'failed')} | {change} "
                f"| {pair('sram')} | {pair('verdicts')} | {pair('cpu')} "
                f"| {ca.get('cpu_s', '-')} / {cb.get('cpu_s', '-')} | {same} |"
            )
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--vela", action="append", default=[], help="VERSION=DIR (DIR may be empty)")
    ap.add_argument("--models", nargs="*", default=ZOO)
    ap.add_argument("--targets", nargs="*", default=TARGETS)
    ap.add_argument("--timeout", type=float, default=3600)
    ap.add_argument("--out", default=OUT)
    ap.add_argument("--table", action="store_true", help="print the markdown table and stop")
    ap.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        _child_main(*args.child)
        return
    velas = [v.split("=", 1) for v in args.vela]
    if args.table:
        rows = _rows(args.out)
        print(table(rows, [v for v, _ in velas] or sorted({r["vela"] for r in rows})))
        return
    if not velas or any(len(v) != 2 for v in velas):
        ap.error("give each Vela as --vela VERSION=DIR (DIR empty: the venv's own)")
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    for model in args.models:
        for target in args.targets:
            for version, vela_dir in velas:
                done = any(
                    r["model"] == model and r["target"] == target and r["vela"] == version
                    for r in _rows(args.out)
                )
                if done:
                    continue
                r = run(model, target, version, vela_dir, args.timeout)
                print(json.dumps(r), flush=True)
                with open(args.out, "a") as f:
                    f.write(json.dumps(r) + "\n")


if __name__ == "__main__":
    main()
