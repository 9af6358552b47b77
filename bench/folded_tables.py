# SPDX-License-Identifier: BSD-3-Clause
"""SQNR against float of the eager quantized model, with the values a model computes without its
inputs folded to constants before annotation (``passes/fold_input_independent.py``) and without
(computed by quantized ops at every inference), on the same calibration and test batches.

    python bench/folded_tables.py                      # the synthetic blocks of the test
    python bench/folded_tables.py timm:edgenext_xx_small@64 timm:swinv2_cr_tiny_ns_224@224

A model spec is ``timm:<name>@<image size>`` (random weights, ``pretrained=False``).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

import ethosu_ng.quantizer as quantizer
from ethosu_ng import EthosUNGCompileSpec
from ethosu_ng.export import quantize

ROOT = Path(__file__).resolve().parent.parent


def sqnr(want: torch.Tensor, got: torch.Tensor) -> float:
    return float(10 * torch.log10(want.pow(2).mean() / (want - got).pow(2).mean()))


def models(specs):
    if not specs:
        sys.path.insert(0, str(ROOT / "tests"))
        from test_fold_input_independent import KINDS, Block

        for kind in KINDS:
            torch.manual_seed(0)
            yield f"block:{kind}", Block(kind, "add", 16, 16).eval(), (1, 16, 16)
        return
    import timm

    for spec in specs:
        name, size = spec.split(":", 1)[1].split("@")
        torch.manual_seed(0)
        kwargs = {"img_size": int(size)} if "swin" in name else {}
        m = timm.create_model(name, pretrained=False, **kwargs).eval()
        yield spec, m, (1, 3, int(size), int(size))


def measure(model, shape, args):
    """SQNR computed and folded, values folded, seconds to quantize with the fold."""

    def batch(seed):
        return (torch.randn(shape, generator=torch.Generator().manual_seed(seed)),)

    calibration = [batch(k) for k in range(1, 1 + args.calibration)]
    test = [batch(1000 + k) for k in range(args.test)]
    with torch.no_grad():
        want = torch.cat([model(*b) for b in test])
    fold = quantizer.fold_input_independent
    counted = []

    def counting(gm):
        counted.append(fold(gm))
        return counted[-1]

    row = {}
    try:
        for on in (False, True):
            quantizer.fold_input_independent = counting if on else (lambda gm: 0)
            t0 = time.time()
            q = quantize(model, batch(0), EthosUNGCompileSpec(args.target), calibration=calibration)
            seconds = time.time() - t0
            with torch.no_grad():
                row[on] = sqnr(want, torch.cat([q(*b) for b in test]))
    finally:
        quantizer.fold_input_independent = fold
    return row[False], row[True], sum(counted), seconds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="*")
    ap.add_argument("--target", default="ethos-u85-256")
    ap.add_argument("--calibration", type=int, default=8)
    ap.add_argument("--test", type=int, default=8)
    args = ap.parse_args()
    print("| model | folded values | SQNR computed dB | SQNR folded dB | quantize s (folded) |")
    print("|---|---|---|---|---|")
    for spec, model, shape in models(args.models):
        computed, folded, count, seconds = measure(model, shape, args)
        print(f"| {spec} | {count} | {computed:.1f} | {folded:.1f} | {seconds:.1f} |", flush=True)


if __name__ == "__main__":
    main()
