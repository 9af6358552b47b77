# SPDX-License-Identifier: BSD-3-Clause
"""A chain of RESHAPEs and TRANSPOSEs -> one transpose of a finer view of its input.

Whatever reshapes sit between them, two or more transposes in a row move each element once:
split the input into the dimensions every reshape of the chain agrees with ("atoms"), and the
chain is one permutation of those atoms. MobileViT's unfold is such a chain (NHWC -> NCHW for
the convolution's layout, then ``[B*C*nh, ph, nw, pw]`` ``(0, 2, 1, 3)``, then ``[B, C, N, P]``
``(0, 3, 2, 1)``): the channel dimension is shuffled out of the innermost place and back. As one
transpose it keeps the channels innermost, which ``DecomposeTranspose`` runs as a few cheap
block swaps.

Applied when it lowers the chain's estimated cost (``transpose_cost``): the block swaps the
fused transpose needs against those of the transposes it replaces, where a transpose that moves
its innermost dimension counts as ``INNERMOST_MOVE_COST`` swaps (measured on ethos-u85-256:
``[1024, 3, 96]`` ``(0, 2, 1)`` 786,756 NPU cycles, ``(1, 0, 2)`` 148,006) and a layout transpose
Vela folds into its neighbour counts nothing.
"""

from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

from ethosu_ng.tosa_optimize.graph import Graph, Operator
from ethosu_ng.tosa_optimize.rewrites import TosaRewrite
from ethosu_ng.tosa_optimize.rewrites._layout import perm_of, single_consumer, swap_plan
from ethosu_ng.tosa_optimize.rewrites.collapse_transpose_rank import (
    collapse,
    is_nhwc_nchw_transpose,
)
from ethosu_ng.tosa_optimize.rewrites.compose_transposes import ComposeTransposes
from ethosu_ng.tosa_optimize.rewrites.merge_reshapes import MergeReshapes
from ethosu_ng.tosa_optimize.rewrites.unit_dim_transpose_to_reshape import moves_only_unit_dims

INNERMOST_MOVE_COST = 4
_CHAIN_OPS = ("RESHAPE", "TRANSPOSE")


def transpose_cost(shape: Sequence[int], perm: Sequence[int]) -> int:
    """Estimated Vela passes of ``transpose(x, perm)``, in rank-3 block swaps."""
    if moves_only_unit_dims(shape, perm) or is_nhwc_nchw_transpose(shape, perm):
        return 0
    _, in_perm = collapse(shape, perm) or (list(shape), list(perm))
    if in_perm[-1] != len(in_perm) - 1:
        return INNERMOST_MOVE_COST
    if len(in_perm) <= 3:
        return 1
    plan = swap_plan(in_perm)
    return len(plan) if plan is not None else INNERMOST_MOVE_COST + len(in_perm)


def fused_permutation(
    in_shape: Sequence[int], steps: Sequence[Tuple[str, Sequence[int]]]
) -> Optional[Tuple[List[int], List[int]]]:
    """(atom sizes in input order, perm) with ``reshape(x, atoms)`` transposed by ``perm`` equal
    to ``x`` put through ``steps`` (("RESHAPE", shape) or ("TRANSPOSE", perm)) up to a final
    reshape; None if a reshape cuts an atom where no whole factor fits."""
    sizes = {k: int(d) for k, d in enumerate(in_shape) if d != 1}
    input_order = list(sizes)
    dims: List[List[int]] = [[k] if d != 1 else [] for k, d in enumerate(in_shape)]
    fresh = len(in_shape)
    for kind, arg in steps:
        if kind == "TRANSPOSE":
            dims = [dims[p] for p in arg]
            continue
        flat = [a for d in dims for a in d]
        dims = []
        for want in arg:
            dim: List[int] = []
            need = int(want)
            while need > 1:
                if not flat:
                    return None
                a = flat[0]
                if sizes[a] <= need:
                    if need % sizes[a]:
                        return None
                    need //= sizes[a]
                    dim.append(flat.pop(0))
                    continue
                if sizes[a] % need:
                    return None
                # Split atom a into an outer part of size ``need`` and the inner rest.
                outer, inner = fresh, fresh + 1
                fresh += 2
                sizes[outer], sizes[inner] = need, sizes[a] // need
                k = input_order.index(a)
                input_order[k : k + 1] = [outer, inner]
                flat[0:1] = [outer, inner]
                dim.append(flat.pop(0))
                need = 1
            dims.append(dim)
        if flat:
            return None
    final = [a for d in dims for a in d]
    return [sizes[a] for a in input_order], [input_order.index(a) for a in final]


class FuseTransposeChain(TosaRewrite):
    # Adjacent pairs are ComposeTransposes' (it names what it did); before the transposes are
    # collapsed and split, so it sees the chain as the lowering wrote it.
    runs_after = (ComposeTransposes, MergeReshapes)

    def apply(self, graph: Graph) -> int:
        consumers = graph.consumers()
        producers = graph.producers()
        changed = 0
        alive = {id(o) for o in graph.ops}
        for first in list(graph.ops):
            if first.op not in _CHAIN_OPS or id(first) not in alive:
                continue
            before = producers.get(first.inputs[0])
            if (
                before is not None
                and before.op in _CHAIN_OPS
                and single_consumer(graph, consumers, before.outputs[0]) is first
            ):
                continue  # not the start of its chain
            chain = [first]
            while True:
                nxt = single_consumer(graph, consumers, chain[-1].outputs[0])
                if nxt is None or nxt.op not in _CHAIN_OPS:
                    break
                chain.append(nxt)
            transposes = [op for op in chain if op.op == "TRANSPOSE"]
            if len(transposes) < 2:
                continue
            x, y = first.inputs[0], chain[-1].outputs[0]
            if graph.is_constant(x):
                continue  # Vela moves constant data at compile time
            steps = [
                (op.op, perm_of(op) if op.op == "TRANSPOSE" else graph.shape_of(op.outputs[0]))
                for op in chain
            ]
            fused = fused_permutation(graph.shape_of(x), steps)
            if fused is None:
                continue
            atoms, perm = fused
            old = sum(transpose_cost(graph.shape_of(t.inputs[0]), perm_of(t)) for t in transposes)
            if transpose_cost(atoms, perm) >= old:
                continue
            self._replace(graph, chain, x, y, atoms, perm)
            changed += 1
            consumers, producers = graph.consumers(), graph.producers()
            alive = {id(o) for o in graph.ops}
        return changed

    @staticmethod
    def _replace(graph: Graph, chain: List[Operator], x: str, y: str, atoms, perm) -> None:
        """x -> RESHAPE(atoms) -> TRANSPOSE(perm) -> RESHAPE -> y, in place of ``chain``; the
        chain's last op becomes that last reshape, the rest goes dead."""
        last = chain[-1]
        attr = next(op.attr for op in chain if op.op == "TRANSPOSE")
        view = graph.insert_reshape(last, x, f"{y}_atoms", atoms)
        graph.become_reshape(last, graph.insert_transpose(last, view, f"{y}_fused", perm, attr))
