# SPDX-License-Identifier: BSD-3-Clause
"""The integer TOSA ops of convolutional partitions, evaluated with numpy, bit-exact to the TOSA
reference model: the verified compile's reference for the graphs it covers.

tosa-tools' reference model runs an int8 convolution at about 0.4 G multiply-accumulates a
second (resnet18 at 224x224: about 5 s a sample, `bench/tosa_fast.py`; two thirds of the
verified compile). Here a
convolution is a matrix product over the im2col of its input, in float32 over chunks of the
reduction whose partial sums stay below 2**24 (the chunks summed in float64), exact because every
product and partial sum is then an integer the float holds (checked per op from the operands'
magnitudes; float64 below 2**53 where float32 chunks would be short, int64 otherwise). Every
other op is a few numpy calls.

``load`` reads a graph whose ops are all in ``OPS`` (or names the first thing it lacks),
``run_graph`` runs it on inputs, ``run`` does both. A run raises ``OutsideSpec`` where the
specification's REQUIRE fails on a value (a RESCALE input beyond its shift's range, an int32
result that does not fit), naming the tensor: the reference model calls such a run
unpredictable, and the caller asks it for its verdict. The outputs are what the reference model
returns (the output tensors' dtypes; INT48 as int64). tests/test_tosa_fast.py checks every op
against the reference model over drawn shapes and parameters, drawn small CNNs, and whole
partitions of real models.

Deliberately free of torch and of the rest of the package: it runs in the child process that
otherwise runs the reference model (``compiler.verify_npu``), loaded by its path. So it reads
the flatbuffer itself rather than through ``tosa_optimize.graph`` (whose serializer also copies
every constant into a Python list) and has its own RESCALE arithmetic rather than
``tosa_optimize``'s ``apply_rescale``; ``tests/test_tosa_fast.py`` checks that the two agree.
"""

from __future__ import annotations

import importlib
from typing import Callable, Dict, List, Sequence, Tuple

import numpy as np

# Integers a float holds exactly: every partial sum of a product below these is exact, in any
# order of summation (so whatever order BLAS picks).
_EXACT_IN_FLOAT32 = 1 << 24
_EXACT_IN_FLOAT64 = 1 << 53
# A float32 product is made in chunks of the reduction at least this long (else float64).
_MIN_FLOAT32_CHUNK = 32


class OutsideSpec(ValueError):
    """A REQUIRE of the TOSA specification fails on these inputs."""


class NotCovered(ValueError):
    """The graph has an op, a dtype or a form this evaluator does not implement."""


_DTYPE_NAMES: Dict[int, str] = {}
_OP_NAMES: Dict[int, str] = {}
_ATTR_NAMES: Dict[int, str] = {}


def _enums():
    if not _OP_NAMES:
        from tosa.Attribute import Attribute
        from tosa.DType import DType
        from tosa.Op import Op

        for enum, table in ((DType, _DTYPE_NAMES), (Op, _OP_NAMES), (Attribute, _ATTR_NAMES)):
            table.update({getattr(enum, k): k for k in dir(enum) if not k.startswith("_")})


_NUMPY = {"INT8": np.int8, "INT16": np.int16, "INT32": np.int32}
_RANGE = {
    "INT8": (-(1 << 7), (1 << 7) - 1),
    "INT16": (-(1 << 15), (1 << 15) - 1),
    "INT32": (-(1 << 31), (1 << 31) - 1),
    "INT48": (-(1 << 47), (1 << 47) - 1),
}


