# SPDX-License-Identifier: BSD-3-Clause
"""Gathers and scatters on the Ethos-U85 model (runtime/ethosu_ng/npu_model/dma.cpp, indexed DMA)
against eager PyTorch.

``gather``, ``index_select`` and ``index_put`` lower to TOSA GATHER / SCATTER, which regor turns
into indexed DMAs (DMA0_SRC_REGION / DST_REGION idx_mode, the int32 indices read from
DMA0_IDX). Each graph is exported through the real pipeline (quantize, partition, TOSA, Vela for
an Ethos-U85 size, ``verify_npu=False`` so that Vela's own stream runs), run on the model with
several index patterns (repeated indices, both ends of the range) and compared with the eager
quantized model bit for bit. Repeated indices of an ``index_put`` without accumulate are written
in order, the last one wins, as eager PyTorch on one thread does; the TOSA reference model calls
that UNPREDICTABLE, so the model is the only host run of them.
"""

from __future__ import annotations

import os

import pytest
import torch
from hypothesis import HealthCheck, Phase, assume, given, settings
from hypothesis import strategies as st

from ethosu_ng import EthosUNGCompileSpec
from ethosu_ng import runtime as rt
from ethosu_ng.export import lower, quantize

U85_SIZES = ("ethos-u85-128", "ethos-u85-256", "ethos-u85-512", "ethos-u85-1024", "ethos-u85-2048")


class _Fn(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *xs):
        return self.fn(*xs)


def _gather(dim):
    return _Fn(lambda x, i: torch.gather(x, dim, i))


def _index_select(dim):
    return _Fn(lambda x, i: torch.index_select(x, dim, i))


def _index_put(n_idx):
    return _Fn(lambda x, v, *idx: torch.index_put(x, tuple(idx), v))


def _check(model, example, index_sets, target, trivial_ok=False):
    """Compile ``model`` for ``target`` with ``example``; run it on the U85 model with each
    inputs tuple of ``index_sets`` and compare with the eager quantized model bit for bit.
    ``trivial_ok``: a graph the partitioner leaves wholly on the CPU (a gather that is a no-op
    copy) is skipped, not failed."""
    spec = EthosUNGCompileSpec(target, embed_tosa=True, verify_npu=False)
    q = quantize(model.eval(), example, spec, calibration=[example])
    edge, partitioner = lower(q, example, spec)
    if trivial_ok:
        assume(partitioner.report.partitions)
    assert partitioner.report.partitions, "nothing was delegated"
    pte = edge.to_executorch().buffer
    assert rt.model_unsupported(pte) is None
    for inputs in index_sets:
        got = rt.run_pte(pte, list(inputs), npu="model")
        assert rt.npu_model_stats()["dmas"] > 0, "the model ran no DMA"
        with torch.no_grad():
            want = q(*inputs)
        want = want if isinstance(want, (list, tuple)) else [want]
        for g, w in zip(got, want):
            assert torch.equal(g, w), f"{target} {[tuple(t.shape) for t in inputs]}:\n{g}\n{w}"


def _indices(draw, k, shape, dtype):
    """Indices into 0..k-1 of ``shape``: random, all equal (repeats), or the ends of the range."""
    n = 1
    for s in shape:
        n *= s
    kind = draw(st.sampled_from(["random", "repeated", "ends"]))
    if kind == "random":
        vals = draw(st.lists(st.integers(0, k - 1), min_size=n, max_size=n))
    elif kind == "repeated":
        vals = [draw(st.integers(0, k - 1))] * n
    else:
        vals = [(k - 1) * (j % 2) for j in range(n)]
    return torch.tensor(vals, dtype=dtype).reshape(shape)


@st.composite
def gathers(draw):
    rank = draw(st.integers(1, 3))
    shape = draw(st.lists(st.integers(1, 6), min_size=rank, max_size=rank))
    dim = draw(st.integers(0, rank - 1))
    ishape = [draw(st.integers(1, s)) for s in shape]
    ishape[dim] = draw(st.integers(1, 6))
    dtype = draw(st.sampled_from([torch.int64, torch.int32]))
    x = torch.randn(shape)
    sets = [(x * (j + 1), _indices(draw, shape[dim], ishape, dtype)) for j in range(3)]
    return _gather(dim), sets


@st.composite
def index_selects(draw):
    rank = draw(st.integers(1, 3))
    shape = draw(st.lists(st.integers(1, 6), min_size=rank, max_size=rank))
    dim = draw(st.integers(0, rank - 1))
    w = draw(st.integers(1, 6))
    dtype = draw(st.sampled_from([torch.int64, torch.int32]))
    x = torch.randn(shape)
    sets = [(x * (j + 1), _indices(draw, shape[dim], [w], dtype)) for j in range(3)]
    return _index_select(dim), sets


@st.composite
def index_puts(draw):
    """index_put without accumulate on the leading ``n_idx`` dims of x, repeats included."""
    rank = draw(st.integers(1, 3))
    shape = draw(st.lists(st.integers(1, 5), min_size=rank, max_size=rank))
    n_idx = draw(st.integers(1, rank))
    w = draw(st.integers(1, 5))
    x = torch.randn(shape)
    v = torch.randn([w, *shape[n_idx:]])
    sets = []
    for j in range(3):
        idx = [_indices(draw, shape[d], [w], torch.int64) for d in range(n_idx)]
        sets.append((x * (j + 1), v * (j + 1), *idx))
    return _index_put(n_idx), sets


# A representative set (the first two in CI): the upstream same_index case (index_put, repeated
# index), a 3-D gather along the middle dim (3D DMA over batches), an index_select with int32
# indices.
FAST = [
    (
        "index_put_same_index",
        _index_put(2),
        [
            (
                torch.rand(1, 2, 3),
                torch.rand(2, 3),
                torch.tensor([0, 0]),
                torch.tensor([0, 0]),
            ),
            (
                torch.rand(1, 2, 3),
                torch.rand(2, 3),
                torch.tensor([0, 0]),
                torch.tensor([1, 1]),
            ),
        ],
        "ethos-u85-128",
    ),
    (
        "gather_3d_dim1",
        _gather(1),
        [
            (torch.randn(2, 5, 3), torch.tensor([[[0, 1, 2], [4, 4, 0]], [[1, 1, 1], [3, 2, 0]]])),
            (torch.randn(2, 5, 3), torch.full((2, 2, 3), 4)),
        ],
        "ethos-u85-256",
    ),
    (
        "index_select_int32",
        _index_select(0),
        [
            (torch.randn(4, 3), torch.tensor([1, 3, 3], dtype=torch.int32)),
            (torch.randn(4, 3), torch.tensor([0, 0, 3], dtype=torch.int32)),
        ],
        "ethos-u85-512",
    ),
]


@pytest.mark.parametrize(
    "case",
    [*FAST[:2], pytest.param(FAST[2], marks=pytest.mark.slow)],
    ids=[c[0] for c in FAST],
)
def test_indexed_dma_graphs_bit_exact_to_eager(case):
    _, model, sets, target = case
    torch.manual_seed(0)
    _check(model, sets[0], sets, target)


_SETTINGS = dict(
    max_examples=int(os.environ.get("ETHOSU_NG_INDEXED_DMA_EXAMPLES", "12")),
    deadline=None,
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@pytest.mark.slow
@settings(**_SETTINGS)
@given(st.one_of(gathers(), index_selects(), index_puts()), st.sampled_from(U85_SIZES))
def test_indexed_dma_graphs_property(graph, target):
    model, sets = graph
    _check(model, sets[0], sets, target, trivial_ok=True)
