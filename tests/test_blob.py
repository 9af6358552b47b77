# SPDX-License-Identifier: BSD-3-Clause
"""DelegateBlob v2 against docs/blob-format.md: the doc's tables are the layout blob.py packs,
every rule of the doc's validation table has a test vector, and the Python reader gives every
vector the verdict (valid with these fields / which rule) the manifest says. A flipped byte in
any checksummed part of a blob is a load-time error naming that part.

The vectors are runtime/tests/gen_blobs.py's, the same the C++ reader is checked against
(runtime/tests/test_blob.cpp, via ctest)."""

import re
import struct
import sys
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ethosu_ng.blob import (
    HEADER,
    HEADER_CRC,
    IO_ENTRY,
    SECTION_ENTRY,
    VERSION,
    BlobFormatError,
    DelegateBlob,
    crc32,
    write_checksums,
)
from ethosu_ng.tensor_spec import REGION_FAST_SCRATCH, TensorSpec

REPO = Path(__file__).resolve().parent.parent
DOC = REPO / "docs" / "blob-format.md"
sys.path.insert(0, str(REPO / "runtime" / "tests"))
import gen_blobs  # noqa: E402


@pytest.fixture(scope="module")
def manifest(tmp_path_factory):
    """[(kind, file bytes, fields...)] for each ok/bad line of the generated manifest."""
    out = tmp_path_factory.mktemp("blob_vectors")
    gen_blobs.main(str(out))
    rows = []
    for line in (out / "manifest.txt").read_text().splitlines():
        kind, *rest = line.split(" ", 3)
        if kind in ("ok", "bad"):
            name, misalign, tail = rest
            rows.append((kind, name, (out / name).read_bytes(), int(misalign), tail))
    return rows


# ------------------------------------------------------------------ the doc's rules
def test_doc_rule_table_parses():
    rules = gen_blobs.doc_rules(str(DOC))
    assert list(rules)[:3] == ["base_align", "truncated", "magic"]
    assert len(rules) >= 30
    errors = {error for error, _ in rules.values()}
    assert errors == {"InvalidArgument", "InvalidProgram", "DelegateInvalidCompatibility"}


def test_a_doc_row_out_of_form_is_an_error(tmp_path):
    doc = tmp_path / "doc.md"
    doc.write_text("## Validation rules\n\n| `new_rule` | something | InvalidProgram | both |\n")
    with pytest.raises(ValueError, match="new_rule"):
        gen_blobs.doc_rules(str(doc))


def test_every_doc_rule_has_a_vector(manifest):
    rules = gen_blobs.doc_rules(str(DOC))
    covered = {tail.split(" ")[0] for kind, _, _, _, tail in manifest if kind == "bad"}
    assert sorted(set(rules) - covered) == [], "rules of the doc without a test vector"
    assert sorted(covered - set(rules)) == [], "vectors for rules the doc does not list"


def test_generator_refuses_a_rule_without_a_vector(tmp_path):
    doc = tmp_path / "doc.md"
    text = DOC.read_text(encoding="utf-8")
    row = "| `new_rule` | a rule added to the doc | `InvalidProgram` | both |\n"
    doc.write_text(text.rstrip("\n") + "\n" + row, encoding="utf-8")
    with pytest.raises(AssertionError, match="new_rule"):
        gen_blobs.main(str(tmp_path / "out"), doc=str(doc))


def test_readers_report_only_doc_rules():
    """Each reader can report exactly the doc's rules (Python: those it can check)."""
    rules = gen_blobs.doc_rules(str(DOC))
    py_src = (REPO / "ethosu_ng" / "blob.py").read_text(encoding="utf-8")
    py = set(re.findall(r'(?:_fail|_check_range|_check_crc)\(\s*"([a-z_]+)"', py_src))
    assert py == {r for r, (_, readers) in rules.items() if readers == "both"}
    cpp_src = (REPO / "runtime" / "ethosu_ng" / "blob.cpp").read_text(encoding="utf-8")
    rule_ids = cpp_src.split("const char* blob_rule_id(", 1)[1].split("\n}\n", 1)[0]
    cpp = set(re.findall(r'return "([a-z_]+)";', rule_ids))
    assert cpp - {"ok", "null_buffer", "unknown"} == set(rules)


# ------------------------------------------------------------------ the vectors
def test_valid_vectors_decode_to_the_manifest_fields(manifest):
    oks = [(name, raw, tail) for kind, name, raw, _, tail in manifest if kind == "ok"]
    assert len(oks) >= 3
    for name, raw, want in oks:
        assert gen_blobs.describe(DelegateBlob.from_bytes(raw)) == want, name


