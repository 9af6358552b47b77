# SPDX-License-Identifier: BSD-3-Clause
"""The original and the optimised TOSA graph, run on the TOSA reference model on the same
random inputs, must agree bit for bit (``NotBitExact`` otherwise, naming the output and the
first differing element)."""

from __future__ import annotations

from typing import List, Optional, Sequence

import numpy as np

from ethosu_ng.tosa_graph import TosaTensorInfo, tosa_io
from ethosu_ng.tosa_optimize.graph import stdout_to_log

_RANGES = {"INT8": (-128, 127, np.int8), "INT16": (-32768, 32767, np.int16)}
_RANGES.update({"INT32": (-(2**31), 2**31 - 1, np.int32), "BOOL": (0, 1, np.bool_)})


class NotBitExact(AssertionError):
    """Two TOSA graphs that should compute the same bits do not."""


def random_inputs(infos: Sequence[TosaTensorInfo], rng: np.random.Generator) -> List[np.ndarray]:
    out = []
    for info in infos:
        if info.dtype_name == "FP32":
            out.append(rng.standard_normal(info.shape).astype(np.float32))
            continue
        if info.dtype_name not in _RANGES:
            raise ValueError(f"no random values for input {info.name} of dtype {info.dtype_name}")
        lo, hi, dt = _RANGES[info.dtype_name]
        out.append(rng.integers(lo, hi, size=info.shape, endpoint=True).astype(dt))
    return out


def run_reference(flatbuffer: bytes, inputs: Sequence[np.ndarray]) -> List[np.ndarray]:
    import tosa_reference_model as refmodel

    arrays = [np.ascontiguousarray(a) for a in inputs]
    with stdout_to_log():  # the reference model prints the serializer's version note too
        outs, status = refmodel.run(flatbuffer, arrays, initialize_variable_tensor_from_numpy=True)
    if status != refmodel.GraphStatus.TOSA_VALID:
        raise RuntimeError(f"TOSA reference model rejected the graph: {status}")
    return [np.asarray(o) for o in outs]


def check_bit_exact(
    original: bytes,
    optimised: bytes,
    trials: int = 2,
    seed: int = 0,
    inputs: Optional[Sequence[Sequence[np.ndarray]]] = None,
    what: str = "optimised graph",
) -> None:
    """Raise ``NotBitExact`` unless both graphs give identical outputs on ``trials`` random input
    sets (or on ``inputs``); also if their IO (names, dtypes, shapes, order) differs."""
    ins, outs = tosa_io(original)
    if (ins, outs) != tosa_io(optimised):
        raise NotBitExact(f"{what}: IO differs: {(ins, outs)} vs {tosa_io(optimised)}")
    rng = np.random.default_rng(seed)
    sets = list(inputs) if inputs is not None else [random_inputs(ins, rng) for _ in range(trials)]
    for k, xs in enumerate(sets):
        want = run_reference(original, xs)
        try:
            got = run_reference(optimised, xs)
        except RuntimeError as e:
            raise NotBitExact(f"{what}: {e}") from e
        for info, a, b in zip(outs, want, got):
            if a.shape != b.shape or a.dtype != b.dtype:
                raise NotBitExact(
                    f"{what}: output {info.name}: {b.dtype}{list(b.shape)} vs "
                    f"{a.dtype}{list(a.shape)} (input set {k})"
                )
            diff = np.flatnonzero(a.view(np.uint8) != b.view(np.uint8)) if a.size else []
            if len(diff):
                idx = np.unravel_index(diff[0] // max(1, a.itemsize), a.shape)
                raise NotBitExact(
                    f"{what}: output {info.name} differs at {tuple(int(i) for i in idx)}: "
                    f"{b[idx]} vs {a[idx]} ({len(diff)} bytes differ, input set {k})"
                )
