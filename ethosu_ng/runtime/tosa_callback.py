# SPDX-License-Identifier: BSD-3-Clause
"""The TOSA reference model behind ``npu="tosa"``: the extension module calls ``run_tosa_graph``
from inside ``Method.execute`` with one delegate's TOSA flatbuffer and its inputs as they sit in
the NPU scratch buffer.

Dtypes: the IO table's uint8 (and uint16) tensors are handed to the reference model as numpy
uint8 (uint16) arrays. TOSA has no unsigned types; the graph's tensor is INT8 (INT16) read by an
unsigned RESCALE, and ``tosa_reference_model.run`` accepts any array whose byte size matches the
tensor and takes the bytes as they are, so the bit pattern reaches the graph unchanged (checked
in tests/test_runtime_host.py). Outputs come back as the graph's signed type and are
reinterpreted bit for bit as the IO entry's dtype.
"""

from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

import numpy as np

from ethosu_ng.blob import CODE_DTYPES

# Blob dtype code -> numpy dtype (torch and numpy share the names).
NP_DTYPES = {code: np.dtype(str(dt).removeprefix("torch.")) for code, dt in CODE_DTYPES.items()}

_last_error: Optional[BaseException] = None


def run_tosa_graph(
    tosa: bytes,
    inputs: Sequence[Tuple[int, Tuple[int, ...], bytes]],
    outputs: Sequence[Tuple[int, Tuple[int, ...], int]],
) -> List[bytes]:
    """Run the TOSA graph on the reference model: ``inputs`` are (dtype code, shape in NPU memory
    order, bytes), ``outputs`` (dtype code, shape, byte size); returns each output's bytes.
    An exception is kept for ``last_callback_error``; the C++ side reports its message."""
    global _last_error
    try:
        import tosa_reference_model as refmodel

        arrays = [_array(code, shape, data) for code, shape, data in inputs]
        outs, status = refmodel.run(tosa, arrays, initialize_variable_tensor_from_numpy=True)
        if status != refmodel.GraphStatus.TOSA_VALID:
            raise RuntimeError(f"TOSA reference model status {status}")
        if len(outs) != len(outputs):
            raise RuntimeError(
                f"TOSA graph produced {len(outs)} outputs, the blob declares {len(outputs)}"
            )
        return [
            _as_output(np.asarray(arr), code, nbytes, k).tobytes()
            for k, (arr, (code, _, nbytes)) in enumerate(zip(outs, outputs))
        ]
    except BaseException as e:
        _last_error = e
        raise


def _array(code: int, shape: Tuple[int, ...], data: bytes) -> np.ndarray:
    if not data:
        return np.zeros(shape, NP_DTYPES[code])
    return np.frombuffer(data, NP_DTYPES[code]).reshape(shape).copy()  # writable


def _as_output(arr: np.ndarray, code: int, nbytes: int, k: int) -> np.ndarray:
    dtype = NP_DTYPES[code]
    arr = np.ascontiguousarray(arr)
    numel = nbytes // dtype.itemsize
    if arr.size != numel:
        raise RuntimeError(
            f"output {k}: reference model gave {arr.size} elements, blob expects {numel}"
        )
    if arr.dtype.itemsize == dtype.itemsize:
        return arr.view(dtype)  # int8 graph tensor for a uint8 entry: same bits
    return arr.astype(dtype)  # e.g. a wider container for the same values


def last_callback_error() -> Optional[BaseException]:
    """The exception the last failing TOSA callback raised (the C++ side only sees its message)."""
    return _last_error
