# SPDX-License-Identifier: BSD-3-Clause
"""The Python and C++ blob readers agree on random blobs, and hostile bytes never escape the
Python reader as anything but a BlobFormatError.

- random valid blobs (hypothesis): what the writer encodes, both readers decode field by field
  to exactly the writer's input;
- random mutations of valid blobs: both readers give the same verdict: the same fields, or the
  same broken rule (they check the doc's rules in the doc's order), with the doc's C++ Error and,
  for a checksum, the same part named. A share of the mutated blobs is resealed
  (``write_checksums``) so that the mutations reach the structural rules behind the checksums.

The C++ reader is runtime/tests/test_blob.cpp's ``--serve`` mode, built with ASan + UBSan, so an
out-of-bounds read on any of these inputs fails the test too.
"""

import os
import random
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_runtime_ctest import SANITIZER_ENV, _run, configure_sanitize_build

from ethosu_ng.blob import (
    DTYPE_CODES,
    HEADER,
    MAX_RANK,
    REGION_SCRATCH,
    SECTION_ENTRY,
    BlobFormatError,
    DelegateBlob,
    write_checksums,
)
from ethosu_ng.tensor_spec import TensorSpec

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "runtime" / "tests"))
import gen_blobs  # noqa: E402

DOC_RULES = gen_blobs.doc_rules()
GOOD = {k: v.to_bytes() for k, v in gen_blobs.good_blobs().items()}


