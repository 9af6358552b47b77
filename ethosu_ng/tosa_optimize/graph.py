# SPDX-License-Identifier: BSD-3-Clause
"""A small mutable IR of one TOSA graph, read from and written back to the flatbuffer.

Reading and writing go through tosa-tools' own serializer (``tosa_serializer``): it loads the
flatbuffer, and a new serializer built from the IR writes it. Attributes are copied field by
field through the serializer's attribute builders, so every operator upstream emits round-trips
without this module knowing its attributes (a graph read and written unchanged is byte-identical:
tests/test_tosa_optimize.py). Constant data stays the serializer's raw little-endian bytes;
``const_array`` / ``set_const_array`` decode it where a rewrite needs the values.

Only single-region, single-block graphs are modelled (what upstream produces for a partition);
``read`` raises ``UnsupportedGraph`` for anything else, and the caller leaves such a graph alone.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import tempfile
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

import numpy as np

logger = logging.getLogger(__name__)

# Ops with no side effect: removable when nothing reads their outputs.
_IMPURE = frozenset(
    {"VARIABLE", "VARIABLE_READ", "VARIABLE_WRITE", "CUSTOM", "COND_IF", "WHILE_LOOP"}
)
_NUMPY_DTYPE = {"BOOL": "u1", "INT8": "i1", "INT16": "<i2", "INT32": "<i4", "INT64": "<i8"}
_NUMPY_DTYPE.update({"FP32": "<f4", "FP16": "<f2", "SHAPE": "<i8"})
# INT48 (the bias of an int16 convolution) is 6 little-endian bytes per value; numpy has no such
# type, so its values are held as int64 (as the serializer takes them).
_INT48 = "INT48"


def _int48_values(raw: bytes) -> np.ndarray:
    b = np.frombuffer(raw, dtype=np.uint8).reshape(-1, 6).astype(np.int64)
    v = sum(b[:, k] << (8 * k) for k in range(6))
    return np.where(v >= 1 << 47, v - (1 << 48), v)


def _decoded(t) -> Optional[np.ndarray]:
    """A constant's values: a numpy array of its dtype (int64 for INT48), None if not modelled."""
    if t.dtype == _INT48:
        return _int48_values(bytes(t.data))
    if t.dtype not in _NUMPY_DTYPE:
        return None
    return np.frombuffer(bytes(t.data), dtype=_NUMPY_DTYPE[t.dtype])


class UnsupportedGraph(ValueError):
    """The graph uses something this IR does not model (several blocks, ...)."""


@dataclass
class Tensor:
    name: str
    shape: List[int]
    dtype: str  # tosa DType name, e.g. "INT8"
    data: Optional[List[int]] = None  # raw bytes of a constant
    is_unranked: bool = False
    variable: bool = False
    variable_name: str = ""


@dataclass
class ShapeValue:
    """A shape-typed value (CONST_SHAPE output): ``rank`` int64 values."""

    name: str
    rank: int
    data: Optional[List[int]] = None


@dataclass
class Operator:
    op: str  # tosa Op name, e.g. "TRANSPOSE"
    inputs: List[str]
    outputs: List[str]
    attr: Dict[str, Any] = field(default_factory=dict)
    location: Optional[str] = None
    # Output name, in the graph as read, of the operator whose FX source this one inherits
    # (upstream's op_sources are keyed by output tensor name).
    source: Optional[str] = None


