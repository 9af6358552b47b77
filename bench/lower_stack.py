# SPDX-License-Identifier: BSD-3-Clause
"""Lower one synthetic ViT stack (bench/lowering_scaling.py's) with our partitioner in this
process, for an outside profiler to watch; prints the lowering's CPU seconds.

    OMP_NUM_THREADS=1 python bench/lower_stack.py 16 --target ethos-u85-256
"""

from __future__ import annotations

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import compare_upstream  # noqa: E402  (bench/, beside this file)
import lowering_scaling  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("blocks", type=int)
    ap.add_argument("--target", default="ethos-u85-256")
    args = ap.parse_args()

    from ethosu_ng import EthosUNGCompileSpec
    from ethosu_ng.export import quantize

    x = (torch.randn(1, 16, 64),)
    spec = EthosUNGCompileSpec(args.target)
    q = quantize(lowering_scaling.vit_stack(args.blocks), x, spec, calibration=[x])
    program = torch.export.export(q, x)
    _, (wall, cpu), _, _ = compare_upstream.lower_ours(program, args.target, [])
    print(f"{args.blocks} blocks: lowering CPU s {cpu:.1f} (Vela children too), wall s {wall:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
