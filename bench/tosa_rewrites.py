# SPDX-License-Identifier: BSD-3-Clause
"""What each TOSA rewrite does to Vela's NPU cycles, per model.

Lowers the model once with the rewrites off (keeping upstream's TOSA in each delegate), then
compiles every partition's TOSA with Vela: as upstream made it, with all rewrites, and with all
but one (so each row says what that rewrite alone is worth with the others present). Prints NPU
cycles and data-movement NPU cycles (``module_profile.data_movement``) summed over partitions.

    OMP_NUM_THREADS=1 python bench/tosa_rewrites.py scenario:reshape_attention \
        --target ethos-u85-256
"""

from __future__ import annotations

import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


def partition_tosa(model_spec: str, target: str):
    import torch
    from compare_upstream import load

    from ethosu_ng import DelegateBlob, EthosUNGCompileSpec
    from ethosu_ng.export import lower, quantize

    model, x, cpu_ops = load(model_spec)
    spec = EthosUNGCompileSpec(target, embed_tosa=True, tosa_optimize=False)
    g = torch.Generator().manual_seed(1)
    calib = [tuple(torch.randn(t.shape, generator=g) for t in x) for _ in range(2)]
    q = quantize(model, x, spec, calibration=calib)
    edge, _ = lower(q, x, spec, cpu_ops=cpu_ops)
    gm = edge.exported_program().graph_module
    return [
        DelegateBlob.from_bytes(getattr(gm, n).processed_bytes).tosa
        for n in gm._modules
        if n.startswith("lowered_module")
    ]


def vela_figures(tosas, target):
    from ethosu_ng import EthosUNGCompileSpec, module_profile
    from ethosu_ng.tosa_graph import tosa_ops
    from ethosu_ng.vela.compiler import compile_tosa

    cycles, layers = 0, []
    for k, tosa in enumerate(tosas):
        r = compile_tosa(tosa, EthosUNGCompileSpec(target), f"p{k}")
        cycles += int(float(r.summary["cycles_npu"]))
        layers += module_profile.attribute(r.layers, tosa_ops(tosa), [])
    return cycles, module_profile.data_movement(layers)


def main():
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("model")
    ap.add_argument("--target", default="ethos-u85-256")
    args = ap.parse_args()

    from ethosu_ng.tosa_optimize.pipeline import REWRITES, optimize

    tosas = partition_tosa(args.model, args.target)
    variants = [("upstream's TOSA (rewrites off)", None), ("all rewrites", ())]
    variants += [(f"all but {r.__name__}", (r,)) for r in REWRITES]
    print(f"{args.model} on {args.target}: {len(tosas)} partition(s)\n")
    print("| TOSA | Vela NPU cycles | data movement NPU cycles | by kind |")
    print("|---|---|---|---|")
    for label, disabled in variants:
        graphs = (
            tosas
            if disabled is None
            else [optimize(t, disabled=disabled, target=args.target).tosa for t in tosas]
        )
        cycles, moved = vela_figures(graphs, args.target)
        kinds = ", ".join(f"{k} {v:,}" for k, v in moved["by_op"].items())
        print(f"| {label} | {cycles:,} | {moved['npu_cycles']:,} | {kinds} |", flush=True)


if __name__ == "__main__":
    main()
