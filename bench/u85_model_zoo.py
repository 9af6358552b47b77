# SPDX-License-Identifier: BSD-3-Clause
"""A zoo model on one Ethos-U85 size, run on the U85 model and cross-checked against the TOSA
reference model on two input batches: the case of
``tests/test_npu_model_u85.py::test_u85_zoo_ships_bit_exact_on_the_model`` (``tests/_pte.py:
zoo_case_on_u85_model``), one process per model and size, with ``--no-verify-npu`` to leave
the compile's own check out (swin_tiny's verified compile takes about 40 minutes, the rest of
the case about 10).

    OMP_NUM_THREADS=1 python bench/u85_model_zoo.py timm:swin_tiny_patch4_window7_224 \\
        ethos-u85-128 [--no-verify-npu]

Prints one line: partitions, ops moved to the CPU, the NPU model the runtime picks, compile
seconds, and "bit-exact on 2 batches" or the first difference (exit code 1).
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))

from _pte import zoo_case_on_u85_model  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    ap.add_argument("target")
    ap.add_argument("--no-verify-npu", action="store_true")
    args = ap.parse_args()
    try:
        print(zoo_case_on_u85_model(args.model, args.target, verify_npu=not args.no_verify_npu))
    except AssertionError as e:
        print(e)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
