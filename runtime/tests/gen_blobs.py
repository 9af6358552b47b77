# SPDX-License-Identifier: BSD-3-Clause
"""The blob test vectors both readers are checked against (docs/blob-format.md, format v2).

Usage: gen_blobs.py OUT_DIR. Writes, with the Python writer (ethosu_ng/blob.py), valid blobs and
invalid blobs (each breaks one rule of the doc's validation table) and OUT_DIR/manifest.txt, one
line per vector or constant (space-separated):

    const dtype CODE ELEM_SIZE NAME       a dtype code of blob.py (DTYPE_CODES)
    const section KIND NAME               a section kind of blob.py (SECTION_NAMES)
    const NAME VALUE                      max_rank, region_scratch, header_size, ...
    ok FILE MISALIGN DESCRIPTION...       valid; both readers decode exactly DESCRIPTION
    bad FILE MISALIGN RULE ERROR READERS [SECTION]
                                          invalid: RULE (the doc's id) is the first rule broken;
                                          the C++ reader returns Error::ERROR; READERS is
                                          "both" or "cpp" (a rule Python cannot check, such
                                          as the base address: Python must accept the bytes);
                                          SECTION, for a checksum rule: the part both readers
                                          name ("blob section 'SECTION'")

MISALIGN: bytes the C++ test adds to a 16-aligned base before parsing. DESCRIPTION is
``describe()``: every decoded field, section sizes and FNV-1a hashes. Each invalid blob but the
checksum vectors has its checksums rewritten after the patch (``write_checksums``), so it breaks
the rule it aims at and no checksum. CMake runs this for the
C++ test (runtime/tests/test_blob.cpp); tests/test_blob.py imports it and runs it for the Python
reader, so both read one set of vectors. Generating asserts that the Python reader gives every
verdict written here, and that every rule of the doc has a vector.
"""

import os
import re
import struct
import sys
from typing import Dict, List, Tuple

import torch

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, REPO)

from ethosu_ng.blob import (  # noqa: E402
    ALIGN,
    CODE_DTYPES,
    DTYPE_CODES,
    FLAG_HAS_TOSA,
    HEADER,
    HEADER_CRC,
    HEADER_IO_TABLE_CRC,
    HEADER_SECTION_TABLE_CRC,
    IO_ENTRY,
    MAX_RANK,
    REGION_SCRATCH,
    SECTION_ENTRY,
    SECTION_NAMES,
    VERSION,
    BlobFormatError,
    DelegateBlob,
    crc32,
    write_checksums,
)
from ethosu_ng.tensor_spec import TensorSpec  # noqa: E402

DOC = os.path.join(REPO, "docs", "blob-format.md")
# A row of the doc's validation table: | `id` | rule | `Error` | readers |
_RULE_ROW = re.compile(r"^\| `([a-z_]+)` \| .+ \| `(\w+)` \| (both|C\+\+ only) \|$")


