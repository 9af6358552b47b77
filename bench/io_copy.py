# SPDX-License-Identifier: BSD-3-Clause
"""Host timing of the delegate IO layout copy vs memcpy of the same bytes.

Builds and runs the C++ bench (runtime/bench/io_copy_bench.cpp, CMake target
ethosu_ng_io_copy_bench) twice: the portable host build (baseline x86-64, what
the extension module gets) and a -march=native build (what a target with
byte shuffles gets from the same source). Prints per case the copy time,
memcpy time and their ratio.

Usage: python bench/io_copy.py [--repeats N] [--portable-only]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from ethosu_ng.runtime.source_build import build_targets, default_build_dir  # noqa: E402

CASES = {  # bench case -> what the brief asks for
    "u8_1x3x224x224_nchw_to_nhwc": "1x3x224x224 uint8 contiguous -> NHWC",
    "u8_1x3x224x224_nhwc_to_nhwc": "1x3x224x224 uint8 NHWC -> NHWC",
    "i8_1x1000": "1x1000 int8",
    "i8_1x3x224x224_nhwc_to_nchw": "1x3x224x224 int8 NHWC -> NCHW (output direction)",
    "i8_1x32x56x56_nhwc_to_nchw": "1x32x56x56 int8 NHWC -> NCHW",
    "i16_1x16x28x28_nchw_to_nhwc": "1x16x28x28 int16 NCHW -> NHWC",
}


def run(build: Path, native: bool, repeats: int) -> list[dict]:
    args = ["-DETHOSU_NG_NATIVE=ON"] if native else []
    build_targets(build, targets=("ethosu_ng_io_copy_bench",), extra_cmake_args=args)
    out = subprocess.run(
        [str(build / "ethosu_ng_io_copy_bench"), str(repeats)],
        check=True,
        stdout=subprocess.PIPE,
        text=True,
    ).stdout
    rows = []
    for line in out.splitlines():
        kv = dict(item.split("=", 1) for item in line.split())
        rows.append(kv)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--portable-only", action="store_true")
    a = ap.parse_args()
    builds = [("portable", default_build_dir(), False)]
    if not a.portable_only:
        builds.append(("native", default_build_dir().parent / "bench-native", True))
    for label, build, native in builds:
        print(f"\n[{label} build: {build}]")
        print(f"{'case':52s} {'bytes':>7s} {'copy us':>9s} {'memcpy us':>10s} {'ratio':>7s}")
        for r in run(build, native, a.repeats):
            name = CASES.get(r["case"], r["case"])
            print(
                f"{name:52s} {int(r['bytes']):7d} {float(r['copy_ns']) / 1e3:9.2f} "
                f"{float(r['memcpy_ns']) / 1e3:10.2f} {float(r['ratio']):7.2f}"
            )


if __name__ == "__main__":
    main()
