# SPDX-License-Identifier: BSD-3-Clause
"""The verified compile's two TOSA engines side by side: tosa-tools' reference model and
``numerics.tosa_fast``, per partition, on the verified compile's sample pair.

    python bench/tosa_fast.py timm:resnet18 timm:mobilenetv2_100 \
        --target ethos-u55-128 ethos-u85-256

Each model is compiled (verified compile off, TOSA embedded); every delegate's TOSA graph runs on
both engines on the mirrored pair ``verify_npu.sample_inputs`` draws, and the outputs are
compared bit for bit. Prints a markdown table: whether ``tosa_fast`` covers the graph (and if not,
why), the CPU seconds of each engine per sample (this process, one thread), and whether they
agree.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="+")
    ap.add_argument("--target", nargs="+", default=["ethos-u55-128"])
    args = ap.parse_args()

    import tosa_reference_model as refmodel

    import ethosu_ng
    from ethosu_ng.adapters import exir
    from ethosu_ng.blob import DelegateBlob
    from ethosu_ng.compiler.verify_npu import sample_inputs
    from ethosu_ng.numerics import tosa_fast

    print(
        "| model | target | partition | covered | reference s / sample | numpy s / sample | agree |"
    )
    print("|---|---|---|---|---|---|---|")
    for model in args.models:
        for target in args.target:
            r = ethosu_ng.compile(
                model, None, target, embed_tosa=True, verify_npu=False, verify_lowering=False
            )
            for k, (_, data) in enumerate(exir.pte_delegate_payloads(r.pte)):
                blob = DelegateBlob.from_bytes(data)
                covered, why = tosa_fast.covers(blob.tosa)
                shapes = [tuple(s.shape[d] for d in s.dim_order) for s in blob.inputs]
                pair = sample_inputs([s.dtype for s in blob.inputs], shapes, seed=7)
                ref_s, fast_s, agree = [], [], True
                for arrays in pair:
                    t0 = time.process_time()
                    want, status = refmodel.run(
                        blob.tosa, arrays, initialize_variable_tensor_from_numpy=True
                    )
                    ref_s.append(time.process_time() - t0)
                    if not covered or status != refmodel.GraphStatus.TOSA_VALID:
                        continue
                    t0 = time.process_time()
                    got = tosa_fast.run(blob.tosa, arrays)
                    fast_s.append(time.process_time() - t0)
                    agree &= all(
                        np.array_equal(np.asarray(a), np.asarray(b)) for a, b in zip(got, want)
                    )
                fast = f"{np.mean(fast_s):.2f}" if fast_s else "-"
                same = ("yes" if agree else "NO") if fast_s else "-"
                print(
                    f"| {model} | {target} | {k} | {'yes' if covered else 'no: ' + why} | "
                    f"{np.mean(ref_s):.2f} | {fast} | {same} |",
                    flush=True,
                )


if __name__ == "__main__":
    main()
