# SPDX-License-Identifier: BSD-3-Clause
# SPDX-License-Identifier: Apache-2.0
"""Standalone RESCALE cycles and total NPU cycles: upstream, ours without the rescale rewrites,
ours (every TOSA rewrite), per model and target.

Each model is quantized once and saved (as ``compare_upstream.py`` does); upstream lowers it in a
spawned child (its Vela figures from the TOSA it hands to Vela), ours lowers it once in another
with the TOSA rewrites off, keeping upstream's lowering of each partition; the parent then runs
our TOSA rewrites on those graphs with and without the rescale rewrites and compiles each with
Vela (what the compile pipeline does: ``tosa_optimize.optimize`` then Vela). "Rescale" is the NPU
cycles of Vela layers whose TOSA operator is a RESCALE (``module_profile.data_movement``).
Results are appended to ``--out`` (JSON lines) and a model/target already there is not run again.

    OMP_NUM_THREADS=1 python bench/rescale_cycles.py timm:poolformerv2_s12 \
        --targets ethos-u85-256 ethos-u55-128 --out bench/results/rescale_cycles.jsonl

``--precision int16`` quantizes the program a16w8 (our quantizer) and both lower that.
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
sys.path.insert(0, os.path.join(HERE, "..", "tests"))

OURS_TOSA = "ours, TOSA kept"


def _ours_tosa_child(which, program_path, target, force_cpu, queue):
    """Our lowering with the TOSA rewrites off; each partition's TOSA as upstream lowered it."""
    try:
        from executorch.exir import to_edge_transform_and_lower

        import ethosu_ng.ops  # noqa: F401 - the quantized_decomposed ops the program calls
        from ethosu_ng import DelegateBlob, EthosUNGCompileSpec, EthosUNGPartitioner

        ep = torch.export.load(program_path)
        spec = EthosUNGCompileSpec(
            target, embed_tosa=True, tosa_optimize=False, verify_lowering=False, verify_npu=False
        )
        edge = to_edge_transform_and_lower(
            ep, partitioner=[EthosUNGPartitioner(spec, cpu_ops=force_cpu)]
        )
        gm = edge.exported_program().graph_module
        tosas = [
            DelegateBlob.from_bytes(getattr(gm, n).processed_bytes).tosa
            for n in gm._modules
            if n.startswith("lowered_module")
        ]
        queue.put(("ok", tosas))
    except BaseException as e:  # report, never hang the parent
        queue.put(
            ("error", f"{type(e).__name__}: {str(e).splitlines()[0][:160] if e.args else ''}")
        )


def vela_cycles(tosas, target):
    """(total NPU cycles, standalone RESCALE NPU cycles, standalone RESCALE layers)."""
    from ethosu_ng import EthosUNGCompileSpec, module_profile
    from ethosu_ng.tosa_graph import tosa_ops
    from ethosu_ng.vela.compiler import compile_tosa

    total, layers = 0, []
    for k, tosa in enumerate(tosas):
        r = compile_tosa(tosa, EthosUNGCompileSpec(target), f"p{k}")
        total += int(float(r.summary["cycles_npu"]))
        layers += module_profile.attribute(r.layers, tosa_ops(tosa), [])
    rescale = [x for x in layers if x.get("data_movement_kind") == module_profile.RESCALE_KIND]
    return total, sum(int(x.get("npu_cycles") or 0) for x in rescale), len(rescale)


def measure(model_spec, target, calibration, timeout, keep_tosa=None, precision="int8"):
    from compare_upstream import load, run_isolated

    from ethosu_ng import EthosUNGCompileSpec
    from ethosu_ng.export import quantize

    model, x, force = load(model_spec)
    g = torch.Generator().manual_seed(1)
    calib = [tuple(torch.randn(t.shape, generator=g) for t in x) for _ in range(calibration)]
    activations = torch.int16 if precision == "int16" else torch.int8
    q = quantize(
        model, x, EthosUNGCompileSpec(target), calibration=calib, activation_dtype=activations
    )
    out = {"model": model_spec, "target": target, "precision": precision}
    with tempfile.TemporaryDirectory(prefix="rescale_cycles_") as tmp:
        path = os.path.join(tmp, "program.pt2")
        torch.export.save(torch.export.export(q, x), path)
        status, up = run_isolated("upstream", path, target, force, timeout)
        if status == "ok":
            rescale = up["data_movement_by_op"].get("Rescale", 0)
            out["upstream"] = {"cycles": int(up["cycles"]), "rescale": int(rescale)}
        else:
            out["upstream"] = {"error": up}
        status, tosas = run_isolated(OURS_TOSA, path, target, force, timeout, _ours_tosa_child)
    if status != "ok":
        out["error"] = tosas
        return out
    if keep_tosa:  # upstream's lowering of each partition, for looking at the graphs later
        os.makedirs(keep_tosa, exist_ok=True)
        for k, t in enumerate(tosas):
            name = f"{model_spec.replace(':', '_').replace('/', '_')}_{target}_{k}.tosa"
            with open(os.path.join(keep_tosa, name), "wb") as f:
                f.write(t)
    out.update(ours(tosas, target))
    return out