def doc_rules(path: str = DOC) -> Dict[str, Tuple[str, str]]:
    """{rule id: (C++ Error name, "both" | "cpp")} from the validation table of the doc, in order.

    Every table row must parse: a row in another form is an error, not a rule without a vector.
    """
    with open(path, encoding="utf-8") as f:
        text = f.read()
    m = re.search(r"^## Validation rules\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    if m is None:
        raise ValueError(f"{path}: no '## Validation rules' section")
    section = m.group(1)
    rules: Dict[str, Tuple[str, str]] = {}
    for line in section.splitlines():
        if not line.startswith("| `"):
            continue
        m = _RULE_ROW.match(line)
        if m is None:
            raise ValueError(f"{path}: validation rule row not in the | `id` | ... form: {line}")
        if m.group(1) in rules:
            raise ValueError(f"{path}: rule {m.group(1)} listed twice")
        rules[m.group(1)] = (m.group(2), "both" if m.group(3) == "both" else "cpp")
    if not rules:
        raise ValueError(f"{path}: no validation rules found")
    return rules


def fnv1a(data: bytes) -> int:
    h = 0x811C9DC5
    for b in data:
        h = ((h ^ b) * 0x01000193) & 0xFFFFFFFF
    return h


def _scale_bits(scale) -> int:
    return 0 if scale is None else struct.unpack("<I", struct.pack("<f", scale))[0]


def describe(blob: DelegateBlob) -> str:
    """Every field a reader decodes, as one line; runtime/tests/test_blob.cpp prints the same."""
    tosa = "-1 0" if blob.tosa is None else f"{len(blob.tosa)} {fnv1a(blob.tosa)}"
    out = [
        f"n_in={len(blob.inputs)} n_out={len(blob.outputs)} scratch={blob.scratch_size} "
        f"fast={blob.fast_scratch_size} cmd={len(blob.command_stream)} "
        f"{fnv1a(blob.command_stream)} weights={len(blob.weights)} {fnv1a(blob.weights)} "
        f"tosa={tosa}"
    ]
    for s in blob.inputs + blob.outputs:
        rank = len(s.shape)
        shape = list(s.shape) + [0] * (MAX_RANK - rank)
        order = list(s.dim_order) + [0] * (MAX_RANK - rank)
        zp = 0 if s.zero_point is None else s.zero_point
        out.append(
            f"io={DTYPE_CODES[s.dtype]} {rank} {s.elem_size} {s.region} {s.offset} "
            f"{s.byte_size} {zp} {_scale_bits(s.scale):08x} " + " ".join(map(str, shape + order))
        )
    return " ".join(out)


def good_blobs() -> Dict[str, DelegateBlob]:
    conv = DelegateBlob(
        inputs=[TensorSpec(torch.int8, (1, 3, 8, 8), (0, 1, 2, 3), 0.01953125, -11, 1, 512)],
        outputs=[TensorSpec(torch.int8, (1, 8, 6, 10), (0, 2, 3, 1), 0.00518798828125, -128, 1, 0)],
        command_stream=bytes(range(256)) * 4 + b"\x01\x02\x03",
        weights=bytes(400),
        scratch_size=704,  # the input ends exactly at the end of scratch
        tosa=b"TOSA" * 91,
    )
    mixed = DelegateBlob(
        inputs=[
            TensorSpec(torch.uint8, (1, 4, 5, 3), (0, 2, 3, 1), 0.5, 128, 1, 0),
            TensorSpec(torch.int16, (7, 9), (1, 0), None, None, 1, 64),
            TensorSpec(torch.int32, (), (), None, None, 1, 192),
        ],
        outputs=[
            TensorSpec(torch.int32, (10,), (0,), 0.25, 3, 1, 208),
            TensorSpec(torch.uint16, (1, 2, 3, 2, 2, 2), (5, 3, 1, 0, 2, 4), None, None, 1, 256),
        ],
        command_stream=b"\xaa" * 17,
        weights=b"",
        scratch_size=400,
        fast_scratch_size=4096,
    )
    empty = DelegateBlob(
        inputs=[], outputs=[], command_stream=b"\x00" * 16, weights=b"\x11", scratch_size=0
    )
    return {"conv": conv, "mixed": mixed, "empty": empty}


class _Raw:
    """A valid blob's bytes plus its header fields and table offsets, to patch one field."""

    def __init__(self, raw: bytes):
        self.raw = raw
        h = HEADER.unpack_from(raw, 0)
        self.n_in, self.n_out, self.io_off = h[4], h[5], h[6]
        self.n_sec, self.sec_off, self.scratch, self.flags = h[8], h[9], h[10], h[12]

    def io(self, k: int) -> int:
        return self.io_off + k * IO_ENTRY.size

    def sec(self, k: int) -> int:
        return self.sec_off + k * SECTION_ENTRY.size

    def sec_fields(self, k: int):
        return SECTION_ENTRY.unpack_from(self.raw, self.sec(k))

    def patch(self, *edits) -> bytes:
        """edits: (offset, struct format, value...) tuples; the checksums are rewritten after
        them, so the result breaks a structural rule, not a checksum."""
        return write_checksums(self.patch_raw(*edits))

    def patch_raw(self, *edits) -> bytes:
        """The edits alone: every checksum stays as the valid blob had it."""
        b = bytearray(self.raw)
        for off, fmt, *vals in edits:
            struct.pack_into("<" + fmt, b, off, *vals)
        return bytes(b)

    def flip(self, off: int, mask: int = 0x01) -> bytes:
        """One byte XOR `mask`, checksums untouched: what a corrupted copy looks like."""
        return self.patch_raw((off, "B", self.raw[off] ^ mask))

    def stored_crc_wrong(self, off: int) -> bytes:
        """A checksum field flipped, the checksums covering it rewritten (the section table's,
        then the header's): only the checksum at `off` disagrees with its bytes."""
        b = bytearray(self.flip(off, 0x80))
        if off >= self.sec_off:  # a section's CRC: the table's CRC covers it
            table = b[self.sec_off : self.sec(self.n_sec)]
            struct.pack_into("<I", b, HEADER_SECTION_TABLE_CRC, crc32(bytes(table)))
        if off != HEADER_CRC:
            struct.pack_into("<I", b, HEADER_CRC, crc32(bytes(b[:HEADER_CRC])))
        return bytes(b)


def invalid_vectors(goods: Dict[str, DelegateBlob]) -> List[Tuple[str, str, bytes, int]]:
    """(rule, name, bytes, misalign): each blob breaks `rule` first (the doc's order)."""
    c = _Raw(goods["conv"].to_bytes())  # 1 input, 1 output, TOSA: 3 sections
    m = _Raw(goods["mixed"].to_bytes())  # 3 inputs, 2 outputs, no TOSA: 2 sections
    i0, o0 = c.io(0), c.io(1)  # conv input 0 (int8 [1,3,8,8]), output 0
    in0_bytes = goods["conv"].inputs[0].byte_size
    s0 = c.sec_fields(0)
    nan, inf, neg, neg0 = 0x7FC00000, 0x7F800000, 0xBF800000, 0x80000000
    io_end = c.io(c.n_in + c.n_out)
    sec_end = c.sec(c.n_sec)
    payload = {  # conv's sections: (offset, size)
        name: c.sec_fields(k)[1:3] for k, name in enumerate(("command_stream", "weights", "tosa"))
    }
    # Checksum vectors are named after the part they corrupt: the section both readers name.
    v = [
        ("base_align", "misaligned_8", c.raw, 8),
        ("base_align", "misaligned_1", c.raw, 1),
        ("truncated", "header_40", c.raw[:40], 0),
        ("truncated", "empty", b"", 0),
        ("magic", "eunh", c.patch((0, "4s", b"EUNH")), 0),
        ("version", "v1", c.patch((4, "H", 1)), 0),
        ("version", "v3", c.patch((4, "H", 3)), 0),
        ("version", "v0", c.patch((4, "H", 0)), 0),
        # Checked before any other header field: a corrupt size reads as corruption.
        ("header_checksum", "header__total_size_bit", c.flip(9), 0),
        ("header_checksum", "header__reserved_byte", c.flip(52), 0),
        ("header_checksum", "header__stored", c.stored_crc_wrong(HEADER_CRC), 0),
        ("header_size", "48", c.patch((6, "H", 48)), 0),
        ("io_entry_size", "32", c.patch((20, "H", 32)), 0),
        ("total_size", "buffer_short", c.raw[:-16], 0),
        ("total_size", "buffer_long", c.raw + bytes(16), 0),
        (
            "total_size_align",
            "plus_4",
            _Raw(c.raw + bytes(4)).patch((8, "I", len(c.raw) + 4)),
            0,
        ),
        ("flags", "bit_1", c.patch((36, "I", c.flags | 2)), 0),
        ("header_reserved", "last_byte", c.patch((HEADER_CRC - 1, "B", 1)), 0),
        ("io_table_offset", "128", c.patch((16, "I", 128)), 0),
        ("io_table_offset", "72", c.patch((16, "I", 72)), 0),
        ("io_table_range", "n_in_4000", c.patch((12, "H", c.n_in + 4000)), 0),
        # Checked before the entries' rules: a flipped dtype reads as corruption.
        ("io_table_checksum", "io_table__input_0_dtype", c.flip(i0, 0x08), 0),
        ("io_table_checksum", "io_table__output_0_scale", c.flip(o0 + 16), 0),
        ("io_table_checksum", "io_table__stored", c.stored_crc_wrong(HEADER_IO_TABLE_CRC), 0),
        ("section_table_align", "plus_8", c.patch((24, "I", c.sec_off + 8)), 0),
        ("section_table_order", "in_io_table", c.patch((24, "I", io_end - 16)), 0),
        ("section_table_range", "n_sec_500", c.patch((22, "H", 500)), 0),
        ("section_table_range", "past_end", c.patch((24, "I", 0x7FFFFFF0)), 0),
        ("section_table_checksum", "section_table__weights_size", c.flip(c.sec(1) + 8), 0),
        ("section_table_checksum", "section_table__kind", c.flip(c.sec(2), 0x04), 0),
        (
            "section_table_checksum",
            "section_table__stored",
            c.stored_crc_wrong(HEADER_SECTION_TABLE_CRC),
            0,
        ),
        ("dtype", "9", c.patch((i0, "B", 9)), 0),
        ("dtype", "output_0", c.patch((o0, "B", 0)), 0),
        ("rank", "7", c.patch((i0 + 1, "B", 7)), 0),
        ("elem_size", "2_for_int8", c.patch((i0 + 2, "B", 2)), 0),
        ("dim_order", "repeated", c.patch((i0 + 44, "B", 1)), 0),
        ("dim_order", "out_of_rank", c.patch((i0 + 47, "B", 4)), 0),
        ("zero_dim", "first", c.patch((i0 + 20, "I", 0), (i0 + 8, "I", 0)), 0),
        # A product past 2^32 before the zero: the zero still decides, in both readers.
        (
            "zero_dim",
            "after_huge",
            c.patch((i0 + 20, "4I", 65536, 65536, 0, 1), (i0 + 8, "I", 0)),
            0,
        ),
        ("byte_size", "1", c.patch((i0 + 8, "I", 1)), 0),
        # numel * elem_size = 2^32 wraps to 0 in 32 bits: must not pass as 0 bytes.
        (
            "byte_size",
            "wraps_32",
            c.patch((i0 + 20, "4I", 65536, 65536, 1, 1), (i0 + 8, "I", 0)),
            0,
        ),
        ("region", "2", c.patch((i0 + 3, "B", 2)), 0),
        ("region", "0", c.patch((i0 + 3, "B", 0)), 0),
        ("scratch_range", "one_past", c.patch((i0 + 4, "I", c.scratch - in0_bytes + 1)), 0),
        ("scratch_range", "wraps_32", c.patch((i0 + 4, "I", 0xFFFFFFF0)), 0),
        ("scale", "nan", c.patch((i0 + 16, "I", nan)), 0),
        ("scale", "inf", c.patch((i0 + 16, "I", inf)), 0),
        ("scale", "negative", c.patch((i0 + 16, "I", neg)), 0),
        ("scale", "minus_zero", c.patch((i0 + 16, "I", neg0)), 0),
        ("zero_point", "no_scale", c.patch((i0 + 16, "I", 0)), 0),
        ("zero_point", "int16_plain", m.patch((m.io(1) + 12, "i", 5)), 0),
        ("io_unused", "shape_slot_4", c.patch((i0 + 20 + 16, "I", 1)), 0),
        ("io_unused", "order_slot_5", c.patch((i0 + 49, "B", 1)), 0),
        ("io_unused", "scalar_shape", m.patch((m.io(2) + 20, "I", 1)), 0),
        ("io_reserved", "last_byte", c.patch((i0 + 63, "B", 1)), 0),
        ("section_kind", "7", c.patch((c.sec(0), "I", 7)), 0),
        ("section_kind", "0", c.patch((c.sec(0), "I", 0)), 0),
        ("section_duplicate", "command_stream", c.patch((c.sec(1), "I", s0[0])), 0),
        ("section_align", "plus_4", c.patch((c.sec(0) + 4, "I", s0[1] + 4)), 0),
        ("section_range", "size", c.patch((c.sec(0) + 8, "I", len(c.raw))), 0),
        ("section_range", "wraps_32", c.patch((c.sec(0) + 4, "2I", 0xFFFFFFF0, 0x20)), 0),
        ("section_order", "in_section_table", c.patch((c.sec(0) + 4, "I", sec_end - 16)), 0),
        ("section_order", "overlaps_previous", c.patch((c.sec(1) + 4, "I", s0[1])), 0),
        ("section_checksum", "command_stream__first_byte", c.flip(payload["command_stream"][0]), 0),
        (
            "section_checksum",
            "command_stream__last_byte",
            c.flip(sum(payload["command_stream"]) - 1, 0x80),
            0,
        ),
        ("section_checksum", "weights__byte_17", c.flip(payload["weights"][0] + 17, 0x02), 0),
        ("section_checksum", "tosa__last_byte", c.flip(sum(payload["tosa"]) - 1), 0),
        ("section_checksum", "weights__stored", c.stored_crc_wrong(c.sec(1) + 12), 0),
        ("section_checksum", "tosa__stored", c.stored_crc_wrong(c.sec(2) + 12), 0),
        # An empty section's CRC is 0: any other value is corruption.
        ("section_checksum", "weights__empty_stored", m.stored_crc_wrong(m.sec(1) + 12), 0),
        ("section_missing", "weights", m.patch((22, "H", 1)), 0),
        ("section_missing", "command_stream", m.patch((m.sec(0), "I", 3), (36, "I", 1)), 0),
        ("tosa_flag", "cleared", c.patch((36, "I", c.flags & ~FLAG_HAS_TOSA)), 0),
        ("tosa_flag", "set", m.patch((36, "I", m.flags | FLAG_HAS_TOSA)), 0),
    ]
    return v


def constants() -> List[str]:
    lines = []
    for dtype, code in sorted(DTYPE_CODES.items(), key=lambda kv: kv[1]):
        lines.append(f"const dtype {code} {dtype.itemsize} {str(dtype).replace('torch.', '')}")
    for kind, name in sorted(SECTION_NAMES.items()):
        lines.append(f"const section {kind} {name}")
    scalars = {
        "max_rank": MAX_RANK,
        "region_scratch": REGION_SCRATCH,
        "version": VERSION,
        "align": ALIGN,
        "header_size": HEADER.size,
        "io_entry_size": IO_ENTRY.size,
        "section_entry_size": SECTION_ENTRY.size,
        "flag_has_tosa": FLAG_HAS_TOSA,
        "header_crc_offset": HEADER_CRC,
        "io_table_crc_offset": HEADER_IO_TABLE_CRC,
        "section_table_crc_offset": HEADER_SECTION_TABLE_CRC,
        # The CRC-32 check value (of b"123456789"): the C++ checksum is zlib's.
        "crc32_check": crc32(b"123456789"),
    }
    lines += [f"const {k} {v}" for k, v in scalars.items()]
    return lines


def python_verdict(raw: bytes) -> str:
    """The Python reader's verdict: "ok DESCRIPTION", "bad RULE", or for a checksum rule
    "bad RULE SECTION" (the part the error names)."""
    try:
        return "ok " + describe(DelegateBlob.from_bytes(raw))
    except BlobFormatError as e:
        return f"bad {e.rule}" + (f" {e.section}" if e.section else "")


def main(out_dir: str, doc: str = DOC) -> None:
    os.makedirs(out_dir, exist_ok=True)
    rules = doc_rules(doc)
    lines = constants()
    goods = good_blobs()

    def write(name: str, raw: bytes) -> None:
        with open(os.path.join(out_dir, name), "wb") as f:
            f.write(raw)

    for name, blob in goods.items():
        raw = blob.to_bytes()
        want = describe(blob)
        assert python_verdict(raw) == "ok " + want, (name, python_verdict(raw), want)
        write(f"good_{name}.blob", raw)
        lines.append(f"ok good_{name}.blob 0 {want}")
    covered = set()
    for rule, name, raw, misalign in invalid_vectors(goods):
        if rule not in rules:
            raise AssertionError(f"vector for {rule!r}, which {doc} does not list")
        error, readers = rules[rule]
        got = python_verdict(raw)
        want = f"bad {rule}"
        if rule.endswith("_checksum"):
            want += " " + name.split("__")[0]
        # A rule only C++ can check (the base address) leaves the bytes valid for Python.
        agrees = got.startswith("ok ") if readers == "cpp" else got == want
        assert agrees, f"vector {rule}/{name}: the Python reader says {got!r}, not {want!r}"
        fname = f"bad_{rule}__{name}.blob"
        write(fname, raw)
        section = want.split(" ")[2:]
        lines.append(" ".join(["bad", fname, str(misalign), rule, error, readers, *section]))
        covered.add(rule)
    missing = [r for r in rules if r not in covered]
    if missing:
        raise AssertionError(f"rules of {doc} without a test vector: {missing}")
    assert set(CODE_DTYPES) == set(DTYPE_CODES.values())
    with open(os.path.join(out_dir, "manifest.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main(sys.argv[1])