def test_invalid_vectors_break_the_manifest_rule(manifest):
    bads = [(name, raw, tail.split(" ")) for kind, name, raw, _, tail in manifest if kind == "bad"]
    assert len(bads) >= 35
    for name, raw, (rule, _error, readers, *section) in bads:
        if readers == "cpp":  # the base address: the bytes themselves are valid
            DelegateBlob.from_bytes(raw)
            continue
        with pytest.raises(BlobFormatError) as e:
            DelegateBlob.from_bytes(raw)
        assert e.value.rule == rule, f"{name}: {e.value}"
        assert isinstance(e.value, ValueError) and str(e.value)
        assert e.value.section == (section[0] if section else None), f"{name}: {e.value}"


# ------------------------------------------------------------------ layout
_TYPES = {"char": "s", "u8": "B", "u16": "H", "u32": "I", "i32": "i", "f32": "f"}


def _doc_layout(title: str):
    """[(offset, size)] of the fields in the doc's table under `title`."""
    text = DOC.read_text(encoding="utf-8")
    section = text.split(f"\n## {title}", 1)[1].split("\n## ", 1)[0]
    fields = []
    for line in section.splitlines():
        m = re.match(r"^\| (\d+) \| (\w+)(?:\[(\d+)\])? \|", line)
        if m:
            count = int(m.group(3) or 1)
            fields.append((int(m.group(1)), struct.calcsize("<" + _TYPES[m.group(2)]) * count))
    return fields


def _struct_layout(s: struct.Struct):
    """[(offset, size)] of a struct's fields; a repeat count ("6I", "24s") is one field."""
    fields, off = [], 0
    for count, code in re.findall(r"(\d*)([a-zA-Z])", s.format):
        size = struct.calcsize("<" + (count or "") + code)
        if code != "x":
            fields.append((off, size))
        off += size
    return fields


@pytest.mark.parametrize(
    "title, layout",
    [("Header", HEADER), ("IO table entry", IO_ENTRY), ("Section table entry", SECTION_ENTRY)],
)
def test_doc_tables_are_the_layout_blob_py_packs(title, layout):
    doc = _doc_layout(title)
    assert doc == _struct_layout(layout)
    assert doc[-1][0] + doc[-1][1] == layout.size


# ------------------------------------------------------------------ writer
def sample(tosa=b"TOSA" * 5):
    return DelegateBlob(
        inputs=[
            TensorSpec(torch.uint8, (1, 3, 8, 8), (0, 2, 3, 1), 1 / 255, 0, 1, 0),
            TensorSpec(torch.int16, (4, 5), (0, 1), None, None, 1, 256),
        ],
        outputs=[TensorSpec(torch.int8, (1, 10), (0, 1), 0.05, -3, 1, 512)],
        command_stream=b"\x01" * 37,
        weights=b"\x02" * 100,
        scratch_size=1024,
        fast_scratch_size=0,
        tosa=tosa,
    )


@pytest.mark.parametrize("tosa", [b"TOSA" * 5, None])
def test_round_trip_keeps_every_field(tosa):
    b = sample(tosa)
    back = DelegateBlob.from_bytes(b.to_bytes())
    assert gen_blobs.describe(back) == gen_blobs.describe(b)
    assert back.inputs[1].scale is None and back.inputs[1].zero_point is None
    assert back.outputs[0].zero_point == -3
    assert back.command_stream == b.command_stream and back.tosa == b.tosa


def _with_input(spec: TensorSpec) -> DelegateBlob:
    b = sample()
    b.inputs = [spec] + b.inputs[1:]
    return b


@pytest.mark.parametrize(
    "spec, rule",
    [
        (TensorSpec(torch.uint8, (1, 0, 8, 8), (0, 1, 2, 3), 0.5, 0, 1, 0), "zero_dim"),
        (TensorSpec(torch.uint8, (4,), (0,), 0.5, 0, REGION_FAST_SCRATCH, 0), "region"),
        (TensorSpec(torch.uint8, (4,), (0,), 0.5, 0, 1, 1022), "scratch_range"),
        (TensorSpec(torch.uint8, (4,), (0,), float("nan"), 0, 1, 0), "scale"),
        (TensorSpec(torch.uint8, (4,), (0,), -0.5, 0, 1, 0), "scale"),
        # Rounds to +0.0 as an f32: the scale would be lost, so it is refused.
        (TensorSpec(torch.uint8, (4,), (0,), 1e-50, 7, 1, 0), "zero_point"),
    ],
)
def test_writer_refuses_what_the_readers_reject(spec, rule):
    with pytest.raises(BlobFormatError) as e:
        _with_input(spec).to_bytes()
    assert e.value.rule == rule


