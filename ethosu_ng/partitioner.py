"""EthosUNGPartitioner: picks what runs on the NPU and makes every boundary integer.

Stages (each a separate module):
1. ``transform_for_pre_decomposition``: CommuteQDQThroughPassThroughPass moves (de)quantize off
   data-movement ops so they run in int8 (the only point where a partitioner may edit the graph).
2. support: upstream's TOSA / Ethos-U operator checks (through ``upstream``) minus ``cpu_ops``.
3. proposal: torch.fx's CapabilityBasedPartitioner (convex partitions, no cycles).
4. boundary: BoundaryContract.shrink removes nodes until no float tensor crosses; the rest are
   re-proposed until a fixpoint, so every partition stays convex *and* integer at its edges.
5. verify: BoundaryContract.verify_tags raises BoundaryContractError naming the node otherwise.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Callable, Dict, Iterable, List, Optional, Set, Tuple

import torch
from torch.export import ExportedProgram
from torch.fx import Node
from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
from torch.fx.passes.operator_support import OperatorSupportBase, chain

from executorch.exir.backend.partitioner import DelegationSpec, Partitioner, PartitionResult
from executorch.exir.backend.utils import tag_constant_data

from . import upstream
from .boundary import BoundaryContract, PartitionIO, node_order
from .compile_spec import EthosUNGCompileSpec
from .delegate_io import QPARAMS_META, integer_tensor_qparams
from .op_names import op_name, resolve_op_names
from .target_limits import TargetLimits
from .passes.qdq_nodes import rename_outputs
from .passes import PRE_PARTITION_PASSES

logger = logging.getLogger(__name__)

BACKEND_ID = "EthosUNGBackend"

# Partitions made only of these lower to an empty (or trivial) NPU program: not worth a delegate.
_NO_COMPUTE = frozenset({
    "aten.view_copy.default", "aten.clone.default", "dim_order_ops._clone_dim_order.default",
    "aten.alias_copy.default", "aten.detach_copy.default", "aten.squeeze_copy.dims",
    "aten.squeeze_copy.dim", "aten.squeeze_copy.default", "aten.unsqueeze_copy.default",
    "dim_order_ops._to_dim_order_copy.default", "aten.expand_copy.default",
    "quantized_decomposed.quantize_per_tensor.default",
    "quantized_decomposed.dequantize_per_tensor.default",
    "quantized_decomposed.dequantize_per_channel.default", "getitem",
})


@dataclass
class PartitionReport:
    """Why each node was (not) delegated; filled by ``partition``."""

    partitions: Dict[str, List[str]] = field(default_factory=dict)   # tag -> node names
    cpu_reasons: Dict[str, str] = field(default_factory=dict)        # node name -> reason
    cpu_targets: Dict[str, str] = field(default_factory=dict)        # node name -> op name
    io: Dict[str, PartitionIO] = field(default_factory=dict, repr=False)


class _PinnedToCpu(OperatorSupportBase):
    def __init__(self, names: Set[str], reasons: Dict[str, str]):
        self.names, self.reasons = names, reasons

    def is_node_supported(self, submodules, node: Node) -> bool:
        if node.op == "call_function" and op_name(node.target) in self.names:
            self.reasons.setdefault(node.name, "pinned to CPU by cpu_ops")
            return False
        return True


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
    """

    def __init__(self, compile_spec: EthosUNGCompileSpec, cpu_ops: Iterable = ()):
        if not isinstance(compile_spec, EthosUNGCompileSpec):
            raise TypeError(
                f"compile_spec must be an EthosUNGCompileSpec, got {type(compile_spec).__name__}")
        self.compile_spec = compile_spec
        self.cpu_ops = resolve_op_names(cpu_ops)
        self.delegation_spec = DelegationSpec(BACKEND_ID, compile_spec.to_compile_specs())
        self.report: Optional[PartitionReport] = None

    # -- stage 1 ------------------------------------------------------------------------------
    def transform_for_pre_decomposition(self, program: ExportedProgram) -> ExportedProgram:
        out = program.graph_module.graph.output_node()
        names_before = [a.name if isinstance(a, Node) else None for a in out.args[0]]
        for make_pass in PRE_PARTITION_PASSES:
            program = make_pass()(program)
        # Passes re-type or replace output nodes; the signature names them by position.
        rename_outputs(program, names_before, program.graph_module.graph.output_node().args[0])
        return program

    def ops_to_not_decompose(
        self, program: ExportedProgram
    ) -> Tuple[List[torch._ops.OpOverload], Optional[Callable[[Node], bool]]]:
        ops, keep = upstream.ops_to_not_decompose(self.compile_spec, program)
        # A pinned op must decompose normally: it will not be delegated, and the CPU needs core ATen.
        ops = [op for op in ops if op_name(op) not in self.cpu_ops]

        def filter_fn(node: Node) -> bool:
            if op_name(node.target) in self.cpu_ops:
                return False
            return keep(node) if keep is not None else True

        return ops, filter_fn

    # -- stages 2-5 ---------------------------------------------------------------------------
    def partition(self, program: ExportedProgram) -> PartitionResult:
        report = PartitionReport()
        graph = program.graph_module.graph
        contract = BoundaryContract(program)
        excluded: Dict[Node, str] = {}
        reporter = upstream.WhyNoPartitionReporter()
        with upstream.lowering_context(self.compile_spec, program):
            support = chain(
                _PinnedToCpu(self.cpu_ops, report.cpu_reasons),
                TargetLimits(self.compile_spec, report.cpu_reasons),
                upstream.operator_support(self.compile_spec, program, reporter),
                _NotExcluded(excluded),
            )
            while True:
                proposals = CapabilityBasedPartitioner(
                    program.graph_module, support, allows_single_node_partition=True
                ).propose_partitions()
                parts = [set(p.nodes) for p in proposals]
                newly = {}
                for part in parts:
                    newly.update(contract.shrink(part))
                    if part and all(op_name(n.target) in _NO_COMPUTE for n in part):
                        newly.update({n: "partition would hold no NPU compute" for n in part})
                        part.clear()
                if not newly:
                    break
                excluded.update(newly)  # re-propose: shrinking can break convexity
        for n in graph.nodes:
            n.meta.pop("delegation_tag", None)
        parts = [p for p in parts if p]
        for k, part in enumerate(sorted(parts, key=lambda p: min(node_order(n) for n in p))):
            tag = f"ethosu_ng_{k}"
            for n in part:
                n.meta["delegation_tag"] = tag
            report.partitions[tag] = [n.name for n in graph.nodes if n in part]
        tag_constant_data(program)
        report.io = contract.verify_tags()
        # Record boundary qparams while the whole graph is visible (the producing quantize of a
        # delegate input/output may sit on the CPU, outside the partition preprocess sees).
        for io in report.io.values():
            for n in io.inputs + io.outputs:
                qp = integer_tensor_qparams(n)
                if qp is not None:
                    n.meta[QPARAMS_META] = qp

        upstream_reasons = getattr(reporter, "_rejected_nodes", {})
        for n in graph.nodes:
            if n.op != "call_function" or n.meta.get("delegation_tag"):
                continue
            report.cpu_targets[n.name] = op_name(n.target)
            reason = (report.cpu_reasons.get(n.name) or excluded.get(n)
                      or upstream_reasons.get(n) or "not supported by the Ethos-U TOSA profile")
            report.cpu_reasons[n.name] = reason
        self.report = report
        if not report.partitions:
            logger.warning(
                "EthosUNGPartitioner: nothing to delegate for %s (is the model quantized with "
                "EthosUNGQuantizer?); the program runs entirely on the CPU.", self.compile_spec.target)
        return PartitionResult(
            tagged_exported_program=program,
            partition_tags={tag: self.delegation_spec for tag in report.partitions},
        )

