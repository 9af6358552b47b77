# SPDX-License-Identifier: BSD-3-Clause
"""The one place ethosu_ng touches executorch's Arm backend.

Everything we reuse from ``executorch.backends.arm`` (TOSA lowering, operator support checks,
the PT2E quantizer configs and the Cortex-M node finders its IO configs are applied with) is
imported here and only here, so an executorch upgrade is a change to this file. Pinned against
executorch 1.5.1.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Callable, Iterator, List, Optional, Sequence, Tuple

import torch
from executorch.backends.arm.ethosu import EthosUCompileSpec, EthosUPartitioner
from executorch.backends.arm.quantizer import (
    EthosUQuantizer,
    get_symmetric_a16w8_quantization_config,
    get_symmetric_quantization_config,
    get_uint8_io_quantization_config,
)
from executorch.backends.arm.tosa.backend import TOSABackend
from executorch.backends.arm.tosa.specification import TosaLoweringContext
from executorch.exir.backend.utils import WhyNoPartitionReporter
from torch._export.utils import _get_shape_env_from_gm
from torch.export import ExportedProgram
from torch.fx.passes.operator_support import OperatorSupportBase

from ethosu_ng.adapters.lazy_recompile import deferred_recompile
from ethosu_ng.adapters.signature_lookups import memoized_signature_lookups
from ethosu_ng.compile_spec import EthosUNGCompileSpec
from ethosu_ng.ops import AVG_POOL_OPS, PAD_OPS, op_name

__all__ = [
    "EthosUQuantizer",
    "get_symmetric_a16w8_quantization_config",
    "get_symmetric_quantization_config",
    "get_uint8_io_quantization_config",
    "int16_table",
    "io_node_finders",
    "io_quantization_config",
    "lacks_conv3d",
    "is_marked_quantized",
    "list_argument_input_qparams",
    "lower_to_tosa",
    "lowering_context",
    "mark_quantized",
    "never_delegated",
    "rejects_arguments",
    "operator_support",
    "ops_to_not_decompose",
    "upstream_compile_spec",
]


def upstream_compile_spec(spec: EthosUNGCompileSpec) -> EthosUCompileSpec:
    return EthosUCompileSpec(
        spec.target,
        system_config=spec.system_config,
        memory_mode=spec.memory_mode,
        extra_flags=list(spec.extra_vela_flags),
    )


def io_quantization_config(dtype: torch.dtype, activation_config):
    """The config for program inputs or outputs of ``dtype``: upstream's uint8 IO config, or the
    activation spec of ``activation_config`` (int8 or int16) for a program whose interior has the
    other width (a RESCALE at the edge, inside the delegate)."""
    if dtype == torch.uint8:
        return get_uint8_io_quantization_config()
    from executorch.backends.arm.quantizer.quantization_config import TOSAQuantizationConfig

    act = activation_config.output_activation
    return TOSAQuantizationConfig(act, act, None, None)


def io_node_finders():
    """(inputs finder, outputs finder) for ``TOSAQuantizer.set_node_finder``."""
    from executorch.backends.cortex_m.quantizer.node_finders import (
        InputNodeFinder,
        OutputNodeFinder,
    )

    return InputNodeFinder(), OutputNodeFinder()


def control_flow_submodules(gm: torch.fx.GraphModule):
    """(name, submodule, node) of every ``cond`` branch and ``while_loop`` cond/body graph that
    ``gm``'s nodes call (not nested ones)."""
    from executorch.exir.graph_module import get_cond_while_submodules

    return list(get_cond_while_submodules(gm))


def quantize_with_control_flow(
    quantizer, model: torch.fx.GraphModule, calibration
) -> torch.fx.GraphModule:
    """prepare/calibrate/convert as upstream does for a graph with ``cond`` or ``while_loop``:
    torchao's ``prepare_pt2e`` reaches a while_loop's body but not its cond graph nor a cond's
    branches, which upstream's quantizer prepares and converts one by one."""
    return quantizer._quantize_with_submodules(model, [tuple(b) for b in calibration])


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


