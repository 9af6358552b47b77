# SPDX-License-Identifier: BSD-3-Clause
# SPDX-License-Identifier: Apache-2.0
"""Instructions per element of the runtime's NCHW -> NHWC layout copy on a Cortex-M55.

Compiles ``runtime/ethosu_ng/layout_copy.cpp`` with arm-none-eabi-g++ for ``-mcpu=cortex-m55``
(the flags of ``runtime/build_cortex_m.sh``: MinSizeRel, i.e. -Os; and -O2 beside it) and
counts the instructions its 3-channel interleave (an image input: C = 3) executes per element:
the inner loop (one element) plus the outer loop's own instructions (one pixel) / 3. A static
count of the generated code, not an emulated run: QEMU's timing says nothing about the M55
(../shared/context/firmware-notes.md, item 10); each of these instructions issues in one cycle
on the M55 except the loads (one more when the next instruction uses the result) and taken
branches (a pipeline refill), so cycles per element are somewhat above the count.

    python bench/io_copy_m55.py
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
WRAPPER = """
#include "{src}"
extern "C" void interleave3_u8(uint8_t* d, const uint8_t* s, int64_t plane, int64_t count) {{
  ethosu_ng::interleave<uint8_t, 3>(d, s, plane, count);
}}
"""
FLAGS = ["-mcpu=cortex-m55", "-mthumb", "-mfloat-abi=hard", "-std=c++17", "-fno-exceptions"]
FLAGS += ["-fno-rtti", "-ffunction-sections", "-fdata-sections"]


def function_asm(asm: str, name: str) -> list[str]:
    body = asm.split(f"\n{name}:\n", 1)[1].split(f"\t.size\t{name}", 1)[0]
    return [ln.strip() for ln in body.splitlines() if ln.strip() and not ln.strip().startswith("@")]


def loops(lines: list[str]):
    """(label, instructions from the label to the branch back to it) per loop, innermost first."""
    found = []
    for k, ln in enumerate(lines):
        if ln.endswith(":"):
            label = ln[:-1]
            for j in range(k + 1, len(lines)):
                if re.match(rf"b\w*\s+{re.escape(label)}$", lines[j]):
                    body = [x for x in lines[k + 1 : j + 1] if not x.endswith(":")]
                    # The function's exit, placed inside the loop's span, runs once.
                    body = [x for x in body if not re.match(r"(pop|add\s+sp, sp)", x)]
                    found.append((label, body))
                    break
    return sorted(found, key=lambda lp: len(lp[1]))


def count(opt: str) -> None:
    import executorch

    include = Path(executorch.__path__[0]) / "include"
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp, "wrapper.cpp")
        src.write_text(WRAPPER.format(src=REPO / "runtime" / "ethosu_ng" / "layout_copy.cpp"))
        out = Path(tmp, "wrapper.s")
        cmd = ["arm-none-eabi-g++", opt, *FLAGS, "-I", str(REPO / "runtime"), "-I", str(include)]
        cmd += ["-S", str(src), "-o", str(out)]
        subprocess.run(cmd, check=True)
        asm = out.read_text()
    lines = function_asm(asm, "interleave3_u8")
    tail = [ln.split()[1] for ln in lines if re.match(r"b\s+_Z", ln)]
    if not loops(lines) and tail:  # -Os keeps the template out of line: a tail call
        lines = function_asm(asm, tail[0])
    (inner_label, inner), (outer_label, outer) = loops(lines)[:2]
    per_pixel = len(outer) - len(inner) + 3 * len(inner)
    print(f"\n{opt}: inner loop {inner_label} (one element): {len(inner)} instructions: {inner}")
    print(
        f"{opt}: outer loop {outer_label} (one pixel, 3 elements): "
        f"{len(outer) - len(inner)} instructions of its own"
    )
    print(f"{opt}: NCHW -> NHWC, C = 3, uint8: {per_pixel / 3:.2f} instructions per element")


def main() -> None:
    version = subprocess.run(
        ["arm-none-eabi-g++", "--version"], capture_output=True, text=True
    ).stdout.splitlines()[0]
    print(f"{version}; {' '.join(FLAGS)}")
    for opt in ("-Os", "-O2"):
        count(opt)


if __name__ == "__main__":
    sys.exit(main())
