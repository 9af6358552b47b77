"""DelegateBlob: the bytes one Ethos-U delegate carries in the .pte (format v1).

Written by preprocess, read by tests, the CLI and (in C++) by runtime/. The layout is documented
in docs/blob-format.md; every multi-byte field is little-endian and every section starts on a
16-byte boundary so the runtime can use the blob in place.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import TYPE_CHECKING, Dict, List, Optional

import torch

if TYPE_CHECKING:  # tensor_spec reads this module's constants; TensorSpec is imported where built
    from ethosu_ng.tensor_spec import TensorSpec

# Dtype codes of the IO table. The code carries signedness because Vela's element size alone
# cannot tell int8 from uint8. runtime/ethosu_ng/blob.h holds the C++ copy; tests/test_blob.py
# checks the two agree.
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

HEADER = struct.Struct("<4sHHIHHIHHIIII24x")  # 64 bytes
IO_ENTRY = struct.Struct("<BBBBIIif6I6B14x")  # 64 bytes
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
# Scale/zero point absent (plain integer tensor): stored as scale 0.0, zero point 0.
_NO_SCALE = 0.0


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
        )
        out = bytearray(header + io_bytes)
        out += b"\0" * (sec_off - len(out))
        out += b"".join(table)
        out += b"\0" * (data_off - len(out))
        out += b"".join(payload)
        assert len(out) == total
        return bytes(out)

    # ---------------------------------------------------------------- reading
    @classmethod
    def from_bytes(cls, buf: bytes) -> DelegateBlob:
        """Parse and bounds-check a blob; any defect is a ValueError saying what and where."""
        buf = bytes(buf)
        if len(buf) < HEADER.size:
            raise ValueError(f"blob truncated: {len(buf)} bytes, header needs {HEADER.size}")
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
        ) = HEADER.unpack_from(buf, 0)
        if magic != MAGIC:
            raise ValueError(f"bad blob magic {magic!r}, expected {MAGIC!r}")
        if version != VERSION:
            raise ValueError(f"unsupported blob version {version}, this reader handles {VERSION}")
        if header_size != HEADER.size or io_entry_size != IO_ENTRY.size:
            raise ValueError(f"bad header/IO entry size {header_size}/{io_entry_size}")
        if total != len(buf):
            raise ValueError(f"blob size field says {total} bytes, buffer has {len(buf)}")
        for name, off in (("io table", io_off), ("section table", sec_off)):
            if off % ALIGN:
                raise ValueError(f"{name} offset {off} is not {ALIGN}-byte aligned")
        _check_range("io table", io_off, (n_in + n_out) * IO_ENTRY.size, total)
        _check_range("section table", sec_off, n_sec * SECTION_ENTRY.size, total)
        specs = [
            _unpack_io(buf, io_off + k * IO_ENTRY.size, k, n_in, scratch)
            for k in range(n_in + n_out)
        ]
        sections: Dict[str, bytes] = {}
        for k in range(n_sec):
            kind, off, size, _ = SECTION_ENTRY.unpack_from(buf, sec_off + k * SECTION_ENTRY.size)
            name = SECTION_NAMES.get(kind)
            if name is None:
                raise ValueError(f"section {k}: unknown kind {kind}")
            if name in sections:
                raise ValueError(f"section {k}: duplicate {name} section")
            if off % ALIGN:
                raise ValueError(f"section {k} ({name}): offset {off} not {ALIGN}-byte aligned")
            _check_range(f"section {k} ({name})", off, size, total)
            sections[name] = buf[off : off + size]
        for required in ("command_stream", "weights"):
            if required not in sections:
                raise ValueError(f"blob has no {required} section")
        if bool(flags & FLAG_HAS_TOSA) != ("tosa" in sections):
            raise ValueError("TOSA flag and TOSA section disagree")
        return cls(
            inputs=specs[:n_in],
            outputs=specs[n_in:],
            command_stream=sections["command_stream"],
            weights=sections["weights"],
            scratch_size=scratch,
            fast_scratch_size=fast_scratch,
            tosa=sections.get("tosa"),
        )


def _check_range(what: str, off: int, size: int, total: int) -> None:
    if off < 0 or size < 0 or off + size > total:
        raise ValueError(f"{what}: bytes [{off}, {off + size}) lie outside the {total}-byte blob")


def _pack_io(index: int, s: TensorSpec) -> bytes:
    rank = len(s.shape)
    shape = list(s.shape) + [0] * (MAX_RANK - rank)
    order = list(s.dim_order) + [0] * (MAX_RANK - rank)
    scale = _NO_SCALE if s.scale is None else float(s.scale)
    zp = 0 if s.zero_point is None else int(s.zero_point)
    return IO_ENTRY.pack(
        DTYPE_CODES[s.dtype],
        rank,
        s.elem_size,
        s.region,
        s.offset,
        s.byte_size,
        zp,
        scale,
        *shape,
        *order,
    )


def _unpack_io(buf: bytes, off: int, k: int, n_in: int, scratch: int) -> TensorSpec:
    name = f"input {k}" if k < n_in else f"output {k - n_in}"
    from ethosu_ng.tensor_spec import TensorSpec

    code, rank, elem, region, offset, byte_size, zp, scale, *rest = IO_ENTRY.unpack_from(buf, off)
    shape, order = rest[:MAX_RANK], rest[MAX_RANK:]
    if code not in CODE_DTYPES:
        raise ValueError(f"{name}: unknown dtype code {code}")
    dtype = CODE_DTYPES[code]
    if rank > MAX_RANK:
        raise ValueError(f"{name}: rank {rank} > {MAX_RANK}")
    if elem != torch.empty((), dtype=dtype).element_size():
        raise ValueError(f"{name}: element size {elem} does not match {dtype}")
    shape, order = tuple(shape[:rank]), tuple(order[:rank])
    if sorted(order) != list(range(rank)):
        raise ValueError(f"{name}: dim order {order} is not a permutation")
    numel = 1
    for d in shape:
        numel *= d
    if numel * elem != byte_size:
        raise ValueError(f"{name}: byte size {byte_size} != {numel} elements x {elem}")
    if region == REGION_SCRATCH and offset + byte_size > scratch:
        raise ValueError(
            f"{name}: [{offset}, {offset + byte_size}) outside scratch of {scratch} bytes"
        )
    return TensorSpec(
        dtype,
        shape,
        order,
        None if scale == _NO_SCALE else scale,
        None if scale == _NO_SCALE else zp,
        region,
        offset,
    )
