"""EthosUNGBackend: preprocess one partition into a typed DelegateBlob.

Stages: declared IO (delegate_io) -> TOSA (upstream lowering via the adapter) -> Vela (child
process) -> cross-check declared == TOSA == Vela IO -> DelegateBlob v1. Any disagreement is a
``BoundaryContractError`` at export time, naming the partition, the IO index and both types.
"""

from __future__ import annotations

import logging
import math
from typing import List, final

from torch.export import ExportedProgram

from executorch.exir.backend.backend_details import BackendDetails, PreprocessResult
from executorch.exir.backend.compile_spec_schema import CompileSpec

from . import upstream
from .blob import DelegateBlob
from .boundary import BoundaryContractError
from .compile_spec import EthosUNGCompileSpec
from .delegate_io import DelegateIOSpec, declared_io
from .tensor_spec import TensorSpec
from .tosa_graph import TOSA_ELEM_SIZE, TosaTensorInfo, tosa_io
from .vela_compiler import VelaResult, VelaTensor, compile_tosa
from tosa.DType import DType

logger = logging.getLogger(__name__)

_TOSA_DTYPE_FOR = {1: DType.INT8, 2: DType.INT16, 4: DType.INT32}  # by element size


def _partition_name(program: ExportedProgram) -> str:
    for n in program.graph_module.graph.nodes:
        tag = n.meta.get("delegation_tag")
        if tag:
            return tag
    return "delegate"


def check_io(name: str, declared: DelegateIOSpec, tosa_ins: List[TosaTensorInfo],
             tosa_outs: List[TosaTensorInfo], vela: VelaResult) -> DelegateIOSpec:
    """declared == TOSA == Vela for every input and output; return specs placed by Vela."""
    placed = {}
    for kind, decl, names, tosa, vel in (
        ("input", declared.inputs, declared.input_names, tosa_ins, vela.inputs),
        ("output", declared.outputs, declared.output_names, tosa_outs, vela.outputs),
    ):
        if not (len(decl) == len(tosa) == len(vel)):
            raise BoundaryContractError(
                f"{name}: {kind} count disagrees: declared {len(decl)}, TOSA {len(tosa)}, "
                f"Vela {len(vel)}")
        out = []
        for k, (d, t, v) in enumerate(zip(decl, tosa, vel)):
            where = f"{name} {kind} {k} ({names[k] if k < len(names) else '?'})"
            want_tosa = _TOSA_DTYPE_FOR.get(d.elem_size)
            if t.dtype != want_tosa:
                raise BoundaryContractError(
                    f"{where}: declared {d.dtype} but the TOSA graph {kind} is {t.dtype_name}")
            if v.elem_size != d.elem_size:
                raise BoundaryContractError(
                    f"{where}: declared {d.dtype} ({d.elem_size} B/element) but Vela "
                    f"{'reads' if kind == 'input' else 'writes'} {v.elem_size} B/element")
            if math.prod(t.shape) != d.numel or v.numel != d.numel:
                raise BoundaryContractError(
                    f"{where}: declared shape {list(d.shape)} but TOSA has {list(t.shape)} and "
                    f"Vela {list(v.shape)}")
            out.append(TensorSpec(d.dtype, d.shape, _npu_dim_order(d, t), d.scale, d.zero_point,
                                  v.region, v.offset))
        placed[kind] = out
    return DelegateIOSpec(placed["input"], placed["output"], declared.input_names,
                          declared.output_names, vela.summary)


def _npu_dim_order(d: TensorSpec, t: TosaTensorInfo):
    """The memory order the NPU buffer uses, from the TOSA tensor's shape."""
    contiguous = tuple(range(len(d.shape)))
    if tuple(t.shape) == d.shape:
        return contiguous
    permuted = tuple(d.shape[i] for i in d.dim_order)
    if tuple(t.shape) == permuted:
        return d.dim_order
    return contiguous  # rank-changing reshape at the boundary: element order is row-major


@final
class EthosUNGBackend(BackendDetails):
    @staticmethod
    def preprocess(edge_program: ExportedProgram, compile_specs: List[CompileSpec]) -> PreprocessResult:
        spec = EthosUNGCompileSpec.from_compile_specs(compile_specs)
        name = _partition_name(edge_program)
        declared = declared_io(edge_program)
        with upstream.lowering_context(spec, edge_program):
            tosa = upstream.lower_to_tosa(edge_program, spec)
        tosa_ins, tosa_outs = tosa_io(tosa)
        vela = compile_tosa(tosa, spec, partition=name)
        io = check_io(name, declared, tosa_ins, tosa_outs, vela)
        blob = DelegateBlob(
            inputs=io.inputs, outputs=io.outputs, command_stream=vela.command_stream,
            weights=vela.weights, scratch_size=vela.scratch_size,
            fast_scratch_size=vela.fast_scratch_size, tosa=tosa if spec.embed_tosa else None,
        )
        logger.info("%s: %d inputs, %d outputs, %d B command stream, %d B weights", name,
                    len(io.inputs), len(io.outputs), len(vela.command_stream), len(vela.weights))
        return PreprocessResult(processed_bytes=blob.to_bytes(), _delegate_info_meta=io)
