# SPDX-License-Identifier: BSD-3-Clause
"""Read the IO of a serialized TOSA graph (what the TOSA lowering actually produced)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Tuple

from tosa.DType import DType
from tosa.TosaGraph import TosaGraph

# TOSA has no unsigned type: uint8 program IO is an INT8 tensor read by an unsigned RESCALE.
TOSA_DTYPE_NAMES = {getattr(DType, k): k for k in dir(DType) if not k.startswith("_")}
TOSA_ELEM_SIZE = {
    DType.INT8: 1,
    DType.INT16: 2,
    DType.INT32: 4,
    DType.BOOL: 1,
    DType.FP32: 4,
    DType.FP16: 2,
    DType.BF16: 2,
}


@dataclass(frozen=True)
class TosaTensorInfo:
    name: str
    dtype: int
    shape: Tuple[int, ...]

    @property
    def dtype_name(self) -> str:
        return TOSA_DTYPE_NAMES.get(self.dtype, str(self.dtype))


def tosa_io(flatbuffer: bytes) -> Tuple[List[TosaTensorInfo], List[TosaTensorInfo]]:
    """Inputs and outputs of the main block, in the order the graph declares them."""
    graph = TosaGraph.GetRootAs(bytearray(flatbuffer), 0)
    if graph.RegionsLength() < 1:
        raise ValueError("TOSA graph has no region")
    block = graph.Regions(0).Blocks(0)
    tensors = {}
    for k in range(block.TensorsLength()):
        t = block.Tensors(k)
        shape = tuple(int(s) for s in t.ShapeAsNumpy()) if t.ShapeLength() else ()
        tensors[t.Name().decode()] = TosaTensorInfo(t.Name().decode(), t.Type(), shape)
    ins = [tensors[block.Inputs(k).decode()] for k in range(block.InputsLength())]
    outs = [tensors[block.Outputs(k).decode()] for k in range(block.OutputsLength())]
    return ins, outs


@dataclass(frozen=True)
class TosaOpInfo:
    op: str
    inputs: Tuple[str, ...]
    outputs: Tuple[str, ...]
    input_unsigned: bool = False  # RESCALE only
    output_unsigned: bool = False  # RESCALE only


def tosa_ops(flatbuffer: bytes) -> List[TosaOpInfo]:
    """Operators of the main block in order (op names as in the TOSA spec)."""
    from tosa.Op import Op
    from tosa.RescaleAttribute import RescaleAttribute

    names = {getattr(Op, k): k for k in dir(Op) if not k.startswith("_")}
    block = TosaGraph.GetRootAs(bytearray(flatbuffer), 0).Regions(0).Blocks(0)
    ops = []
    for k in range(block.OperatorsLength()):
        o = block.Operators(k)
        name = names.get(o.Op(), str(o.Op()))
        ins = tuple(o.Inputs(j).decode() for j in range(o.InputsLength()))
        outs = tuple(o.Outputs(j).decode() for j in range(o.OutputsLength()))
        iu = ou = False
        if name == "RESCALE" and o.Attribute() is not None:
            attr = RescaleAttribute()
            table = o.Attribute()
            attr.Init(table.Bytes, table.Pos)
            iu, ou = bool(attr.InputUnsigned()), bool(attr.OutputUnsigned())
        ops.append(TosaOpInfo(name, ins, outs, iu, ou))
    return ops