@dataclass
class Graph:
    tensors: Dict[str, Tensor]
    shapes: Dict[str, ShapeValue]
    ops: List[Operator]
    inputs: List[str]
    outputs: List[str]
    version: Tuple[int, int, int, bool]
    _counter: int = 0

    # ---- queries -------------------------------------------------------------------------
    def producers(self) -> Dict[str, Operator]:
        return {t: o for o in self.ops for t in o.outputs}

    def consumers(self) -> Dict[str, List[Operator]]:
        out: Dict[str, List[Operator]] = {}
        for o in self.ops:
            for t in o.inputs:
                out.setdefault(t, []).append(o)
        return out

    def const_array(self, name: str) -> Optional[np.ndarray]:
        """Values of a constant tensor or a shape value; None if ``name`` is not constant."""
        if name in self.shapes:
            s = self.shapes[name]
            if s.data is None:
                return None
            return np.frombuffer(bytes(s.data), dtype="<i8").copy()
        t = self.tensors.get(name)
        if t is None or t.data is None:
            return None
        arr = _decoded(t)
        return None if arr is None else arr.copy().reshape(t.shape)

    def is_constant(self, name: str) -> bool:
        return self.tensors[name].data is not None

    def shape_of(self, name: str) -> List[int]:
        return list(self.tensors[name].shape)

    # ---- edits ---------------------------------------------------------------------------
    def fresh_name(self, base: str) -> str:
        while True:
            self._counter += 1
            name = f"{base}_tosaopt{self._counter}"
            if name not in self.tensors and name not in self.shapes:
                return name

    def insert_before(self, anchor: Operator, op: Operator) -> None:
        """Insert ``op`` just before ``anchor`` (the operator order changes no more than needed)."""
        self.ops.insert(next(k for k, o in enumerate(self.ops) if o is anchor), op)

    def copy_before(self, op: Operator, anchor: Operator) -> str:
        """A copy of single-output ``op`` (same inputs and attributes, a fresh output tensor of
        the same shape and type) placed just before ``anchor``; returns the copy's output."""
        return self.insert_copy(op, anchor).outputs[0]

    def insert_copy(self, op: Operator, anchor: Operator) -> Operator:
        """``copy_before``, returning the copy itself."""
        y = op.outputs[0]
        out = self.fresh_name(y)
        t = self.tensors[y]
        self.tensors[out] = Tensor(out, list(t.shape), t.dtype)
        copy = Operator(op.op, list(op.inputs), [out], dict(op.attr), op.location, op.source)
        self.insert_before(anchor, copy)
        return copy

    def add_const(self, anchor: Operator, base: str, arr: np.ndarray, dtype: str) -> str:
        """A new CONST operator holding ``arr`` as ``dtype``, placed before ``anchor`` and
        attributed to it; returns its output name."""
        name = self.fresh_name(base)
        raw = np.ascontiguousarray(arr.astype(_NUMPY_DTYPE[dtype]))
        self.tensors[name] = Tensor(name, list(arr.shape), dtype, list(raw.tobytes()))
        self.insert_before(anchor, Operator("CONST", [], [name], source=anchor.source))
        return name

    def add_const_shape(self, anchor: Operator, base: str, values: Iterable[int]) -> str:
        """A new CONST_SHAPE operator, placed before ``anchor`` and attributed to it."""
        name = self.fresh_name(base)
        vals = np.asarray(list(values), dtype="<i8")
        self.shapes[name] = ShapeValue(name, len(vals), list(vals.tobytes()))
        self.insert_before(anchor, Operator("CONST_SHAPE", [], [name], source=anchor.source))
        return name

    def insert_reshape(self, anchor: Operator, x: str, base: str, shape: Sequence[int]) -> str:
        """A RESHAPE of ``x`` to ``shape`` placed before ``anchor`` and attributed to it; returns
        its output's name."""
        out = self.fresh_name(base)
        self.tensors[out] = Tensor(out, list(shape), self.tensors[x].dtype)
        reshape = Operator("RESHAPE", [x], [out], source=anchor.source)
        self.insert_before(anchor, reshape)
        reshape.inputs.append(self.add_const_shape(reshape, out + "_shape", shape))
        return out

    def insert_transpose(
        self, anchor: Operator, x: str, base: str, perm: Sequence[int], attr: Dict[str, Any]
    ) -> str:
        """A TRANSPOSE of ``x`` by ``perm`` (other attributes from ``attr``) placed before
        ``anchor`` and attributed to it; returns its output's name."""
        out = self.fresh_name(base)
        shape = self.shape_of(x)
        self.tensors[out] = Tensor(out, [shape[p] for p in perm], self.tensors[x].dtype)
        op = Operator("TRANSPOSE", [x], [out], {**attr, "perms": list(perm)}, source=anchor.source)
        self.insert_before(anchor, op)
        return out

    def become_reshape(self, op: Operator, x: str) -> None:
        """``op`` now reshapes ``x`` to its own output's shape (its output keeps its name)."""
        op.op, op.attr = "RESHAPE", {}
        y = op.outputs[0]
        op.inputs = [x, self.add_const_shape(op, y + "_shape", self.shape_of(y))]

    def replace_uses(self, old: str, new: str) -> None:
        """Every operator input reading ``old`` reads ``new`` instead (not graph outputs)."""
        if old in self.outputs:
            raise ValueError(f"{old} is a graph output; its producer must keep producing it")
        for o in self.ops:
            o.inputs = [new if t == old else t for t in o.inputs]

    def remove_dead(self) -> None:
        """Drop side-effect-free operators whose outputs nothing reads, to a fixed point."""
        while True:
            used = set(self.outputs)
            for o in self.ops:
                used.update(o.inputs)
            keep = [o for o in self.ops if o.op in _IMPURE or any(t in used for t in o.outputs)]
            if len(keep) == len(self.ops):
                return
            self.ops = keep

    def check_order(self) -> None:
        """Every operator input is a graph input, a constant or an earlier operator's output."""
        known = set(self.inputs)
        for o in self.ops:
            missing = [t for t in o.inputs if t not in known]
            if missing:
                raise ValueError(f"{o.op} -> {o.outputs} reads {missing} before it is produced")
            known.update(o.outputs)


