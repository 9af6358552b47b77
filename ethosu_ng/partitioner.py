# SPDX-License-Identifier: BSD-3-Clause
"""EthosUNGPartitioner: picks what runs on the NPU and makes every boundary integer.

Stages (each a separate module):
1. ``transform_for_pre_decomposition``: our FX passes (``passes/pipeline.py``; e.g.
   CommuteQDQThroughPassThroughPass moves (de)quantize off data-movement ops so they run in int8),
   then DecomposeInPlacePass decomposes the few nodes executorch would otherwise retrace the whole
   program for (the only point where a partitioner may edit the graph).
2. support: upstream's TOSA / Ethos-U operator checks (through ``upstream``) minus ``cpu_ops``.
3. proposal: ``partitioning.proposal`` (convex partitions, no cycles; linear where the supported
   nodes are convex as a whole).
4. boundary: BoundaryContract.shrink removes nodes until no float tensor crosses; the rest are
   re-proposed until a fixpoint, so every partition stays convex *and* integer at its edges.
5. verify: BoundaryContract.verify_tags raises BoundaryContractError naming the node otherwise.
"""

from __future__ import annotations

import logging
import warnings
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, Dict, Iterable, List, Optional, Set, Tuple

import torch
from executorch.exir.backend.partitioner import DelegationSpec, Partitioner, PartitionResult
from executorch.exir.backend.utils import tag_constant_data
from torch.export import ExportedProgram
from torch.fx import GraphModule, Node
from torch.fx.passes.operator_support import OperatorSupportBase, chain

from ethosu_ng.adapters import arm as upstream
from ethosu_ng.adapters import exir

# Importing the class is what lets to_backend find it (among BackendDetails subclasses).
from ethosu_ng.backend import EthosUNGBackend  # noqa: F401
from ethosu_ng.compile_spec import BACKEND_ID, EthosUNGCompileSpec
from ethosu_ng.compiler.compiled_cache import CompiledCache, attach
from ethosu_ng.compiler.pipeline import LoweringError, compile_partitions
from ethosu_ng.compiler.verify_lowering import LoweringDeviation
from ethosu_ng.compiler.verify_npu import NpuDeviation
from ethosu_ng.ops import (
    CONTROL_FLOW_OPS,
    CPU_PINNED_META,
    NO_COMPUTE_OPS,
    is_compute,
    op_name,
    resolve_op_names,
)
from ethosu_ng.partitioning.boundary import BoundaryContract, PartitionIO, node_order, partition_io
from ethosu_ng.partitioning.control_flow import (
    clear_control_flow_tags,
    reject_cpu_unrunnable,
    tag_control_flow_graphs,
)
from ethosu_ng.partitioning.culprit_search import CulpritSearch
from ethosu_ng.partitioning.delegate_io import QPARAMS_META, integer_tensor_qparams
from ethosu_ng.partitioning.partition_program import RealTensors, carve, fingerprint
from ethosu_ng.partitioning.proposal import propose_partitions
from ethosu_ng.partitioning.target_limits import TargetLimits
from ethosu_ng.passes import non_core_aten_ops, pass_pipeline, run_passes
from ethosu_ng.passes.decompose_in_place import DecomposeInPlacePass, functional_activations
from ethosu_ng.passes.qdq_nodes import rename_outputs
from ethosu_ng.vela import process as vela_process
from ethosu_ng.vela.compiler import VelaError

logger = logging.getLogger(__name__)

# What the verified compile finds: ``strict`` makes these export errors.
_DEVIATIONS = (NpuDeviation, LoweringDeviation)

# Each round moves at least one op per failing partition to the CPU; a model needing more rounds
# than this is failing for a reason bisection will not fix.
_MAX_FALLBACK_ROUNDS = 16


@dataclass
class PartitionReport:
    """Why each node was (not) delegated; filled by ``partition``."""

    partitions: Dict[str, List[str]] = field(default_factory=dict)  # tag -> node names
    cpu_reasons: Dict[str, str] = field(default_factory=dict)  # node name -> reason
    cpu_targets: Dict[str, str] = field(default_factory=dict)  # node name -> op name
    io: Dict[str, PartitionIO] = field(default_factory=dict, repr=False)
    # node name -> why: ops moved to the CPU because Vela failed on them (culprit_search)
    compiler_fallback: Dict[str, str] = field(default_factory=dict)
    fallback_compiles: int = 0  # candidate partitions compiled to find them
    # node name -> op: ops kept whole for the NPU that ended on the CPU, which has no kernel
    # for them (non_core_aten_ops.KEPT_WHEN_QUANTIZED, or any op without an out variant, such as
    # aten.pad); lowering again with them in ``decomposed_ops`` (or, for the kept-when-quantized
    # ops, ``cpu_ops``) writes them in core ATen (``ethosu_ng.export.lower`` does).
    no_cpu_kernel: Dict[str, str] = field(default_factory=dict)