class CppReader:
    """The C++ reader in a long-lived process: one verdict line per blob."""

    def __init__(self, binary: Path):
        self.log = tempfile.TemporaryFile()  # noqa: SIM115 (open as long as the process)
        self.proc = subprocess.Popen(
            [str(binary), "--serve"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
            env=dict(os.environ, **SANITIZER_ENV),
        )

    def verdict(self, raw: bytes, misalign: int = 0) -> str:
        self.proc.stdin.write(struct.pack("<II", len(raw), misalign) + raw)
        self.proc.stdin.flush()
        line = self.proc.stdout.readline().decode()
        if not line:
            self.log.seek(0)
            tail = self.log.read()[-6000:].decode(errors="replace")
            pytest.fail(f"the C++ reader died on a {len(raw)}-byte blob:\n{tail}")
        return line.rstrip("\n")

    def close(self):
        self.proc.stdin.close()
        assert self.proc.wait(timeout=60) == 0
        self.log.close()


@pytest.fixture(scope="module")
def cpp():
    cmake, build = configure_sanitize_build()
    _run([cmake, "--build", build, "--target", "test_blob", "--parallel", "2"])
    reader = CppReader(build / "test_blob")
    yield reader
    reader.close()


def python_verdict(raw: bytes) -> str:
    """The Python reader's verdict in the C++ reader's form ("ok FIELDS" / "bad RULE ERROR" /
    "bad RULE ERROR SECTION" for a checksum)."""
    v = gen_blobs.python_verdict(raw)
    if v.startswith("bad "):
        _, rule, *section = v.split(" ")
        return " ".join(["bad", rule, DOC_RULES[rule][0], *section])
    return v


def assert_same_verdict(cpp: CppReader, raw: bytes) -> str:
    py, c = python_verdict(raw), cpp.verdict(raw)
    assert c == py, f"readers disagree: Python {py!r}, C++ {c!r} on {raw.hex()[:512]}..."
    return py


# ------------------------------------------------------------------ random valid blobs
@st.composite
def tensor_specs(draw):
    rank = draw(st.integers(0, MAX_RANK))
    shape = tuple(draw(st.lists(st.integers(1, 6), min_size=rank, max_size=rank)))
    order = tuple(draw(st.permutations(range(rank))))
    dtype = draw(st.sampled_from(sorted(DTYPE_CODES, key=DTYPE_CODES.get)))
    if draw(st.booleans()):
        scale = draw(st.floats(1e-30, 1e30, allow_nan=False, allow_infinity=False))
        zp = draw(st.integers(-(2**31), 2**31 - 1))
    else:
        scale = zp = None
    return TensorSpec(dtype, shape, order, scale, zp)


@st.composite
def valid_blobs(draw):
    specs = draw(st.lists(tensor_specs(), max_size=6))
    n_in = draw(st.integers(0, len(specs)))
    placed, cursor = [], 0
    for s in specs:  # scratch offsets with gaps, any alignment
        cursor += draw(st.integers(0, 40))
        placed.append(
            TensorSpec(s.dtype, s.shape, s.dim_order, s.scale, s.zero_point, REGION_SCRATCH, cursor)
        )
        cursor += s.byte_size
    return DelegateBlob(
        inputs=placed[:n_in],
        outputs=placed[n_in:],
        command_stream=draw(st.binary(max_size=80)),
        weights=draw(st.binary(max_size=80)),
        scratch_size=cursor + draw(st.integers(0, 100)),
        fast_scratch_size=draw(st.integers(0, 2**32 - 1)),
        tosa=draw(st.none() | st.binary(max_size=40)),
    )


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(valid_blobs())
def test_both_readers_decode_what_the_writer_wrote(cpp, blob):
    raw = blob.to_bytes()
    want = "ok " + gen_blobs.describe(blob)
    assert python_verdict(raw) == want
    assert cpp.verdict(raw) == want
    # The same bytes at an address that is not 16-aligned: C++ only (Python has no address).
    assert cpp.verdict(raw, misalign=8) == "bad base_align InvalidArgument"


# ------------------------------------------------------------------ mutated blobs
_WORDS = [0, 1, 2, 3, 15, 16, 63, 64, 65, 0x7FFFFFFF, 0x80000000, 0xFFFFFFF0, 0xFFFFFFFF]


@settings(max_examples=600, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    st.sampled_from(sorted(GOOD)),
    st.lists(
        st.tuples(st.integers(0, 2**16), st.integers(0, 255), st.booleans()),
        min_size=1,
        max_size=6,
    ),
    st.integers(-20, 20),
    st.booleans(),
)
def test_readers_agree_on_mutated_blobs(cpp, base, edits, resize, reseal):
    data = bytearray(GOOD[base])
    for pos, value, word in edits:
        # Bias towards the header and tables, where the structure lives.
        pos %= 256 if pos % 2 else len(data)
        if word and pos + 4 <= len(data):
            struct.pack_into("<I", data, pos & ~3, _WORDS[value % len(_WORDS)])
        elif pos < len(data):
            data[pos] = value
    data = data[: len(data) + resize] if resize < 0 else data + bytes(resize)
    assert_same_verdict(cpp, write_checksums(data) if reseal else bytes(data))


def test_mutations_reach_most_rules(cpp):
    """The agreement above is not only on accepted blobs: seeded mutations, compared one by
    one, break nearly every rule of the doc."""
    rng = random.Random(0)
    seen = set()
    for it in range(4000):
        data = bytearray(GOOD[("conv", "mixed")[it % 2]])
        for _ in range(rng.randint(1, 3)):
            pos = rng.randrange(256 if rng.random() < 0.7 else len(data))
            if rng.random() < 0.5:
                struct.pack_into("<I", data, pos & ~3, rng.choice(_WORDS))
            else:
                data[pos] = rng.randrange(256)
        if rng.random() < 0.05:
            cut = rng.randint(-70, 20)
            data = data[: len(data) + cut] if cut < 0 else data + bytes(cut)
            if rng.random() < 0.5 and len(data) >= 12:  # keep total_size == the length
                struct.pack_into("<I", data, 8, len(data))
        if rng.random() < 0.8:
            data = write_checksums(data)
        verdict = assert_same_verdict(cpp, bytes(data))
        if verdict.startswith("bad "):
            seen.add(verdict.split(" ")[1])
    both = {r for r, (_, readers) in DOC_RULES.items() if readers == "both"}
    assert len(seen & both) >= 0.9 * len(both), sorted(both - seen)


def _checksum_fields(raw: bytes) -> set:
    """Byte positions of a valid blob's checksum fields (header and section table)."""
    h = HEADER.unpack_from(raw, 0)
    n_sec, sec_off = h[8], h[9]
    fields = set(range(40, 48)) | set(range(60, 64))
    for k in range(n_sec):
        fields |= set(range(sec_off + k * SECTION_ENTRY.size + 12, sec_off + (k + 1) * 16))
    return fields


def _diff(base: bytes, raw: bytes):
    """The edit of an invalid vector, without the checksums resealing rewrote."""
    skip = _checksum_fields(base)
    return {i: b for i, (a, b) in enumerate(zip(base, raw)) if a != b and i not in skip}


def test_readers_agree_on_every_pair_of_defects(cpp):
    """Both readers stop at the same rule when a blob breaks two: every pair of same-length
    invalid vectors of one base blob, combined, gets the same verdict from both (random
    mutations seldom break two rules that are checked in the same place)."""
    goods = gen_blobs.good_blobs()
    pairs = 0
    for base_name in ("conv", "mixed"):
        base = goods[base_name].to_bytes()
        diffs = [
            (rule, _diff(base, raw))
            for rule, _, raw, misalign in gen_blobs.invalid_vectors(goods)
            if misalign == 0 and len(raw) == len(base) and raw != base
        ]
        # Only the vectors patched from this base: the other base's bytes differ everywhere.
        diffs = [(rule, d) for rule, d in diffs if 0 < len(d) <= 16]
        for i, (rule_a, a) in enumerate(diffs):
            for rule_b, b in diffs[i + 1 :]:
                if rule_a == rule_b or a.keys() & b.keys():
                    continue
                data = bytearray(base)
                for pos, value in {**a, **b}.items():
                    data[pos] = value
                # Checksum vectors rely on stale checksums: keep them unsealed.
                stale = rule_a.endswith("_checksum") or rule_b.endswith("_checksum")
                assert_same_verdict(cpp, bytes(data) if stale else write_checksums(data))
                pairs += 1
    assert pairs >= 800


# ------------------------------------------------------------------ Python reader alone
def accepted_or_format_error(data: bytes) -> None:
    try:
        blob = DelegateBlob.from_bytes(data)
    except BlobFormatError as e:
        assert e.rule in DOC_RULES and str(e)
        return
    # Accepted: the writer can write what the reader accepted, with the same fields.
    again = DelegateBlob.from_bytes(blob.to_bytes())
    assert gen_blobs.describe(again) == gen_blobs.describe(blob)


@settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.binary(max_size=512))
def test_random_bytes(data):
    accepted_or_format_error(data)


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.sampled_from(sorted(GOOD)), st.data())
def test_mutated_words(base, data):
    raw = bytearray(GOOD[base])
    word = data.draw(st.integers(0, len(raw) // 4 - 1))
    struct.pack_into("<I", raw, word * 4, data.draw(st.integers(0, 2**32 - 1)))
    accepted_or_format_error(bytes(raw))


@pytest.mark.parametrize("n", range(0, len(GOOD["conv"]), 7))
def test_every_truncation(n):
    with pytest.raises(BlobFormatError):
        DelegateBlob.from_bytes(GOOD["conv"][:n])


@pytest.mark.parametrize("bad", [None, 42, "EUNG", 3.5])
def test_wrong_types(bad):
    with pytest.raises((TypeError, ValueError)):
        DelegateBlob.from_bytes(bad)