@contextlib.contextmanager
def stdout_to_log():
    """The serializer prints a version note to file descriptor 1 on every load; log it instead."""
    sys.stdout.flush()
    saved = os.dup(1)
    with tempfile.TemporaryFile() as sink:
        os.dup2(sink.fileno(), 1)
        try:
            yield
        finally:
            os.dup2(saved, 1)
            os.close(saved)
            sink.seek(0)
            text = sink.read().decode(errors="replace").strip()
            if text:
                logger.debug("tosa_serializer: %s", text)


def _attr_fields(attr) -> Dict[str, Any]:
    return {k: getattr(attr, k) for k in dir(attr) if not k.startswith("_")}


def _tensors(block) -> Dict[str, Tensor]:
    """The block's tensors, read from the flatbuffer itself: the serializer's tensor map finds a
    name by a linear search, so reading every tensor through it grows with the square of the
    graph (5.5 of 6.1 s of ``read`` on a 32-block ViT stack)."""
    from tosa.DType import DType

    names = {v: k for k, v in vars(DType).items() if not k.startswith("_")}
    tensors: Dict[str, Tensor] = {}
    for i in range(block.TensorsLength()):
        t = block.Tensors(i)
        name = t.Name().decode()
        variable_name = t.VariableName()
        tensors[name] = Tensor(
            name,
            t.ShapeAsNumpy().tolist() if t.ShapeLength() else [],
            names[t.Type()],
            t.DataAsNumpy().tolist() if t.DataLength() else None,
            bool(t.IsUnranked()),
            bool(t.Variable()),
            variable_name.decode() if variable_name else "",
        )
    return tensors


def read(flatbuffer: bytes) -> Graph:
    """Parse a TOSA flatbuffer into a ``Graph``."""
    from tosa.TosaGraph import TosaGraph

    fb = TosaGraph.GetRootAs(bytearray(flatbuffer), 0)
    v = fb.Version()
    version = (v._Major(), v._Minor(), v._Patch(), bool(v._Draft()))
    if fb.RegionsLength() != 1 or fb.Regions(0).BlocksLength() != 1:
        raise UnsupportedGraph("TOSA graph has more than one region or block")
    block = _loaded(flatbuffer, version).regions[0].basicBlocks[0]
    tensors = _tensors(fb.Regions(0).Blocks(0))
    for t in tensors.values():
        if t.data is not None and t.dtype not in _NUMPY_DTYPE and t.dtype != _INT48:
            raise UnsupportedGraph(f"constant {t.name} has dtype {t.dtype}, which is not modelled")
    shapes: Dict[str, ShapeValue] = {}
    for name in block.shapes.keys():  # noqa: SIM118
        s = block.shapes[name]
        shapes[name] = ShapeValue(s.name, s.rank, list(s.data) if s.data else None)
    ops = []
    for o in block.operators:
        loc = o.location.text if o.location is not None else None
        out = list(o.outputs)
        ops.append(
            Operator(
                o.op.name,
                list(o.inputs),
                out,
                _attr_fields(o.attributes),
                loc,
                source=out[0] if out else None,
            )
        )
    return Graph(tensors, shapes, ops, list(block.inputs), list(block.outputs), version)