def supports_control_flow(spec: EthosUNGCompileSpec) -> bool:
    """Whether ``spec``'s TOSA profile has the control-flow extension (Ethos-U85: ``+cf``)."""
    return upstream_compile_spec(spec).tosa_spec.support_extension("cf")


def lacks_conv3d(spec: EthosUNGCompileSpec) -> bool:
    """Whether ``spec``'s target has no CONV3D (upstream lowers a conv3d there as a conv2d)."""
    return upstream_compile_spec(spec).tosa_spec.is_U55_subset


def never_delegated(spec: EthosUNGCompileSpec, op: torch._ops.OpOverload) -> bool:
    """Whether upstream rejects every node of ATen ``op`` on ``spec``'s target whatever its
    arguments (the Ethos-U55 list of ops without a TOSA mapping: GATHER, SCATTER ...)."""
    from executorch.backends.arm.operator_support.ethos_u55_support import EthosU55NotSupported

    if not upstream_compile_spec(spec).tosa_spec.is_U55_subset:
        return False
    return any(getattr(e, "_op", None) == op for e in EthosU55NotSupported.unsupported_ops)


def rejects_arguments(spec: EthosUNGCompileSpec, node: torch.fx.Node) -> bool:
    """Whether upstream's TOSA support check for ``node``'s op (e.g. ``GatherSupported``: dim 1
    of rank-2/3 tensors only) rejects this ATen node's arguments on ``spec``'s target. Asked
    before decomposition, of a node whose arguments decomposition does not change."""
    from executorch.backends.arm.operator_support.tosa_supported_operators import (
        get_registered_tosa_support_checks,
    )
    from executorch.exir.dialects._ops import ops as exir_ops

    packet = getattr(node.target, "_overloadpacket", None)
    overload = getattr(node.target, "_overloadname", None)
    if packet is None or overload is None:
        return False
    edge_op = getattr(getattr(exir_ops.edge.aten, packet.__name__, None), overload, None)
    tosa_spec = upstream_compile_spec(spec).tosa_spec
    with TosaLoweringContext(tosa_spec):
        for check in get_registered_tosa_support_checks(tosa_spec):
            if edge_op in check.targets:
                checker = check(tosa_spec, WhyNoPartitionReporter())
                try:
                    return not checker.is_node_tosa_supported(node, tosa_spec)
                except Exception:  # noqa: BLE001  (a check that cannot read the node rejects it)
                    return True
    return False


@contextmanager
def _tables_before_pooling(edge_program: ExportedProgram) -> Iterator[None]:
    """Upstream's pipeline turns sigmoid, tanh, exp, ... into TOSA TABLEs (``InsertTableOpsPass``)
    after it decomposes the average pools (``DecomposeAdaptiveAvgPool2dPass``,
    ``DecomposeAvgPool2dPass``). Between q/dq folding and the table pass such an op's output is
    float (its fake kernel promotes an int8 input), so a pool right after it, or after a pad
    that follows it, is built on a float input and raises ("Unsupported input dtype
    torch.float32"), and the pool goes to the CPU; upstream's own export fails the same way.
    Running the table pass once more before the pooling decompositions, on those table ops only
    (``PooledTableOps``: integer input, an average pool reading the output), makes them integer
    first; every other table op waits for the pipeline's own pass as before (a table op of a
    float constant, say, is an integer only after later passes). Built for ``edge_program`` as
    the pipeline builds its own (control flow bodies are passed the graph only), registered for
    one lowering and removed after it."""
    from executorch.backends.arm._passes import arm_pass_manager as apm
    from executorch.backends.arm._passes.decompose_adaptive_avg_pool2d_pass import (
        DecomposeAdaptiveAvgPool2dPass,
    )
    from executorch.backends.arm._passes.insert_table_ops import InsertTableOpsPass, TableOps

    class PooledTableOps(TableOps):
        """The table ops on an integer input whose output reaches an average pool (through
        pads): no other op is touched before the pipeline's own table pass."""

        def __contains__(self, node) -> bool:
            if not super().__contains__(node) or not node.args:
                return False
            val = getattr(node.args[0], "meta", {}).get("val")
            if getattr(val, "dtype", None) not in (torch.int8, torch.int16):
                return False
            users = list(node.users)
            while users:
                user = users.pop()
                if op_name(user.target) in AVG_POOL_OPS:
                    return True
                if op_name(user.target) in PAD_OPS:
                    users.extend(user.users)
            return False

    early = InsertTableOpsPass(edge_program)
    early.table_ops = PooledTableOps(edge_program)
    saved = {k: (list(v.before_passes), list(v.after_passes))
             for k, v in apm._registered_pass_insertions.items()}  # fmt: skip
    apm.register_pass_insertions_before(DecomposeAdaptiveAvgPool2dPass, [early])
    try:
        yield
    finally:
        apm._registered_pass_insertions.clear()
        for k, (before, after) in saved.items():
            apm._registered_pass_insertions[k] = apm.PassInsertions(before, after)


