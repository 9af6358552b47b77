# SPDX-License-Identifier: BSD-3-Clause
"""Upstream's permute/view propagation, with only the nodes a move touched marked stale
(``adapters.arm._stale_paths_only``): the same TOSA graph, in a number of graph retraces that
does not grow with the number of blocks; and carving a partition builds the signature's maps a
number of times that does not grow with the blocks either."""

from __future__ import annotations

import contextlib
import copy

import torch
from conftest import calibration_batches
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from ethosu_ng import EthosUNGCompileSpec
from ethosu_ng.adapters import arm as upstream
from ethosu_ng.export import lower, quantize

KINDS = ["channels_last_add", "tokens_sigmoid", "fork_cat", "mean_keepdim", "view_mul"]


class Block(nn.Module):
    """One data-movement pattern around elementwise work, as vision models write them."""

    def __init__(self, kind: str, c: int):
        super().__init__()
        self.kind = kind
        self.scale = nn.Parameter(torch.linspace(0.5, 1.5, c))
        self.conv = nn.Conv2d(c, c, 1)

    def forward(self, x):
        b, c, h, w = x.shape
        if self.kind == "channels_last_add":  # ConvNeXt: NHWC elementwise between convs
            y = x.permute(0, 2, 3, 1)
            y = torch.relu(y * self.scale + 1.0)
            x = y.permute(0, 3, 1, 2)
        elif self.kind == "tokens_sigmoid":  # ViT-style: tokens through a table op
            t = x.flatten(2).transpose(1, 2)
            t = torch.sigmoid(t) * self.scale
            x = t.transpose(1, 2).reshape(b, c, h, w)
        elif self.kind == "fork_cat":  # one permute read by two branches, joined again
            y = x.permute(0, 2, 3, 1)
            x = torch.cat([y * 2.0, torch.sigmoid(y)], dim=3).permute(0, 3, 1, 2)[:, :c]
        elif self.kind == "mean_keepdim":  # squeeze-excite over a channels-last view
            y = x.permute(0, 2, 3, 1)
            s = y.mean(dim=(1, 2), keepdim=True)
            x = (y * torch.sigmoid(s)).permute(0, 3, 1, 2)
        else:  # a view round trip around a multiply
            x = (x.reshape(b, c, h * w) * 0.75).reshape(b, c, h, w)
        return self.conv(x)


class Stack(nn.Module):
    def __init__(self, kinds, c: int):
        super().__init__()
        self.blocks = nn.Sequential(*[Block(k, c) for k in kinds])

    def forward(self, x):
        return self.blocks(x)


def _lower(model, shape, target, checks=None, switch="_stale_paths_only", cpu_fallback=True):
    """Lower ``model``; with ``checks``, each partition also without the context ``switch``
    names in ``adapters.arm`` (upstream's stale rule, torch's signature lookups), and whether
    the two TOSA graphs are the same byte for byte appended to ``checks``. Without
    ``cpu_fallback`` a partition whose lowering fails raises instead of moving ops to the CPU."""
    spec = EthosUNGCompileSpec(
        target, verify_npu=False, verify_lowering=False, cpu_fallback=cpu_fallback
    )
    example = (torch.randn(*shape),)
    q = quantize(model.eval(), example, spec, calibration=calibration_batches(example, n=1))
    if checks is None:
        lower(q, example, spec)
        return
    real = upstream.lower_to_tosa

    def both(program, spec, op_sources=None):
        twin = copy.deepcopy(program)
        paths = real(program, spec, op_sources)
        whole = getattr(upstream, switch)
        setattr(upstream, switch, contextlib.nullcontext)
        try:
            with upstream.lowering_context(spec, twin):
                downstream = real(twin, spec)
        finally:
            setattr(upstream, switch, whole)
        checks.append(paths == downstream)
        return paths

    upstream.lower_to_tosa = both
    try:
        lower(q, example, spec)
    finally:
        upstream.lower_to_tosa = real