class _Graph:
    def __init__(self, flatbuffer: bytes):
        from tosa.TosaGraph import TosaGraph

        _enums()
        fb = TosaGraph.GetRootAs(bytearray(flatbuffer), 0)
        if fb.RegionsLength() != 1 or fb.Regions(0).BlocksLength() != 1:
            raise NotCovered("more than one region or block")
        block = fb.Regions(0).Blocks(0)
        self.dtype: Dict[str, str] = {}
        self.shape: Dict[str, Tuple[int, ...]] = {}
        self.const: Dict[str, np.ndarray] = {}
        for k in range(block.TensorsLength()):
            t = block.Tensors(k)
            name = t.Name().decode()
            dt = _DTYPE_NAMES.get(t.Type(), str(t.Type()))
            shape = tuple(int(s) for s in t.ShapeAsNumpy()) if t.ShapeLength() else ()
            self.dtype[name], self.shape[name] = dt, shape
            if t.IsUnranked() or t.Variable():
                raise NotCovered(f"tensor {name} is unranked or a variable")
            if not t.DataIsNone() and t.DataLength():
                self.const[name] = _decode(t.DataAsNumpy().tobytes(), dt, shape, name)
        for k in range(block.ShapesLength()):
            s = block.Shapes(k)
            name = s.Name().decode()
            self.dtype[name] = "SHAPE"
            if not s.DataIsNone() and s.DataLength():
                raw = s.DataAsNumpy().tobytes()
                if len(raw) < 8 * s.Rank():
                    raise NotCovered(f"shape {name}: {len(raw)} bytes for {s.Rank()} values")
                self.const[name] = np.frombuffer(raw, dtype="<i8", count=s.Rank()).copy()
        self.inputs = [block.Inputs(k).decode() for k in range(block.InputsLength())]
        self.outputs = [block.Outputs(k).decode() for k in range(block.OutputsLength())]
        self.ops: List[Tuple[str, List[str], List[str], Dict[str, object]]] = []
        for k in range(block.OperatorsLength()):
            o = block.Operators(k)
            name = _OP_NAMES.get(o.Op(), str(o.Op()))
            ins = [o.Inputs(j).decode() for j in range(o.InputsLength())]
            outs = [o.Outputs(j).decode() for j in range(o.OutputsLength())]
            self.ops.append((name, ins, outs, _attributes(o)))


def _decode(raw: bytes, dtype: str, shape, name: str) -> np.ndarray:
    """A constant's values; the serializer pads data past the last value (to 8 bytes)."""
    count = int(np.prod(shape, dtype=np.int64))
    if dtype == "INT48":
        if len(raw) < 6 * count:
            raise NotCovered(f"constant {name}: {len(raw)} bytes for {count} INT48 values")
        b = np.frombuffer(raw[: 6 * count], dtype=np.uint8).reshape(-1, 6).astype(np.int64)
        v = sum(b[:, k] << (8 * k) for k in range(6))
        return np.where(v >= 1 << 47, v - (1 << 48), v).reshape(shape)
    if dtype not in _NUMPY:
        raise NotCovered(f"constant {name} of dtype {dtype}")
    dt = np.dtype(_NUMPY[dtype]).newbyteorder("<")
    if len(raw) < dt.itemsize * count:
        raise NotCovered(f"constant {name}: {len(raw)} bytes for {count} {dtype} values")
    return np.frombuffer(raw, dtype=dt, count=count).reshape(shape)


def _attributes(o) -> Dict[str, object]:
    kind = _ATTR_NAMES.get(o.AttributeType(), "NONE")
    table = o.Attribute()
    if kind == "NONE" or table is None:
        return {}
    cls = getattr(importlib.import_module(f"tosa.{kind}"), kind)
    attr = cls()
    attr.Init(table.Bytes, table.Pos)
    out: Dict[str, object] = {}
    for field in dir(cls):
        if field.startswith("_") or field in ("Init", "GetRootAs") or field.startswith("GetRoot"):
            continue
        if field.endswith(("Length", "IsNone", "BufferHasIdentifier")):
            continue
        if field.endswith("AsNumpy"):
            out[field[: -len("AsNumpy")]] = [int(v) for v in np.atleast_1d(getattr(attr, field)())]
        elif not hasattr(cls, field + "AsNumpy"):
            out[field] = getattr(attr, field)()
    return out


def _require(ok, what: str) -> None:
    if not bool(ok):
        raise OutsideSpec(what)


def _fits(v: np.ndarray, dtype: str, what: str) -> np.ndarray:
    _require(_in_range(v, dtype), f"{what}: a value outside {dtype}")
    return v


