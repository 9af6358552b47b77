# SPDX-License-Identifier: BSD-3-Clause
# SPDX-License-Identifier: Apache-2.0
"""Cortex-M55 firmware images (firmware/, ethosu_ng/tools/firmware.py): size and build time.

For each model (compiled for the target, uint8 in / int8 out) builds the image in an empty
cache (cold: the ExecuTorch sources unpacked, the runtime, delegate and NPU model compiled),
then the next program's image in the same tree (only its runner, .pte and kernels compile),
then each again (cached: nothing to do). Prints per image the bytes of code, read-only data,
the .pte and the pools (the memory plan's planned arenas, temp and method allocator), and the
build times in wall-clock seconds, and the code and read-only data of each part of the image
(from the linker map). QEMU run time is not a speed figure and is not printed.

Usage: python bench/firmware_image.py [--target ethos-u55-128] [--models kws cnn] [--keep DIR]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

import torch  # noqa: E402
from models import KeywordSpotter, SmallCNN  # noqa: E402

from ethosu_ng import api  # noqa: E402
from ethosu_ng.tools import firmware  # noqa: E402

MODELS = {"kws": KeywordSpotter, "cnn": SmallCNN}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="ethos-u55-128")
    ap.add_argument("--models", nargs="+", choices=sorted(MODELS), default=["kws", "cnn"])
    ap.add_argument("--keep", metavar="DIR", help="build in DIR (kept) instead of a temp dir")
    args = ap.parse_args()

    ptes = {}
    for name in args.models:
        torch.manual_seed(0)
        cls = MODELS[name]
        res = api.compile(
            cls().eval(), cls.example(), args.target, input_dtype="uint8", output_dtype="int8"
        )
        ptes[name] = res.pte

    cache = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="ethosu_ng_fw_bench_"))
    if args.keep and cache.exists() and any(cache.iterdir()):
        print(f"{cache} is not empty: the first build would not be cold", file=sys.stderr)
        return 2
    firmware.set_cache_root(cache)
    try:
        rows = []
        for k, name in enumerate(args.models):
            t0 = time.monotonic()
            image = firmware.build_image(ptes[name])
            first = time.monotonic() - t0
            t0 = time.monotonic()
            again = firmware.build_image(ptes[name])
            cached = time.monotonic() - t0
            assert again.cached, "second build of the same program did work"
            kind = "cold (empty cache)" if k == 0 else "new program, runtime cached"
            rows.append((name, image.sizes(), first, kind, cached, firmware.code_breakdown(image)))
    finally:
        if not args.keep:
            shutil.rmtree(cache, ignore_errors=True)

    print(f"target {args.target}, Cortex-M55 image (-Os, arm-none-eabi-gcc), NPU model inside")
    print(
        f"{'model':6} {'code B':>9} {'rodata B':>9} {'.pte B':>8} {'pools B':>9} "
        f"{'build s':>8}  {'kind':28} {'cached s':>8}"
    )
    for name, s, first, kind, cached, _ in rows:
        print(
            f"{name:6} {s['code']:>9,} {s['rodata']:>9,} {s['pte']:>8,} {s['pools']:>9,} "
            f"{first:>8.1f}  {kind:28} {cached:>8.2f}"
        )
    for name, *_, parts in rows:
        print(f"{name}: code / read-only data by part (linker map):")
        for part, (text, ro) in sorted(parts.items(), key=lambda kv: -kv[1][0]):
            print(f"  {part:24} {text:>9,} {ro:>9,}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