@contextmanager
def _round_trips_kept() -> Iterator[None]:
    """Upstream's ``FuseConsecutiveRescalesPass`` does not run, on any target.

    It removes each ``RESCALE(int32 -> int8) -> RESCALE(int8 -> int32)`` pair (int16 in an a16w8
    program) whose scales compose to about one: a residual ADD's int32 sum then feeds the next
    residual ADD directly (ConvNeXt, every ``x = x + f(x)`` chain), skipping the rounding and
    clamp the quantized model has there. The sum, read twice, stays int32, and Vela 5.1 folds
    an ADD's operand scales only into an ADD with an 8/16-bit result
    (``EthosU55Constraints::SupportedIFMQuant``; on Ethos-U85 a shared int32 result also keeps
    its RESCALE as a layer of its own): operand and result RESCALEs run as layers of their own.
    With the pair kept, each ADD rounds as the quantized model does, and Vela folds every scale
    into the ADDs. Measured with the pass and without (``bench/rescale_round_trips.py``,
    docs/benchmarks.md): never more NPU cycles without it, on Ethos-U55 and Ethos-U85
    (fastvit_t8 on ethos-u85-256: 20,667,534 -> 17,102,781, standalone Rescale 3,027,761 -> 0)."""
    from executorch.backends.arm._passes.fuse_consecutive_rescales_pass import (
        FuseConsecutiveRescalesPass,
    )
    from executorch.exir.pass_base import PassResult

    fuse = FuseConsecutiveRescalesPass.call
    FuseConsecutiveRescalesPass.call = lambda self, graph_module: PassResult(graph_module, False)
    try:
        yield
    finally:
        FuseConsecutiveRescalesPass.call = fuse


@contextmanager
def _a16w8_convolutions_narrowed() -> Iterator[None]:
    """Upstream's a16w8 convolution does not rescale its INT48 accumulator to int32.

    ``RewriteConvPass`` gives each int32 consumer of an a16w8 convolution (a residual ADD's
    operand RESCALE) its own RESCALE of the INT48 accumulator, the convolution's requantization
    and the consumer's scale in one: the int16 rounding and clamp the quantized model has there
    is skipped. Where the output saturates int16 that is hundreds of int16 steps from the
    quantized model (a drawn BasicBlock on ethos-u55-128: 301, the lowering check's tolerance
    44). Where other consumers read the int16 output the accumulator has two readers and Vela
    folds neither RESCALE into the convolution: on ethos-u85-256 an a16w8 mobilenetv2_100 spends
    1,371,701 of 7,223,218 NPU cycles in them; on Ethos-U55/U65 Vela cannot run the convolution
    ("Non-passthrough operation (Conv2D) could not run on NPU"). Narrowed, every consumer reads
    the int16 output, rounded as the quantized model rounds it, and Vela folds the
    requantization into the convolution. It costs cycles where the ADD was the only consumer on
    Ethos-U55/U65, whose ADD takes an int32 operand but not that int16 operand's scale (a16w8
    resnet18 on ethos-u55-128: 36,670,035 NPU cycles upstream, 39,192,516 ours); on Ethos-U85
    it saves them there too (resnet18: 17,061,856 -> 15,696,555). ``tests/test_a16w8_residual.py``.
    """
    from executorch.backends.arm._passes.rewrite_conv_pass import RewriteConvPass

    fork = RewriteConvPass._insert_a16w8_output_branches
    RewriteConvPass._insert_a16w8_output_branches = lambda self, *args, **kwargs: None
    try:
        yield
    finally:
        RewriteConvPass._insert_a16w8_output_branches = fork


