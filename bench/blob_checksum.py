# SPDX-License-Identifier: BSD-3-Clause
"""Init cost of the blob checksums (docs/blob-format.md, "Checksums").

For every EthosUNGBackend delegate blob of a .pte:

- host, C++: ``Blob::parse`` (every rule, CRC-32 of every part included) against the CRC-32 of
  the bytes it covers alone (runtime/bench/blob_checksum_bench.cpp, CMake target
  ethosu_ng_blob_bench, portable host build), and a byte-at-a-time table CRC for comparison
  with the slice-by-4 one the runtime uses;
- host, Python: ``DelegateBlob.from_bytes`` and zlib.crc32 over the same bytes;
- Cortex-M55, estimated: the instructions of the runtime's CRC word loop as arm-none-eabi-gcc
  compiles it for the firmware library (MinSizeRel, runtime/build_cortex_m.sh), one cycle
  each, plus 0 to 2 cycles per taken branch, data and tables in zero-wait-state memory (TCM or
  SRAM); weights read from slower flash cost what that flash's bandwidth allows.

Usage: python bench/blob_checksum.py MODEL.pte [--repeats N] [--mhz 400 160]
       (e.g. ethosu-ng compile timm:resnet18 --target ethos-u55-128 -o /tmp/r18.pte first)
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from ethosu_ng.adapters.exir import pte_delegate_payloads  # noqa: E402
from ethosu_ng.blob import HEADER, HEADER_CRC, IO_ENTRY, SECTION_ENTRY, DelegateBlob  # noqa: E402
from ethosu_ng.compile_spec import BACKEND_ID  # noqa: E402
from ethosu_ng.runtime.source_build import build_targets, default_build_dir  # noqa: E402

M55_LIB = REPO / "build" / "cortex-m" / "cortex-m55" / "libethosu_ng_delegate.a"


def checksummed(raw: bytes) -> list[bytes]:
    """The parts the readers checksum: header, IO table, section table, payloads."""
    h = HEADER.unpack_from(raw, 0)
    n_io, io_off, n_sec, sec_off = h[4] + h[5], h[6], h[8], h[9]
    parts = [raw[:HEADER_CRC], raw[io_off : io_off + n_io * IO_ENTRY.size]]
    parts.append(raw[sec_off : sec_off + n_sec * SECTION_ENTRY.size])
    for k in range(n_sec):
        _, off, size, _ = SECTION_ENTRY.unpack_from(raw, sec_off + k * SECTION_ENTRY.size)
        parts.append(raw[off : off + size])
    return parts


def best_s(f, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        f()
        best = min(best, time.perf_counter() - t0)
    return best


def cpp_figures(raw: bytes, repeats: int) -> dict:
    build = default_build_dir()
    build_targets(build, targets=("ethosu_ng_blob_bench",))
    with tempfile.NamedTemporaryFile(suffix=".blob") as f:
        f.write(raw)
        f.flush()
        out = subprocess.run(
            [str(build / "ethosu_ng_blob_bench"), f.name, str(repeats)],
            check=True,
            stdout=subprocess.PIPE,
            text=True,
        ).stdout
    return {k: float(v) for k, v in (kv.split("=", 1) for kv in out.split())}


def m55_word_loop() -> list[str] | None:
    """The instructions of ethosu_ng::crc32's 4-byte loop in the Cortex-M55 firmware library:
    from the post-incremented word load to the branch back, plus the loop control at that
    branch's target; None without the library or objdump."""
    objdump = shutil.which("arm-none-eabi-objdump")
    if objdump is None or not M55_LIB.exists():
        return None
    dis = subprocess.run(
        [objdump, "-d", "-C", "--no-show-raw-insn", str(M55_LIB)],
        check=True,
        stdout=subprocess.PIPE,
        text=True,
    ).stdout
    m = re.search(r"<ethosu_ng::crc32\(.*?>:\n(.*?)\n\n", dis, re.S)
    if m is None:
        return None
    insns = []  # (address, mnemonic, operands)
    for line in m.group(1).splitlines():
        f = re.match(r"\s*([0-9a-f]+):\s+(\S+)\s*(.*)", line)
        if f and not f.group(2).startswith("."):
            insns.append((int(f.group(1), 16), f.group(2), f.group(3)))
    addr = {a: i for i, (a, _, _) in enumerate(insns)}
    start = next(
        (i for i, (_, op, args) in enumerate(insns) if op.startswith("ldr") and "], #4" in args),
        None,
    )
    if start is None:
        return None
    body = []
    for i in range(start, len(insns)):
        body.append(insns[i])
        if insns[i][1] in ("b.n", "b.w", "b"):
            target = int(insns[i][2].split()[0], 16)
            break
    else:
        return None
    # Loop control at the branch target, up to the conditional branch back into the body.
    for j in range(addr.get(target, len(insns)), len(insns)):
        body.append(insns[j])
        if insns[j][1].startswith(("b", "le", "cb")) and insns[j][1] not in ("bic", "bic.w"):
            break
    return [f"{op} {args}".strip() for _, op, args in body]


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("pte", type=Path)
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--mhz", type=float, nargs="+", default=[400.0, 160.0])
    a = ap.parse_args()
    blobs = [d for b, d in pte_delegate_payloads(a.pte.read_bytes()) if b == BACKEND_ID]
    if not blobs:
        sys.exit(f"{a.pte}: no {BACKEND_ID} delegate")
    loop = m55_word_loop()
    print(f"{a.pte}: {len(blobs)} delegate blob(s)")
    for k, raw in enumerate(blobs):
        blob = DelegateBlob.from_bytes(raw)
        parts = checksummed(raw)
        covered = sum(map(len, parts))
        print(
            f"\n[delegate {k}] {len(raw)} B: command stream {len(blob.command_stream)} B, "
            f"weights {len(blob.weights)} B, tosa {len(blob.tosa or b'')} B; "
            f"checksummed {covered} B"
        )
        c = cpp_figures(raw, a.repeats)
        mb = covered / 1e6
        print(
            f"  host C++  Blob::parse          {c['parse_ns'] / 1e3:10.1f} us"
            f"  (structural rules {c['structural_ns'] / 1e3:.1f} us)"
        )
        print(
            f"  host C++  CRC-32 slice-by-4    {c['crc_ns'] / 1e3:10.1f} us"
            f"  {covered / c['crc_ns']:.2f} GB/s"
        )
        print(
            f"  host C++  CRC-32 byte table    {c['bytewise_crc_ns'] / 1e3:10.1f} us"
            f"  {covered / c['bytewise_crc_ns']:.2f} GB/s"
        )
        py_parse = best_s(lambda raw=raw: DelegateBlob.from_bytes(raw), a.repeats)
        py_crc = best_s(lambda parts=parts: [zlib.crc32(p) for p in parts], a.repeats)
        print(f"  host Py   DelegateBlob.from_bytes {py_parse * 1e6:7.1f} us")
        print(f"  host Py   zlib.crc32             {py_crc * 1e6:10.1f} us  {mb / py_crc:.0f} MB/s")
        if loop is None:
            print("  Cortex-M55: no arm-none-eabi-objdump or no firmware library (build it with")
            print("  runtime/build_cortex_m.sh cortex-m55): no estimate")
            continue
        branches = sum(1 for ins in loop if ins.split()[0] in ("b.n", "b.w", "b", "bne.n", "bne"))
        lo, hi = len(loop) / 4, (len(loop) + 2 * branches) / 4
        print(
            f"  Cortex-M55 (estimate): word loop {len(loop)} instructions, {branches} taken "
            f"branches per 4 bytes -> {lo:.1f}-{hi:.1f} cycles/byte"
        )
        for mhz in a.mhz:
            print(
                f"    at {mhz:.0f} MHz: {covered * lo / mhz / 1e3:.1f}-"
                f"{covered * hi / mhz / 1e3:.1f} ms for the {covered} checksummed bytes"
            )
    if loop is not None:
        print("\nCortex-M55 word loop (MinSizeRel):\n  " + "\n  ".join(loop))


if __name__ == "__main__":
    main()