@settings(max_examples=8, deadline=None)
@given(
    kinds=st.lists(st.sampled_from(KINDS), min_size=1, max_size=5),
    c=st.sampled_from([4, 8, 16]),
    hw=st.sampled_from([(4, 4), (6, 10), (8, 8)]),
    target=st.sampled_from(["ethos-u55-128", "ethos-u85-256"]),
)
def test_the_tosa_graph_is_the_one_the_downstream_rule_gives(kinds, c, hw, target):
    torch.manual_seed(0)
    checks = []
    _lower(Stack(kinds, c), (1, c, *hw), target, checks)
    assert checks and all(checks), (kinds, checks)


@settings(max_examples=6, deadline=None)
@given(
    kinds=st.lists(st.sampled_from(KINDS), min_size=1, max_size=5),
    c=st.sampled_from([4, 8, 16]),
    target=st.sampled_from(["ethos-u55-128", "ethos-u85-256"]),
)
def test_the_tosa_graph_is_the_one_torchs_signature_lookups_give(kinds, c, target):
    """Equal constants in every block (the scales, and the convolutions' weights made equal):
    upstream's passes fuse them into new placeholders and delete the old ones, then look the
    new ones up, so the signature changes between lookups."""
    torch.manual_seed(0)
    model = Stack(kinds, c)
    for block in model.blocks:
        block.conv.load_state_dict(model.blocks[0].conv.state_dict())
    checks = []
    _lower(
        model,
        (1, c, 6, 10),
        target,
        checks,
        switch="memoized_signature_lookups",
        cpu_fallback=False,
    )
    assert checks and all(checks), (kinds, checks)


def test_retraces_do_not_grow_with_the_blocks():
    """Each block's permutes move once. Upstream's rule retraces the whole graph once per
    move on a graph where each move is downstream of the last (the count grows with the
    blocks); with the stale paths only, moves in different blocks share a scan."""
    from executorch.backends.transforms.propagate_view_copy_permute_pass import (
        PropagateViewCopyPermutePass,
    )

    counts = {}
    real = PropagateViewCopyPermutePass._retrace

    def counted(self, gm):
        counts[key] = counts.get(key, 0) + 1
        return real(self, gm)

    PropagateViewCopyPermutePass._retrace = counted
    try:
        for key, blocks in (("paths", 4), ("paths", 12), ("downstream", 4), ("downstream", 12)):
            key = f"{key} {blocks}"
            rule = contextlib.nullcontext if key.startswith("downstream") else None
            whole = upstream._stale_paths_only
            upstream._stale_paths_only = rule or whole
            try:
                torch.manual_seed(0)
                kinds = ["channels_last_add", "mean_keepdim"] * (blocks // 2)
                _lower(Stack(kinds, 8), (1, 8, 6, 6), "ethos-u85-256")
            finally:
                upstream._stale_paths_only = whole
    finally:
        PropagateViewCopyPermutePass._retrace = real
    # the premise: upstream's rule retraces once more per block or two
    assert counts["downstream 12"] >= counts["downstream 4"] + 4, counts
    assert counts["paths 12"] == counts["paths 4"], counts


def test_carving_a_partition_builds_the_signature_maps_a_fixed_number_of_times():
    """``to_backend``'s node list asks the signature's parameter and buffer maps once per
    node; torch builds a map from every input spec on each ask (quadratic in the graph)."""
    from torch.export import graph_signature as gs

    from ethosu_ng.adapters import exir

    builds = {}
    real_build, real_carve = gs._immutable_dict, exir.carve_partition

    def counted_build(items):
        if carving:
            builds[blocks] = builds.get(blocks, 0) + 1
        return real_build(items)

    def carve(*args, **kwargs):
        carving.append(True)
        try:
            return real_carve(*args, **kwargs)
        finally:
            carving.pop()

    carving: list = []
    gs._immutable_dict, exir.carve_partition = counted_build, carve
    try:
        for blocks in (len(KINDS), 3 * len(KINDS)):  # every kind of block, once and thrice
            torch.manual_seed(0)
            _lower(Stack(KINDS * (blocks // len(KINDS)), 8), (1, 8, 6, 6), "ethos-u85-256")
    finally:
        gs._immutable_dict, exir.carve_partition = real_build, real_carve
    assert len(builds) == 2 and len(set(builds.values())) == 1, builds