@pytest.mark.parametrize("scale, zp", [(0.5, None), (None, 3)])
def test_writer_needs_scale_and_zero_point_together(scale, zp):
    with pytest.raises(ValueError, match="give both or neither"):
        _with_input(TensorSpec(torch.uint8, (4,), (0,), scale, zp, 1, 0)).to_bytes()


# ------------------------------------------------------------------ checksums
def checksummed_parts(raw: bytes) -> dict:
    """{part name: [start, end)} of every checksummed part of a valid blob, as the doc lists
    them: the header's first six bytes (magic, version) are left out, they break their own
    rules first."""
    h = HEADER.unpack_from(raw, 0)
    n_io, io_off, n_sec, sec_off = h[4] + h[5], h[6], h[8], h[9]
    parts = {
        "header": (6, HEADER.size),
        "io_table": (io_off, io_off + n_io * IO_ENTRY.size),
        "section_table": (sec_off, sec_off + n_sec * SECTION_ENTRY.size),
    }
    names = {1: "command_stream", 2: "weights", 3: "tosa"}
    for k in range(n_sec):
        kind, off, size, _ = SECTION_ENTRY.unpack_from(raw, sec_off + k * SECTION_ENTRY.size)
        parts[names[kind]] = (off, off + size)
    return parts


def _flipped(raw: bytes, pos: int, mask: int) -> bytes:
    b = bytearray(raw)
    b[pos] ^= mask
    return bytes(b)


def test_crc32_is_zlibs():
    assert crc32(b"123456789") == 0xCBF43926 and crc32(b"") == 0


def test_written_blobs_are_sealed():
    raw = sample().to_bytes()
    assert write_checksums(raw) == raw
    assert struct.unpack_from("<I", raw, HEADER_CRC)[0] == crc32(raw[:HEADER_CRC])


@pytest.mark.parametrize(
    "part", ["header", "io_table", "section_table", "command_stream", "weights", "tosa"]
)
def test_a_flipped_byte_is_an_error_naming_its_section(part):
    raw = sample().to_bytes()
    start, end = checksummed_parts(raw)[part]
    for pos in {start, (start + end) // 2, end - 1}:
        with pytest.raises(BlobFormatError) as e:
            DelegateBlob.from_bytes(_flipped(raw, pos, 0x10))
        assert e.value.section == part, (pos, str(e.value))
        assert e.value.rule.endswith("_checksum")
        assert re.fullmatch(
            rf"blob section '{part}': checksum 0x[0-9a-f]{{8}}, expected 0x[0-9a-f]{{8}} .*",
            str(e.value),
        ), str(e.value)


@st.composite
def blobs_and_flips(draw):
    """A blob with random payloads, one of its parts, a byte of that part and a bit mask."""
    blob = sample(tosa=draw(st.none() | st.binary(min_size=1, max_size=64)))
    blob.command_stream = draw(st.binary(min_size=1, max_size=200))
    blob.weights = draw(st.binary(min_size=1, max_size=300))
    raw = blob.to_bytes()
    parts = checksummed_parts(raw)
    part = draw(st.sampled_from(sorted(parts)))
    start, end = parts[part]
    pos = draw(st.integers(start, end - 1))
    mask = draw(st.integers(1, 255))
    return raw, part, pos, mask


@settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))
@given(blobs_and_flips())
def test_any_corrupt_byte_is_caught_and_named(case):
    """Property: whatever byte of whatever part changes, and however, the Python reader rejects
    the blob at load and names that part."""
    raw, part, pos, mask = case
    with pytest.raises(BlobFormatError) as e:
        DelegateBlob.from_bytes(_flipped(raw, pos, mask))
    assert e.value.section == part and f"blob section '{part}'" in str(e.value), str(e.value)


@pytest.mark.parametrize("version", [1, VERSION + 1])
def test_another_version_is_an_error_naming_it(version):
    raw = bytearray(sample().to_bytes())
    struct.pack_into("<H", raw, 4, version)
    with pytest.raises(BlobFormatError, match=rf"version {version}, .* version {VERSION}") as e:
        DelegateBlob.from_bytes(bytes(raw))
    assert e.value.rule == "version"
