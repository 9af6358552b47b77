# SPDX-License-Identifier: BSD-3-Clause
"""Does compiling partitions with parallel Vela workers pay? Lowering wall time per worker count.

The partitioner lowers partitions to TOSA one after the other in the Python process and runs up
to ``vela_workers`` Vela child processes meanwhile. Each lowering runs in a forked child of a
quantized model (quantized once), so the counts see the same graph.

    python bench/vela_workers.py timm:mobilevit_s --target ethos-u85-256 \
        --force-cpu aten.exp.default aten.amax.default aten.sum.dim_IntList \
            aten.reciprocal.default aten._softmax.default --workers 1 2 3
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import platform
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare_upstream import load  # noqa: E402


def _child(q, x, target, force_cpu, workers, queue):
    from executorch.exir import to_edge_transform_and_lower

    from ethosu_ng import EthosUNGCompileSpec, EthosUNGPartitioner

    try:
        spec = EthosUNGCompileSpec(target, vela_workers=workers)
        part = EthosUNGPartitioner(spec, cpu_ops=force_cpu)
        ep = torch.export.export(q, x)
        t0 = time.time()
        to_edge_transform_and_lower(ep, partitioner=[part])
        queue.put((time.time() - t0, len(part.report.partitions)))
    except BaseException as e:  # report, never hang the parent
        queue.put((None, f"{type(e).__name__}: {e}"))


def main():
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("model")
    ap.add_argument("--target", default="ethos-u85-256")
    ap.add_argument("--force-cpu", nargs="*", default=[], metavar="OP")
    ap.add_argument("--workers", nargs="+", type=int, default=[1, 2])
    ap.add_argument("--repeat", type=int, default=1)
    args = ap.parse_args()

    from ethosu_ng import EthosUNGCompileSpec
    from ethosu_ng.export import quantize

    model, x, scenario_cpu = load(args.model)
    force = list(args.force_cpu) + scenario_cpu
    q = quantize(model, x, EthosUNGCompileSpec(args.target))
    print(
        f"{args.model} for {args.target}; force-cpu {force or '-'}; "
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores\n"
    )
    print("| Vela workers | partitions | lowering s |")
    print("|---|---|---|")
    ctx = mp.get_context("fork")
    for workers in args.workers:
        for _ in range(args.repeat):
            queue = ctx.Queue()
            p = ctx.Process(target=_child, args=(q, x, args.target, force, workers, queue))
            p.start()
            t, parts = queue.get()
            p.join()
            print(f"| {workers} | {parts} | {'-' if t is None else f'{t:.1f}'} |", flush=True)


if __name__ == "__main__":
    main()
