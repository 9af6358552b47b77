# SPDX-License-Identifier: BSD-3-Clause
"""The culprit search moves the ops a failure is due to, never an op only for looking like one.

A property over chains of ops of a few kinds, some of them real culprits (an op that fails any
partition holding it, or a pair that fails one holding both), driven round by round as the
partitioner drives it: each round the remaining ops re-partition into contiguous runs, the
failing runs are searched, and the culprits move to the CPU. Whatever the graph:

- the search ends with every partition compiling, in a bounded number of rounds;
- an op moves only with ops that take a real culprit out of its partition or cut a failing pair
  of it apart (a signature match moves its whole group: the same op twenty times over pays for
  one search), so a match by signature or kind that does not clear a partition moves nothing
  (unchecked, such matches moved 13 of swin_tiny's muls on ethos-u85-256, one per round, while
  the deviation they were moved for stayed the same).
"""

from typing import Dict, FrozenSet, List, Set, Tuple

import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st
from torch.fx import Graph, Node

from ethosu_ng.partitioning.culprit_search import CulpritSearch, op_kind, op_signature
from ethosu_ng.vela.compiler import VelaError

# (op, output shape): two signatures share each kind, so a kind match can catch innocents.
_KINDS = [
    (torch.ops.aten.mul.Tensor, (1, 8, 4)),
    (torch.ops.aten.mul.Tensor, (1, 16, 4)),
    (torch.ops.aten.add.Tensor, (1, 8, 4)),
    (torch.ops.aten.add.Tensor, (1, 16, 4)),
    (torch.ops.aten.relu.default, (1, 8, 4)),
]


def _chain(kinds: List[int]) -> List[Node]:
    graph = Graph()
    x = graph.placeholder("x")
    x.meta["val"] = torch.empty(1, 8, 4)
    nodes = []
    for k in kinds:
        op, shape = _KINDS[k]
        args = (x,) if op is torch.ops.aten.relu.default else (x, x)
        x = graph.call_function(op, args)
        x.meta["val"] = torch.empty(shape)
        nodes.append(x)
    return nodes


def _runs(nodes: Set[Node], chain: List[Node]) -> List[Set[Node]]:
    """Contiguous runs of ``nodes`` in chain order: the convex partitions of a chain."""
    runs, run = [], set()
    for n in chain:
        if n in nodes:
            run.add(n)
        elif run:
            runs, run = runs + [run], set()
    return runs + [run] if run else runs


def _drive(chain, guilty: Set[Node], pairs: List[Tuple[Node, Node]], use_memory=True):
    """Partition, compile and move culprits until every partition compiles.

    Returns the rounds taken and, per moved op, what justifies the move: the real culprits moved
    out of the same partition in the same round, and the first op of each failing pair of that
    partition the ops moved with it cut apart."""

    def error(part: Set[Node]):
        if part & guilty or any(a in part and b in part for a, b in pairs):
            return VelaError("p", "ethos-u85-256", "failed", "planted")
        return None

    excluded: Set[Node] = set()
    search = CulpritSearch(
        propose=lambda nodes: _runs(nodes - excluded, chain),
        try_compile=lambda parts: [error(p) for p in parts],
        is_compute=lambda n: True,
        order=chain.index,
    )
    moved_with: Dict[Node, FrozenSet[Node]] = {}
    real = guilty | {n for p in pairs for n in p}
    for round_ in range(len(chain) + 1):
        failures = [(p, e) for p in _runs(set(chain) - excluded, chain) if (e := error(p))]
        if not failures:
            return round_, moved_with
        for part, e in failures:
            moving = {c.node for c in search.culprits(part, e)}
            assert moving and moving <= part
            cut = {
                a
                for a, b in pairs
                if {a, b} <= part
                and any(
                    min(chain.index(a), chain.index(b))
                    < chain.index(m)
                    < max(chain.index(a), chain.index(b))
                    for m in moving
                )
            }
            for n in moving:
                moved_with[n] = frozenset((moving & real) | cut)
            excluded |= moving
        if not use_memory:
            search.failed_signatures.clear()
            search.failed_kinds.clear()
    raise AssertionError("the search did not converge")


@st.composite
def _graphs(draw):
    kinds = draw(st.lists(st.integers(0, len(_KINDS) - 1), min_size=3, max_size=24))
    chain = _chain(kinds)
    idx = st.integers(0, len(chain) - 1)
    guilty = {chain[i] for i in draw(st.lists(idx, max_size=3))}
    pairs = [
        (chain[a], chain[b]) for a, b in draw(st.lists(st.tuples(idx, idx), max_size=2)) if a != b
    ]
    return chain, guilty, pairs


@settings(max_examples=150, deadline=None)
@given(_graphs())
@example(
    # A kind match that cuts a failing pair apart: relu_1 shares relu's signature and lies
    # between mul_3 and mul_7.
    (
        chain := _chain([0, 0, 0, 4, 0, 0, 0, 0, 4, 0]),
        set(),
        [(chain[0], chain[3]), (chain[4], chain[9])],
    )
)
def test_an_op_moves_only_beside_a_real_culprit(graph):
    chain, guilty, pairs = graph
    rounds, moved_with = _drive(chain, guilty, pairs)
    assert guilty <= set(moved_with)  # every failing op left the NPU
    for n, culprits in moved_with.items():
        assert culprits, (
            f"{op_signature(n)} moved in a round that moved no real culprit out of its partition"
            " and cut no failing pair apart"
        )
    # Each round clears at least one real culprit from every failing partition.
    assert rounds <= len(guilty) + len(pairs) + 1


def test_a_kind_that_failed_elsewhere_is_not_blamed_for_another_failure():
    # mul(8) fails; the muls of shape 16 share its kind but not its failure; the add fails too.
    chain = _chain([0, 1, 2, 1, 1, 4, 1])
    rounds, moved_with = _drive(chain, {chain[0], chain[2]}, [])
    assert set(moved_with) == {chain[0], chain[2]}, [op_kind(n) for n in moved_with]
    assert rounds == 2


def test_identical_failing_ops_move_together_after_one_search():
    chain = _chain([0, 2, 0, 2, 0, 2, 0])
    guilty = {n for n in chain if n.target is torch.ops.aten.mul.Tensor}
    rounds, moved_with = _drive(chain, guilty, [])
    assert set(moved_with) == guilty
    assert rounds == 2
