# SPDX-License-Identifier: BSD-3-Clause
"""DelegateBlob: the bytes one Ethos-U delegate carries in the .pte (format v2).

Written by preprocess, read by tests, the CLI and (in C++) by runtime/. The layout is documented
in docs/blob-format.md; every multi-byte field is little-endian and every section starts on a
16-byte boundary so the runtime can use the blob in place. The header, the IO table, the section
table and every section payload carry a CRC-32 (zlib's), checked by both readers at load.
"""

from __future__ import annotations

import math
import struct
import zlib
from dataclasses import dataclass
from typing import Dict, List, NoReturn, Optional

import torch

from ethosu_ng.tensor_spec import BOUNDARY_DTYPES, MAX_RANK, REGION_SCRATCH, TensorSpec

# Dtype codes of the IO table. The code carries signedness because Vela's element size alone
# cannot tell int8 from uint8. runtime/ethosu_ng/blob.h holds the C++ copy; the test vectors of
# runtime/tests/gen_blobs.py carry these constants to runtime/tests/test_blob.cpp, which checks
# the two agree.
DTYPE_CODES = {
    torch.int8: 1,
    torch.uint8: 2,
    torch.int16: 3,
    torch.uint16: 4,
    torch.int32: 5,
    # One byte per element, 0 or 1: what TOSA's BOOL and Vela's bool tensors hold.
    torch.bool: 6,
}
CODE_DTYPES = {v: k for k, v in DTYPE_CODES.items()}
assert set(DTYPE_CODES) == BOUNDARY_DTYPES, "every boundary dtype needs a code, and only those"

MAGIC = b"EUNG"
VERSION = 2
ALIGN = 16

# Reserved bytes are unpacked (not skipped) because the readers require them to be zero.
HEADER = struct.Struct("<4sHHIHHIHHIIIIII12sI")  # 64 bytes
# The scale is unpacked as its bit pattern: "no scale" is exactly +0.0 (bits 0).
IO_ENTRY = struct.Struct("<BBBBIIiI6I6B14s")  # 64 bytes
SECTION_ENTRY = struct.Struct("<IIII")  # 16 bytes: kind, offset, size, CRC-32 of the payload
assert HEADER.size == 64 and IO_ENTRY.size == 64 and SECTION_ENTRY.size == 16

# Where the checksums live. The header's own CRC covers every header byte before it (reserved
# bytes and the two table CRCs included), so a flip anywhere in the blob's metadata is caught.
HEADER_IO_TABLE_CRC = 40
HEADER_SECTION_TABLE_CRC = 44
HEADER_CRC = 60
SECTION_CRC = 12  # inside a section table entry

SECTION_COMMAND_STREAM = 1
SECTION_WEIGHTS = 2
SECTION_TOSA = 3
SECTION_NAMES = {
    SECTION_COMMAND_STREAM: "command_stream",
    SECTION_WEIGHTS: "weights",
    SECTION_TOSA: "tosa",
}

FLAG_HAS_TOSA = 1


class BlobFormatError(ValueError):
    """A blob that breaks one rule of docs/blob-format.md; ``rule`` is the rule's id there, and
    for a checksum rule ``section`` names the corrupt part ("header", "io_table",
    "section_table", "command_stream", "weights", "tosa")."""

    def __init__(self, rule: str, message: str, section: Optional[str] = None) -> None:
        super().__init__(message)
        self.rule = rule
        self.section = section


def crc32(data: bytes) -> int:
    """The blob's checksum: CRC-32 (IEEE 802.3 polynomial, reflected, as zlib.crc32)."""
    return zlib.crc32(data) & 0xFFFFFFFF


