"""Compile partition programs to DelegateBlobs: the stages behind ``EthosUNGBackend``.

Per partition: declared IO (delegate_io) -> TOSA (upstream lowering via the adapter) -> Vela
(child process) -> cross-check declared == TOSA == Vela IO -> DelegateBlob v1. Any disagreement is
a ``BoundaryContractError`` naming the partition, the IO index and both types.

Many partitions: TOSA lowering runs in this process, one partition after the other (upstream's
lowering is not thread-safe); up to ``spec.vela_workers`` Vela child processes run meanwhile, so
Vela for partition k overlaps the lowering of partition k+1.

Compiled partitions are kept by fingerprint (``partition_program.fingerprint``) until
``preprocess`` takes them: the partitioner compiles before it answers (to fall back to the CPU on
a Vela failure), and the backend must not pay a second time.
"""

from __future__ import annotations

import copy
import logging
import math
import time
from collections import OrderedDict
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import List, Optional, Sequence, Set, Tuple, Union

import torch
from torch.export import ExportedProgram
from tosa.DType import DType

from . import module_profile, upstream, vela_compiler
from .blob import DelegateBlob
from .boundary import BoundaryContractError
from .compile_spec import EthosUNGCompileSpec
from .delegate_io import DelegateIOSpec, declared_io
from .tensor_spec import TensorSpec
from .tosa_graph import TosaTensorInfo, tosa_io, tosa_ops
from .vela_compiler import VelaError, VelaResult

logger = logging.getLogger(__name__)

_TOSA_DTYPE_FOR = {1: DType.INT8, 2: DType.INT16, 4: DType.INT32}  # by element size


def check_io(
    name: str,
    declared: DelegateIOSpec,
    tosa_ins: List[TosaTensorInfo],
    tosa_outs: List[TosaTensorInfo],
    vela: VelaResult,
    nhwc_outputs: Set[int] = frozenset(),
) -> DelegateIOSpec:
    """declared == TOSA == Vela for every input and output; return specs placed by Vela.

    ``nhwc_outputs``: output indices deliberately emitted channels-last by the NPU."""
    placed = {}
    for kind, decl, names, tosa, vel in (
        ("input", declared.inputs, declared.input_names, tosa_ins, vela.inputs),
        ("output", declared.outputs, declared.output_names, tosa_outs, vela.outputs),
    ):
        if not (len(decl) == len(tosa) == len(vel)):
            raise BoundaryContractError(
                f"{name}: {kind} count disagrees: declared {len(decl)} {names}, TOSA {len(tosa)} "
                f"{[t.name for t in tosa]} {[list(t.shape) for t in tosa]}, Vela {len(vel)} "
                f"{[list(v.shape) for v in vel]}"
            )
        out = []
        for k, (d, t, v) in enumerate(zip(decl, tosa, vel)):
            where = f"{name} {kind} {k} ({names[k] if k < len(names) else '?'})"
            want_tosa = _TOSA_DTYPE_FOR.get(d.elem_size)
            if t.dtype != want_tosa:
                raise BoundaryContractError(
                    f"{where}: declared {d.dtype} but the TOSA graph {kind} is {t.dtype_name}"
                )
            if v.elem_size != d.elem_size:
                raise BoundaryContractError(
                    f"{where}: declared {d.dtype} ({d.elem_size} B/element) but Vela "
                    f"{'reads' if kind == 'input' else 'writes'} {v.elem_size} B/element"
                )
            if math.prod(t.shape) != d.numel or v.numel != d.numel:
                raise BoundaryContractError(
                    f"{where}: declared shape {list(d.shape)} but TOSA has {list(t.shape)} and "
                    f"Vela {list(v.shape)}"
                )
            want_nhwc = kind == "output" and k in nhwc_outputs
            order = _npu_dim_order(d, t, want_nhwc)
            if order is None:
                raise BoundaryContractError(
                    f"{where}: TOSA shape {list(t.shape)} is no layout of declared shape "
                    f"{list(d.shape)}"
                )
            out.append(
                TensorSpec(d.dtype, d.shape, order, d.scale, d.zero_point, v.region, v.offset)
            )
        placed[kind] = out
    return DelegateIOSpec(
        placed["input"], placed["output"], declared.input_names, declared.output_names, vela.summary
    )