@contextmanager
def _stale_paths_only() -> Iterator[None]:
    """Upstream's permute/view propagation marks only the nodes a move touched as stale.

    ``PropagateViewCopyPermuteUpPass``/``DownPass`` move each permute or view along a path of
    nodes, then skip, for the rest of that scan, every node downstream of the path (their
    metadata is treated as stale) and retrace the whole graph before the next scan. A move
    leaves the tensor at the end of its path as it was, so only the path's nodes (the moved
    node, the nodes it crossed, a fork's branches) hold stale shapes; the nodes it creates get
    theirs set. Here the path's nodes and their direct readers, the nodes whose checks read
    those shapes, are skipped. On a partition of a few dozen nodes it makes no difference; on a
    whole model in one partition the downstream rule lets about one move happen per scan, and
    each scan costs a retrace of the whole graph: levit_128s (2,403 nodes) took 82 retraces,
    110 of the 148 CPU s its pipeline took in that run. The TOSA graph is the same
    (``tests/test_lowering_speed.py``, ``bench/stale_rule.py``; docs/sweep.md)."""
    from executorch.backends.transforms.propagate_view_copy_permute_pass import (
        PropagateViewCopyPermutePass,
    )

    def mark_stale_region(self, nodes, stale_nodes) -> None:
        for node in nodes:
            stale_nodes.add(node)
            stale_nodes.update(node.users)

    whole = PropagateViewCopyPermutePass._mark_stale_region
    PropagateViewCopyPermutePass._mark_stale_region = mark_stale_region
    try:
        yield
    finally:
        PropagateViewCopyPermutePass._mark_stale_region = whole


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
        with (
            deferred_recompile(),
            _tables_before_pooling(edge_program),
            _round_trips_kept(),
            _a16w8_convolutions_narrowed(),
            _stale_paths_only(),
            memoized_signature_lookups(),
        ):
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
        with (
            deferred_recompile(),
            _tables_before_pooling(edge_program),
            _round_trips_kept(),
            _a16w8_convolutions_narrowed(),
            _stale_paths_only(),
            memoized_signature_lookups(),
        ):
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


def is_table_op(node: torch.fx.Node) -> bool:
    """Whether upstream lowers ``node`` (quantized) to a TOSA TABLE: an elementwise function of
    its one input."""
    from executorch.backends.arm._passes.insert_table_ops import TableOps

    return node in TableOps(None)


def int16_table(
    node: torch.fx.Node,
    in_qparams: Tuple[float, int, int, int],
    out_qparams: Tuple[float, int, int, int],
) -> Optional[Tuple[torch.Tensor, int]]:
    """The 513-entry TOSA TABLE upstream lowers an int16 ``node`` to, and the power-of-two
    rescale it puts after it: (table values as int16, left shift), or None when upstream does
    not lower ``node``'s op to a table. ``*_qparams``: (scale, zero point, qmin, qmax)."""
    from executorch.backends.arm._passes.insert_table_ops import InsertTableOpsPass, TableOps
    from executorch.backends.arm._passes.quant_args import QuantArgs

    table_ops = TableOps(None)
    if node not in table_ops:
        return None
    in_args = QuantArgs(*in_qparams, torch.int16)
    out_args = QuantArgs(*out_qparams, torch.int16)
    return InsertTableOpsPass.generate_16_bit_table_values(table_ops[node], in_args, out_args)
