"""The one place ethosu_ng touches executorch's Arm backend.

Everything we reuse from ``executorch.backends.arm`` (TOSA lowering, operator support checks,
the PT2E quantizer configs) is imported here and only here, so an executorch upgrade is a change
to this file. Pinned against executorch 1.5.1.
"""

from __future__ import annotations

import weakref
from contextlib import contextmanager
from typing import Callable, Iterator, List, Optional, Sequence, Tuple

import torch
from executorch.backends.arm.constants import DQ_OPS, Q_OPS  # noqa: F401  (re-exported)
from executorch.backends.arm.ethosu import EthosUCompileSpec, EthosUPartitioner
from executorch.backends.arm.quantizer import (
    EthosUQuantizer,
    get_symmetric_quantization_config,
    get_uint8_io_quantization_config,
)
from executorch.backends.arm.tosa.backend import TOSABackend
from executorch.backends.arm.tosa.specification import TosaLoweringContext
from executorch.exir.backend.utils import WhyNoPartitionReporter
from torch._export.utils import _get_shape_env_from_gm
from torch.export import ExportedProgram
from torch.fx.passes.operator_support import OperatorSupportBase

from .compile_spec import EthosUNGCompileSpec

__all__ = [
    "DQ_OPS",
    "Q_OPS",
    "EthosUQuantizer",
    "get_symmetric_quantization_config",
    "get_uint8_io_quantization_config",
    "upstream_compile_spec",
    "lowering_context",
    "operator_support",
    "ops_to_not_decompose",
    "keepable_ops",
    "lower_to_tosa",
    "WhyNoPartitionReporter",
]


def upstream_compile_spec(spec: EthosUNGCompileSpec) -> EthosUCompileSpec:
    return EthosUCompileSpec(
        spec.target,
        system_config=spec.system_config,
        memory_mode=spec.memory_mode,
        extra_flags=list(spec.extra_vela_flags),
    )


def io_node_finders():
    """(inputs finder, outputs finder) for ``TOSAQuantizer.set_node_finder``."""
    from executorch.backends.cortex_m.quantizer.node_finders import (
        InputNodeFinder,
        OutputNodeFinder,
    )

    return InputNodeFinder(), OutputNodeFinder()


def _upstream_partitioner(spec: EthosUNGCompileSpec, additional_checks=None) -> EthosUPartitioner:
    return EthosUPartitioner(upstream_compile_spec(spec), additional_checks=additional_checks)


@contextmanager
def lowering_context(spec: EthosUNGCompileSpec, program: ExportedProgram) -> Iterator[None]:
    """Upstream's support checks and TOSA node visitors read the TOSA spec from this context."""
    tosa_spec = upstream_compile_spec(spec).tosa_spec
    with TosaLoweringContext(tosa_spec, _get_shape_env_from_gm(program.graph_module)):
        yield


def operator_support(
    spec: EthosUNGCompileSpec,
    program: ExportedProgram,
    reporter: WhyNoPartitionReporter,
    additional_checks: Sequence[OperatorSupportBase] = (),
) -> OperatorSupportBase:
    """Upstream's TOSA/Ethos-U operator support (U55 subset, quantization checks, ...).

    Call inside ``lowering_context``.
    """
    part = _upstream_partitioner(spec, list(additional_checks))
    return part._create_operator_support(program, reporter)


def ops_to_not_decompose(
    spec: EthosUNGCompileSpec, program: ExportedProgram
) -> Tuple[List[torch._ops.OpOverload], Optional[Callable[[torch.fx.Node], bool]]]:
    return _upstream_partitioner(spec).ops_to_not_decompose(program)


def keepable_ops(ops: List[torch._ops.OpOverload]) -> List[torch._ops.OpOverload]:
    """``ops`` without those executorch refuses to keep from decomposition (it applies this on the
    path with a per-node filter only)."""
    from executorch.exir.program._program import _remove_invalid_ops_for_not_decompose

    return _remove_invalid_ops_for_not_decompose(list(ops))


def lower_to_tosa(
    edge_program: ExportedProgram,
    spec: EthosUNGCompileSpec,
    op_sources: Optional[List[dict]] = None,
) -> bytes:
    """Run upstream's Arm pass pipeline and TOSA serializer on one partition.

    ``op_sources``: if given, receives one entry per TOSA operator a node visitor serialized, from
    upstream's own debug hook (``tosa_debug_mode=JSON``): ``{"tosa_output": output tensor name,
    "node": FX node name after upstream's passes, "target": its op, "nn_module_stack": ...}``.
    The TOSA flatbuffer is the same with or without it."""
    tosa_spec = TOSABackend.filter_tosa_compile_specs(upstream_compile_spec(spec))
    if op_sources is None:
        with deferred_recompile():
            return bytes(TOSABackend._preprocess(edge_program, tosa_spec).processed_bytes)
    import executorch.backends.arm.tosa.backend as tosa_backend
    from executorch.backends.arm.common.arm_compile_spec import ArmCompileSpec

    hooks = []
    real_hook = tosa_backend.DebugHook

    def capture(mode):
        hooks.append(real_hook(mode))
        return hooks[-1]

    tosa_spec.tosa_debug_mode = ArmCompileSpec.DebugMode.JSON
    tosa_backend.DebugHook = capture  # _preprocess builds its hook from this module global
    try:
        with deferred_recompile():
            tosa = bytes(TOSABackend._preprocess(edge_program, tosa_spec).processed_bytes)
    finally:
        tosa_backend.DebugHook = real_hook
    for hook in hooks:
        for ev in hook._debug_events:
            stack = ev.torch_info.nn_module_stack
            op_sources.append(
                {
                    "tosa_output": ev.tosa_info.node_name if ev.tosa_info else None,
                    "node": ev.aten_info.node_name,
                    "target": ev.aten_info.operator_name,
                    "nn_module_stack": stack if isinstance(stack, dict) else None,
                }
            )
    return tosa


