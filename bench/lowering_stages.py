# SPDX-License-Identifier: BSD-3-Clause
"""Where the lowering time goes, by stage, for ethosu_ng and upstream on the same program.

Each model is quantized once and saved; each partitioner lowers it in a spawned child (as in
bench/compare_upstream.py, whose loaders and lowering functions this reuses) with timers around
the stage entry points. A stage's figure is the CPU time spent in it and not in a nested stage
(per thread: our Vela waits run in worker threads), so the rows add up to the total.

    python bench/lowering_stages.py torchvision:mobilenet_v3_small --target ethos-u55-128

Stages:
  decompositions        ExportedProgram.run_decompositions (executorch's edge generation)
  our FX passes         ethosu_ng's pre-partition passes (passes/pipeline.py)
  upstream TOSA passes  ArmPassManager.transform_to_backend_pipeline, per partition
  TOSA serialization    the rest of the TOSA lowering (node visitors, flatbuffer)
  our TOSA rewrites     ethosu_ng.tosa_optimize (between the TOSA lowering and Vela)
  Vela                  in process for upstream; for ours the CPU of the Vela child processes
  other                 everything else in to_edge_transform_and_lower (edge dialect,
                        capability checks, carving, tagging)
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from collections import defaultdict

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import compare_upstream  # noqa: E402  (bench/, beside this file)

STAGES = [
    "decompositions",
    "our FX passes",
    "upstream TOSA passes",
    "TOSA serialization",
    "our TOSA rewrites",
    "Vela",
    "other",
]


class StageTimer:
    """Exclusive thread CPU time per stage: entering a nested stage pauses the outer one."""

    def __init__(self):
        self.totals = defaultdict(float)
        self._local = threading.local()

    def wrap(self, owner, attr: str, stage: str) -> None:
        real = getattr(owner, attr)
        timer = self

        def timed(*args, **kwargs):
            stack = timer._stack()
            now = time.thread_time()
            if stack:
                outer, since = stack[-1]
                timer.totals[outer] += now - since
            stack.append([stage, now])
            try:
                return real(*args, **kwargs)
            finally:
                now = time.thread_time()
                _, since = stack.pop()
                timer.totals[stage] += now - since
                if stack:
                    stack[-1][1] = now

        setattr(owner, attr, timed)

    def _stack(self):
        if not hasattr(self._local, "stack"):
            self._local.stack = []
        return self._local.stack


def _install(timer: StageTimer, which: str) -> None:
    from executorch.backends.arm import arm_vela
    from executorch.backends.arm._passes.arm_pass_manager import ArmPassManager
    from executorch.backends.arm.tosa.backend import TOSABackend
    from torch.export import ExportedProgram

    timer.wrap(ExportedProgram, "run_decompositions", "decompositions")
    timer.wrap(ArmPassManager, "transform_to_backend_pipeline", "upstream TOSA passes")
    # The TOSA lowering of one partition; what its passes do not take is serialization.
    timer.wrap(TOSABackend, "_preprocess", "TOSA serialization")
    if which == "upstream":
        import executorch.backends.arm.ethosu.backend as ethosu_backend

        timer.wrap(ethosu_backend, "vela_compile", "Vela")
        timer.wrap(arm_vela, "vela_compile", "Vela")
    else:
        from ethosu_ng.passes.pipeline import PRE_PARTITION_PASSES
        from ethosu_ng.tosa_optimize import pipeline as tosa_optimize

        timer.wrap(tosa_optimize, "optimize", "our TOSA rewrites")
        for cls in PRE_PARTITION_PASSES:
            timer.wrap(cls, "__call__", "our FX passes")


def _child(which, program_path, target, force_cpu, queue):
    try:
        import torch

        import ethosu_ng.ops  # noqa: F401 - defines the quantized_decomposed ops the program calls
        from ethosu_ng.vela import process as vela_process

        ep = torch.export.load(program_path)
        timer = StageTimer()
        _install(timer, which)
        fn = compare_upstream.lower_upstream if which == "upstream" else compare_upstream.lower_ours
        c0, v0 = time.process_time(), vela_process.cpu_seconds()
        # compare_upstream's lowering functions time to_edge_transform_and_lower themselves.
        _, (wall, _), *_ = fn(ep, target, force_cpu)
        vela_children = vela_process.cpu_seconds() - v0
        total = time.process_time() - c0 + vela_children
        stages = dict(timer.totals)
        if which == "upstream":
            # Upstream's Vela runs in process (timed above); the Vela children here only
            # recompile its TOSA for figures, after compare_upstream's timing: left out.
            total -= vela_children
        else:
            stages["Vela"] = stages.get("Vela", 0.0) + vela_children
        stages["other"] = total - sum(v for k, v in stages.items() if k != "other")
        queue.put(("ok", {"total": total, "wall": wall, "stages": stages}))
    except BaseException as e:  # report, never hang the parent
        queue.put(("error", f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="+")
    ap.add_argument("--target", default="ethos-u55-128")
    ap.add_argument("--force-cpu", nargs="*", default=[])
    ap.add_argument("--timeout", type=float, default=3600)
    args = ap.parse_args()

    from ethosu_ng import EthosUNGCompileSpec
    from ethosu_ng.export import quantize

    print("| model | partitioner | " + " | ".join(STAGES) + " | total CPU s | wall s |")
    print("|---" * (len(STAGES) + 4) + "|")
    for spec_str in args.models:
        model, x, scenario_cpu = compare_upstream.load(spec_str)
        q = quantize(model, x, EthosUNGCompileSpec(args.target))
        with compare_upstream.saved_program(q, x) as path:
            force = list(args.force_cpu) + scenario_cpu
            results = {
                w: compare_upstream.run_isolated(w, path, args.target, force, args.timeout, _child)
                for w in ("upstream", "ours")
            }
        for who, (status, r) in results.items():
            if status != "ok":
                print(f"| {spec_str} | {who} | {r} |")
                continue
            cells = " | ".join(f"{r['stages'].get(s, 0.0):.1f}" for s in STAGES)
            print(f"| {spec_str} | {who} | {cells} | {r['total']:.1f} | {r['wall']:.1f} |")
        if all(s == "ok" for s, _ in results.values()):
            up, ours = results["upstream"][1], results["ours"][1]
            cells = " | ".join(
                f"{ours['stages'].get(s, 0.0) / up['stages'][s]:.2f}"
                if up["stages"].get(s, 0.0) > 0.05
                else "-"
                for s in STAGES
            )
            print(f"| {spec_str} | ours/upstream | {cells} | {ours['total'] / up['total']:.2f} | |")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
