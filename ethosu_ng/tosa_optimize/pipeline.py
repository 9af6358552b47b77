# SPDX-License-Identifier: BSD-3-Clause
"""The TOSA rewrites in their declared order, run to a fixed point, and the stage's entry point.

Each rewrite class may declare ``runs_after`` (read by ``passes.pipeline.check_order``);
``rewrite_pipeline`` returns the rewrites without the disabled ones and raises
``RewriteOrderError`` if one would run before a rewrite it declares it runs after. ``optimize``
reads the flatbuffer, runs the rewrites in rounds until none changes the graph, checks the
graph's IO contract is unchanged and writes it back; a graph no rewrite touched is returned as
the same bytes. A rewrite that pays on some targets only names their families in ``families``;
``optimize`` given a target skips it on others.
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Optional, Sequence, Tuple, Type

from ethosu_ng.compile_spec import EthosUNGCompileSpec
from ethosu_ng.passes.pipeline import ordered_without
from ethosu_ng.tosa_graph import tosa_io
from ethosu_ng.tosa_optimize import graph as tosa_ir
from ethosu_ng.tosa_optimize.rewrites.add_operand_shift_to_result import AddOperandShiftToResult
from ethosu_ng.tosa_optimize.rewrites.collapse_transpose_rank import CollapseTransposeRank
from ethosu_ng.tosa_optimize.rewrites.compose_transposes import ComposeTransposes
from ethosu_ng.tosa_optimize.rewrites.decompose_transpose import DecomposeTranspose
from ethosu_ng.tosa_optimize.rewrites.drop_identity_data_movement import DropIdentityDataMovement
from ethosu_ng.tosa_optimize.rewrites.fuse_transpose_chain import FuseTransposeChain
from ethosu_ng.tosa_optimize.rewrites.merge_consecutive_rescales import MergeConsecutiveRescales
from ethosu_ng.tosa_optimize.rewrites.merge_reshapes import MergeReshapes
from ethosu_ng.tosa_optimize.rewrites.move_rescale_through_data_movement import (
    MoveRescaleThroughDataMovement,
)
from ethosu_ng.tosa_optimize.rewrites.relayout_elementwise_region import (
    RelayoutElementwiseRegion,
)
from ethosu_ng.tosa_optimize.rewrites.repeat_channels_for_depthwise import (
    RepeatChannelsForDepthwise,
)
from ethosu_ng.tosa_optimize.rewrites.sink_transpose_to_cancel import SinkTransposeToCancel
from ethosu_ng.tosa_optimize.rewrites.slice_before_transpose import SliceBeforeTranspose
from ethosu_ng.tosa_optimize.rewrites.split_shared_add_result import SplitSharedAddResult
from ethosu_ng.tosa_optimize.rewrites.split_shared_rescale import SplitSharedRescale
from ethosu_ng.tosa_optimize.rewrites.stage_broadcast_constant import StageBroadcastConstant
from ethosu_ng.tosa_optimize.rewrites.unit_dim_transpose_to_reshape import (
    UnitDimTransposeToReshape,
)

logger = logging.getLogger(__name__)

REWRITES: Tuple[type, ...] = (
    ComposeTransposes,
    UnitDimTransposeToReshape,
    MergeReshapes,
    FuseTransposeChain,
    SinkTransposeToCancel,
    RelayoutElementwiseRegion,
    DropIdentityDataMovement,
    SliceBeforeTranspose,
    CollapseTransposeRank,
    DecomposeTranspose,
    SplitSharedAddResult,
    SplitSharedRescale,
    AddOperandShiftToResult,
    MoveRescaleThroughDataMovement,
    MergeConsecutiveRescales,
    StageBroadcastConstant,
    RepeatChannelsForDepthwise,
)
# The rewrites that take standalone RESCALEs away (bench/rescale_cycles.py turns them off).
RESCALE_REWRITES: Tuple[type, ...] = (
    SplitSharedAddResult,
    SplitSharedRescale,
    AddOperandShiftToResult,
    MoveRescaleThroughDataMovement,
    MergeConsecutiveRescales,
)
MAX_ROUNDS = 64


class RewriteOrderError(ValueError):
    """A rewrite would run before one it declares it runs after, or an unknown one was named."""


class TosaOptimizeError(RuntimeError):
    """A rewrite broke the graph (operator order, IO contract, no fixed point); names it."""


def target_family(target: str) -> str:
    """``ethos-u85-256`` -> ``ethos-u85``."""
    return "-".join(target.split("-")[:2])


def rewrite_pipeline(
    disabled: Iterable[Type] = (), target: Optional[str] = None
) -> Tuple[type, ...]:
    """``REWRITES`` without ``disabled`` and, given ``target``, without the rewrites whose
    ``families`` leave it out; order-checked."""
    skipped = set(disabled)
    if target is not None:
        family = target_family(target)
        skipped |= {r for r in REWRITES if r.families is not None and family not in r.families}
    return ordered_without(REWRITES, skipped, "TOSA rewrite", RewriteOrderError)


def run_rewrites(
    graph: tosa_ir.Graph,
    rewrites: Sequence[type],
    family: Optional[str] = None,
    spec: Optional[EthosUNGCompileSpec] = None,
) -> Dict[str, int]:
    """Apply ``rewrites`` (for target ``family``, compiled by Vela with ``spec``) in order, in
    rounds, until a round changes nothing; how often each applied."""
    counts: Counter = Counter()
    for _ in range(MAX_ROUNDS):
        changed = []
        for rewrite in rewrites:
            n = rewrite(family, spec).apply(graph)
            if not n:
                continue
            graph.remove_dead()
            try:
                graph.check_order()
            except ValueError as e:
                raise TosaOptimizeError(
                    f"{rewrite.__name__} left the graph out of order: {e}"
                ) from e
            counts[rewrite.__name__] += n
            changed.append(rewrite.__name__)
        if not changed:
            return dict(counts)
    raise TosaOptimizeError(
        f"TOSA rewrites reached no fixed point in {MAX_ROUNDS} rounds; the last round changed "
        f"the graph with {changed}"
    )


@dataclass
class Optimized:
    tosa: bytes
    op_sources: List[dict]
    applied: Dict[str, int] = field(default_factory=dict)  # rewrite name -> applications

    @property
    def changed(self) -> bool:
        return bool(self.applied)


def remap_op_sources(graph: tosa_ir.Graph, op_sources: Sequence[dict]) -> List[dict]:
    """op_sources for the rewritten graph: each operator takes the entry of the operator it
    inherits its source from (``Operator.source``), under its own output name."""
    by_output = {s["tosa_output"]: s for s in op_sources if s.get("tosa_output")}
    out = [s for s in op_sources if not s.get("tosa_output")]
    for op in graph.ops:
        src = by_output.get(op.source)
        if src is not None and op.outputs:
            out.append({**src, "tosa_output": op.outputs[0]})
    return out


def optimize(
    flatbuffer: bytes,
    op_sources: Optional[Sequence[dict]] = None,
    disabled: Iterable[Type] = (),
    verify: bool = False,
    what: str = "TOSA graph",
    target: Optional[str] = None,
    spec: Optional[EthosUNGCompileSpec] = None,
) -> Optimized:
    """Run the rewrites on one TOSA flatbuffer. A graph the IR does not model is returned as is.

    ``verify``: run the original and the optimised graph on the TOSA reference model on random
    inputs; a difference raises ``verify.NotBitExact`` naming the rewrites that cause it alone.
    ``target``: the Ethos-U target Vela compiles for (None: every rewrite); ``spec``: the
    compile spec Vela compiles with (None: the target's defaults)."""
    if spec is None and target is not None:
        spec = EthosUNGCompileSpec(target)
    if spec is not None and target is None:
        target = spec.target
    result = _optimize(flatbuffer, op_sources, disabled, target, spec)
    if verify and result.changed:
        from ethosu_ng.tosa_optimize.verify import NotBitExact, check_bit_exact

        try:
            check_bit_exact(flatbuffer, result.tosa, what=what)
        except NotBitExact as e:
            culprits = []
            for name in result.applied:
                alone = [r for r in REWRITES if r.__name__ != name]
                try:
                    check_bit_exact(
                        flatbuffer,
                        _optimize(flatbuffer, (), alone, target, spec).tosa,
                        what=what,
                    )
                except NotBitExact:
                    culprits.append(name)
            raise NotBitExact(
                f"{e}; rewrites applied: {result.applied}; changing bits on their own: "
                f"{culprits or 'none (only in combination)'}"
            ) from e
    return result


def _optimize(flatbuffer, op_sources, disabled, target, spec) -> Optimized:
    sources = list(op_sources or [])
    rewrites = rewrite_pipeline(disabled, target)
    try:
        graph = tosa_ir.read(flatbuffer)
    except tosa_ir.UnsupportedGraph as e:
        logger.info("TOSA optimisation skipped: %s", e)
        return Optimized(flatbuffer, sources)
    family = target_family(target) if target else None
    applied = run_rewrites(graph, rewrites, family, spec)
    if not applied:
        return Optimized(flatbuffer, sources)
    out = tosa_ir.write(graph)
    before, after = tosa_io(flatbuffer), tosa_io(out)
    if before != after:
        raise TosaOptimizeError(
            f"TOSA rewrites {sorted(applied)} changed the graph's IO: {before} -> {after}"
        )
    return Optimized(out, remap_op_sources(graph, sources), applied)
