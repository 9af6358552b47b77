# SPDX-License-Identifier: BSD-3-Clause
"""A zoo model on one Ethos-U85 size, run on the U85 model and cross-checked against the TOSA
reference model on two input batches: the steps of
``tests/test_npu_model_u85.py::test_u85_zoo_ships_bit_exact_on_the_model``, one process per
model and size, with ``--no-verify-npu`` to leave the compile's own check out (swin_tiny's
verified compile takes about 40 minutes, the rest of the case about 10).

    OMP_NUM_THREADS=1 python bench/u85_model_zoo.py timm:swin_tiny_patch4_window7_224 \\
        ethos-u85-128 [--no-verify-npu]

Prints one line: partitions, ops moved to the CPU, the NPU model the runtime picks, compile
seconds, and "bit-exact on 2 batches" or the first difference (exit code 1).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))

from _pte import CrossCheckedMethod  # noqa: E402

from ethosu_ng import EthosUNGCompileSpec  # noqa: E402
from ethosu_ng import runtime as rt  # noqa: E402
from ethosu_ng.export import lower, quantize  # noqa: E402
from ethosu_ng.tools.model_source import load_model  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    ap.add_argument("target")
    ap.add_argument("--no-verify-npu", action="store_true")
    args = ap.parse_args()
    t0 = time.time()
    m = load_model(args.model)
    g = torch.Generator().manual_seed(1)
    calib = [tuple(torch.randn(t.shape, generator=g) for t in m.example_inputs) for _ in range(2)]
    spec = EthosUNGCompileSpec(args.target, embed_tosa=True, verify_npu=not args.no_verify_npu)
    q = quantize(m.model, m.example_inputs, spec, calibration=calib)
    edge, part = lower(q, m.example_inputs, spec)
    pte = edge.to_executorch().buffer
    line = (
        f"{args.model} {args.target}: partitions {len(part.report.partitions)}, "
        f"moved {sorted(dict(part.report.compiler_fallback))}, "
        f"default npu {rt.default_npu_for(pte)}, compile {time.time() - t0:.0f} s"
    )
    unsupported = rt.model_unsupported(pte)
    if unsupported is not None:
        print(f"{line}; not run on the model: {unsupported}")
        return 1
    method = CrossCheckedMethod(pte, args.target)
    t1 = time.time()
    try:
        for k, batch in enumerate(calib):
            method.execute(list(batch), f"{args.model} {args.target} batch {k}")
    except AssertionError as e:
        print(f"{line}; DIFFERS: {str(e)[:300]}")
        return 1
    print(f"{line}; bit-exact on 2 batches ({(time.time() - t1) / 2:.1f} s per batch, both paths)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
