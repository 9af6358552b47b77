"""DelegateBlob v1: round trip, and every malformed blob is a ValueError that says what is wrong."""

import struct

import pytest
import torch

from ethosu_ng.blob import ALIGN, HEADER, IO_ENTRY, SECTION_ENTRY, DelegateBlob
from ethosu_ng.tensor_spec import TensorSpec


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


def test_round_trip_keeps_every_field():
    b = sample()
    raw = b.to_bytes()
    assert len(raw) % ALIGN == 0
    back = DelegateBlob.from_bytes(raw)
    assert back.inputs[0].dtype == torch.uint8 and back.inputs[0].dim_order == (0, 2, 3, 1)
    assert back.inputs[1].scale is None and back.inputs[1].dtype == torch.int16
    assert back.outputs[0].zero_point == -3
    assert back.outputs[0].scale == pytest.approx(0.05)
    assert back.command_stream == b.command_stream and back.weights == b.weights
    assert back.tosa == b.tosa and back.scratch_size == 1024


def test_without_tosa_section():
    back = DelegateBlob.from_bytes(sample(tosa=None).to_bytes())
    assert back.tosa is None


def _patch(raw, off, fmt, value):
    raw = bytearray(raw)
    struct.pack_into(fmt, raw, off, value)
    return bytes(raw)


def _sections(raw):
    n, off = struct.unpack_from("<H", raw, 22)[0], struct.unpack_from("<I", raw, 24)[0]
    return [
        (
            off + k * SECTION_ENTRY.size,
            *SECTION_ENTRY.unpack_from(raw, off + k * SECTION_ENTRY.size),
        )
        for k in range(n)
    ]


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda r: r[:40], "truncated"),
        (lambda r: r[:-16], "size field"),
        (lambda r: b"XXXX" + r[4:], "magic"),
        (lambda r: _patch(r, 4, "<H", 2), "version"),
        (lambda r: _patch(r, 16, "<I", 72), "aligned"),
        (lambda r: _patch(r, 24, "<I", 1 << 20), "outside"),
        (lambda r: _patch(r, _sections(r)[0][0] + 4, "<I", len(r) - 16), "outside"),
        (lambda r: _patch(r, _sections(r)[1][0] + 4, "<I", 8), "aligned"),
        (lambda r: _patch(r, _sections(r)[0][0], "<I", 9), "unknown kind"),
        (lambda r: _patch(r, 64, "<B", 77), "dtype code"),
        (lambda r: _patch(r, 64 + 1, "<B", 9), "rank"),
        (lambda r: _patch(r, 64 + 2, "<B", 4), "element size"),
        (lambda r: _patch(r, 64 + 8, "<I", 5), "byte size"),
        (lambda r: _patch(r, 64 + 4, "<I", 1000), "outside scratch"),
        (lambda r: _patch(r, 64 + 44, "<B", 3), "permutation"),
        (lambda r: _patch(r, 36, "<I", 0), "TOSA flag"),
    ],
)
def test_malformed_blob_is_a_clear_value_error(mutate, message):
    with pytest.raises(ValueError, match=message):
        DelegateBlob.from_bytes(mutate(sample().to_bytes()))


def test_header_layout_is_what_the_doc_says():
    raw = sample().to_bytes()
    assert raw[:4] == b"EUNG" and HEADER.size == 64 and IO_ENTRY.size == 64
    assert struct.unpack_from("<HH", raw, 12) == (2, 1)
    assert struct.unpack_from("<I", raw, 28)[0] == 1024
