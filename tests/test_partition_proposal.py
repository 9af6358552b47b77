# SPDX-License-Identifier: BSD-3-Clause
"""The partition proposal: convex partitions covering every supported node, one partition
without torch's quadratic partitioner where the supported nodes are convex as a whole."""

from __future__ import annotations

import operator
from unittest import mock

import networkx as nx
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.fx import Graph, GraphModule
from torch.fx.passes.infra import partitioner as fx_partitioner
from torch.fx.passes.operator_support import OperatorSupportBase

from ethosu_ng.partitioning.proposal import (
    first_convexity_break,
    propose_partitions,
    supported_nodes,
)


class _Names(OperatorSupportBase):
    def __init__(self, names):
        self.names = set(names)

    def is_node_supported(self, submodules, node):
        return node.name in self.names


@st.composite
def graphs(draw):
    """A DAG of adds, some nodes tuples read through getitem, and the names supported."""
    graph = Graph()
    values = [graph.placeholder(f"x{i}") for i in range(draw(st.integers(1, 3)))]
    calls = []
    for _ in range(draw(st.integers(1, 24))):
        a, b = (draw(st.sampled_from(values)) for _ in range(2))
        if draw(st.integers(0, 5)) == 0:
            pair = graph.call_function(torch.ops.aten.split.Tensor, (a, 1))
            items = [graph.call_function(operator.getitem, (pair, k)) for k in range(2)]
            calls += [pair, *items]
            values += items
        else:
            node = graph.call_function(torch.ops.aten.add.Tensor, (a, b))
            calls.append(node)
            values.append(node)
    readers = {u for n in values for u in n.users}
    graph.output(tuple(n for n in values if n not in readers and n.op != "placeholder"))
    names = {n.name for n in calls if draw(st.booleans())}
    return GraphModule(torch.nn.Module(), graph), _Names(names)


def _dag(gm):
    g = nx.DiGraph()
    for n in gm.graph.nodes:
        g.add_node(n)
        g.add_edges_from((p, n) for p in n.all_input_nodes)
    return g


def _is_convex(dag, part):
    out = set().union(*(nx.descendants(dag, n) for n in part)) - part
    return not any(nx.descendants(dag, n) & part for n in out)


@settings(max_examples=300, deadline=None)
@given(graphs())
def test_partitions_are_convex_disjoint_and_cover_the_supported_nodes(case):
    gm, support = case
    parts = propose_partitions(gm, support)
    dag = _dag(gm)
    assert all(parts), "an empty partition"
    assert sum(len(p) for p in parts) == len(set().union(*parts)), "partitions overlap"
    assert set().union(*parts) == supported_nodes(gm, support)
    for p in parts:
        assert _is_convex(dag, p), sorted(n.name for n in p)
    # A tuple and its items are never split by a boundary.
    for n in gm.graph.nodes:
        if n.target is operator.getitem:
            assert [n.args[0] in p for p in parts] == [n in p for p in parts], n.name


@settings(max_examples=300, deadline=None)
@given(graphs())
def test_convex_support_is_one_partition_without_torchs_partitioner(case):
    gm, support = case
    chosen = supported_nodes(gm, support)
    convex = _is_convex(_dag(gm), chosen)
    assert (first_convexity_break(gm, chosen) is None) == convex
    asked = []
    real = fx_partitioner.CapabilityBasedPartitioner

    def spy(*args, **kwargs):
        asked.append(1)
        return real(*args, **kwargs)

    with mock.patch("ethosu_ng.partitioning.proposal.CapabilityBasedPartitioner", spy):
        parts = propose_partitions(gm, support)
    if convex and chosen:
        assert parts == [chosen] and not asked
    else:
        assert asked or not chosen


def test_a_cpu_node_between_two_supported_runs_splits_them():
    graph = Graph()
    x = graph.placeholder("x")
    a = graph.call_function(torch.ops.aten.add.Tensor, (x, x))
    cpu = graph.call_function(torch.ops.aten.mul.Tensor, (a, a))
    b = graph.call_function(torch.ops.aten.add.Tensor, (cpu, a))
    graph.output((b,))
    gm = GraphModule(torch.nn.Module(), graph)
    support = _Names({a.name, b.name})
    assert first_convexity_break(gm, {a, b}) is cpu
    assert sorted(sorted(n.name for n in p) for p in propose_partitions(gm, support)) == [
        [a.name],
        [b.name],
    ]


@pytest.mark.parametrize("blocks", [200])
def test_a_long_supported_chain_is_proposed_in_linear_passes(blocks, monkeypatch):
    """torch's dependency viewer (every node's downstream set) is never built for it."""
    graph = Graph()
    v = graph.placeholder("x")
    for _ in range(blocks):
        v = graph.call_function(torch.ops.aten.add.Tensor, (v, v))
    graph.output((v,))
    gm = GraphModule(torch.nn.Module(), graph)
    built = []
    monkeypatch.setattr(fx_partitioner, "_DependencyViewer", lambda *a: built.append(1) or None)
    support = _Names({n.name for n in gm.graph.nodes if n.op == "call_function"})
    assert [len(p) for p in propose_partitions(gm, support)] == [blocks]
    assert not built
