# SPDX-License-Identifier: BSD-3-Clause
"""Find the operators a failing NPU compile is due to, so they alone move to the CPU.

Bisection over a failing partition's compute ops in graph order. Each half is re-partitioned
under the boundary contract (``propose``; a half may come back as several convex, integer-edged
partitions) and compiled; a failing piece is searched further. When both halves compile alone,
the failure needs ops from both: the shortest failing prefix is found by binary search and its
last op is the culprit (moving it breaks the combination). One culprit per failing partition and
round; the partitioner re-partitions and compiles again until everything compiles.

Op signatures (op, argument types, constant arguments) that failed are remembered: a later
failing partition holding the same signature is tried without those ops, and if that compiles
they move at once, without bisecting again, so a model with 20 identical blocks pays for one
search, not 20. Failing that, it is tried without the ops of the same *kind* (op, argument ranks
and which dims are 1: the same layer at another stage of the network, e.g. Swin's window
attention at each resolution). A match is only a guess: one whose removal leaves the partition
failing moves nothing; what still fails without it is searched and the op found moves, and the
next round tries the match again (a deviation the verified compile finds at one element is not
due to every op that looks like the one it was found on before).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence, Set, Tuple

import torch
from torch.fx import Node

from ethosu_ng.ops import op_name
from ethosu_ng.vela.compiler import VelaError

logger = logging.getLogger(__name__)

Propose = Callable[[Set[Node]], List[Set[Node]]]
# Compile candidate partitions; None where it compiled, the VelaError where it did not.
TryCompile = Callable[[List[Set[Node]]], List[Optional[VelaError]]]


def _describe(a, tensor: Callable[[torch.Tensor], str], constant: Callable[[object], str]) -> str:
    """Arguments as Vela would see them: tensors by ``tensor``, other values by ``constant``."""
    if isinstance(a, Node):
        v = a.meta.get("val")
        return tensor(v) if isinstance(v, torch.Tensor) else "?"
    if isinstance(a, (list, tuple)):
        return "(" + ",".join(_describe(x, tensor, constant) for x in a) + ")"
    if isinstance(a, dict):
        return (
            "{"
            + ",".join(f"{k}:{_describe(v, tensor, constant)}" for k, v in sorted(a.items()))
            + "}"
        )
    return constant(a)


def _signature(node: Node, tensor, constant) -> str:
    return (
        f"{op_name(node.target)}{_describe(node.args, tensor, constant)}"
        f"{_describe(node.kwargs, tensor, constant)}->{_describe(node, tensor, constant)}"
    )


def op_signature(node: Node) -> str:
    """What Vela sees of an op: its kind, argument types/shapes and constant arguments."""
    return _signature(node, lambda v: f"{v.dtype}{tuple(v.shape)}", repr)


def op_kind(node: Node) -> str:
    """Coarser than ``op_signature``: the op and its arguments' ranks and unit dims."""
    return _signature(
        node,
        lambda v: f"{v.dtype}[{''.join('1' if d == 1 else 'n' for d in v.shape)}]",
        lambda c: "c",
    )


@dataclass
class Culprit:
    node: Node
    error: VelaError  # what Vela said on the smallest failing piece holding the op
    known: str = ""  # "signature" / "kind": matched an op that failed before (no search)


@dataclass
class CulpritSearch:
    propose: Propose
    try_compile: TryCompile
    is_compute: Callable[[Node], bool]
    order: Callable[[Node], int]
    failed_signatures: Dict[str, VelaError] = field(default_factory=dict)
    failed_kinds: Dict[str, VelaError] = field(default_factory=dict)
    compiles: int = 0  # candidate partitions compiled while searching (for the report / tests)

    def culprits(self, part: Set[Node], error: VelaError) -> List[Culprit]:
        """Ops of a partition that failed with ``error`` to keep on the CPU."""
        compute = sorted((n for n in part if self.is_compute(n)), key=self.order)
        guessed: List[Culprit] = []
        left: List[Tuple[Set[Node], VelaError]] = []
        for how, failed, key in (
            ("signature", self.failed_signatures, op_signature),
            ("kind", self.failed_kinds, op_kind),
        ):
            have = {c.node for c in guessed}
            more = [
                Culprit(n, failed[key(n)], how)
                for n in compute
                if n not in have and key(n) in failed
            ]
            if not more:
                continue
            guessed += more
            left = self._failures(part - {c.node for c in guessed})
            if not left:
                return guessed
        if left:  # no match cleared the partition: search what fails without them
            part, error = left[0]
        found = self._search(part, error)
        self.failed_signatures[op_signature(found.node)] = found.error
        self.failed_kinds[op_kind(found.node)] = found.error
        return [found]

    def _failures(self, nodes: Set[Node]) -> List[Tuple[Set[Node], VelaError]]:
        """The pieces ``nodes`` re-partitions into that do not compile, with their errors."""
        pieces = self._pieces(nodes)
        return [(p, e) for p, e in zip(pieces, self._compile(pieces)) if e is not None]

    def _compile(self, parts: List[Set[Node]]) -> List[Optional[VelaError]]:
        parts = [p for p in parts if any(self.is_compute(n) for n in p)]
        if not parts:
            return []
        self.compiles += len(parts)
        return self.try_compile(parts)

    def _pieces(self, nodes: Set[Node]) -> List[Set[Node]]:
        return [p for p in self.propose(nodes) if any(self.is_compute(n) for n in p)]

    def _prefix(self, part: Set[Node], compute: Sequence[Node], k: int) -> Set[Node]:
        """The first ``k`` compute ops with everything up to the next one (their quantize
        nodes), so no op loses its integer output to the cut."""
        end = self.order(compute[k]) if k < len(compute) else None
        return {n for n in part if end is None or self.order(n) < end}

    def _search(self, part: Set[Node], error: VelaError) -> Culprit:
        while True:
            compute = sorted((n for n in part if self.is_compute(n)), key=self.order)
            if len(compute) <= 1:
                return Culprit(compute[0], error)
            mid = len(compute) // 2
            first = self._prefix(part, compute, mid)
            pieces = self._pieces(first) + self._pieces(part - first)
            verdicts = self._compile(pieces)
            failing = [(p, e) for p, e in zip(pieces, verdicts) if e is not None]
            if failing:
                part, error = failing[0]
                continue
            return self._shortest_failing_prefix(part, compute, mid, error)

    def _shortest_failing_prefix(
        self, part: Set[Node], compute: Sequence[Node], passes: int, error: VelaError
    ) -> Culprit:
        """The first ``passes`` compute ops compile, all of them do not: binary search between."""
        fails = len(compute)
        while fails - passes > 1:
            k = (passes + fails) // 2
            pieces = self._pieces(self._prefix(part, compute, k))
            errs = [e for e in self._compile(pieces) if e is not None]
            if errs:
                fails, error = k, errs[0]
            else:
                passes = k
        return Culprit(compute[fails - 1], error)
