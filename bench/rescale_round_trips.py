# SPDX-License-Identifier: BSD-3-Clause
"""What keeping the int8 (int16 with --precision int16) round trips between residual ADDs costs
or saves, per model and target.

    OMP_NUM_THREADS=1 python bench/rescale_round_trips.py timm:convnext_atto \\
        torchvision:mobilenet_v3_small --targets ethos-u55-128 ethos-u85-256 [--precision int16]

Each model is compiled twice per target, in spawned children, with the default compile (the
verified compile's lowering check on, the NPU-model check off): once with upstream's
``FuseConsecutiveRescalesPass`` running ("fused") and once without it ("kept"), whatever
``adapters/arm.py``'s ``_round_trips_kept`` does. Prints NPU cycles,
standalone Rescale cycles, the delegates' worst lowering LSB and Vela's end-to-end NPU time.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing as mp
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))


def _compile(model: str, target: str, precision: str, kept: bool, out: str, q) -> None:
    try:
        from executorch.backends.arm._passes.fuse_consecutive_rescales_pass import (
            FuseConsecutiveRescalesPass,
        )
        from executorch.exir.pass_base import PassResult

        from ethosu_ng.adapters import arm
        from ethosu_ng.tools import cli

        if kept:
            FuseConsecutiveRescalesPass.call = lambda self, gm: PassResult(gm, False)
        else:
            arm._round_trips_kept = contextlib.nullcontext
        rc = cli.main(
            ["compile", model, "--target", target, "--precision", precision, "--no-verify-npu"]
            + ["-o", out]
        )
        if rc:
            raise RuntimeError(f"ethosu-ng compile exited {rc}")
        with open(out.replace(".pte", ".report.json")) as f:
            r = json.load(f)
        q.put(
            {
                "cycles": r["totals"]["npu_cycles"],
                "rescale": r["totals"]["data_movement_by_op"].get("Rescale", 0),
                "lsb": max(d["lowering_verification"]["max_lsb"] for d in r["delegates"]),
                "npu_ms": sum(r["end_to_end"]["npu_ms"]),
            }
        )
    except Exception as e:  # noqa: BLE001  (a failed compile is a row)
        q.put({"error": f"{type(e).__name__}: {e}"})


def main():
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("models", nargs="+")
    ap.add_argument("--targets", nargs="+", default=["ethos-u55-128", "ethos-u85-256"])
    ap.add_argument(
        "--precision", choices=["int8", "int16"], default="int8", help="activations (a16w8: int16)"
    )
    args = ap.parse_args()
    ctx = mp.get_context("spawn")
    print("| model | target | round trips | NPU cycles | Rescale cycles | lowering LSB | NPU ms |")
    print("|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as work:
        for model in args.models:
            for target in args.targets:
                for kept in (False, True):
                    q = ctx.Queue()
                    out = os.path.join(work, f"{len(os.listdir(work))}.pte")
                    job = (model, target, args.precision, kept, out)
                    p = ctx.Process(target=_compile, args=(*job, q))
                    p.start()
                    r = q.get()
                    p.join()
                    label = "kept" if kept else "fused"
                    if "error" in r:
                        print(f"| {model} | {target} | {label} | {r['error']} | | | |")
                        continue
                    print(
                        f"| {model} | {target} | {label} | {int(r['cycles']):,} | "
                        f"{int(r['rescale']):,} | {r['lsb']} | {r['npu_ms']:.2f} |",
                        flush=True,
                    )


if __name__ == "__main__":
    main()
