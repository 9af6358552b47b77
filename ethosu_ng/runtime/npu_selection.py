# SPDX-License-Identifier: BSD-3-Clause
"""Which NPU runs a program's delegates on the host: Vela's command stream on the NPU model (the
default, for every product it executes) or the embedded TOSA graph on the reference model."""

from __future__ import annotations

from typing import Optional

from ethosu_ng.adapters import exir
from ethosu_ng.compile_spec import BACKEND_ID
from ethosu_ng.runtime.host_module import load_host_runtime
from ethosu_ng.runtime.npu_model import NpuModelError, npu_model_run

NPU_MODES = {"tosa": 0, "model": 1}  # the extension module's NPU_TOSA / NPU_MODEL (host_api.h)
# Vela's command stream on the NPU model: a firmware .pte (no TOSA inside) runs as it is.
DEFAULT_NPU = "model"
# Product field of the driver payload's optimizer config the NPU model executes (0 U55, 1 U65,
# 2 U85). Its U85 coverage is partial (docs/npu-model.md): ``model_unsupported`` says what a
# program's U85 streams use that it does not implement.
MODEL_PRODUCTS = (0, 1, 2)
PRODUCT_NAMES = {0: "Ethos-U55", 1: "Ethos-U65", 2: "Ethos-U85"}
NPU_MODEL_NOT_SUPPORTED = 0x10  # executorch Error::NotSupported: a gap of the model
_unsupported_cache: dict = {}


def payload_product(payload: bytes) -> Optional[int]:
    """The product field (bits 28..31) of a Vela driver payload's optimizer config: 0 Ethos-U55,
    1 Ethos-U65, 2 Ethos-U85; None if the payload has no config action where expected."""
    import struct

    # COP1 fourcc, then the config action (tag 1) with the optimizer config word after it.
    if len(payload) < 12 or payload[:4] != b"COP1" or payload[4] != 1:
        return None
    return struct.unpack_from("<I", payload, 8)[0] >> 28


def model_unsupported(pte: bytes) -> Optional[str]:
    """None when the NPU model implements everything the program's Ethos-U85 command streams use;
    else the model's ``NotSupported`` message for the first delegate it does not. Found by a trial
    run of each U85 delegate on zeroed scratch (which commands run does not depend on the data),
    cached per stream. U55/U65 streams are not tried: the model covers what Vela emits for them."""
    import hashlib

    from ethosu_ng.blob import DelegateBlob

    for backend, data in exir.pte_delegate_payloads(pte):
        if backend != BACKEND_ID:
            continue
        blob = DelegateBlob.from_bytes(data)
        if payload_product(blob.command_stream) != 2:
            continue
        key = hashlib.sha256(blob.command_stream + blob.weights).hexdigest()
        if key not in _unsupported_cache:
            reason = None
            try:
                npu_model_run(
                    blob.command_stream,
                    blob.weights,
                    bytearray(blob.scratch_size),
                    bytearray(blob.fast_scratch_size) if blob.fast_scratch_size else None,
                )
            except NpuModelError as e:
                if e.code == NPU_MODEL_NOT_SUPPORTED:
                    reason = str(e)
            _unsupported_cache[key] = reason
        if _unsupported_cache[key] is not None:
            return _unsupported_cache[key]
    return None


def tosa_fallback_at_run(pte: bytes) -> bool:
    """Whether a run on the model that meets ``NotSupported`` may run again on the TOSA graphs:
    every delegate carries its TOSA graph and one is an Ethos-U85 stream. ``model_unsupported``
    tries a stream on zeroed scratch, which takes one path through a cond or while_loop's
    branches; another input may take a path with something the model does not implement."""
    from ethosu_ng.blob import DelegateBlob

    blobs = [
        DelegateBlob.from_bytes(data)
        for backend, data in exir.pte_delegate_payloads(pte)
        if backend == BACKEND_ID
    ]
    return (
        bool(blobs)
        and all(b.tosa is not None for b in blobs)
        and any(payload_product(b.command_stream) == 2 for b in blobs)
    )


def npu_model_name(pte: bytes) -> str:
    """Which NPU the model runs for this program's delegates, e.g. ``"Ethos-U85"``."""
    from ethosu_ng.blob import DelegateBlob

    names = []
    for backend, data in exir.pte_delegate_payloads(pte):
        if backend == BACKEND_ID:
            product = payload_product(DelegateBlob.from_bytes(data).command_stream)
            name = PRODUCT_NAMES.get(product, f"product {product}")
            if name not in names:
                names.append(name)
    return "/".join(names) or "Ethos-U"


def default_npu_for(pte: bytes) -> str:
    """``DEFAULT_NPU`` (the model, for every product it executes), except ``"tosa"`` for a
    program the NPU model cannot run as a whole: a delegate of a product it does not execute, or
    an Ethos-U85 stream using something it does not implement (``model_unsupported``) when every
    delegate carries its TOSA graph."""
    from ethosu_ng.blob import DelegateBlob

    blobs = [
        DelegateBlob.from_bytes(data)
        for backend, data in exir.pte_delegate_payloads(pte)
        if backend == BACKEND_ID
    ]
    for blob in blobs:
        product = payload_product(blob.command_stream)
        if product is not None and product not in MODEL_PRODUCTS:
            return "tosa"
    if all(b.tosa is not None for b in blobs) and model_unsupported(pte) is not None:
        return "tosa"
    return DEFAULT_NPU


def set_npu(npu: str) -> None:
    """Select what the host driver runs for each delegate: ``"tosa"`` or ``"model"``.

    Process-wide; ``HostMethod.execute`` and ``run_pte`` set it on every call (their ``npu``
    argument or the program's default), so this is for callers that run a method otherwise.
    """
    if npu not in NPU_MODES:
        raise ValueError(f"npu must be one of {sorted(NPU_MODES)}, not {npu!r}")
    load_host_runtime().set_npu_mode(NPU_MODES[npu])
