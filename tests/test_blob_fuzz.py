"""Hostile bytes into DelegateBlob.from_bytes: always a clear ValueError (or a valid blob),
never an IndexError / struct.error / anything else leaking out."""

import struct

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ethosu_ng.blob import DelegateBlob
from ethosu_ng.tensor_spec import TensorSpec


def good() -> bytes:
    return DelegateBlob(
        inputs=[TensorSpec(torch.uint8, (1, 3, 4, 4), (0, 2, 3, 1), 1 / 255, 0, 1, 0)],
        outputs=[TensorSpec(torch.int8, (1, 10), (0, 1), 0.1, 3, 1, 64)],
        command_stream=b"\x07" * 20,
        weights=b"\x01" * 33,
        scratch_size=128,
        tosa=b"T" * 9,
    ).to_bytes()


GOOD = good()


def parse_or_value_error(data: bytes) -> None:
    try:
        blob = DelegateBlob.from_bytes(data)
    except ValueError as e:
        assert str(e), "a ValueError must say what is wrong"
        return
    # Accepted: it must be internally consistent.
    for s in blob.inputs + blob.outputs:
        assert s.byte_size == s.numel * s.elem_size
        if s.region == 1:
            assert s.offset + s.byte_size <= blob.scratch_size


@settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.binary(max_size=512))
def test_random_bytes(data):
    parse_or_value_error(data)


@settings(max_examples=600, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    st.lists(st.tuples(st.integers(0, len(GOOD) - 1), st.integers(0, 255)), min_size=1, max_size=8)
)
def test_mutated_real_blob(edits):
    data = bytearray(GOOD)
    for pos, byte in edits:
        data[pos] = byte
    parse_or_value_error(bytes(data))


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.integers(0, len(GOOD) // 4 - 1), st.integers(0, 2**32 - 1))
def test_mutated_words(word, value):
    data = bytearray(GOOD)
    struct.pack_into("<I", data, word * 4, value)
    parse_or_value_error(bytes(data))


@pytest.mark.parametrize("n", range(0, len(GOOD), 7))
def test_every_truncation(n):
    with pytest.raises(ValueError):
        DelegateBlob.from_bytes(GOOD[:n])


@pytest.mark.parametrize("bad", [None, 42, "EUNG", 3.5])
def test_wrong_types(bad):
    with pytest.raises((TypeError, ValueError)):
        DelegateBlob.from_bytes(bad)
