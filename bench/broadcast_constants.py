# SPDX-License-Identifier: BSD-3-Clause
"""What staging broadcast constants into the arena (``StageBroadcastConstant``) changes, per model.

    OMP_NUM_THREADS=1 python bench/broadcast_constants.py timm:repvgg_a0 timm:mixnet_s \\
        --target ethos-u55-128

Each model is quantized (two random calibration batches, seed 1) and lowered once by us with the
TOSA rewrites off, in a spawned child (``rescale_cycles._ours_tosa_child``: upstream's lowering of
each of our partitions). The parent runs our TOSA rewrites on those graphs with and without
``StageBroadcastConstant`` and compiles each with Vela under the target's default system config
and memory mode (``--memory-mode`` to change it). Prints, per model: the constants staged, Vela's
NPU cycles (``cycles_npu``), its total cycles (``cycles_total``: memory-bound time included),
flash access cycles and inference time.
"""

from __future__ import annotations

import argparse
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, ".."))


def figures(tosas, spec):
    from ethosu_ng.vela.compiler import compile_tosa

    keys = ("cycles_npu", "cycles_total", "cycles_off_chip_flash_access", "inference_time")
    out = dict.fromkeys(keys, 0.0)
    for k, tosa in enumerate(tosas):
        s = compile_tosa(tosa, spec, f"p{k}").summary
        for key in keys:
            out[key] += float(s.get(key) or 0)
    return out


def pair(a, b, key, scale=1.0, fmt="{:,.0f}"):
    return f"{fmt.format(a[key] * scale)} / {fmt.format(b[key] * scale)}"


def main():
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("models", nargs="+")
    ap.add_argument("--target", default="ethos-u55-128")
    ap.add_argument("--memory-mode", default=None)
    ap.add_argument("--timeout", type=int, default=3600)
    args = ap.parse_args()

    from compare_upstream import load, run_isolated, saved_program
    from rescale_cycles import _ours_tosa_child

    from ethosu_ng import EthosUNGCompileSpec
    from ethosu_ng.export import quantize
    from ethosu_ng.tosa_optimize.pipeline import optimize
    from ethosu_ng.tosa_optimize.rewrites.stage_broadcast_constant import StageBroadcastConstant

    spec = EthosUNGCompileSpec(args.target, memory_mode=args.memory_mode)
    print(f"{args.target}, {spec.system_config}, {spec.memory_mode}")
    print(
        "| model | constants staged | NPU cycles without / with | total cycles without / with "
        "| flash access cycles without / with | inference ms without / with |"
    )
    print("|---|---|---|---|---|---|")
    for model_spec in args.models:
        model, x, force = load(model_spec)
        g = torch.Generator().manual_seed(1)
        calib = [tuple(torch.randn(t.shape, generator=g) for t in x) for _ in range(2)]
        q = quantize(model, x, spec, calibration=calib)
        with saved_program(q, x) as path:
            status, tosas = run_isolated(
                "ours", path, args.target, force, args.timeout, _ours_tosa_child
            )
        if status != "ok":
            print(f"| {model_spec} | {tosas} | | | | |", flush=True)
            continue
        without = [optimize(t, disabled=[StageBroadcastConstant], spec=spec).tosa for t in tosas]
        results = [optimize(t, spec=spec) for t in tosas]
        staged = sum(r.applied.get("StageBroadcastConstant", 0) for r in results)
        a, b = figures(without, spec), figures([r.tosa for r in results], spec)

        print(
            f"| {model_spec} | {staged} | {pair(a, b, 'cycles_npu')} | "
            f"{pair(a, b, 'cycles_total')} | {pair(a, b, 'cycles_off_chip_flash_access')} | "
            f"{pair(a, b, 'inference_time', 1e3, '{:.2f}')} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
