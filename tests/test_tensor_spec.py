# SPDX-License-Identifier: BSD-3-Clause
"""TensorSpec, the boundary tensor's description, accepts exactly what the blob can carry.

A property over every dtype, every rank up to one past the blob's limit and every dim order of
in-range or just-out-of-range entries: a spec is built when, and only when, the dtype is a
boundary dtype, the rank fits the blob's slots and the dim order is a permutation of the
shape's axes; otherwise a ValueError names what is wrong. Its sizes are what the runtime copies.
"""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from ethosu_ng.tensor_spec import (
    BOUNDARY_DTYPES,
    CHANNELS_LAST,
    MAX_RANK,
    REGION_FAST_SCRATCH,
    REGION_SCRATCH,
    REGION_WEIGHTS,
    TensorSpec,
)

DTYPES = sorted(BOUNDARY_DTYPES | {torch.float32, torch.int64, torch.float16}, key=str)
BYTES = {torch.int8: 1, torch.uint8: 1, torch.bool: 1, torch.int16: 2, torch.uint16: 2}


@st.composite
def specs(draw):
    rank = draw(st.integers(0, MAX_RANK + 1))
    shape = tuple(draw(st.lists(st.integers(1, 5), min_size=rank, max_size=rank)))
    # a permutation, or the entries of one with some drawn over -1..rank (repeats, gaps)
    order = list(draw(st.permutations(range(rank))))
    for k in draw(st.lists(st.integers(0, max(rank - 1, 0)), max_size=2)):
        if rank:
            order[k] = draw(st.integers(-1, rank))
    if draw(st.booleans()) and rank:
        order = order[:-1] if draw(st.booleans()) else order + [rank]
    return draw(st.sampled_from(DTYPES)), shape, tuple(order)


@settings(max_examples=400, deadline=None)
@given(specs())
def test_a_spec_is_built_exactly_when_the_blob_can_carry_it(drawn):
    dtype, shape, order = drawn
    is_permutation = sorted(order) == list(range(len(shape)))
    valid = dtype in BOUNDARY_DTYPES and len(shape) <= MAX_RANK and is_permutation
    if valid:
        spec = TensorSpec(dtype, shape, order, 0.5, 0)
        assert spec.shape == shape and spec.dim_order == order
        assert spec.numel == math.prod(shape)
        assert spec.elem_size == BYTES.get(dtype, 4)
        assert spec.byte_size == math.prod(shape) * BYTES.get(dtype, 4)
        return
    with pytest.raises(ValueError) as err:
        TensorSpec(dtype, shape, order, 0.5, 0)
    msg = str(err.value)
    if dtype not in BOUNDARY_DTYPES:
        assert str(dtype) in msg, msg
    elif len(shape) > MAX_RANK:
        assert f"rank {len(shape)} exceeds {MAX_RANK}" in msg, msg
    else:
        assert f"dim_order {order} is not a permutation of rank {len(shape)}" in msg, msg


@pytest.mark.parametrize("rank", range(MAX_RANK + 1))
def test_every_dim_order_that_is_no_permutation_is_refused(rank):
    """Exhaustive where the property samples: every order of ``rank`` entries in 0..rank-1."""
    for order in itertools.product(range(rank), repeat=rank):
        if rank > 4 and len(set(order)) not in (rank, rank - 1):
            continue  # 6**6 orders: the ones one swap away from a permutation suffice
        if sorted(order) == list(range(rank)):
            TensorSpec(torch.int8, (2,) * rank, order)
        else:
            with pytest.raises(ValueError, match="not a permutation"):
                TensorSpec(torch.int8, (2,) * rank, order)


def test_channels_last_is_nhwc():
    x = torch.zeros(2, 3, 4, 5).to(memory_format=torch.channels_last)
    assert tuple(x.dim_order()) == CHANNELS_LAST


def test_regions_are_the_base_pointers_vela_addresses():
    """The region an IO entry names is the base-pointer index in Vela's command stream."""
    from ethosu.vela.high_level_command_to_npu_op import BasePointerIndex

    assert BasePointerIndex.WeightTensor == REGION_WEIGHTS
    assert BasePointerIndex.ScratchTensor == REGION_SCRATCH
    assert BasePointerIndex.ScratchFastTensor == REGION_FAST_SCRATCH
    spec = TensorSpec(torch.int8, (4,), (0,))
    assert (spec.region, spec.offset) == (REGION_SCRATCH, 0), "an unplaced spec: scratch, offset 0"


def test_describe_names_dtype_shape_and_qparams():
    assert TensorSpec(torch.int8, (1, 10), (0, 1), 0.05, -3).describe() == (
        "int8[1, 10] scale=0.05 zp=-3"
    )
    assert TensorSpec(torch.int32, (4,), (0,)).describe() == "int32[4]"
