# SPDX-License-Identifier: BSD-3-Clause
"""Compile the model zoo for each target and write docs/zoo.md (and docs/zoo.json).

    python bench/zoo_table.py                      # all models, u55-128 and u85-256
    python bench/zoo_table.py --models timm:resnet18 --targets ethos-u85-256

Per model and target: partitions, NPU op share, Vela NPU cycles, SRAM, .pte size, compile
seconds, float boundary tensors and numerics (worst delegate, TOSA reference model vs the eager
quantized model, in LSB). A failure is a row that says why; no model is dropped. Each compile
runs in a child process so a compiler crash is recorded, not fatal.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import queue
import time
import traceback
from pathlib import Path

ZOO = [
    "timm:mobilenetv2_100",
    "timm:resnet18",
    "timm:convnext_atto",
    "timm:deit_tiny_patch16_224",
    "timm:mobilevit_s",
    "timm:swin_tiny_patch4_window7_224",
    "torchvision:mobilenet_v3_small",
]
TARGETS = ["ethos-u55-128", "ethos-u85-256"]
# The targets the NPU model (runtime/ethosu_ng/npu_model) executes; U85 is not modelled.
NPU_MODEL_TARGETS = ["ethos-u55-128", "ethos-u65-256"]
HERE = os.path.dirname(os.path.abspath(__file__))


def compile_one(model_spec: str, target: str) -> dict:
    import torch

    from ethosu_ng import EthosUNGCompileSpec
    from ethosu_ng.export import lower, quantize
    from ethosu_ng.module_profile import unmapped_share
    from ethosu_ng.numerics.tosa_reference import check_delegates
    from ethosu_ng.partitioning.boundary import float_boundary_tensors
    from ethosu_ng.tools import report
    from ethosu_ng.tools.model_source import load_model

    t0 = time.time()
    m = load_model(model_spec)
    # Every partition's TOSA rewrites are checked bit for bit against upstream's TOSA on the
    # reference model while compiling (a difference is a NotBitExact naming the rewrite).
    spec = EthosUNGCompileSpec(target, embed_tosa=True, tosa_optimize_verify=True)
    g = torch.Generator().manual_seed(1)
    calib = [tuple(torch.randn(t.shape, generator=g) for t in m.example_inputs) for _ in range(2)]
    q = quantize(m.model, m.example_inputs, spec, calibration=calib)
    edge, part = lower(q, m.example_inputs, spec)
    compile_s = time.time() - t0
    rep = report.build_report(edge, part, b"", spec, model_spec)
    floats = len(float_boundary_tensors(edge.exported_program()))
    numerics = check_delegates(edge, m.example_inputs)
    worst = max((r.worst for r in numerics), default=0)
    exact = sum(r.worst <= 1 for r in numerics)
    pte = edge.to_executorch().buffer
    # Firmware size: the TOSA sections are only embedded for the host numerics check.
    from ethosu_ng import DelegateBlob
    from ethosu_ng.adapters import exir
    from ethosu_ng.compile_spec import BACKEND_ID

    tosa_bytes = sum(
        len(DelegateBlob.from_bytes(d).tosa or b"")
        for b, d in exir.pte_delegate_payloads(pte)
        if b == BACKEND_ID
    )
    t = rep["totals"]
    return {
        "model": model_spec,
        "target": target,
        "ok": True,
        "partitions": t["partitions"],
        "npu_op_share": t["npu_op_share"],
        "npu_cycles": t["npu_cycles"],
        "data_movement_cycles": t["data_movement_cycles"],
        "sram_kib": t["sram_kib_max"],
        "pte_bytes": len(pte) - tosa_bytes,
        "pte_kind": "firmware",
        "compile_s": round(compile_s, 1),
        "tosa_optimize": spec.tosa_optimize,
        "float_boundary": floats,
        "worst_lsb": worst,
        "delegates_within_1lsb": exact,
        "cpu_ops": sorted({c["op"] for c in rep["cpu_ops"]}),
        # NPU cycles the per-module profile could not give a module (module_profile).
        "unmapped_cycle_share": unmapped_share(rep["by_module"]),
    }


def npu_model_one(model_spec: str, target: str, seed: int = 0, verify_npu: bool = True) -> dict:
    """NPU model vs TOSA reference model on every delegate output of one zoo model, and the C++
    weight decoder vs Vela's ``mlw_codec.decode`` on every weight stream its kernels read.

    Walks the lowered program in Python (CPU ops in PyTorch); at each delegate the same integer
    inputs go to the embedded TOSA graph and, laid out in scratch as the backend lays them out,
    to Vela's command stream on the NPU model. The program continues on the TOSA outputs, so
    each delegate is judged on identical inputs. ``verify_npu=False`` compiles without the
    verified compile, to see Vela's streams as Vela emits them.
    """
    import sys

    import numpy as np
    import torch
    from torch.fx import Interpreter

    from ethosu_ng import DelegateBlob, EthosUNGCompileSpec
    from ethosu_ng import runtime as rt
    from ethosu_ng.export import lower, quantize
    from ethosu_ng.numerics.tosa_reference import (
        _module,
        logical_to_npu,
        npu_to_logical,
        run_tosa,
    )
    from ethosu_ng.ops import CALL_DELEGATE
    from ethosu_ng.tools.model_source import load_model

    sys.path.insert(0, os.path.join(HERE, "..", "tests"))
    from ethosu import mlw_codec
    from npu_payload import streams

    t0 = time.time()
    m = load_model(model_spec)
    spec = EthosUNGCompileSpec(target, embed_tosa=True, verify_npu=verify_npu)
    g = torch.Generator().manual_seed(1)
    calib = [tuple(torch.randn(t.shape, generator=g) for t in m.example_inputs) for _ in range(2)]
    q = quantize(m.model, m.example_inputs, spec, calibration=calib)
    edge, _ = lower(q, m.example_inputs, spec)
    compile_s = time.time() - t0
    rt.load_host_runtime()
    delegates = []

    class Both(Interpreter):
        def call_function(self, fn, args, kwargs):
            if fn is not CALL_DELEGATE:
                return super().call_function(fn, args, kwargs)
            lowered, *inputs = args
            blob = DelegateBlob.from_bytes(lowered.processed_bytes)
            raw = [logical_to_npu(t, s) for t, s in zip(inputs, blob.inputs)]
            want = [np.asarray(a) for a in run_tosa(blob.tosa, [torch.from_numpy(a) for a in raw])]
            scratch = bytearray(blob.scratch_size)
            fast = bytearray(blob.fast_scratch_size) if blob.fast_scratch_size else None
            for s, a in zip(blob.inputs, raw):
                scratch[s.offset : s.offset + s.byte_size] = a.tobytes()
            t = time.perf_counter()
            rt.npu_model_run(blob.command_stream, blob.weights, scratch, fast)
            host_s = time.perf_counter() - t
            st = rt.npu_model_stats()
            lsb, differing = [], []
            for s, w in zip(blob.outputs, want):
                dtype = np.dtype(str(s.dtype).removeprefix("torch."))
                got = np.frombuffer(scratch, dtype, s.numel, s.offset)
                w = w.reshape(-1)
                if w.dtype.itemsize == got.dtype.itemsize:
                    w = w.view(got.dtype)  # TOSA's signed tensor for an unsigned IO entry
                d = np.abs(got.astype(np.int64) - w.astype(np.int64))
                lsb.append(int(d.max()) if d.size else 0)
                differing.append(int((d > 0).sum()))
            untraced = []
            found = streams(blob.command_stream, len(blob.weights), untraced)
            weights = {(o, n) for k, o, n in found if k == "weights"}
            bad = [(o, n, why) for o, n in sorted(weights) if (why := _mlw_mismatch(blob, o, n))]
            delegates.append(
                {
                    "lsb": lsb,
                    "differing": differing,
                    "aliased_ofm_ops": st["aliased_ofm_ops"],
                    "ops": st["ops"],
                    "macs": st["macs"],
                    "host_s": host_s,
                    "weight_streams": len(weights),
                    "weight_streams_differing": bad,
                    "untraced_streams": untraced,
                }
            )
            out = [npu_to_logical(w, s) for s, w in zip(blob.outputs, want)]
            return tuple(out)

    def _mlw_mismatch(blob, off, n):
        stream = blob.weights[off : off + n]
        try:
            ours = rt.mlw_decode(stream)
        except ValueError as e:
            return f"ours: {e}"
        try:
            theirs = np.asarray(mlw_codec.decode(bytearray(stream)), np.int16)
        except Exception as e:  # noqa: BLE001 - recorded, the comparison goes on
            return f"mlw_codec: {type(e).__name__}: {e}"
        if not np.array_equal(ours, theirs):
            return f"{len(ours)} vs {len(theirs)} weights, first values {ours[:4]} {theirs[:4]}"
        return ""

    gen = torch.Generator().manual_seed(seed)
    Both(_module(edge)).run(*[torch.randn(t.shape, generator=gen) for t in m.example_inputs])
    return {
        "model": model_spec,
        "target": target,
        "ok": True,
        "compile_s": round(compile_s, 1),
        "tosa_optimize": spec.tosa_optimize,
        "delegates": len(delegates),
        "outputs": sum(len(d["lsb"]) for d in delegates),
        "worst_lsb": max((x for d in delegates for x in d["lsb"]), default=0),
        "differing": sum(x for d in delegates for x in d["differing"]),
        "aliased_ofm_ops": sum(d["aliased_ofm_ops"] for d in delegates),
        "ops": sum(d["ops"] for d in delegates),
        "macs": sum(d["macs"] for d in delegates),
        "host_s": round(sum(d["host_s"] for d in delegates), 3),
        "weight_streams": sum(d["weight_streams"] for d in delegates),
        "weight_streams_differing": sum(len(d["weight_streams_differing"]) for d in delegates),
        "untraced_streams": sum(len(d["untraced_streams"]) for d in delegates),
        "per_delegate": delegates,
    }


def _child(model_spec, target, queue, fn="compile_one"):
    try:
        queue.put(globals()[fn](model_spec, target))
    except BaseException as e:
        traceback.print_exc()
        # The exception's first line: torch's last traceback line is often only advice.
        first = f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"
        queue.put({"model": model_spec, "target": target, "ok": False, "why": first[:300]})


def run(model_spec, target, timeout, fn="compile_one", start="fork"):
    ctx = mp.get_context(start)
    q = ctx.Queue()
    p = ctx.Process(target=_child, args=(model_spec, target, q, fn))
    t0 = time.time()
    p.start()
    # Read before joining: a child blocks on exit until its queued result is read.
    while True:
        try:
            r = q.get(timeout=2)
            p.join(60)
            return r
        except queue.Empty:
            if not p.is_alive():
                break
            if time.time() - t0 > timeout:
                p.kill()
                return {
                    "model": model_spec,
                    "target": target,
                    "ok": False,
                    "why": f"timed out after {timeout} s",
                }
    return {
        "model": model_spec,
        "target": target,
        "ok": False,
        "why": f"process died (exit {p.exitcode}) after {time.time() - t0:.0f} s",
    }


def _npu_cell(model, target, npu_rows) -> str:
    if target not in NPU_MODEL_TARGETS:
        return "n/a (U85 not modelled)"
    r = next((x for x in npu_rows if x["model"] == model and x["target"] == target), None)
    if r is None:
        return "not run"
    if not r["ok"]:
        return "failed (below)"
    return f"{r['worst_lsb']} LSB"


# A row's ``tosa_optimize`` (rows measured before the TOSA rewrites existed carry none).
REWRITES = {True: "on", False: "off", None: "before the rewrites"}


def npu_markdown(npu_rows) -> str:
    out = [
        "| model | target | delegates | outputs | NPU model vs TOSA (LSB) | elements differing | "
        "weight streams = `mlw_codec.decode` | NPU kernels | MACs | NPU model host s | "
        "TOSA rewrites |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for model in ZOO:
        for target in NPU_MODEL_TARGETS:
            r = next((x for x in npu_rows if x["model"] == model and x["target"] == target), None)
            if r is None:
                out.append(f"| {model} | {target} | not run |" + " |" * 8)
            elif not r["ok"]:
                out.append(f"| {model} | {target} | failed: {r['why']} |" + " |" * 8)
            else:
                ok = r["weight_streams"] - r["weight_streams_differing"]
                out.append(
                    f"| {model} | {target} | {r['delegates']} | {r['outputs']} | "
                    f"{r['worst_lsb']} | {r['differing']} | {ok}/{r['weight_streams']} | "
                    f"{r['ops']:,} | {r['macs'] / 1e6:,.0f} M | {r['host_s']:.2f} | "
                    f"{REWRITES.get(r.get('tosa_optimize'))} |"
                )
    return "\n".join(out)


def markdown(rows, npu_rows=()) -> str:
    out = [
        "| model | target | partitions | NPU op share | Vela NPU cycles | data-movement cycles | "
        "unmapped cycles | SRAM KiB | .pte bytes | compile s | float boundary tensors | "
        "numerics (worst delegate, delegates within 1 LSB) | NPU model vs TOSA (LSB) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        npu = _npu_cell(r["model"], r["target"], npu_rows)
        if not r["ok"]:
            out.append(
                f"| {r['model']} | {r['target']} | failed: {r['why']} |" + " |" * 9 + f" {npu} |"
            )
            continue
        cyc = f"{r['npu_cycles']:,.0f}" if r["npu_cycles"] else "-"
        moved = r.get("data_movement_cycles")
        moved = "not measured" if moved is None else f"{moved:,.0f}"
        unmapped = r.get("unmapped_cycle_share")
        unmapped = "not measured" if unmapped is None else f"{100 * unmapped:.2f}%"
        out.append(
            f"| {r['model']} | {r['target']} | {r['partitions']} | "
            f"{100 * r['npu_op_share']:.1f}% | "
            f"{cyc} | {moved} | {unmapped} | {r['sram_kib']:,.1f} | "
            f"{r['pte_bytes']:,} ({r.get('pte_kind', '+TOSA')}) | "
            f"{r['compile_s']} | "
            f"{r['float_boundary']} | {r['worst_lsb']} LSB, "
            f"{r['delegates_within_1lsb']}/{r['partitions']} | {npu} |"
        )
    out += [
        "",
        "Data-movement cycles: the NPU cycles of transposes, reshapes, slices, concats, pads "
        "and rescale-only ops (`ethosu-ng report`). Unmapped cycles: the share of Vela's NPU "
        "cycles the per-module profile could not give an `nn.Module` (goal 0%, at most 1%: "
        "`tests/zoo/test_zoo.py`, `-m slow`).",
        "",
        "`(firmware)`: the .pte as flashed; `(+TOSA)`: measured with the TOSA graphs embedded for "
        "the numerics check (rows from a run before the script subtracted them).",
        "",
        "Numerics: the numerics column compares with the eager quantized model, which computes in "
        "float32; float32 rounds a few values that lie within ~1e-5 LSB of a .5 boundary the wrong "
        "way and deep partitions amplify that (deit_tiny: <= 1 LSB per block when split per "
        "block on U55, 16 LSB over 12 blocks in one partition). Against the same quantized graph "
        "evaluated in float64 (`ethosu_ng.numerics.op_numerics.check_ops`) the TOSA graphs are "
        "within 1 LSB (mobilevit_s: 0 LSB on 60 of 61 delegates; tests/zoo/).",
        "",
        "mobilevit_s and swin_tiny for ethos-u55-128 are one partition with no CPU compute "
        "because of `passes/slice_on_merged_axis.py` (upstream's Vela compile crashes on both "
        "for U55; docs/benchmarks.md).",
        "",
        "## NPU model vs TOSA",
        "",
        "Generated by `python bench/zoo_table.py --npu-model` (the same check is "
        "`tests/zoo/test_npu_model_zoo.py`, `-m slow`). Per model and target, compiled "
        "with `embed_tosa=True`: at every delegate the same integer inputs (one random input "
        "batch, seed 0) go to the delegate's TOSA graph on the TOSA reference model and to Vela's "
        "command stream on the NPU model (runtime/ethosu_ng/npu_model, docs/npu-model.md); the "
        "column is the largest difference over all delegate outputs, in integer steps. Every "
        "weight stream the kernels read is also decoded by the model's decoder and by Vela's "
        "`mlw_codec.decode`. The `ethos-u55-128` rows of the table above show the same LSB "
        "figure; ethos-u85-256 is not modelled. NPU model host s: the model's own time for one "
        "inference (all delegates, no .pte runtime), one core of a shared machine.",
        "",
        npu_markdown(npu_rows),
    ]
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--models", nargs="*", default=ZOO)
    ap.add_argument("--targets", nargs="*", default=TARGETS)
    ap.add_argument("--timeout", type=int, default=2400)
    ap.add_argument("--out", default=os.path.join(HERE, "..", "docs", "zoo.md"))
    ap.add_argument("--render", action="store_true", help="only rewrite the .md from the .json")
    ap.add_argument(
        "--npu-model",
        action="store_true",
        help="compare the NPU model with TOSA (targets default to "
        + " ".join(NPU_MODEL_TARGETS)
        + ")",
    )
    args = ap.parse_args()
    json_path = os.path.splitext(args.out)[0] + ".json"
    rows = json.loads(Path(json_path).read_text()) if os.path.exists(json_path) else []
    if args.render:
        write_md(args.out, rows)
        return
    if args.npu_model:
        targets = args.targets if args.targets != TARGETS else NPU_MODEL_TARGETS
        for model in args.models:
            for target in targets:
                # spawn: the child must not inherit a process in which torch has run.
                r = run(model, target, args.timeout, fn="npu_model_one", start="spawn")
                print(json.dumps({k: v for k, v in r.items() if k != "per_delegate"}), flush=True)
                npu = _npu_rows(args.out)
                npu = [x for x in npu if not (x["model"] == model and x["target"] == target)]
                Path(_npu_json(args.out)).write_text(json.dumps(npu + [r], indent=1))
                write_md(args.out, rows)
        return
    for model in args.models:
        for target in args.targets:
            r = run(model, target, args.timeout)
            print(json.dumps(r), flush=True)
            rows = [x for x in rows if not (x["model"] == model and x["target"] == target)] + [r]
            Path(json_path).write_text(json.dumps(rows, indent=1))
            write_md(args.out, rows)


def _npu_json(md_path) -> str:
    return os.path.splitext(md_path)[0] + "_npu_model.json"


def _npu_rows(md_path) -> list:
    p = _npu_json(md_path)
    return json.loads(Path(p).read_text()) if os.path.exists(p) else []


def write_md(path, rows):
    order = {m: i for i, m in enumerate(ZOO)}
    rows = sorted(rows, key=lambda r: (order.get(r["model"], len(ZOO)), r["target"]))
    with open(path, "w") as f:
        f.write(
            "# Model zoo\n\nGenerated by `python bench/zoo_table.py` "
            f"({platform.machine()}, {os.cpu_count()} cores, shared with other jobs while "
            "measuring; random weights, 2 random calibration batches; numerics: each delegate's "
            "TOSA graph on the "
            "TOSA reference model vs the eager quantized model on the same inputs). Compiled with "
            "the TOSA rewrites on and `tosa_optimize_verify=True`: while compiling, every "
            "partition's rewritten TOSA graph is run against upstream's on the reference model "
            "and must agree bit for bit.\n\n"
        )
        f.write(markdown(rows, _npu_rows(path)) + "\n")


if __name__ == "__main__":
    main()