def write(graph: Graph) -> bytes:
    """Serialize ``graph``; only tensors and shapes some operator or the IO uses are written.

    The serializer's ``addTensor`` looks each new name up by a linear search, so adding every
    tensor through it grows with the square of the graph (5.5 s of a 32-block ViT stack's
    write, 0.3 s at 8 blocks). Its loader appends without a search: the tensors and
    shapes go in as a flatbuffer of their own, loaded, and the operators and IO are added to
    the loaded block, which the serializer writes as if every tensor had been added one by one.
    """
    used = set(graph.inputs) | set(graph.outputs)
    for o in graph.ops:
        used.update(o.inputs)
        used.update(o.outputs)
    ser = _loaded(_tensors_only(graph, used), graph.version)
    add_operators_and_io(ser.regions[0].basicBlocks[0], graph)
    return bytes(ser.serialize())


def _loaded(flatbuffer: bytes, version: Tuple[int, int, int, bool]):
    """A serializer holding ``flatbuffer`` (of TOSA ``version``), loaded from a file (the only
    way it loads)."""
    import tosa_serializer as ts

    major, minor, patch, draft = version
    fd, path = tempfile.mkstemp(suffix=".tosa")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(flatbuffer)
        ser = ts.TosaSerializer(
            "", targetMajor=major, targetMinor=minor, targetPatch=patch, targetDraft=draft
        )
        with stdout_to_log():
            if not ser.loadTosaFlatbuffer(path):
                raise UnsupportedGraph(
                    f"tosa_serializer cannot load TOSA version {version} (major, minor, patch,"
                    " draft)"
                )
    finally:
        os.unlink(path)
    return ser


def add_operators_and_io(block, graph: Graph) -> None:
    """Add ``graph``'s operators, inputs and outputs to the serializer's ``block``."""
    import tosa_serializer as ts

    for o in graph.ops:
        attr = ts.TosaSerializerAttribute()
        builder = _ATTRIBUTE_BUILDER.get(o.op) or _builder_name(o.op)
        getattr(attr, builder)(**o.attr)
        loc = ts.TosaOpLocation(o.location) if o.location is not None else None
        block.addOperator(ts.Op.__members__[o.op], list(o.inputs), list(o.outputs), attr, loc)
    for name in graph.inputs:
        block.addInput(name)
    for name in graph.outputs:
        block.addOutput(name)


# What a new serializer names its region and block.
_REGION_NAME = _BLOCK_NAME = "main"


