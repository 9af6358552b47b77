# SPDX-License-Identifier: BSD-3-Clause
# SPDX-License-Identifier: Apache-2.0
"""NPU cycles and SRAM with NCHW and with NHWC program input, ours next to upstream's program.

Each model is quantized twice (the same calibration batches): once with its NCHW example input,
once with the same input laid out channels-last (what ``ethosu-ng compile --input-layout nhwc``
does). Each quantized program is saved and lowered by upstream's EthosUPartitioner and by ours,
each in a spawned child (``bench/compare_upstream.py``: a Vela crash is a result). Per run it
prints the delegates' Vela NPU cycles, the cycles of Transpose layers, Vela's SRAM and the
program input's dim order (to show the layout reached the delegate).

    python bench/io_layout.py torchvision:mobilenet_v3_small timm:mobilenetv2_100 \
        timm:resnet18 --targets ethos-u55-128 ethos-u65-256 ethos-u85-256

Ours runs with the verified compile off (``verify_npu`` / ``verify_lowering`` do not change
what Vela is given unless a deviation is found; none was on these models, docs/zoo.md).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import compare_upstream as cu  # noqa: E402


def _transpose_cycles(edge) -> int:
    gm = edge.exported_program().graph_module
    total = 0
    for name in gm._modules:
        if name.startswith("lowered_module"):
            info = getattr(gm, name).meta.get("_delegate_info_meta")
            for layer in getattr(info, "layers", None) or []:
                if layer.get("data_movement_kind") == "Transpose":
                    total += int(layer.get("npu_cycles") or 0)
    return total


def _input_dim_order(edge):
    from ethosu_ng.io_layout import program_dim_orders

    return program_dim_orders(edge)[0][0][1]


def _child(which, program_path, target, force_cpu, queue):
    try:
        import ethosu_ng.ops  # noqa: F401 - defines the quantized_decomposed ops the program calls

        ep = torch.export.load(program_path)
        if which == "upstream":
            edge, t, summaries, moved = cu.lower_upstream(ep, target, force_cpu)
            transposes = moved["by_op"].get("Transpose", 0)
        else:
            edge, t, summaries, moved = _lower_ours(ep, target)
            transposes = _transpose_cycles(edge)
        metrics = cu.measure(edge, t, summaries, moved)
        metrics["transposes"] = transposes
        metrics["dim_order"] = list(_input_dim_order(edge))
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
    gm = edge.exported_program().graph_module
    infos = [
        getattr(gm, n).meta["_delegate_info_meta"]
        for n in gm._modules
        if n.startswith("lowered_module")
    ]
    moved = module_profile.data_movement(layer for i in infos for layer in (i.layers or []))
    return edge, t, [i.vela_summary for i in infos], moved


def main():
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("models", nargs="+")
    ap.add_argument("--targets", nargs="+", default=["ethos-u55-128"])
    ap.add_argument("--calibration", type=int, default=2)
    ap.add_argument("--timeout", type=int, default=1800)
    ap.add_argument("--who", nargs="+", default=["upstream", "ethosu_ng"])
    args = ap.parse_args()

    from ethosu_ng import EthosUNGCompileSpec
    from ethosu_ng.export import quantize

    print(f"torch {torch.__version__}; {os.cpu_count()} cores\n")
    print(
        "| model | target | partitioner | input | input dim order | NPU cycles | "
        "Transpose NPU cycles | SRAM KiB | NHWC / NCHW cycles | NHWC / NCHW SRAM |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    workdir = tempfile.mkdtemp(prefix="io_layout_")
    for spec_str in args.models:
        model, x, _ = cu.load(spec_str)
        g = torch.Generator().manual_seed(1)
        calib = [
            tuple(torch.randn(t.shape, generator=g) for t in x) for _ in range(args.calibration)
        ]
        paths = {}
        for layout in ("nchw", "nhwc"):
            fmt = torch.channels_last if layout == "nhwc" else torch.contiguous_format
            xl = tuple(t.contiguous(memory_format=fmt) for t in x)
            cl = [tuple(t.contiguous(memory_format=fmt) for t in b) for b in calib]
            # The quantizer's config does not depend on the target family beyond U55's op set.
            q = quantize(model, xl, EthosUNGCompileSpec("ethos-u55-128"), calibration=cl)
            paths[layout] = os.path.join(workdir, f"{len(os.listdir(workdir))}.pt2")
            torch.export.save(torch.export.export(q, xl), paths[layout])
        for target in args.targets:
            for who in args.who:
                runs = {}
                for layout, path in paths.items():
                    status, r = cu.run_isolated(who, path, target, [], args.timeout, child=_child)
                    runs[layout] = r if status == "ok" else str(r)
                for layout, r in runs.items():
                    base = runs["nchw"]
                    if isinstance(r, str):
                        print(f"| {spec_str} | {target} | {who} | {layout} | {r} | | | | | |")
                        continue
                    ratio = ""
                    if layout == "nhwc" and isinstance(base, dict):
                        ratio = (
                            f"{r['cycles'] / base['cycles']:.3f} | "
                            f"{r['sram_kib'] / base['sram_kib']:.3f}"
                        )
                    else:
                        ratio = " | "
                    print(
                        f"| {spec_str} | {target} | {who} | {layout} | {r['dim_order']} | "
                        f"{r['cycles']:,.0f} | {r['transposes']:,} | {r['sram_kib']:,.1f} | "
                        f"{ratio} |",
                        flush=True,
                    )


if __name__ == "__main__":
    main()