def _in_range(v: np.ndarray, dtype: str) -> bool:
    lo, hi = _RANGE[dtype]
    return not v.size or (v.min() >= lo and v.max() <= hi)


def _scalar(x: np.ndarray) -> int:
    if x.size != 1:
        raise NotCovered("a zero point or shift that is not a single value")
    return int(x.reshape(-1)[0])


def _magnitude(x: np.ndarray, zero_point: int = 0) -> int:
    """The largest ``|x - zero_point|`` (0 for an empty array)."""
    if x.size == 0:
        return 0
    return max(abs(int(x.min()) - zero_point), abs(int(x.max()) - zero_point))


def _product_type(a: int, b: int, terms: int) -> Tuple[type, int]:
    """The type in which sums of ``terms`` products of integers of magnitudes up to ``a`` and
    ``b`` are exact, and how many terms of the reduction one float32 product may take: float32
    in chunks whose partial sums stay below 2**24 (the chunks summed in float64), float64 where
    the whole sum stays below 2**53, int64 else."""
    product = a * b
    if product == 0:
        return np.float32, max(terms, 1)
    chunk = (_EXACT_IN_FLOAT32 - 1) // product
    if chunk >= min(terms, _MIN_FLOAT32_CHUNK):
        return np.float32, min(chunk, max(terms, 1))
    if product * terms < _EXACT_IN_FLOAT64:
        return np.float64, terms
    return np.int64, terms


def _dot(a: np.ndarray, b: np.ndarray, chunk: int) -> np.ndarray:
    """``a @ b`` (2-D, one type from ``_product_type``) as int64, float32 in ``chunk``s of the
    reduction."""
    k = a.shape[-1]
    if a.dtype != np.float32 or chunk >= k:
        return (a @ b).astype(np.int64)
    acc = np.zeros(a.shape[:-1] + b.shape[-1:], dtype=np.float64)
    for k0 in range(0, k, chunk):
        acc += a[..., k0 : k0 + chunk] @ b[k0 : k0 + chunk]
    return acc.astype(np.int64)