def _tensors_only(graph: Graph, used) -> bytes:
    """A TOSA flatbuffer holding the used tensors and shapes of ``graph`` in its order, in one
    region and block named as the serializer names its own, and no operators."""
    import flatbuffers
    from tosa import TosaBasicBlock as TB
    from tosa import TosaGraph as TG
    from tosa import TosaRegion as TR
    from tosa import TosaShape as TS
    from tosa import TosaTensor as TT
    from tosa import Version
    from tosa.DType import DType

    b = flatbuffers.Builder(1 << 16)

    def vector(start, offsets) -> int:
        start(b, len(offsets))
        for o in reversed(offsets):
            b.PrependUOffsetTRelative(o)
        return b.EndVector()

    tensors = []
    for name, t in graph.tensors.items():
        if name not in used:
            continue
        if t.data is not None and t.dtype not in _NUMPY_DTYPE and t.dtype != _INT48:
            raise UnsupportedGraph(f"constant {t.name} has dtype {t.dtype}, which is not modelled")
        # A constant's bytes as the serializer writes its values: little-endian, unpadded.
        fields = (
            b.CreateString(t.name),
            b.CreateNumpyVector(np.asarray(t.shape, dtype=np.int32)),
            None if t.data is None else b.CreateNumpyVector(np.asarray(t.data, np.uint8)),
            b.CreateString(t.variable_name),
        )
        TT.Start(b)
        TT.AddName(b, fields[0])
        TT.AddShape(b, fields[1])
        TT.AddType(b, getattr(DType, t.dtype))
        if fields[2] is not None:
            TT.AddData(b, fields[2])
        TT.AddVariable(b, t.variable)
        TT.AddIsUnranked(b, t.is_unranked)
        TT.AddVariableName(b, fields[3])
        tensors.append(TT.End(b))
    shapes = []
    for name, s in graph.shapes.items():
        if name not in used:
            continue
        shape_name = b.CreateString(s.name)
        data = None if s.data is None else b.CreateNumpyVector(np.asarray(s.data, np.uint8))
        TS.Start(b)
        TS.AddName(b, shape_name)
        TS.AddRank(b, s.rank)
        if data is not None:
            TS.AddData(b, data)
        shapes.append(TS.End(b))
    fields = (
        vector(TB.StartTensorsVector, tensors),
        vector(TB.StartShapesVector, shapes),
        vector(TB.StartOperatorsVector, []),
        vector(TB.StartInputsVector, []),
        vector(TB.StartOutputsVector, []),
        b.CreateString(_BLOCK_NAME),
    )
    TB.Start(b)
    TB.AddTensors(b, fields[0])
    TB.AddShapes(b, fields[1])
    TB.AddOperators(b, fields[2])
    TB.AddInputs(b, fields[3])
    TB.AddOutputs(b, fields[4])
    TB.AddName(b, fields[5])
    blocks = vector(TR.StartBlocksVector, [TB.End(b)])
    region_name = b.CreateString(_REGION_NAME)
    TR.Start(b)
    TR.AddName(b, region_name)
    TR.AddBlocks(b, blocks)
    regions = vector(TG.StartRegionsVector, [TR.End(b)])
    major, minor, patch, draft = graph.version
    Version.Start(b)
    Version.Add_Major(b, major)
    Version.Add_Minor(b, minor)
    Version.Add_Patch(b, patch)
    Version.Add_Draft(b, draft)
    version = Version.End(b)
    TG.Start(b)
    TG.AddVersion(b, version)
    TG.AddRegions(b, regions)
    b.Finish(TG.End(b), file_identifier=b"TOSA")
    return bytes(b.Output())


# Attribute builders whose names do not follow CamelCase(op) + "Attribute".
_ATTRIBUTE_BUILDER = {
    "MATMUL": "MatMulAttribute",
    "MATMUL_T_BLOCK_SCALED": "MatMulTBlockScaledAttribute",
    "FFT2D": "FFT2dAttribute",
    "RFFT2D": "RFFT2dAttribute",
    "CONV2D": "Conv2dAttribute",
    "CONV3D": "Conv3dAttribute",
    "DEPTHWISE_CONV2D": "DepthwiseConv2dAttribute",
    "TRANSPOSE_CONV2D": "TransposeConv2dAttribute",
    "AVG_POOL2D": "AvgPool2dAttribute",
    "MAX_POOL2D": "MaxPool2dAttribute",
    "AVG_POOL2D_ADAPTIVE": "AvgPool2dAdaptiveAttribute",
    "MAX_POOL2D_ADAPTIVE": "MaxPool2dAdaptiveAttribute",
    "CONV2D_BLOCK_SCALED": "Conv2dBlockScaledAttribute",
}


def _builder_name(op: str) -> str:
    return "".join(p.capitalize() for p in op.split("_")) + "Attribute"
