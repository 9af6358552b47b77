"""DelegateBlob: the bytes one Ethos-U delegate carries in the .pte (format v1).

Written by preprocess, read by tests, the CLI and (in C++) by runtime/. The layout is documented
in docs/blob-format.md; every multi-byte field is little-endian and every section starts on a
16-byte boundary so the runtime can use the blob in place.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass
from typing import TYPE_CHECKING, Dict, List, NoReturn, Optional

import torch

if TYPE_CHECKING:  # tensor_spec reads this module's constants; TensorSpec is imported where built
    from ethosu_ng.tensor_spec import TensorSpec

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
}
CODE_DTYPES = {v: k for k, v in DTYPE_CODES.items()}
MAX_RANK = 6  # shape and dim_order slots of an IO entry

# Vela's memory regions (the base-address index the command stream uses).
REGION_WEIGHTS = 0
REGION_SCRATCH = 1
REGION_FAST_SCRATCH = 2

MAGIC = b"EUNG"
VERSION = 1
ALIGN = 16

# Reserved bytes are unpacked (not skipped) because the readers require them to be zero.
HEADER = struct.Struct("<4sHHIHHIHHIIII24s")  # 64 bytes
# The scale is unpacked as its bit pattern: "no scale" is exactly +0.0 (bits 0).
IO_ENTRY = struct.Struct("<BBBBIIiI6I6B14s")  # 64 bytes
SECTION_ENTRY = struct.Struct("<IIII")  # 16 bytes
assert HEADER.size == 64 and IO_ENTRY.size == 64 and SECTION_ENTRY.size == 16

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
    """A blob that breaks one rule of docs/blob-format.md; ``rule`` is the rule's id there."""

    def __init__(self, rule: str, message: str) -> None:
        super().__init__(message)
        self.rule = rule


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
            raise ValueError("too many delegate inputs/outputs for blob v1")
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
            bytes(24),
        )
        out = bytearray(header + io_bytes)
        out += b"\0" * (sec_off - len(out))
        out += b"".join(table)
        out += b"\0" * (data_off - len(out))
        out += b"".join(payload)
        assert len(out) == total
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
            reserved,
        ) = HEADER.unpack_from(buf, 0)
        if magic != MAGIC:
            _fail("magic", f"bad blob magic {magic!r}, expected {MAGIC!r}")
        if version != VERSION:
            _fail("version", f"unsupported blob version {version}, this reader handles {VERSION}")
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
        if sec_off % ALIGN:
            _fail("section_table_align", f"section table offset {sec_off} is not {ALIGN}-aligned")
        if sec_off < io_end:
            _fail("section_table_order", f"section table at {sec_off} overlaps the IO table")
        sec_end = sec_off + n_sec * SECTION_ENTRY.size
        _check_range("section_table_range", "section table", sec_off, sec_end - sec_off, total)
        specs = [
            _unpack_io(buf, io_off + k * IO_ENTRY.size, k, n_in, scratch)
            for k in range(n_in + n_out)
        ]
        sections: Dict[str, bytes] = {}
        cursor = sec_end
        for k in range(n_sec):
            kind, off, size, res = SECTION_ENTRY.unpack_from(buf, sec_off + k * SECTION_ENTRY.size)
            name = SECTION_NAMES.get(kind)
            if name is None:
                _fail("section_kind", f"section {k}: unknown kind {kind}")
            if name in sections:
                _fail("section_duplicate", f"section {k}: duplicate {name} section")
            if res:
                _fail("section_reserved", f"section {k} ({name}): reserved word is {res}, not 0")
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
    from ethosu_ng.tensor_spec import TensorSpec

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