@contextmanager
def deferred_recompile() -> Iterator[None]:
    """Generate a GraphModule's Python code only when someone runs or reads it.

    Each of upstream's ~150 TOSA passes builds a new GraphModule and regenerates its ``forward``
    source (``GraphModule.recompile``), which nothing reads: measured 17 s of an 82 s mobilenetv2
    lowering (cProfile). Inside this context ``recompile`` only marks the module; its code is
    generated when it is called or its ``code`` read, and on exit for every module still alive,
    so no module leaves the context stale. Same idea as torch's own ``_LazyGraphModule``, which
    only applies to modules built through torch's private factory.
    """
    from torch.fx import GraphModule

    if getattr(GraphModule, "_ethosu_ng_deferred", False):  # nested: the outer context flushes
        yield
        return
    real_recompile, real_code = GraphModule.recompile, GraphModule.code
    dirty: weakref.WeakSet[GraphModule] = weakref.WeakSet()

    def flush(gm: GraphModule) -> None:
        if gm in dirty:
            dirty.discard(gm)
            real_recompile(gm)

    def run_lazily(self, *args, **kwargs):
        flush(self)
        return self(*args, **kwargs)

    def mark(self):
        dirty.add(self)
        type(self).forward = run_lazily  # each GraphModule has its own class

    def code(self):
        flush(self)
        return real_code.fget(self)

    GraphModule.recompile, GraphModule.code = mark, property(code)
    GraphModule._ethosu_ng_deferred = True
    try:
        yield
    finally:
        GraphModule.recompile, GraphModule.code = real_recompile, real_code
        GraphModule._ethosu_ng_deferred = False
        for gm in list(dirty):
            flush(gm)


def list_argument_input_qparams(dequantize_nodes):
    """The single input qparams upstream's FoldAndAnnotateQParamsPass records for a list argument
    (e.g. ``cat``'s tensors) fed by these dequantize nodes: (scale, zero_point) or None.

    Exposed so a test pins upstream's convention (one entry per top-level argument index, merged
    across the list's elements); FoldQuantizedConstantsPass exists because of it.
    """
    from executorch.backends.arm._passes.fold_qdq_with_annotated_qparams_pass import (
        FoldAndAnnotateQParamsPass,
    )

    qargs, _ = FoldAndAnnotateQParamsPass()._extract_arg_input_params(list(dequantize_nodes))
    return (
        None
        if qargs is None
        else (float(qargs.get_scale_per_tensor()), int(qargs.get_zp_per_tensor()))
    )


def mark_quantized(node: torch.fx.Node) -> None:
    """Mark an ATen node the way upstream's quantizer does (for hand-built quantized graphs)."""
    from executorch.backends.arm.common.annotation_meta import ArmAnnotationInfo

    node.meta.setdefault("custom", {})[ArmAnnotationInfo.CUSTOM_META_KEY] = {"quantized": True}


def is_marked_quantized(node: torch.fx.Node) -> bool:
    from executorch.backends.arm.common.annotation_meta import ArmAnnotationInfo

    info = (node.meta.get("custom") or {}).get(ArmAnnotationInfo.CUSTOM_META_KEY)
    return bool(info and info.get("quantized"))


def pte_delegate_payloads(pte: bytes):
    """[(backend_id, processed bytes)] of every delegate in a serialized .pte, in plan order."""
    from executorch.exir._serialize._program import deserialize_pte_binary

    program = deserialize_pte_binary(bytes(pte)).program
    out = []
    for plan in program.execution_plan:
        for d in plan.delegates:
            if d.processed.location != 0:  # 0 = inline in backend_delegate_data
                raise ValueError(
                    f"delegate {d.id}: processed data stored out of line is not supported"
                )
            out.append((d.id, bytes(program.backend_delegate_data[d.processed.index].data)))
    return out


def carve_partition(graph_module: torch.fx.GraphModule, owning_program: ExportedProgram, tag: str):
    """Cut the nodes tagged ``tag`` out of ``graph_module`` exactly as ``to_backend`` does before
    calling ``preprocess``: (submodule program, call_module node). Edits ``graph_module``."""
    from executorch.exir.backend.backend_api import _get_node_list_with_same_tag
    from executorch.exir.lowered_backend_module import (
        create_exported_program_from_submodule,
        create_submodule_from_nodes,
    )

    nodes = _get_node_list_with_same_tag(graph_module, tag, owning_program)
    with graph_module._set_replace_hook(owning_program.graph_signature.get_replace_hook()):
        submodule, call_node = create_submodule_from_nodes(graph_module, nodes, tag)
    program, _, _ = create_exported_program_from_submodule(
        submodule, owning_program, tag, call_node, False
    )
    return program


def duplicate_shared_constants(program: ExportedProgram, tag: str) -> None:
    """``to_backend``'s own step before carving: constants shared across partitions are copied."""
    from executorch.exir.backend.utils import _maybe_duplicate_constant_nodes

    _maybe_duplicate_constant_nodes(program, tag)
