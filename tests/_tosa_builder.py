# SPDX-License-Identifier: BSD-3-Clause
"""Build small TOSA graphs for the TOSA optimisation tests, through the stage's own IR."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ethosu_ng.tosa_optimize.graph import Graph, Operator, ShapeValue, Tensor, write

_NP = {"INT8": np.int8, "INT16": np.int16, "INT32": np.int32}


class Builder:
    def __init__(self):
        self.g = Graph({}, {}, [], [], [], (1, 0, 0, False))
        self.n = 0

    def _name(self, base: str) -> str:
        self.n += 1
        return f"{base}_{self.n}"

    def _tensor(self, base, shape, dtype, data=None) -> str:
        name = self._name(base)
        self.g.tensors[name] = Tensor(name, list(shape), dtype, data)
        return name

    def input(self, shape, dtype="INT8") -> str:
        name = self._tensor("input", shape, dtype)
        self.g.inputs.append(name)
        return name

    def output(self, name: str) -> None:
        self.g.outputs.append(name)

    def const(self, values, dtype) -> str:
        if dtype == "INT48":  # 6 little-endian bytes a value
            arr = np.asarray(values, dtype=np.int64)
            raw = b"".join(int(v).to_bytes(6, "little", signed=True) for v in arr.ravel())
        else:
            arr = np.asarray(values, dtype=np.dtype(_NP[dtype]).newbyteorder("<"))
            raw = arr.tobytes()
        name = self._tensor("const", arr.shape, dtype, list(raw))
        self.g.ops.append(Operator("CONST", [], [name], source=name))
        return name

    def op(self, op, inputs, shape, dtype, **attr) -> str:
        """Any operator, its attributes as the serializer's builder names them."""
        return self._op(op, inputs, shape, dtype, attr)

    def _op(self, op, inputs, shape, dtype, attr=None) -> str:
        out = self._tensor(op.lower(), shape, dtype)
        self.g.ops.append(Operator(op, list(inputs), [out], dict(attr or {}), source=out))
        return out

    def dtype(self, name):
        return self.g.tensors[name].dtype

    def shape(self, name):
        return list(self.g.tensors[name].shape)

    def transpose(self, x, perm: Sequence[int]) -> str:
        shape = [self.shape(x)[p] for p in perm]
        return self._op("TRANSPOSE", [x], shape, self.dtype(x), {"perms": list(perm)})

    def reshape(self, x, shape) -> str:
        return self._op("RESHAPE", [x, self._const_shape(shape)], shape, self.dtype(x))

    def _const_shape(self, values) -> str:
        s = self._name("shape")
        vals = np.asarray(values, dtype="<i8")
        self.g.shapes[s] = ShapeValue(s, len(vals), list(vals.tobytes()))
        self.g.ops.append(Operator("CONST_SHAPE", [], [s], source=s))
        return s

    def slice(self, x, start, size) -> str:
        inputs = [x, self._const_shape(start), self._const_shape(size)]
        return self._op("SLICE", inputs, size, self.dtype(x))

    def rescale(self, x, out_dtype, multiplier=1 << 30, shift=30, in_zp=0, out_zp=0, channels=0):
        n = channels or 1
        mult = self.const([multiplier] * n, "INT32")
        sh = self.const([shift] * n, "INT8")
        izp = self.const([in_zp], self.dtype(x))
        ozp = self.const([out_zp], out_dtype)
        import tosa_serializer as ts

        attr = {
            "scale32": True,
            "rounding_mode": ts.RoundingMode.SINGLE_ROUND,
            "per_channel": bool(channels),
            "input_unsigned": False,
            "output_unsigned": False,
        }
        return self._op("RESCALE", [x, mult, sh, izp, ozp], self.shape(x), out_dtype, attr)

    def binary(self, op, a, b) -> str:
        shape = [max(p, q) for p, q in zip(self.shape(a), self.shape(b))]
        extra = [self.const([0], "INT8")] if op == "MUL" else []
        return self._op(op, [a, b, *extra], shape, "INT32")

    def clamp(self, x, lo, hi) -> str:
        import tosa_serializer as ts

        dt = _NP[self.dtype(x)]
        attr = {  # the serializer takes the bounds as the dtype's little-endian bytes
            "min_val": list(np.asarray([lo], dt).tobytes()),
            "max_val": list(np.asarray([hi], dt).tobytes()),
            "nan_mode": ts.NanPropagationMode.PROPAGATE,
        }
        return self._op("CLAMP", [x], self.shape(x), self.dtype(x), attr)

    def tosa(self) -> bytes:
        return write(self.g)
