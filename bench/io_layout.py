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

``--bit-exact N`` (ours only) also writes each lowered program's .pte to ``--workdir`` and,
once a model's NHWC program is lowered for a target, runs it and the NCHW one on the host
runtime (the programs' default NPU model) on N seeded random inputs, the same values in each
program's layout; the NHWC row records whether every output is bit for bit the NCHW one's
(``bit_exact``). With the transposes these rows show the done-when of NHWC program input for
the sweep's CNNs:

    OMP_NUM_THREADS=1 python bench/io_layout.py --sweep-cnns --who ethosu_ng \\
        --targets ethos-u85-256 ethos-u55-128 ethos-u65-256 --bit-exact 2 \\
        --results bench/results/io_layout.jsonl

Resumable: every finished lowering is appended to ``--results`` (one JSON line) and skipped when
the command runs again; the quantized programs are kept in ``--workdir``. ``--table`` prints the
table from ``--results`` without lowering anything.

Ours runs with the verified compile off (``verify_npu`` / ``verify_lowering`` do not change
what Vela is given unless a deviation is found; none was on these models, docs/zoo.md).
"""

from __future__ import annotations

import argparse
import functools
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


def _moves_before_compute(layers) -> int:
    """NPU cycles of the layers that move bytes (a Rescale does not count) before a delegate's
    first computing layer, whatever Vela made of them: Vela can carry out the input transpose
    as a MemoryCopy (squeezenet1_1 on the U85), which ``edge_transposes`` does not count."""
    from ethosu_ng.module_profile import RESCALE_KIND

    total = 0
    for layer in layers:
        kind = layer.get("data_movement_kind")
        if not kind:
            break
        if kind != RESCALE_KIND:
            total += int(layer.get("npu_cycles") or 0)
    return total


def _child(which, program_path, target, force_cpu, queue, pte_path=None, nchw_pte=None, n=0):
    """Lower ``program_path`` for ``target``. Ours: with ``pte_path``, also write its .pte
    there; with ``nchw_pte``, run both on ``n`` inputs (``_bit_exact``)."""
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
        metrics["in_moves"] = sum(_moves_before_compute(layers) for layers in per_delegate)
        # What those layers are (Vela's operator, the TOSA one it came from), to tell a
        # transpose Vela made a MemoryCopy of from a copy.
        metrics["in_move_layers"] = [
            [x.get("vela_op"), x.get("tosa_op"), int(x.get("npu_cycles") or 0)]
            for layers in per_delegate
            for x in layers[
                : next(
                    (k for k, y in enumerate(layers) if not y.get("data_movement_kind")),
                    len(layers),
                )
            ]
        ]
        metrics["transposes"] = moved["by_op"].get("Transpose", 0)
        ins, outs = program_dim_orders(edge)
        metrics["in_dim_order"] = [list(o) for _, o in ins]
        metrics["out_dim_order"] = [list(o) for _, o in outs]
        if pte_path:
            with open(pte_path + ".part", "wb") as f:
                f.write(edge.to_executorch().buffer)
            os.replace(pte_path + ".part", pte_path)
        if nchw_pte:
            try:
                metrics.update(_bit_exact(nchw_pte, pte_path, ep, [o for _, o in ins], n))
            except Exception as e:  # the lowering's figures stand; the run failing is a result
                first = str(e).splitlines()[0][:160] if str(e) else ""
                metrics.update(bit_exact=None, differ=[f"run: {type(e).__name__}: {first}"])
        queue.put(("ok", metrics))
    except BaseException as e:  # report, never hang the parent
        queue.put(("error", f"{type(e).__name__}: {str(e).splitlines()[0][:160] if e else ''}"))


def _bit_exact(nchw_pte, nhwc_pte, ep, nhwc_orders, n):
    """Whether the NHWC program's outputs are bit for bit the NCHW program's on ``n`` seeded
    random inputs (the calibration's distribution), each fed in its program's layout."""
    from ethosu_ng.runtime import run_pte

    if not os.path.exists(nchw_pte):
        return {"bit_exact": None, "differ": ["no NCHW program to compare with"]}
    shapes = [tuple(t.shape) for t in ep.example_inputs[0]]
    g = torch.Generator().manual_seed(11)
    t0, differ = time.time(), []
    for _ in range(n):
        xs = [torch.randn(s, generator=g) for s in shapes]
        want = run_pte(nchw_pte, xs)
        got = run_pte(
            nhwc_pte,
            [
                x.contiguous(memory_format=torch.channels_last) if tuple(o) == (0, 2, 3, 1) else x
                for x, o in zip(xs, nhwc_orders)
            ],
        )
        if len(got) != len(want):
            differ.append(f"{len(got)} outputs, NCHW {len(want)}")
        for k, (a, b) in enumerate(zip(want, got)):
            if a.dtype != b.dtype or a.shape != b.shape:
                differ.append(
                    f"output {k}: {b.dtype}{list(b.shape)}, NCHW {a.dtype}{list(a.shape)}"
                )
            elif not torch.equal(a, b):
                d = (a.double() - b.double()).abs()
                differ.append(f"output {k}: {int((d > 0).sum())} elements differ, max {d.max():g}")
    out = {"bit_exact": not differ, "bit_exact_inputs": n, "run_s": round(time.time() - t0, 1)}
    if differ:
        out["differ"] = differ[:4]
    return out


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
    if any(out_layouts):
        model = io_layout.OutputLayouts(model, out_layouts).eval()
    # The quantizer's config does not depend on the target family beyond U55's op set.
    q = quantize(model, xl, EthosUNGCompileSpec("ethos-u55-128"), calibration=calib)
    tmp = path + ".part"
    torch.export.save(torch.export.export(q, xl), tmp)
    os.replace(tmp, path)
    return path, numel


def _pte_path(workdir, model, target, layout, calibration) -> str:
    stem = re.sub(r"[^A-Za-z0-9_.-]", "_", model)
    return os.path.join(workdir, f"{stem}.{layout}.c{calibration}.{target}.pte")


def _key(model, target, who, layout) -> str:
    return f"{model}|{target}|{who}|{layout}"


def _load_results(path):
    return {_key(r["model"], r["target"], r["who"], r["layout"]): r for r in cu.read_jsonl(path)}


HEADER = (
    "| model | target | partitioner | IO | input dim order | NPU cycles | input transpose | "
    "output transpose | input transpose / element | SRAM KiB | NHWC / NCHW cycles | "
    "NHWC / NCHW SRAM | NHWC outputs = NCHW outputs |\n"
    "|---|---|---|---|---|---|---|---|---|---|---|---|---|"
)


def _row(r, base) -> str:
    head = f"| {r['model']} | {r['target']} | {r['who']} | {r['layout']} |"
    if "error" in r:
        return head + f" {r['error']} |" + " |" * 8
    ratio = " | "
    if r["layout"] == "nhwc" and base and "error" not in base:
        ratio = (
            f"{r['cycles'] / base['cycles']:.3f} | {r['sram_kib'] / base['sram_kib']:.3f}"
            if base["cycles"] and base["sram_kib"]
            else " | "
        )
    same = ""
    if "bit_exact" in r:
        n = r.get("bit_exact_inputs", 0)
        same = {True: f"bit-exact ({n} inputs)", False: "differ: ", None: "not run: "}[
            r["bit_exact"]
        ] + "; ".join(r.get("differ", []))
    per = r["in_transpose"] / r["numel"] if r.get("numel") else 0.0
    orders = r["in_dim_order"]
    order = orders[0] if len(orders) == 1 else orders
    return (
        f"{head} {order} | {r['cycles']:,.0f} | {r['in_transpose']:,} | {r['out_transpose']:,} | "
        f"{per:.2f} | {r['sram_kib']:,.1f} | {ratio} | {same} |"
    )


PAIR_HEADER = (
    "| model | target | NCHW: NPU cycles | NCHW: input transpose | NCHW: moves before compute | "
    "NHWC: NPU cycles | NHWC: input transpose | NHWC: moves before compute | "
    "NHWC: Transpose elsewhere | NHWC outputs = NCHW outputs |\n"
    "|---|---|---|---|---|---|---|---|---|---|"
)


def pair_table(done, models, targets) -> str:
    """Ours, one row per model and target: the NCHW program next to the NHWC one. Cycles are
    Vela's NPU cycles; "moves before compute" counts every layer that moves bytes ahead of a
    delegate's first computing layer (``_moves_before_compute``), "Transpose elsewhere" the
    Transpose layers inside the model (a channel shuffle, a head's reduction)."""
    lines = [PAIR_HEADER]
    for model in models:
        for target in targets:
            a = done.get(_key(model, target, "ethosu_ng", "nchw"))
            b = done.get(_key(model, target, "ethosu_ng", "nhwc"))
            if a is None or b is None:
                continue
            if "error" in a or "error" in b:
                err = a.get("error") or b.get("error")
                lines.append(f"| {model} | {target} | {err} |" + " |" * 7)
                continue
            moved = [f"{r['in_moves']:,}" if "in_moves" in r else "-" for r in (a, b)]
            same = {True: "bit-exact", False: "differ: ", None: "not run: "}[b.get("bit_exact")]
            same += "; ".join(b.get("differ", []))
            if b.get("bit_exact"):
                same += f" ({b['bit_exact_inputs']} inputs)"
            lines.append(
                f"| {model} | {target} | {a['cycles']:,.0f} | {a['in_transpose']:,} | {moved[0]} | "
                f"{b['cycles']:,.0f} | {b['in_transpose']:,} | {moved[1]} | "
                f"{b['transposes'] - b['in_transpose'] - b['out_transpose']:,} | {same} |"
            )
    return "\n".join(lines)


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
    ap.add_argument("models", nargs="*")
    ap.add_argument(
        "--sweep-cnns", action="store_true", help="add the CNNs of bench/sweep.py (CNNS)"
    )
    ap.add_argument("--targets", nargs="+", default=["ethos-u55-128"])
    ap.add_argument("--calibration", type=int, default=2)
    ap.add_argument("--timeout", type=int, default=1800)
    ap.add_argument("--who", nargs="+", default=list(WHO), choices=WHO)
    ap.add_argument(
        "--bit-exact",
        type=int,
        default=0,
        metavar="N",
        help="ours: also run the NCHW and NHWC programs on N inputs and compare them",
    )
    ap.add_argument("--results", help="JSON lines, appended per lowering; done ones are skipped")
    ap.add_argument(
        "--workdir",
        default=os.path.join(os.environ.get("TMPDIR", "/tmp"), f"io_layout_programs_{os.getuid()}"),
        help="where the quantized programs are kept between runs",
    )
    ap.add_argument("--table", action="store_true", help="print the table from --results only")
    args = ap.parse_args()
    if args.sweep_cnns:
        import sweep

        args.models += [m for m in sweep.CNNS if m not in args.models]
    if not args.models:
        ap.error("no models: name some or give --sweep-cnns")

    done = _load_results(args.results)

    def finished(model, target, who, layout) -> bool:
        r = done.get(_key(model, target, who, layout))
        if r is None or not (args.bit_exact and who == "ethosu_ng") or "error" in r:
            return r is not None
        # --bit-exact: the NCHW program's .pte is kept; the NHWC row holds the comparison.
        if layout == "nchw":
            pte = _pte_path(args.workdir, model, target, layout, args.calibration)
            return os.path.exists(pte) or finished(model, target, who, "nhwc")
        return "bit_exact" in r

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
                        if finished(model, target, who, layout):
                            continue
                        if model not in programs:
                            programs[model] = {
                                lay: _program(model, lay, args.workdir, args.calibration)
                                for lay in LAYOUTS
                            }
                        path, numel = programs[model][layout]
                        t0 = time.time()
                        child = _child
                        if args.bit_exact and who == "ethosu_ng":
                            ptes = {
                                lay: _pte_path(args.workdir, model, target, lay, args.calibration)
                                for lay in LAYOUTS
                            }
                            child = functools.partial(
                                _child,
                                pte_path=ptes[layout],
                                nchw_pte=ptes["nchw"] if layout == "nhwc" else None,
                                n=args.bit_exact,
                            )
                        status, r = cu.run_isolated(
                            who, path, target, [], args.timeout, child=child
                        )
                        rec = dict(model=model, target=target, who=who, layout=layout, numel=numel)
                        rec.update(r if status == "ok" else {"error": str(r)})
                        rec["wall_s"] = round(time.time() - t0, 1)
                        done[_key(model, target, who, layout)] = rec
                        if args.results:
                            with open(args.results, "a") as f:
                                f.write(json.dumps(rec) + "\n")
                        print(f"{model} {target} {who} {layout}: {rec['wall_s']} s", flush=True)
    if args.bit_exact:
        print(pair_table(done, args.models, args.targets))
    else:
        print(table(done, args.models, args.targets, args.who))


if __name__ == "__main__":
    main()