CHANNELS_LAST = (0, 2, 3, 1)


def _npu_dim_order(d: TensorSpec, t: TosaTensorInfo, want_nhwc: bool = False):
    """The memory order of the NPU buffer, from the TOSA tensor's shape."""
    contiguous = tuple(range(len(d.shape)))
    shape = tuple(t.shape)
    if want_nhwc and len(d.shape) == 4 and shape == tuple(d.shape[i] for i in CHANNELS_LAST):
        return CHANNELS_LAST
    if shape == d.shape:
        return contiguous
    if shape == tuple(d.shape[i] for i in d.dim_order):
        return d.dim_order
    if len(shape) != len(d.shape):
        return contiguous  # rank-changing reshape at the boundary: element order is row-major
    return None


def _internal_rank4_exits(program: ExportedProgram):
    for k, a in enumerate(program.graph_module.graph.output_node().args[0]):
        if isinstance(a, torch.fx.Node) and len(a.users) >= 2:
            v = a.meta.get("val")
            if isinstance(v, torch.Tensor) and v.dim() == 4:
                yield k, a, v


def _has_internal_rank4_exit(program: ExportedProgram) -> bool:
    return next(_internal_rank4_exits(program), None) is not None


def _nhwc_exits(program: ExportedProgram) -> Set[int]:
    """Make every rank-4 output that is also consumed inside the partition channels-last.

    Vela 5.1.0 drops such an output when upstream's layout pass routes the internal consumer
    through the output's NCHW transpose and straight back (Vela cancels the pair and loses the
    output; measured: TOSA 2 outputs, Vela 1). Emitting the output in NHWC removes the pair; the
    runtime's layout copy turns it into the ExecuTorch tensor's dim order.
    """
    changed: Set[int] = set()
    for k, a, v in list(_internal_rank4_exits(program)):
        n, c, h, w = v.shape
        with v.fake_mode:
            a.meta["val"] = torch.empty_strided(v.shape, (h * w * c, 1, w * c, c), dtype=v.dtype)
        changed.add(k)
    return changed


def _drop_provenance(program: ExportedProgram) -> None:
    """Forget torch.fx's ``from_node`` provenance on this private copy of the partition.

    Every one of upstream's ~150 TOSA passes deep-copies each touched node's provenance chain,
    which grows with every pass: measured 12 s of a 72 s mobilenetv2 lowering in ``deepcopy``.
    The chain is debugging metadata only; the parent program keeps its own.
    """
    for n in program.graph_module.graph.nodes:
        n.meta.pop("from_node", None)


def partition_name(program: ExportedProgram) -> str:
    for n in program.graph_module.graph.nodes:
        tag = n.meta.get("delegation_tag")
        if tag:
            return tag
    return "delegate"


@dataclass
class CompiledPartition:
    blob: bytes
    io: DelegateIOSpec


@dataclass
class _Pending:
    name: str
    declared: DelegateIOSpec
    pristine: Optional[ExportedProgram]  # kept only where Vela may drop an output (_nhwc_exits)
    tosa: bytes
    vela: Future[VelaResult]
    op_sources: List[dict]  # upstream's record of which FX node each TOSA operator came from


def _start(
    program: ExportedProgram,
    spec: EthosUNGCompileSpec,
    name: str,
    pool: Optional[ThreadPoolExecutor],
) -> _Pending:
    declared = declared_io(program)
    # Upstream's lowering edits the program in place; keep a copy for the channels-last retry,
    # which only a rank-4 output with a consumer inside the partition can need.
    pristine = copy.deepcopy(program) if _has_internal_rank4_exit(program) else None
    _drop_provenance(program)
    op_sources: List[dict] = []
    with upstream.lowering_context(spec, program):
        tosa = upstream.lower_to_tosa(program, spec, op_sources)
    if pool is None:
        fut: Future = Future()
        try:
            fut.set_result(vela_compiler.compile_tosa(tosa, spec, partition=name))
        except Exception as e:  # noqa: BLE001  (delivered by _finish, like a worker's)
            fut.set_exception(e)
    else:
        fut = pool.submit(vela_compiler.compile_tosa, tosa, spec, name)
    return _Pending(name, declared, pristine, tosa, fut, op_sources)