def write_checksums(buf: bytes) -> bytes:
    """``buf`` with every checksum field recomputed from the bytes it covers.

    The writer seals blobs with it; tests and fuzz tooling reseal a patched blob so that it
    breaks the rule they aim at rather than a checksum. Tolerates hostile layouts: a checksum
    whose range lies outside the buffer is left as it is.
    """
    b = bytearray(buf)
    if len(b) < HEADER.size:
        return bytes(b)
    n_in, n_out, io_off = struct.unpack_from("<HHI", b, 12)
    n_sec, sec_off = struct.unpack_from("<HI", b, 22)
    # Payloads first: their CRCs sit in the section table, which the table's CRC covers; the
    # header's CRC covers the table CRCs, so it comes last.
    for k in range(n_sec):
        entry = sec_off + k * SECTION_ENTRY.size
        if entry + SECTION_ENTRY.size > len(b):
            break
        _, off, size, _ = SECTION_ENTRY.unpack_from(b, entry)
        if off + size <= len(b):
            struct.pack_into("<I", b, entry + SECTION_CRC, crc32(b[off : off + size]))
    sec_end = sec_off + n_sec * SECTION_ENTRY.size
    if sec_end <= len(b):
        struct.pack_into("<I", b, HEADER_SECTION_TABLE_CRC, crc32(b[sec_off:sec_end]))
    io_end = io_off + (n_in + n_out) * IO_ENTRY.size
    if io_end <= len(b):
        struct.pack_into("<I", b, HEADER_IO_TABLE_CRC, crc32(b[io_off:io_end]))
    struct.pack_into("<I", b, HEADER_CRC, crc32(b[:HEADER_CRC]))
    return bytes(b)


def _check_crc(rule: str, section: str, data: bytes, stored: int) -> None:
    actual = crc32(data)
    if actual != stored:
        raise BlobFormatError(
            rule,
            f"blob section '{section}': checksum 0x{actual:08x}, expected 0x{stored:08x} "
            f"(the blob changed after it was written)",
            section,
        )