def _exact_matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a @ b`` of int64 matrices, exactly."""
    if a.size == 0 or b.size == 0:
        return np.zeros(a.shape[:-1] + b.shape[-1:], dtype=np.int64)
    kind, chunk = _product_type(_magnitude(a), _magnitude(b), a.shape[-1])
    return _dot(a.astype(kind), b.astype(kind), chunk)


def _patches(x: np.ndarray, kh, kw, stride, dilation, pad, fill: int) -> np.ndarray:
    """[N, OH, OW, KH, KW, C] windows of NHWC ``x`` padded with ``fill`` (a view)."""
    top, bottom, left, right = pad
    n, h, w, c = x.shape
    xp = np.full((n, h + top + bottom, w + left + right, c), fill, dtype=x.dtype)
    xp[:, top : top + h, left : left + w, :] = x
    sy, sx = stride
    dy, dx = dilation
    oh = (h + top + bottom - (kh - 1) * dy - 1) // sy + 1
    ow = (w + left + right - (kw - 1) * dx - 1) // sx + 1
    _require(oh > 0 and ow > 0, "an empty output")
    s = xp.strides
    return np.lib.stride_tricks.as_strided(
        xp,
        (n, oh, ow, kh, kw, c),
        (s[0], s[1] * sy, s[2] * sx, s[1] * dy, s[2] * dx, s[3]),
        writeable=False,
    )


def _out_shape(g: _Graph, name: str, got: Tuple[int, ...], op: str) -> None:
    if tuple(g.shape[name]) != tuple(got):
        raise NotCovered(f"{op} output {name}: declared {g.shape[name]}, computed {got}")


def _conv_operands(ins, a, v, kernel_axes, terms):
    """A convolution's input windows and weights, zero points subtracted, and its bias, in the
    type whose products of ``terms`` terms are exact (``_product_type``; the im2col copy is
    made once, in that type), with the chunk of the reduction a float32 product takes."""
    x, w, bias = (v[n] for n in ins[:3])
    izp, wzp = _scalar(v[ins[3]]), _scalar(v[ins[4]])
    kind, chunk = _product_type(_magnitude(x, izp), _magnitude(w, wzp), terms(w))
    # The zero points subtracted in that type: exact, the differences are in range there.
    x, w = x.astype(kind) - kind(izp), w.astype(kind) - kind(wzp)
    kh, kw = (w.shape[k] for k in kernel_axes)
    win = _patches(x, kh, kw, a["Stride"], a["Dilation"], a["Pad"], 0)
    return win, w, bias.astype(np.int64).reshape(-1), chunk


def _conv2d(g, ins, outs, a, v):
    # weights [OC, KH, KW, IC]: an output sums KH * KW * IC products
    win, wk, bias, chunk = _conv_operands(ins, a, v, (1, 2), lambda w: w[0].size)
    n, oh, ow = win.shape[:3]
    cols = win.reshape(n * oh * ow, -1)
    acc = _dot(cols, wk.reshape(wk.shape[0], -1).T, chunk).reshape(n, oh, ow, -1)
    return acc + bias


def _depthwise_conv2d(g, ins, outs, a, v):
    # weights [KH, KW, C, M]: an output sums KH * KW products
    win, wk, bias, chunk = _conv_operands(ins, a, v, (0, 1), lambda w: w.shape[0] * w.shape[1])
    kh, kw, c, m = wk.shape
    n, oh, ow = win.shape[:3]
    kind = np.float64 if wk.dtype == np.float32 and chunk < kh * kw else wk.dtype
    acc = np.zeros((n, oh, ow, c, m), dtype=kind)
    for ky in range(kh):
        for kx in range(kw):
            acc += win[:, :, :, ky, kx, :, None] * wk[ky, kx]
    return acc.astype(np.int64).reshape(n, oh, ow, c * m) + bias


def _matmul(g, ins, outs, a, v):
    x, y = v[ins[0]].astype(np.int64), v[ins[1]].astype(np.int64)
    xz, yz = _scalar(v[ins[2]]), _scalar(v[ins[3]])
    return np.stack([_exact_matmul(p, q) for p, q in zip(x - xz, y - yz)])


def _avg_pool2d(g, ins, outs, a, v):
    x = v[ins[0]].astype(np.int64)
    izp, ozp = _scalar(v[ins[1]]), _scalar(v[ins[2]])
    kh, kw = a["Kernel"]
    ones = np.ones(x.shape[:3] + (1,), dtype=np.int64)
    acc = _patches(x - izp, kh, kw, a["Stride"], (1, 1), a["Pad"], 0).sum(axis=(3, 4))
    count = _patches(ones, kh, kw, a["Stride"], (1, 1), a["Pad"], 0).sum(axis=(3, 4))
    _require(count.min() > 0, "a window entirely in the padding")
    # reciprocal_scale(count): k = ceil(log2(count)), multiplier ((1 << 30) + 1) << k // count
    multiplier, shift = np.zeros_like(count), np.zeros_like(count)
    for c in np.unique(count):
        k = (int(c) - 1).bit_length()
        multiplier[count == c], shift[count == c] = (((1 << 30) + 1) << k) // int(c), 30 + k
    out = _apply_scale(acc, multiplier, shift, "AVG_POOL2D")
    lo, hi = _RANGE[g.dtype[outs[0]]]
    return np.clip(out + ozp, lo, hi)


def _max_pool2d(g, ins, outs, a, v):
    x = v[ins[0]]
    kh, kw = a["Kernel"]
    lo = _RANGE[g.dtype[ins[0]]][0]
    return _patches(x.astype(np.int64), kh, kw, a["Stride"], (1, 1), a["Pad"], lo - 1).max(
        axis=(3, 4)
    )


def _apply_scale(value, multiplier, shift, what: str, scale32=True, double_round=False):
    """TOSA's apply_scale_32 (``scale32``) or apply_scale_16: ``(value * multiplier + round) >>
    shift``, REQUIREs checked; only apply_scale_32 bounds ``value`` by the shift."""
    value, multiplier, shift = (np.asarray(t, dtype=np.int64) for t in (value, multiplier, shift))
    _require(np.all(multiplier >= 0), f"{what}: a negative multiplier")
    _require(np.all((shift >= 2) & (shift <= 62)), f"{what}: a shift outside [2, 62]")
    rnd = np.left_shift(np.int64(1), shift - 1)
    lo, hi = (int(value.min()), int(value.max())) if value.size else (0, 0)
    if scale32 and not (rnd.size == 1 and -int(rnd.min()) <= lo and hi < int(rnd.min())):
        _require(np.all((value >= -rnd) & (value < rnd)), f"{what}: a value beyond 2**(shift - 1)")
    if double_round:
        rnd = np.where(shift > 31, np.where(value >= 0, rnd + (1 << 30), rnd - (1 << 30)), rnd)
    # int64 where the product cannot wrap (the operands' ranges say so), Python integers else
    big = max(-lo, hi) * int(np.max(multiplier, initial=0))
    if big + int(np.max(np.abs(rnd), initial=0)) < 1 << 63:
        return _fits((value * multiplier + rnd) >> shift, "INT32", what)
    flat = [f.ravel() for f in np.broadcast_arrays(value, multiplier, rnd, shift)]
    exact = np.array(
        [(int(x) * int(m) + int(r)) >> int(k) for x, m, r, k in zip(*flat)], dtype=object
    )
    return _fits(exact, "INT32", what).astype(np.int64).reshape(np.broadcast(value, shift).shape)


def _rescale(g, ins, outs, a, v):
    x = v[ins[0]].astype(np.int64)
    mult, shift = v[ins[1]].astype(np.int64), v[ins[2]].astype(np.int64)
    in_t, out_t = g.dtype[ins[0]], g.dtype[outs[0]]
    izp, ozp = _scalar(v[ins[3]]), _scalar(v[ins[4]])
    if a["InputUnsigned"]:
        bits = {"INT8": 8, "INT16": 16}.get(in_t)
        if bits is None:
            raise NotCovered(f"unsigned RESCALE input of {in_t}")
        x, izp = x & ((1 << bits) - 1), izp & ((1 << bits) - 1)
    lo, hi = _RANGE.get(out_t, (None, None))
    if a["OutputUnsigned"]:
        bits = {"INT8": 8, "INT16": 16}.get(out_t)
        if bits is None:
            raise NotCovered(f"unsigned RESCALE output of {out_t}")
        ozp &= (1 << bits) - 1
        lo, hi = 0, (1 << bits) - 1
    if lo is None:
        raise NotCovered(f"RESCALE to {out_t}")
    if in_t == "INT48" and a["Scale32"]:
        raise NotCovered("RESCALE of INT48 with scale32 (an invalid graph: the reference says so)")
    _require(in_t == "INT8" or a["InputUnsigned"] or izp == 0, "RESCALE: an input zero point")
    _require(out_t == "INT8" or a["OutputUnsigned"] or ozp == 0, "RESCALE: an output zero point")
    from tosa.RoundingMode import RoundingMode

    mode = a["RoundingMode"]
    if mode not in (RoundingMode.SINGLE_ROUND, RoundingMode.DOUBLE_ROUND):
        raise NotCovered(f"RESCALE rounding mode {mode}")
    if not a["PerChannel"]:
        mult, shift = mult.reshape(-1)[:1], shift.reshape(-1)[:1]
    double = mode == RoundingMode.DOUBLE_ROUND
    out = _apply_scale(
        x - izp, mult.reshape(-1), shift.reshape(-1), "RESCALE", a["Scale32"], double
    )
    out = np.clip(out + ozp, lo, hi)
    if a["OutputUnsigned"]:
        out = out.astype(np.int64)
        out = np.where(out >= 1 << (bits - 1), out - (1 << bits), out)
    return out


def _binary(fn: Callable) -> Callable:
    def run(g, ins, outs, a, v):
        t = g.dtype[outs[0]]
        if t != "INT32" or g.dtype[ins[0]] != "INT32":
            raise NotCovered(f"{fn.__name__} of {g.dtype[ins[0]]} -> {t}")
        res = fn(v[ins[0]].astype(np.int64), v[ins[1]].astype(np.int64))
        return _fits(res, "INT32", fn.__name__)

    return run


def _mul(g, ins, outs, a, v):
    in_t, out_t = g.dtype[ins[0]], g.dtype[outs[0]]
    x, y = v[ins[0]].astype(np.int64), v[ins[1]].astype(np.int64)
    shift = _scalar(v[ins[2]]) if len(ins) > 2 else 0
    if out_t != "INT32":
        raise NotCovered(f"MUL to {out_t}")
    if in_t != "INT32":
        _require(shift == 0, "MUL: a shift on a narrow input")
        return x * y
    if shift > 0:
        _require(shift <= 63, "MUL: a shift above 63")
        return _fits((x * y + (1 << (shift - 1))) >> shift, "INT32", "MUL")
    return ((x * y + (1 << 31)) & 0xFFFFFFFF) - (1 << 31)  # the low 32 bits, as the reference


def _clamp(g, ins, outs, a, v):
    t = g.dtype[ins[0]]
    if t not in ("INT8", "INT16"):
        raise NotCovered(f"CLAMP of {t}")
    dt = np.dtype(_NUMPY[t]).newbyteorder("<")
    lo = int(np.frombuffer(bytes(a["MinVal"]), dtype=dt)[0])
    hi = int(np.frombuffer(bytes(a["MaxVal"]), dtype=dt)[0])
    _require(lo <= hi, "CLAMP: min above max")
    return np.clip(v[ins[0]].astype(np.int64), lo, hi)


def _table(g, ins, outs, a, v):
    x, table = v[ins[0]].astype(np.int64), v[ins[1]].astype(np.int64).reshape(-1)
    t = g.dtype[ins[0]]
    if t == "INT8":
        return table[x + 128]
    if t == "INT16":
        index, fraction = (x + 32768) >> 7, (x + 32768) & 0x7F
        base, nxt = table[index], table[index + 1]
        _require(_in_range(nxt - base, "INT16"), "TABLE: a slope outside int16")
        return (base << 7) + (nxt - base) * fraction
    raise NotCovered(f"TABLE of {t}")


def _reshape(g, ins, outs, a, v):
    return v[ins[0]].reshape(tuple(int(s) for s in v[ins[1]]))


def _transpose(g, ins, outs, a, v):
    return np.transpose(v[ins[0]], a["Perms"])


def _concat(g, ins, outs, a, v):
    return np.concatenate([v[n] for n in ins], axis=a["Axis"])


def _slice(g, ins, outs, a, v):
    start, size = (tuple(int(s) for s in v[n]) for n in ins[1:3])
    x = v[ins[0]]
    _require(
        all(b >= 0 and b + s <= d for b, s, d in zip(start, size, x.shape)), "SLICE: out of bounds"
    )
    return x[tuple(slice(b, b + s) for b, s in zip(start, size))]


def _pad(g, ins, outs, a, v):
    x = v[ins[0]]
    p = [int(s) for s in v[ins[1]]]
    fill = _scalar(v[ins[2]])
    return np.pad(x, [(p[2 * d], p[2 * d + 1]) for d in range(x.ndim)], constant_values=fill)


def _reduce(fn: Callable, what: str) -> Callable:
    def run(g, ins, outs, a, v):
        t = g.dtype[ins[0]]
        if what == "REDUCE_SUM" and t != "INT32":
            raise NotCovered(f"REDUCE_SUM of {t}")
        res = fn(v[ins[0]].astype(np.int64), axis=a["Axis"], keepdims=True)
        return _fits(res, "INT32", what) if what == "REDUCE_SUM" else res

    return run


def _identity(g, ins, outs, a, v):
    return v[ins[0]]


OPS: Dict[str, Callable] = {
    "CONV2D": _conv2d,
    "DEPTHWISE_CONV2D": _depthwise_conv2d,
    "MATMUL": _matmul,
    "AVG_POOL2D": _avg_pool2d,
    "MAX_POOL2D": _max_pool2d,
    "RESCALE": _rescale,
    "ADD": _binary(np.add),
    "SUB": _binary(np.subtract),
    "MAXIMUM": _binary(np.maximum),
    "MINIMUM": _binary(np.minimum),
    "MUL": _mul,
    "CLAMP": _clamp,
    "TABLE": _table,
    "RESHAPE": _reshape,
    "TRANSPOSE": _transpose,
    "CONCAT": _concat,
    "SLICE": _slice,
    "PAD": _pad,
    "REDUCE_SUM": _reduce(np.sum, "REDUCE_SUM"),
    "REDUCE_MAX": _reduce(np.max, "REDUCE_MAX"),
    "REDUCE_MIN": _reduce(np.min, "REDUCE_MIN"),
    "IDENTITY": _identity,
}
# Ops that only name a constant the graph's tensor table holds.
_CONSTANT_OPS = ("CONST", "CONST_SHAPE")
_DATA_DTYPES = ("INT8", "INT16", "INT32", "INT48", "SHAPE")


def load(flatbuffer: bytes) -> _Graph:
    """The graph, read once for many runs; ``NotCovered`` naming the first op or dtype ``run``
    does not evaluate."""
    g = _Graph(flatbuffer)
    for op, ins, outs, _ in g.ops:
        if op not in OPS and op not in _CONSTANT_OPS:
            raise NotCovered(f"op {op}")
        for name in (*ins, *outs):
            if g.dtype.get(name) not in _DATA_DTYPES:
                raise NotCovered(f"{op} tensor {name} of dtype {g.dtype.get(name)}")
        if op in OPS and g.dtype[outs[0]] not in _RANGE:
            raise NotCovered(f"{op} output {outs[0]} of dtype {g.dtype[outs[0]]}")
    return g


def covers(flatbuffer: bytes) -> Tuple[bool, str]:
    """Whether ``run`` evaluates this graph, and if not, why."""
    try:
        load(flatbuffer)
    except NotCovered as e:
        return False, str(e)
    return True, ""


def run(flatbuffer: bytes, arrays: Sequence[np.ndarray]) -> List[np.ndarray]:
    """The graph's outputs on ``arrays`` (its inputs, in order); ``NotCovered`` if it has an op
    outside ``OPS``, ``OutsideSpec`` where a REQUIRE of the specification fails."""
    return run_graph(load(flatbuffer), arrays)


def run_graph(g: _Graph, arrays: Sequence[np.ndarray]) -> List[np.ndarray]:
    """``run`` on a graph ``load`` returned."""
    if len(arrays) != len(g.inputs):
        raise ValueError(f"{len(g.inputs)} inputs expected, {len(arrays)} given")
    values: Dict[str, np.ndarray] = dict(g.const)
    for name, arr in zip(g.inputs, arrays):
        arr = np.asarray(arr)
        if tuple(arr.shape) != g.shape[name]:
            raise ValueError(f"input {name}: shape {arr.shape}, the graph declares {g.shape[name]}")
        t = np.dtype(_NUMPY.get(g.dtype[name], np.int64))
        if g.dtype[name] not in _NUMPY or arr.dtype.itemsize != t.itemsize:
            raise NotCovered(f"input {name}: {arr.dtype} for a {g.dtype[name]} tensor")
        values[name] = arr.view(t)  # the bytes as the graph reads them (uint8 as INT8)
    for op, ins, outs, attr in g.ops:
        if op in _CONSTANT_OPS:
            if any(o not in values for o in outs):
                raise NotCovered(f"{op} without data")
            continue
        out = outs[0]
        try:
            res = np.asarray(OPS[op](g, ins, outs, attr, values))
            # An arithmetic result beyond its type: the specification REQUIREs it does not
            # happen (or the reference wraps); either way the reference model decides.
            _fits(res, g.dtype[out], op)
        except OutsideSpec as e:
            raise OutsideSpec(f"{out} ({e})") from None
        _out_shape(g, out, res.shape, op)
        t = g.dtype[out]
        values[out] = res.astype(np.int64 if t == "INT48" else _NUMPY[t])
    return [values[n] for n in g.outputs]
