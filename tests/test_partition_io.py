# SPDX-License-Identifier: BSD-3-Clause
"""``partition_io``: the values that flow into and out of a set of nodes, which the boundary
contract checks and the partition report lists (``PartitionReport.io``). Drawn over graphs of
any shape and any subset of their ops, not only the partitions the partitioner proposes."""

import operator

from hypothesis import given, settings
from hypothesis import strategies as st
from torch.fx import Graph

from ethosu_ng.partitioning.boundary import node_order, partition_io


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_partition_io_is_every_value_crossing_the_partition(data):
    """Inputs: each value a partition op reads that is computed outside it and is not a
    constant, once. Outputs: each partition op read outside it (by an op or as a program
    output), once, in graph order."""
    graph = Graph()
    n_inputs = data.draw(st.integers(1, 3), label="placeholders")
    nodes = [graph.placeholder(f"x{k}") for k in range(n_inputs)]
    constants = {n.name for n in nodes if data.draw(st.booleans(), label=f"{n.name} constant")}
    ops = []
    for _ in range(data.draw(st.integers(1, 8), label="ops")):
        reads = data.draw(st.lists(st.sampled_from(nodes), min_size=1, max_size=3))
        op = graph.call_function(operator.add if len(reads) > 1 else operator.neg, tuple(reads))
        nodes.append(op)
        ops.append(op)
    returned = data.draw(st.lists(st.sampled_from(ops), min_size=1, unique=True))
    graph.output(tuple(returned))
    part = set(data.draw(st.lists(st.sampled_from(ops), min_size=1, unique=True)))

    io = partition_io(part, constants)

    want_inputs = {
        i for p in part for i in p.all_input_nodes if i not in part and i.name not in constants
    }
    want_outputs = {p for p in part if any(u not in part for u in p.users)}
    assert len(io.inputs) == len(set(io.inputs)) and set(io.inputs) == want_inputs
    assert io.outputs == sorted(want_outputs, key=node_order)