class _PinnedToCpu(OperatorSupportBase):
    def __init__(self, names: Set[str], reasons: Dict[str, str]):
        self.names, self.reasons = names, reasons

    def is_node_supported(self, submodules, node: Node) -> bool:
        if node.op != "call_function":
            return True
        pinned_as = (node.meta.get("custom") or {}).get(CPU_PINNED_META)
        if op_name(node.target) in self.names or pinned_as:
            self.reasons.setdefault(
                node.name, "pinned to CPU by cpu_ops" + (f" ({pinned_as})" if pinned_as else "")
            )
            return False
        return True


class _Allowed(OperatorSupportBase):
    def __init__(self, nodes: Set[Node]):
        self.nodes = nodes

    def is_node_supported(self, submodules, node: Node) -> bool:
        return node in self.nodes


class _NotExcluded(OperatorSupportBase):
    def __init__(self, excluded: Dict[Node, str]):
        self.excluded = excluded

    def is_node_supported(self, submodules, node: Node) -> bool:
        return node not in self.excluded


class EthosUNGPartitioner(Partitioner):
    """Partitioner for ``to_edge_transform_and_lower``.

    Args:
        compile_spec: an ``EthosUNGCompileSpec``.
        cpu_ops: edge/ATen op overloads or their names (``"aten.bmm.default"``) to keep on CPU.
        decomposed_ops: ops never kept whole for the NPU: written in core ATen everywhere, on
            the NPU and on the CPU alike.
        disabled_passes: pass classes of ``ethosu_ng.passes`` not to run (to show what a pass
            guards; every guarantee of a disabled pass is void).
    """

    def __init__(
        self,
        compile_spec: EthosUNGCompileSpec,
        cpu_ops: Iterable = (),
        disabled_passes: Iterable[type] = (),
        decomposed_ops: Iterable = (),
    ):
        if not isinstance(compile_spec, EthosUNGCompileSpec):
            raise TypeError(
                f"compile_spec must be an EthosUNGCompileSpec, got {type(compile_spec).__name__}"
            )
        self.compile_spec = compile_spec
        self.cpu_ops = resolve_op_names(cpu_ops)
        self.decomposed_ops = resolve_op_names(decomposed_ops)
        self._kept_whole: Set[str] = set()  # names of the ops ops_to_not_decompose kept
        self.passes = pass_pipeline(disabled_passes)
        self.delegation_spec = DelegationSpec(BACKEND_ID, compile_spec.to_compile_specs())
        self.report: Optional[PartitionReport] = None
        self._real_tensors: Optional[RealTensors] = None
        # Blobs compiled by ``partition``, waiting for ``preprocess`` (reached through node meta).
        self.compiled = CompiledCache()
        # Vela's import in the zygote overlaps executorch's edge generation.
        vela_process.prestart()

    # -- stage 1 ------------------------------------------------------------------------------
    def transform_for_pre_decomposition(self, program: ExportedProgram) -> ExportedProgram:
        out = program.graph_module.graph.output_node()
        names_before = [a.name if isinstance(a, Node) else None for a in out.args[0]]
        for n in program.graph_module.graph.nodes:
            if n.op == "call_function" and op_name(n.target) in self.cpu_ops:
                n.meta.setdefault("custom", {})[CPU_PINNED_META] = op_name(n.target)
        program = run_passes(program, self.passes, self.compile_spec)
        functional_activations(program)
        kept, per_node = self.ops_to_not_decompose(program)
        if per_node is None:  # with a per-node filter executorch decomposes everything anyway
            table = exir.decomposition_table()
            for op in kept:
                table.pop(op, None)
            program = DecomposeInPlacePass(table)(program)
        # Passes re-type or replace output nodes; the signature names them by position.
        rename_outputs(program, names_before, program.graph_module.graph.output_node().args[0])
        # ``partition`` will get this program with fake parameters; remember the real ones.
        self._real_tensors = RealTensors(program)
        return program

    def ops_to_not_decompose(
        self, program: ExportedProgram
    ) -> Tuple[List[torch._ops.OpOverload], Optional[Callable[[Node], bool]]]:
        ops, keep = upstream.ops_to_not_decompose(self.compile_spec, program)
        # A pinned op must decompose normally: it will not be delegated, and the CPU needs core
        # ATen.
        ops = [op for op in ops if op_name(op) not in self.cpu_ops | self.decomposed_ops]
        # Ops outside core ATen pass the edge verifier only if kept (passes/non_core_aten_ops.py).
        non_core = non_core_aten_ops.present(program)
        ops += sorted(non_core - set(ops), key=str)

        def filter_fn(node: Node) -> bool:
            if node.target in non_core_aten_ops.NON_CORE_ATEN_OPS:
                return non_core_aten_ops.kept_whole(node)
            if op_name(node.target) in self.cpu_ops | self.decomposed_ops:
                return False
            return keep(node) if keep is not None else True

        # A filter makes executorch decompose the whole program three times (EDGE_DO_NOT_DECOMP)
        # instead of once or twice: on mobilenet_v3_small 6.3 vs 4.1 CPU s of about 10 s of edge
        # generation (docs/benchmarks.md). When every node of a kept op passes it, the
        # answer is known: keep exactly the ops present and return no filter. A node that passes
        # here passes after decomposition too (its DQ inputs, Q users and dtype do not change).
        # Only the top-level graph is checked, so a program with control flow keeps the filter.
        # Left unchecked: a node of a kept op that a decomposition creates (none is known for
        # upstream's list) is kept if that op already occurs, and decomposed if not.
        # Without a filter executorch excepts from its verifier only the kept ops it would have
        # decomposed, which a non-core op without a decomposition in its table is not.
        nodes = [n for n in program.graph_module.graph.nodes if n.op == "call_function"]
        if not non_core and not any(
            isinstance(n.target, torch._ops.HigherOrderOperator) for n in nodes
        ):
            kept = set(ops)
            present = {n.target for n in nodes if n.target in kept}
            if all(filter_fn(n) for n in nodes if n.target in present):
                # As executorch would on its filter path: drop ops it cannot keep (aliasing ...).
                kept_ops = exir.keepable_ops([op for op in ops if op in present])
                self._kept_whole = {op_name(op) for op in kept_ops}
                return kept_ops, None
        self._kept_whole = {op_name(op) for op in ops}
        return ops, filter_fn

    # -- stages 2-6 ---------------------------------------------------------------------------
    def _propose(
        self,
        program: ExportedProgram,
        support: OperatorSupportBase,
        contract: BoundaryContract,
        excluded: Dict[Node, str],
        allowed: Optional[Set[Node]] = None,
    ) -> Tuple[List[Set[Node]], Dict[Node, str]]:
        """Convex partitions of supported (and ``allowed``) nodes, integer at every edge.

        Returns the partitions and the nodes the boundary contract removed (with reasons)."""
        removed: Dict[Node, str] = {}
        blocked = dict(excluded)
        support = chain(support, _NotExcluded(blocked))
        if allowed is not None:
            support = chain(support, _Allowed(allowed))
        while True:
            parts = propose_partitions(program.graph_module, support)
            newly = {}
            for part in parts:
                # A cond / while_loop graph goes only where its operator goes.
                part -= {
                    n
                    for n in part
                    if n.op == "get_attr"
                    and isinstance(getattr(program.graph_module, str(n.target), None), GraphModule)
                    and not all(u in part for u in n.users)
                }
                newly.update(contract.shrink(part))
                if part and all(op_name(n.target) in NO_COMPUTE_OPS for n in part):
                    newly.update({n: "partition would hold no NPU compute" for n in part})
                    part.clear()
            if not newly:
                return [p for p in parts if p], removed
            removed.update(newly)
            blocked.update(newly)  # re-propose: shrinking can break convexity

    def partition(self, program: ExportedProgram) -> PartitionResult:
        report = PartitionReport()
        graph = program.graph_module.graph
        contract = BoundaryContract(program, bool_crosses=not self.compile_spec.is_u55_subset)
        excluded: Dict[Node, str] = {}
        reporter = exir.WhyNoPartitionReporter()
        trial = _TrialCompiler(self, program, contract)
        with upstream.lowering_context(self.compile_spec, program):
            support = chain(
                _PinnedToCpu(self.cpu_ops, report.cpu_reasons),
                TargetLimits(self.compile_spec, report.cpu_reasons),
                upstream.operator_support(self.compile_spec, program, reporter),
            )
            # Upstream's check takes a cond / while_loop whose graphs are tagged whole.
            if upstream.supports_control_flow(self.compile_spec):
                tag_control_flow_graphs(program, support, report.cpu_reasons)
            search = CulpritSearch(
                propose=lambda nodes: self._propose(program, support, contract, excluded, nodes)[0],
                try_compile=trial.try_compile,
                is_compute=_is_compute,
                order=node_order,
            )
            for round_ in range(_MAX_FALLBACK_ROUNDS + 1):
                parts, removed = self._propose(program, support, contract, excluded)
                failures = trial.compile_final(parts) if trial.enabled else []
                if not failures:
                    break
                if not self.compile_spec.cpu_fallback:
                    raise failures[0][1]
                deviation = next((e for _, e in failures if isinstance(e, _DEVIATIONS)), None)
                if self.compile_spec.strict and deviation is not None:
                    raise deviation
                if round_ == _MAX_FALLBACK_ROUNDS:
                    raise _gave_up(failures[0][1], round_, report.compiler_fallback)
                for part, error in failures:
                    logger.info(
                        "fallback round %d: searching the culprit of: %s", round_ + 1, error
                    )
                    for c in search.culprits(part, error):
                        kind = " (an op of the same kind)" if c.known == "kind" else ""
                        if isinstance(c.error, LoweringError):
                            why = (
                                f"{c.error.what} on {op_name(c.node.target)}{kind}: "
                                f"{c.error.last_words}"
                            )
                        elif isinstance(c.error, _DEVIATIONS):
                            why = (
                                f"verified compile: {c.error.what} with "
                                f"{op_name(c.node.target)}{kind} in the partition; moved to CPU: "
                                f"{c.error.last_words}"
                            )
                        else:
                            why = (
                                f"NPU compiler failed: Vela {c.error.what} on "
                                f"{op_name(c.node.target)}{kind}: {c.error.last_words}"
                            )
                        excluded[c.node] = why
                        report.compiler_fallback[c.node.name] = why
                        logger.info("fallback round %d: %s to the CPU: %s", round_ + 1, c.node, why)
        excluded.update(removed)
        report.fallback_compiles = search.compiles
        clear_control_flow_tags(program)
        for n in graph.nodes:
            n.meta.pop("delegation_tag", None)
        for k, part in enumerate(sorted(parts, key=lambda p: min(node_order(n) for n in p))):
            tag = f"ethosu_ng_{k}"
            for n in part:
                n.meta["delegation_tag"] = tag
            report.partitions[tag] = [n.name for n in graph.nodes if n in part]
        tag_constant_data(program)
        trial.keep_only_final()
        attach(program, self.compiled)
        report.io = contract.verify_tags()
        # Record boundary qparams while the whole graph is visible (the producing quantize of a
        # delegate input/output may sit on the CPU, outside the partition preprocess sees).
        for io in report.io.values():
            for n, qp in _boundary_qparams(io):
                n.meta[QPARAMS_META] = qp

        upstream_reasons = exir.rejected_reasons(reporter)
        for n in graph.nodes:
            if n.op != "call_function" or n.meta.get("delegation_tag"):
                continue
            report.cpu_targets[n.name] = op_name(n.target)
            reason = (
                report.cpu_reasons.get(n.name)
                or excluded.get(n)
                or upstream_reasons.get(n)
                or "not supported by the Ethos-U TOSA profile"
            )
            report.cpu_reasons[n.name] = reason
            name = op_name(n.target)
            if name in non_core_aten_ops.WITHOUT_CPU_KERNEL or (
                name in self._kept_whole and not exir.has_out_variant(n.target)
            ):
                report.no_cpu_kernel[n.name] = name
        self.report = report
        reject_cpu_unrunnable(program, self.compile_spec.target, report.cpu_reasons)
        if report.no_cpu_kernel:
            warnings.warn(
                f"EthosUNGPartitioner: {sorted(report.no_cpu_kernel)} "
                f"({', '.join(sorted(set(report.no_cpu_kernel.values())))}) stay on the CPU, "
                "which has no kernel for them; lower again with them in decomposed_ops "
                "(erfinv: cpu_ops), as ethosu_ng.export.lower does, so they are written in core "
                "ATen",
                stacklevel=2,
            )
        if report.compiler_fallback:
            warnings.warn(
                f"EthosUNGPartitioner: the NPU compiler failed (or its stream failed the "
                f"verified compile) on {len(report.compiler_fallback)} "
                f"op(s) for {self.compile_spec.target}; they run on the CPU: "
                + "; ".join(f"{name}: {why}" for name, why in report.compiler_fallback.items()),
                stacklevel=2,
            )
        if not report.partitions:
            logger.warning(
                "EthosUNGPartitioner: nothing to delegate for %s (is the model quantized with "
                "EthosUNGQuantizer?); the program runs entirely on the CPU.",
                self.compile_spec.target,
            )
        return PartitionResult(
            tagged_exported_program=program,
            partition_tags={tag: self.delegation_spec for tag in report.partitions},
        )