def _pad(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


@dataclass
class DelegateBlob:
    inputs: List[TensorSpec]
    outputs: List[TensorSpec]
    command_stream: bytes
    weights: bytes
    scratch_size: int
    fast_scratch_size: int = 0
    tosa: Optional[bytes] = None

    # ---------------------------------------------------------------- writing
    def to_bytes(self) -> bytes:
        """The blob; a ValueError (BlobFormatError naming the rule) if it would break a rule."""
        if len(self.inputs) > 0xFFFF or len(self.outputs) > 0xFFFF:
            raise ValueError(f"too many delegate inputs/outputs for blob v{VERSION}")
        sections = [(SECTION_COMMAND_STREAM, self.command_stream), (SECTION_WEIGHTS, self.weights)]
        if self.tosa is not None:
            sections.append((SECTION_TOSA, self.tosa))
        io_off = HEADER.size
        io_bytes = b"".join(_pack_io(i, s) for i, s in enumerate(self.inputs + self.outputs))
        sec_off = _pad(io_off + len(io_bytes))
        data_off = _pad(sec_off + SECTION_ENTRY.size * len(sections))
        table, payload, cursor = [], [], data_off
        for kind, data in sections:
            table.append(SECTION_ENTRY.pack(kind, cursor, len(data), 0))
            padded = bytes(data) + b"\0" * (_pad(len(data)) - len(data))
            payload.append(padded)
            cursor += len(padded)
        total = cursor
        if total > 0xFFFFFFFF:
            raise ValueError("delegate blob exceeds 4 GiB")
        header = HEADER.pack(
            MAGIC,
            VERSION,
            HEADER.size,
            total,
            len(self.inputs),
            len(self.outputs),
            io_off,
            IO_ENTRY.size,
            len(sections),
            sec_off,
            self.scratch_size,
            self.fast_scratch_size,
            FLAG_HAS_TOSA if self.tosa is not None else 0,
            0,  # IO table CRC, section table CRC and header CRC: write_checksums
            0,
            bytes(12),
            0,
        )
        out = bytearray(header + io_bytes)
        out += b"\0" * (sec_off - len(out))
        out += b"".join(table)
        out += b"\0" * (data_off - len(out))
        out += b"".join(payload)
        assert len(out) == total
        out = write_checksums(out)
        # The writer emits only blobs the readers accept: a TensorSpec the format cannot hold
        # (a zero-size tensor, IO outside scratch, ...) fails here, at compile time, not on the
        # device.
        DelegateBlob.from_bytes(out)
        return bytes(out)

    # ---------------------------------------------------------------- reading
    @classmethod
    def from_bytes(cls, buf: bytes) -> DelegateBlob:
        """Parse and check a blob against every rule of docs/blob-format.md, in the doc's order
        (the C++ reader checks the same rules in the same order); a defect is a BlobFormatError
        naming the rule, what and where."""
        buf = bytes(buf)
        if len(buf) < HEADER.size:
            _fail("truncated", f"blob truncated: {len(buf)} bytes, header needs {HEADER.size}")
        (
            magic,
            version,
            header_size,
            total,
            n_in,
            n_out,
            io_off,
            io_entry_size,
            n_sec,
            sec_off,
            scratch,
            fast_scratch,
            flags,
            io_crc,
            sec_crc,
            reserved,
            header_crc,
        ) = HEADER.unpack_from(buf, 0)
        if magic != MAGIC:
            _fail("magic", f"bad blob magic {magic!r}, expected {MAGIC!r}")
        if version != VERSION:
            _fail(
                "version",
                f"blob format version {version}, this reader reads version {VERSION}: rebuild "
                f"the .pte with a matching ethosu_ng",
            )
        # Before any other header field is believed: a flipped bit in a size or an offset
        # must read as corruption, not as a malformed blob.
        _check_crc("header_checksum", "header", buf[:HEADER_CRC], header_crc)
        if header_size != HEADER.size:
            _fail("header_size", f"header size {header_size}, expected {HEADER.size}")
        if io_entry_size != IO_ENTRY.size:
            _fail("io_entry_size", f"IO entry size {io_entry_size}, expected {IO_ENTRY.size}")
        if total != len(buf):
            _fail("total_size", f"blob size field says {total} bytes, buffer has {len(buf)}")
        if total % ALIGN:
            _fail("total_size_align", f"blob size {total} is not a multiple of {ALIGN}")
        if flags & ~FLAG_HAS_TOSA:
            _fail("flags", f"unknown flag bits 0x{flags & ~FLAG_HAS_TOSA:x}")
        if any(reserved):
            _fail("header_reserved", "reserved header bytes are not zero")
        if io_off != HEADER.size:
            _fail("io_table_offset", f"IO table offset {io_off}, expected {HEADER.size}")
        io_end = io_off + (n_in + n_out) * IO_ENTRY.size
        _check_range("io_table_range", "IO table", io_off, io_end - io_off, total)
        _check_crc("io_table_checksum", "io_table", buf[io_off:io_end], io_crc)
        if sec_off % ALIGN:
            _fail("section_table_align", f"section table offset {sec_off} is not {ALIGN}-aligned")
        if sec_off < io_end:
            _fail("section_table_order", f"section table at {sec_off} overlaps the IO table")
        sec_end = sec_off + n_sec * SECTION_ENTRY.size
        _check_range("section_table_range", "section table", sec_off, sec_end - sec_off, total)
        _check_crc("section_table_checksum", "section_table", buf[sec_off:sec_end], sec_crc)
        specs = [
            _unpack_io(buf, io_off + k * IO_ENTRY.size, k, n_in, scratch)
            for k in range(n_in + n_out)
        ]
        sections: Dict[str, bytes] = {}
        cursor = sec_end
        for k in range(n_sec):
            kind, off, size, crc = SECTION_ENTRY.unpack_from(buf, sec_off + k * SECTION_ENTRY.size)
            name = SECTION_NAMES.get(kind)
            if name is None:
                _fail("section_kind", f"section {k}: unknown kind {kind}")
            if name in sections:
                _fail("section_duplicate", f"section {k}: duplicate {name} section")
            if off % ALIGN:
                _fail("section_align", f"section {k} ({name}): offset {off} not {ALIGN}-aligned")
            _check_range("section_range", f"section {k} ({name})", off, size, total)
            if off < cursor:
                _fail(
                    "section_order",
                    f"section {k} ({name}) at {off} overlaps the section table or the section "
                    f"before it (which end at {cursor})",
                )
            cursor = off + size
            _check_crc("section_checksum", name, buf[off : off + size], crc)
            sections[name] = buf[off : off + size]
        for required in ("command_stream", "weights"):
            if required not in sections:
                _fail("section_missing", f"blob has no {required} section")
        if bool(flags & FLAG_HAS_TOSA) != ("tosa" in sections):
            _fail("tosa_flag", "TOSA flag and TOSA section disagree")
        return cls(
            inputs=specs[:n_in],
            outputs=specs[n_in:],
            command_stream=sections["command_stream"],
            weights=sections["weights"],
            scratch_size=scratch,
            fast_scratch_size=fast_scratch,
            tosa=sections.get("tosa"),
        )


def _fail(rule: str, message: str) -> NoReturn:
    raise BlobFormatError(rule, message)


def _check_range(rule: str, what: str, off: int, size: int, total: int) -> None:
    if off + size > total:
        _fail(rule, f"{what}: bytes [{off}, {off + size}) lie outside the {total}-byte blob")


def _f32_bits(x: float) -> int:
    return struct.unpack("<I", struct.pack("<f", x))[0]


def _f32(bits: int) -> float:
    return struct.unpack("<f", struct.pack("<I", bits))[0]


def _pack_io(index: int, s: TensorSpec) -> bytes:
    if (s.scale is None) != (s.zero_point is None):
        raise ValueError(
            f"IO {index}: scale {s.scale} and zero point {s.zero_point}: give both or neither"
        )
    rank = len(s.shape)
    shape = list(s.shape) + [0] * (MAX_RANK - rank)
    order = list(s.dim_order) + [0] * (MAX_RANK - rank)
    return IO_ENTRY.pack(
        DTYPE_CODES[s.dtype],
        rank,
        s.elem_size,
        s.region,
        s.offset,
        s.byte_size,
        0 if s.zero_point is None else int(s.zero_point),
        0 if s.scale is None else _f32_bits(float(s.scale)),
        *shape,
        *order,
        bytes(14),
    )


def _unpack_io(buf: bytes, off: int, k: int, n_in: int, scratch: int) -> TensorSpec:
    name = f"input {k}" if k < n_in else f"output {k - n_in}"
    fields = IO_ENTRY.unpack_from(buf, off)
    code, rank, elem, region, offset, byte_size, zp, scale_bits = fields[:8]
    shape, order = fields[8 : 8 + MAX_RANK], fields[8 + MAX_RANK : 8 + 2 * MAX_RANK]
    reserved = fields[-1]
    if code not in CODE_DTYPES:
        _fail("dtype", f"{name}: unknown dtype code {code}")
    dtype = CODE_DTYPES[code]
    if rank > MAX_RANK:
        _fail("rank", f"{name}: rank {rank} > {MAX_RANK}")
    if elem != dtype.itemsize:
        _fail("elem_size", f"{name}: element size {elem} does not match {dtype}")
    if sorted(order[:rank]) != list(range(rank)):
        _fail("dim_order", f"{name}: dim order {order[:rank]} is not a permutation")
    if 0 in shape[:rank]:
        _fail("zero_dim", f"{name}: shape {shape[:rank]} has a zero dimension")
    numel = math.prod(shape[:rank])
    if numel * elem != byte_size:
        _fail("byte_size", f"{name}: byte size {byte_size} != {numel} elements x {elem}")
    if region != REGION_SCRATCH:
        _fail("region", f"{name}: region {region}, IO must live in region {REGION_SCRATCH}")
    if offset + byte_size > scratch:
        _fail(
            "scratch_range",
            f"{name}: [{offset}, {offset + byte_size}) outside scratch of {scratch} bytes",
        )
    scale = _f32(scale_bits)
    if scale_bits != 0 and not (math.isfinite(scale) and scale > 0):
        _fail("scale", f"{name}: scale {scale} is neither +0.0 nor finite and positive")
    if scale_bits == 0 and zp != 0:
        _fail("zero_point", f"{name}: zero point {zp} without a scale")
    if any(shape[rank:]) or any(order[rank:]):
        _fail("io_unused", f"{name}: shape/dim order slots past rank {rank} are not zero")
    if any(reserved):
        _fail("io_reserved", f"{name}: reserved bytes are not zero")
    return TensorSpec(
        dtype,
        shape[:rank],
        order[:rank],
        None if scale_bits == 0 else scale,
        None if scale_bits == 0 else zp,
        region,
        offset,
    )
