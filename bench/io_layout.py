# SPDX-License-Identifier: BSD-3-Clause
# SPDX-License-Identifier: Apache-2.0
"""NPU cycles, IO transpose cycles and SRAM with NCHW and with NHWC program IO, ours next to
upstream's program.

Each model is quantized twice (the same calibration batches): once with its NCHW example input,
once with the input laid out channels-last and every rank-4 output asked NHWC (what
``ethosu-ng compile --input-layout nhwc --output-layout nhwc`` does). Each quantized program is
saved and lowered by upstream's EthosUPartitioner and by ours, each in a spawned child
(``bench/compare_upstream.py``: a Vela crash is a result). Per run it prints the delegates' Vela
NPU cycles, the cycles of the Transpose layers before each delegate's first computing layer
(input transpose) and after its last (output transpose, ``io_layout.edge_transposes``), those
input cycles per input element (to set against the CPU layout copy, ``bench/io_copy_m55.py``),
Vela's SRAM, and the program input's dim order (to show the layout reached the delegate).

    OMP_NUM_THREADS=1 python bench/io_layout.py torchvision:mobilenet_v3_small \\
        timm:mobilenetv2_100 timm:resnet18 timm:convnext_atto \\
        --targets ethos-u55-128 ethos-u65-256 ethos-u85-256 \\
        --results bench/results/io_layout.jsonl

Resumable: every finished lowering is appended to ``--results`` (one JSON line) and skipped when
the command runs again; the quantized programs are kept in ``--workdir``. ``--table`` prints the
table from ``--results`` without lowering anything.

Ours runs with the verified compile off (``verify_npu`` / ``verify_lowering`` do not change
what Vela is given unless a deviation is found; none was on these models, docs/zoo.md).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import compare_upstream as cu  # noqa: E402

LAYOUTS = ("nchw", "nhwc")
WHO = ("upstream", "ethosu_ng")


def _ours_layers(edge):
    """Per delegate of our lowered program: its attributed Vela layers."""
    gm = edge.exported_program().graph_module
    infos = [
        getattr(gm, n).meta["_delegate_info_meta"]
        for n in gm._modules
        if n.startswith("lowered_module")
    ]
    return [list(i.layers or []) for i in infos]


def _child(which, program_path, target, force_cpu, queue):
    try:
        import ethosu_ng.ops  # noqa: F401 - defines the quantized_decomposed ops the program calls
        from ethosu_ng import module_profile
        from ethosu_ng.io_layout import edge_transposes, program_dim_orders

        ep = torch.export.load(program_path)
        if which == "upstream":
            # compare_upstream.lower_upstream attributes each delegate's Vela layers once;
            # keep them, per delegate, for the transposes at its edges.
            per_delegate, attribute = [], module_profile.attribute

            def keep(*args, **kw):
                per_delegate.append(attribute(*args, **kw))
                return per_delegate[-1]

            module_profile.attribute = keep
            edge, t, summaries, moved = cu.lower_upstream(ep, target, force_cpu)
        else:
            edge, t, summaries, moved = _lower_ours(ep, target)
            per_delegate = _ours_layers(edge)
        metrics = cu.measure(edge, t, summaries, moved)
        edges = [edge_transposes(layers) for layers in per_delegate]
        metrics["in_transpose"] = sum(e["input"] for e in edges)
        metrics["out_transpose"] = sum(e["output"] for e in edges)
        metrics["transposes"] = moved["by_op"].get("Transpose", 0)
        ins, outs = program_dim_orders(edge)
        metrics["in_dim_order"] = [list(o) for _, o in ins]
        metrics["out_dim_order"] = [list(o) for _, o in outs]
        queue.put(("ok", metrics))
    except BaseException as e:  # report, never hang the parent
        queue.put(("error", f"{type(e).__name__}: {str(e).splitlines()[0][:160] if e else ''}"))


def _lower_ours(ep, target):
    from executorch.exir import to_edge_transform_and_lower

    from ethosu_ng import EthosUNGCompileSpec, EthosUNGPartitioner, module_profile
    from ethosu_ng.vela import process as vela_process

    spec = EthosUNGCompileSpec(target, verify_npu=False, verify_lowering=False)
    vela_process.prestart(wait=True)
    t0 = time.time()
    edge = to_edge_transform_and_lower(ep, partitioner=[EthosUNGPartitioner(spec)])
    t = (time.time() - t0, 0.0)
    layers = [layer for per in _ours_layers(edge) for layer in per]
    gm = edge.exported_program().graph_module
    summaries = [
        getattr(gm, n).meta["_delegate_info_meta"].vela_summary
        for n in gm._modules
        if n.startswith("lowered_module")
    ]
    return edge, t, summaries, module_profile.data_movement(layers)


def _program(spec_str, layout, workdir, calibration):
    """The saved quantized program of ``spec_str`` with ``layout`` IO (made once) and its input
    element count."""
    from ethosu_ng import EthosUNGCompileSpec, io_layout
    from ethosu_ng.export import quantize

    stem = re.sub(r"[^A-Za-z0-9_.-]", "_", spec_str)
    path = os.path.join(workdir, f"{stem}.{layout}.c{calibration}.pt2")
    model, x, _ = cu.load(spec_str)
    numel = sum(t.numel() for t in x if t.dim() == 4)
    if os.path.exists(path):
        return path, numel
    g = torch.Generator().manual_seed(1)
    calib = [tuple(torch.randn(t.shape, generator=g) for t in x) for _ in range(calibration)]
    asked = None if layout == "nchw" else layout
    in_layouts = io_layout.resolve(asked, [tuple(t.shape) for t in x], "input")
    out_shapes = io_layout.output_shapes(model, x)
    out_layouts = [asked if len(s) == 4 else None for s in out_shapes]
    xl = io_layout.apply_input_layouts(x, in_layouts)
    cl = [io_layout.apply_input_layouts(b, in_layouts) for b in calib]
    if any(out_layouts):
        model = io_layout.OutputLayouts(model, out_layouts).eval()
    # The quantizer's config does not depend on the target family beyond U55's op set.
    q = quantize(model, xl, EthosUNGCompileSpec("ethos-u55-128"), calibration=cl)
    tmp = path + ".part"
    torch.export.save(torch.export.export(q, xl), tmp)
    os.replace(tmp, path)
    return path, numel


def _key(model, target, who, layout) -> str:
    return f"{model}|{target}|{who}|{layout}"


def _load_results(path):
    return {_key(r["model"], r["target"], r["who"], r["layout"]): r for r in cu.read_jsonl(path)}


HEADER = (
    "| model | target | partitioner | IO | input dim order | NPU cycles | input transpose | "
    "output transpose | input transpose / element | SRAM KiB | NHWC / NCHW cycles | "
    "NHWC / NCHW SRAM |\n|---|---|---|---|---|---|---|---|---|---|---|---|"
)


def _row(r, base) -> str:
    head = f"| {r['model']} | {r['target']} | {r['who']} | {r['layout']} |"
    if "error" in r:
        return head + f" {r['error']} |" + " |" * 7
    ratio = " | "
    if r["layout"] == "nhwc" and base and "error" not in base:
        ratio = (
            f"{r['cycles'] / base['cycles']:.3f} | {r['sram_kib'] / base['sram_kib']:.3f}"
            if base["cycles"] and base["sram_kib"]
            else " | "
        )
    per = r["in_transpose"] / r["numel"] if r.get("numel") else 0.0
    orders = r["in_dim_order"]
    order = orders[0] if len(orders) == 1 else orders
    return (
        f"{head} {order} | {r['cycles']:,.0f} | {r['in_transpose']:,} | {r['out_transpose']:,} | "
        f"{per:.2f} | {r['sram_kib']:,.1f} | {ratio} |"
    )


def table(done, models, targets, who) -> str:
    lines = [HEADER]
    for model in models:
        for target in targets:
            for w in who:
                base = done.get(_key(model, target, w, "nchw"))
                for layout in LAYOUTS:
                    r = done.get(_key(model, target, w, layout))
                    if r is not None:
                        lines.append(_row(r, base))
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("models", nargs="+")
    ap.add_argument("--targets", nargs="+", default=["ethos-u55-128"])
    ap.add_argument("--calibration", type=int, default=2)
    ap.add_argument("--timeout", type=int, default=1800)
    ap.add_argument("--who", nargs="+", default=list(WHO), choices=WHO)
    ap.add_argument("--results", help="JSON lines, appended per lowering; done ones are skipped")
    ap.add_argument(
        "--workdir",
        default=os.path.join(os.environ.get("TMPDIR", "/tmp"), f"io_layout_programs_{os.getuid()}"),
        help="where the quantized programs are kept between runs",
    )
    ap.add_argument("--table", action="store_true", help="print the table from --results only")
    args = ap.parse_args()

    done = _load_results(args.results)
    if not args.table:
        os.makedirs(args.workdir, exist_ok=True)
        print(f"torch {torch.__version__}; {os.cpu_count()} cores", flush=True)
        # Target by target (the first given first), every model on it, so that a run cut
        # short has whole targets.
        programs = {}
        for target in args.targets:
            for model in args.models:
                for who in args.who:
                    for layout in LAYOUTS:
                        if _key(model, target, who, layout) in done:
                            continue
                        if model not in programs:
                            programs[model] = {
                                lay: _program(model, lay, args.workdir, args.calibration)
                                for lay in LAYOUTS
                            }
                        path, numel = programs[model][layout]
                        t0 = time.time()
                        status, r = cu.run_isolated(
                            who, path, target, [], args.timeout, child=_child
                        )
                        rec = dict(model=model, target=target, who=who, layout=layout, numel=numel)
                        rec.update(r if status == "ok" else {"error": str(r)})
                        rec["wall_s"] = round(time.time() - t0, 1)
                        done[_key(model, target, who, layout)] = rec
                        if args.results:
                            with open(args.results, "a") as f:
                                f.write(json.dumps(rec) + "\n")
                        print(f"{model} {target} {who} {layout}: {rec['wall_s']} s", flush=True)
    print(table(done, args.models, args.targets, args.who))


if __name__ == "__main__":
    main()
