# SPDX-License-Identifier: BSD-3-Clause
"""Proposing partitions: the supported nodes, grouped so that no partition is convex-broken.

A partition is *convex* when no path leaves it and comes back (through a node outside it):
otherwise the delegate would need an input computed from its own output. When the supported
nodes as a whole are convex, they are one partition; deciding that takes one pass over the
graph each way. torch.fx's ``CapabilityBasedPartitioner`` answers every case, but builds the
set of every node downstream of every node first, which grows with the square of the graph
(a 64-block ViT stack: most of the partitioner's time). It is asked only when the supported
nodes are not convex as a whole, where a node on the CPU splits them.
"""

from __future__ import annotations

import operator
from typing import Dict, List, Set

from torch.fx import GraphModule, Node
from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
from torch.fx.passes.operator_support import OperatorSupportBase


def _is_getitem(node: Node) -> bool:
    return node.op == "call_function" and node.target is operator.getitem


def supported_nodes(graph_module: GraphModule, support: OperatorSupportBase) -> Set[Node]:
    """The nodes ``support`` accepts, each tuple's ``getitem`` readers where the tuple is.

    A node whose every reader is a ``getitem`` returns a tuple: its items go with it, as
    torch's partitioner places them (a tuple cannot cross a delegate boundary)."""
    modules = dict(graph_module.named_modules())
    chosen = {n for n in graph_module.graph.nodes if support.is_node_supported(modules, n)}
    for node in graph_module.graph.nodes:  # topological: a nested tuple's producer comes first
        if node.users and all(_is_getitem(u) for u in node.users):
            if node in chosen:
                chosen.update(node.users)
            else:
                chosen.difference_update(node.users)
    return chosen


def first_convexity_break(graph_module: GraphModule, chosen: Set[Node]) -> Node | None:
    """A node outside ``chosen`` on a path from ``chosen`` back into it, or None if none is.

    Linear: whether each node has a chosen ancestor (one pass forward) and a chosen descendant
    (one pass backward)."""
    nodes = list(graph_module.graph.nodes)
    after: Dict[Node, bool] = {}
    for n in nodes:
        after[n] = any(p in chosen or after[p] for p in n.all_input_nodes)
    before: Dict[Node, bool] = {}
    for n in reversed(nodes):
        before[n] = any(u in chosen or before[u] for u in n.users)
    return next((n for n in nodes if n not in chosen and after[n] and before[n]), None)


def propose_partitions(graph_module: GraphModule, support: OperatorSupportBase) -> List[Set[Node]]:
    """Convex partitions of the nodes ``support`` accepts, covering all of them.

    One partition when the supported nodes are convex as a whole; otherwise torch's
    ``CapabilityBasedPartitioner`` (single-node partitions allowed) decides."""
    chosen = supported_nodes(graph_module, support)
    if not chosen:
        return []
    if first_convexity_break(graph_module, chosen) is None:
        return [chosen]
    proposals = CapabilityBasedPartitioner(
        graph_module, support, allows_single_node_partition=True
    ).propose_partitions()
    return [set(p.nodes) for p in proposals]
