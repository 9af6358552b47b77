# SPDX-License-Identifier: BSD-3-Clause
"""The permute/view propagation's stale rule on real models: each partition's TOSA graph with
ours (``adapters.arm._stale_paths_only``) and with upstream's (everything downstream of a move),
byte for byte, and the CPU seconds of each lowering in this process (verification off; Vela's
child processes not counted).

    OMP_NUM_THREADS=1 python bench/stale_rule.py ethos-u85-256 timm:levit_128s timm:convnext_atto

One JSON line per model.
"""

import contextlib
import hashlib
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import compare_upstream  # noqa: E402  (bench/, beside this file)

from ethosu_ng import EthosUNGCompileSpec  # noqa: E402
from ethosu_ng.adapters import arm  # noqa: E402
from ethosu_ng.export import lower, quantize  # noqa: E402


def main() -> int:
    target = sys.argv[1]
    for name in sys.argv[2:]:
        model, x, _ = compare_upstream.load(name)
        spec = EthosUNGCompileSpec(target, verify_npu=False, verify_lowering=False)
        q = quantize(model, x, spec)
        out = {}
        real = arm.lower_to_tosa
        for mode in ("paths", "downstream"):
            got, error = [], None

            def capture(*a, real=real, got=got, **k):
                t = real(*a, **k)
                got.append(t)
                return t

            arm.lower_to_tosa = capture
            saved = arm._stale_paths_only
            if mode == "downstream":
                arm._stale_paths_only = contextlib.nullcontext
            c = time.process_time()
            try:
                lower(q, x, spec)
            except Exception as e:
                error = f"{type(e).__name__}: {e}"[:200]
            finally:
                arm.lower_to_tosa, arm._stale_paths_only = real, saved
            hashes = [hashlib.sha1(t).hexdigest()[:10] for t in got]
            out[mode] = (time.process_time() - c, hashes, error)
        # the same, and something lowered with neither raising
        ok = all(out[m][1] and not out[m][2] for m in out)
        same = ok and out["paths"][1] == out["downstream"][1]
        row = {
            "model": name,
            "target": target,
            "same_tosa": same,
            "cpu_s_paths": round(out["paths"][0], 1),
            "cpu_s_downstream": round(out["downstream"][0], 1),
            "tosa": out,
        }
        print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