def _finish(p: _Pending, spec: EthosUNGCompileSpec) -> CompiledPartition:
    tosa, vela, op_sources = p.tosa, p.vela.result(), p.op_sources
    nhwc: Set[int] = set()
    if len(vela.outputs) != len(p.declared.outputs):
        nhwc = _nhwc_exits(p.pristine) if p.pristine is not None else set()
        if nhwc:
            logger.info(
                "%s: Vela dropped an output; emitting outputs %s channels-last",
                p.name,
                sorted(nhwc),
            )
            _drop_provenance(p.pristine)
            op_sources = []
            with upstream.lowering_context(spec, p.pristine):
                tosa = upstream.lower_to_tosa(p.pristine, spec, op_sources)
            vela = vela_compiler.compile_tosa(tosa, spec, partition=p.name)
    tosa_ins, tosa_outs = tosa_io(tosa)
    io = check_io(p.name, p.declared, tosa_ins, tosa_outs, vela, nhwc)
    io.layers = module_profile.attribute(vela.layers, tosa_ops(tosa), op_sources)
    blob = DelegateBlob(
        inputs=io.inputs,
        outputs=io.outputs,
        command_stream=vela.command_stream,
        weights=vela.weights,
        scratch_size=vela.scratch_size,
        fast_scratch_size=vela.fast_scratch_size,
        tosa=tosa if spec.embed_tosa else None,
    )
    logger.debug(
        "%s: %d inputs, %d outputs, %d B command stream, %d B weights",
        p.name,
        len(io.inputs),
        len(io.outputs),
        len(vela.command_stream),
        len(vela.weights),
    )
    return CompiledPartition(blob.to_bytes(), io)


def compile_partitions(
    programs: Sequence[Tuple[str, ExportedProgram]],
    spec: EthosUNGCompileSpec,
) -> List[Union[CompiledPartition, VelaError]]:
    """Compile (name, program) pairs; a partition Vela fails on yields its ``VelaError`` in place
    of a result (the caller decides: fall back or raise). Other errors propagate. Edits the
    programs."""
    t0 = time.time()
    workers = spec.vela_workers if len(programs) > 1 else 1
    pool = (
        ThreadPoolExecutor(max_workers=workers, thread_name_prefix="vela") if workers > 1 else None
    )
    pending: List[_Pending] = []
    results: List[Union[CompiledPartition, VelaError]] = []
    try:
        for name, program in programs:
            pending.append(_start(program, spec, name, pool))
        for p in pending:
            try:
                results.append(_finish(p, spec))
            except VelaError as e:
                results.append(e)
    finally:
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
    logger.info(
        "compiled %d partition(s) for %s in %.1f s (%d Vela worker(s))",
        len(programs),
        spec.target,
        time.time() - t0,
        workers,
    )
    return results


class CompiledCache:
    """Fingerprint -> compiled partition, waiting for ``preprocess``. Bounded: an entry nobody
    takes (the partition was dropped, or lowering stopped) is evicted oldest first."""

    def __init__(self, capacity: int = 512):
        self.capacity = capacity
        self._entries: OrderedDict[str, CompiledPartition] = OrderedDict()

    def put(self, key: str, compiled: CompiledPartition) -> None:
        self._entries[key] = compiled
        self._entries.move_to_end(key)
        while len(self._entries) > self.capacity:
            self._entries.popitem(last=False)

    def get(self, key: Optional[str]) -> Optional[CompiledPartition]:
        return self._entries.get(key) if key is not None else None

    def take(self, key: Optional[str]) -> Optional[CompiledPartition]:
        return self._entries.pop(key, None) if key is not None else None


COMPILED = CompiledCache()
