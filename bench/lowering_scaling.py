# SPDX-License-Identifier: BSD-3-Clause
"""How lowering time grows with the graph: synthetic ViT stacks of 4, 16 and 64 blocks.

Each stack (pre-norm blocks: LayerNorm, multi-head attention written with reshapes, permutes and
matrix products, an MLP with GELU; 16 tokens of 64 channels) is quantized once and lowered by
upstream's partitioner and ours in spawned children, with the stage timers of
bench/lowering_stages.py. Printed: lowering CPU seconds (ours: Vela's child processes
included), per block, and the time in upstream's TOSA passes. Linear growth is a constant
per-block column. ``--downstream-rule`` adds ours with upstream's stale-node rule in the
permute/view propagation (``adapters.arm._stale_paths_only`` off).

    OMP_NUM_THREADS=1 python bench/lowering_scaling.py --target ethos-u85-256 --blocks 4 16 64

On a shared machine CPU seconds drift by a quarter within an hour, more than the growth to
measure. ``--beside`` lowers the largest stack (ours) in one child while the smallest is lowered
again and again in another, so that both see the machine alike, and prints the ratio of their
CPU seconds per block (1.00 is linear growth):

    OMP_NUM_THREADS=1 python bench/lowering_scaling.py --blocks 16 64 --beside
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import threading

import torch
from torch import nn

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import compare_upstream  # noqa: E402  (bench/, beside this file)
import lowering_stages  # noqa: E402


class Attention(nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads, self.scale = heads, (dim // heads) ** -0.5
        self.qkv = nn.Linear(dim, dim * 3)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        b, n, c = x.shape
        qkv = self.qkv(x).reshape(b, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        a = torch.softmax((q * self.scale) @ k.transpose(-2, -1), dim=-1)
        return self.proj((a @ v).transpose(1, 2).reshape(b, n, c))


class Block(nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = Attention(dim, heads)
        self.mlp = nn.Sequential(nn.Linear(dim, dim * 2), nn.GELU(), nn.Linear(dim * 2, dim))

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


def vit_stack(blocks: int, dim: int = 64, heads: int = 4) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(*[Block(dim, heads) for _ in range(blocks)]).eval()


def _child(which, program_path, target, force_cpu, queue):
    """bench/lowering_stages.py's child; "ours, downstream rule": ours with upstream's rule
    for the permute/view propagation's stale nodes (everything downstream of a move)."""
    if which == DOWNSTREAM:
        import contextlib

        from ethosu_ng.adapters import arm

        arm._stale_paths_only = contextlib.nullcontext
        which = "ours"
    lowering_stages._child(which, program_path, target, force_cpu, queue)


DOWNSTREAM = "ours, downstream rule"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="ethos-u85-256")
    ap.add_argument("--blocks", type=int, nargs="+", default=[4, 16, 64])
    ap.add_argument("--timeout", type=float, default=3600)
    ap.add_argument(
        "--partitioners",
        nargs="+",
        choices=["upstream", "ours"],
        default=["upstream", "ours"],
        help="which partitioners lower each stack (default both)",
    )
    ap.add_argument(
        "--downstream-rule",
        action="store_true",
        help="also ours with upstream's stale rule in the permute/view propagation",
    )
    ap.add_argument(
        "--beside",
        action="store_true",
        help="ours only: the largest stack lowered beside the smallest, lowered repeatedly",
    )
    args = ap.parse_args()

    from ethosu_ng import EthosUNGCompileSpec
    from ethosu_ng.export import quantize

    x = (torch.randn(1, 16, 64),)
    if args.beside:
        return _beside(args, x)
    print(f"target {args.target}; CPU s of to_edge_transform_and_lower (ours: Vela children too)")
    print("| blocks | partitioner | lowering CPU s | per block | upstream TOSA passes s | wall s |")
    print("|---|---|---|---|---|---|")
    for n in args.blocks:
        q = quantize(vit_stack(n), x, EthosUNGCompileSpec(args.target))
        with compare_upstream.saved_program(q, x) as path:
            for who in tuple(args.partitioners) + ((DOWNSTREAM,) if args.downstream_rule else ()):
                status, r = compare_upstream.run_isolated(
                    who, path, args.target, [], args.timeout, _child
                )
                if status != "ok":
                    print(f"| {n} | {who} | {r} | | | |")
                    continue
                passes = r["stages"].get("upstream TOSA passes", 0.0)
                print(
                    f"| {n} | {who} | {r['total']:.1f} | {r['total'] / n:.2f} | "
                    f"{passes:.1f} | {r['wall']:.1f} |"
                )
                sys.stdout.flush()
    return 0


def _beside(args, x) -> int:
    from ethosu_ng import EthosUNGCompileSpec
    from ethosu_ng.export import quantize

    small, large = min(args.blocks), max(args.blocks)
    if small == large:
        raise SystemExit("--beside needs two stack sizes in --blocks (e.g. 16 64)")
    per_block = {small: [], large: []}
    print(f"target {args.target}; CPU s of to_edge_transform_and_lower (ours: Vela children too)")
    print("| blocks | lowering CPU s | per block | wall s |")
    print("|---|---|---|---|")
    with contextlib.ExitStack() as stack:
        paths = {}
        for n in (small, large):
            q = quantize(vit_stack(n), x, EthosUNGCompileSpec(args.target))
            paths[n] = stack.enter_context(compare_upstream.saved_program(q, x))

        def lower(n: int) -> None:
            status, r = compare_upstream.run_isolated(
                "ours", paths[n], args.target, [], args.timeout, _child
            )
            if status != "ok":
                print(f"| {n} | {r} | | |")
            else:
                per_block[n].append(r["total"] / n)
                print(f"| {n} | {r['total']:.1f} | {r['total'] / n:.2f} | {r['wall']:.1f} |")
            sys.stdout.flush()

        big = threading.Thread(target=lower, args=(large,))
        big.start()
        while big.is_alive():
            lower(small)
        big.join()
    if not per_block[small] or not per_block[large]:
        return 1
    mean = sum(per_block[small]) / len(per_block[small])
    print(
        f"per block: {large} blocks {per_block[large][0]:.2f}, {small} blocks {mean:.2f} "
        f"(mean of {len(per_block[small])}); ratio {per_block[large][0] / mean:.3f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