def ours(tosas, target):
    """Our figures from upstream's lowering of each partition, without and with the rescale
    rewrites; what still stands alone after them, by pattern (``rescale_report``)."""
    from ethosu_ng import EthosUNGCompileSpec
    from ethosu_ng.tosa_optimize.pipeline import RESCALE_REWRITES, optimize
    from ethosu_ng.tosa_optimize.rescale_report import standalone_rescales, summarize
    from ethosu_ng.vela.compiler import VelaError, compile_tosa

    out = {}
    for label, disabled in (("ours_no_rescale_rewrites", RESCALE_REWRITES), ("ours", ())):
        graphs = [optimize(t, disabled=disabled, target=target).tosa for t in tosas]
        try:
            cycles, rescale, n = vela_cycles(graphs, target)
        except VelaError as e:  # a graph Vela cannot compile (its last words)
            out[label] = {"error": str(e)[-120:]}
            continue
        out[label] = {"cycles": cycles, "rescale": rescale, "rescale_layers": n}
    if "error" in out["ours"]:
        return out
    left = []
    for k, g in enumerate(graphs):
        r = compile_tosa(g, EthosUNGCompileSpec(target), f"p{k}")
        left += standalone_rescales(g, r.layers, target) or []
    out["ours"]["left"] = summarize(left)
    return out


def kept_tosa(keep_tosa, model_spec, target):
    """The partitions' TOSA a run with ``--keep-tosa`` wrote, in order; [] if none."""
    prefix = f"{model_spec.replace(':', '_').replace('/', '_')}_{target}_"
    if not keep_tosa or not os.path.isdir(keep_tosa):
        return []
    names = [n for n in os.listdir(keep_tosa) if n.startswith(prefix) and n.endswith(".tosa")]
    names.sort(key=lambda n: int(n[len(prefix) : -len(".tosa")]))
    out = []
    for n in names:
        with open(os.path.join(keep_tosa, n), "rb") as f:
            out.append(f.read())
    return out


def _fmt(r, key):
    if "error" in r:
        return "fails: " + r["error"].split("Error: ")[-1][:60].replace("|", "/")
    return f"{r[key]:,}"


def table(results):
    lines = [
        "| model | target | activations | Rescale cycles upstream | ours, rescale rewrites off | "
        "ours | ours/upstream | NPU cycles upstream | ours, rescale rewrites off | ours |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        head = f"| {r['model']} | {r['target']} | {r.get('precision', 'int8')} |"
        if "error" in r:
            lines.append(f"{head} {r['error']} |" + " |" * 6)
            continue
        up, off, on = r["upstream"], r["ours_no_rescale_rewrites"], r["ours"]
        ratio = (
            f"{on['rescale'] / up['rescale']:.3f}"
            if "error" not in up and "error" not in on and up["rescale"]
            else "-"
        )
        lines.append(
            f"{head} {_fmt(up, 'rescale')} | {_fmt(off, 'rescale')} | {_fmt(on, 'rescale')} | "
            f"{ratio} | {_fmt(up, 'cycles')} | {_fmt(off, 'cycles')} | {_fmt(on, 'cycles')} |"
        )
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("models", nargs="+")
    ap.add_argument("--targets", nargs="+", default=["ethos-u85-256", "ethos-u55-128"])
    ap.add_argument("--calibration", type=int, default=2)
    ap.add_argument("--timeout", type=int, default=3600)
    ap.add_argument("--out", default=os.path.join(HERE, "results", "rescale_cycles.jsonl"))
    ap.add_argument("--keep-tosa", metavar="DIR", help="write each partition's TOSA here")
    ap.add_argument(
        "--recompute",
        action="store_true",
        help="redo our rows of the models in --out from the TOSA --keep-tosa kept (upstream's "
        "rows and the lowering are not rerun)",
    )
    ap.add_argument("--table", action="store_true", help="print the table of --out and exit")
    ap.add_argument(
        "--precision",
        choices=("int8", "int16"),
        default="int8",
        help="activations of the program both lower (int16: a16w8, our quantizer)",
    )
    args = ap.parse_args()

    done = []
    if os.path.exists(args.out):
        with open(args.out) as f:
            done = [json.loads(line) for line in f if line.strip()]
    if args.recompute:
        for r in done:
            tosas = kept_tosa(args.keep_tosa, r["model"], r["target"])
            if r["model"] in args.models and r["target"] in args.targets and tosas:
                r.update(ours(tosas, r["target"]))
                print(json.dumps(r), flush=True)
        with open(args.out, "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in done)
    elif not args.table:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        for model in args.models:
            for target in args.targets:
                if any(
                    r["model"] == model
                    and r["target"] == target
                    and r.get("precision", "int8") == args.precision
                    for r in done
                ):
                    continue
                t0 = time.time()
                r = measure(
                    model, target, args.calibration, args.timeout, args.keep_tosa, args.precision
                )
                r["seconds"] = round(time.time() - t0, 1)
                done.append(r)
                with open(args.out, "a") as f:
                    f.write(json.dumps(r) + "\n")
                print(json.dumps(r), flush=True)
    wanted = [
        r
        for r in done
        if r["model"] in args.models
        and r["target"] in args.targets
        and r.get("precision", "int8") == args.precision
    ]
    print(table(wanted))
    for r in wanted:
        for g in r.get("ours", {}).get("left", []):
            print(
                f"<!-- {r['model']} {r['target']} left: {g['npu_cycles']:,} cycles, "
                f"{g['layers']} layer(s): {g['pattern']}; {g['blocker']} -->"
            )


if __name__ == "__main__":
    main()