def _gave_up(error: VelaError, rounds: int, moved: Dict[str, str]) -> VelaError:
    """The last Vela failure, saying that CPU fallback ran out of rounds and what it moved."""
    names = ", ".join(list(moved)[:8]) + (", ..." if len(moved) > 8 else "")
    return VelaError(
        error.partition,
        error.target,
        f"{error.what}; CPU fallback gave up: still failing after {rounds} round(s) "
        f"({len(moved)} op(s) moved to the CPU: {names or '-'})",
        error.last_words,
    )


def _boundary_qparams(io: PartitionIO):
    for n in io.inputs + io.outputs:
        qp = integer_tensor_qparams(n)
        if qp is not None:
            yield n, qp


def _is_compute(node: Node) -> bool:
    if node.op == "call_function" and node.target in CONTROL_FLOW_OPS:
        return True  # what its graphs compute
    return (
        node.op == "call_function"
        and is_compute(op_name(node.target))
        and op_name(node.target) not in NO_COMPUTE_OPS
    )


class _TrialCompiler:
    """Compiles candidate partitions of one program (real constants, carved as ``to_backend``
    will carve them). Final partitions that compile wait in the partitioner's ``compiled`` cache
    for ``preprocess``; outcomes are remembered by fingerprint so nothing compiles twice."""

    def __init__(
        self,
        partitioner: EthosUNGPartitioner,
        program: ExportedProgram,
        contract: BoundaryContract,
    ):
        self.spec = partitioner.compile_spec
        self.cache = partitioner.compiled
        self.put: Set = set()  # cache keys this partition() stored
        self.final: Set = set()  # cache keys of the last compile_final round
        self.contract = contract
        self.program = program
        real = partitioner._real_tensors
        self.enabled = real is not None and real.covers(program)
        if not self.enabled:
            logger.info(
                "EthosUNGPartitioner: constants not available before to_backend; "
                "partitions compile in preprocess, without CPU fallback"
            )
        self.real = real
        self.outcome: Dict[str, Optional[VelaError]] = {}
        self.rounds = 0

    def _compile(
        self, parts: List[Set[Node]], prefix: str, keep: bool
    ) -> List[Optional[VelaError]]:
        copy_ = self.real.real_program(self.program)
        tags = {
            f"{prefix}{k}": [n.name for n in self.program.graph_module.graph.nodes if n in p]
            for k, p in enumerate(parts)
        }
        by_name = {n.name: n for n in copy_.graph_module.graph.nodes}
        for p in parts:  # as ``partition`` records them for the final partitions
            io = partition_io(p, self.contract.constants)
            for n, qp in _boundary_qparams(io):
                by_name[n.name].meta[QPARAMS_META] = qp
        carved = carve(copy_, tags)
        keys = {tag: fingerprint(ep) for tag, ep in carved.items()}
        verdict: Dict[str, Optional[VelaError]] = {}
        todo = []
        for tag, ep in carved.items():
            key = keys[tag]
            known = key is not None and key in self.outcome
            cached = self.cache.get(self.cache.key(self.spec, key)) is not None
            if known and not (keep and self.outcome[key] is None and not cached):
                verdict[tag] = self.outcome[key]
            else:
                todo.append((tag, ep))
        for (tag, _), res in zip(todo, compile_partitions(todo, self.spec)):
            verdict[tag] = res if isinstance(res, VelaError) else None
            if keys[tag] is not None:
                self.outcome[keys[tag]] = verdict[tag]
                if keep and verdict[tag] is None:
                    ckey = self.cache.key(self.spec, keys[tag])
                    self.cache.put(ckey, res)
                    self.put.add(ckey)
        if keep:
            # preprocess takes an entry once per partition with that fingerprint.
            final = Counter(self.cache.key(self.spec, k) for k in keys.values() if k is not None)
            for ckey, n in final.items():
                self.cache.set_uses(ckey, n)
            self.final = set(final)
        return [verdict[tag] for tag in tags]

    def keep_only_final(self) -> None:
        """Drop what this partition() compiled that is not a final partition."""
        self.cache.retain(self.put, self.final)

    def compile_final(self, parts: List[Set[Node]]) -> List[Tuple[Set[Node], VelaError]]:
        parts = sorted(parts, key=lambda p: min(node_order(n) for n in p))
        self.rounds += 1
        errors = self._compile(parts, "ethosu_ng_", keep=True)
        return [(p, e) for p, e in zip(parts, errors) if e is not None]

    def try_compile(self, parts: List[Set[Node]]) -> List[Optional[VelaError]]:
        return self._compile(parts, f"ethosu_ng_search{self.rounds}_", keep=False)
