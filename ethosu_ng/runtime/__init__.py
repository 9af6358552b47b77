# SPDX-License-Identifier: BSD-3-Clause
"""Run ethosu_ng .pte programs on the host, through the C++ delegate runtime.

The C++ runtime is the extension module ``ethosu_ng._host_runtime``, compiled when the package is
installed (``pip install``; ``runtime/python/host_runtime.cpp``). ``load_host_runtime()`` imports
it, which registers ``EthosUNGBackend`` into the ExecuTorch runtime of the executorch wheel. The
C++ backend validates each delegate's inputs and layout-copies them into the NPU scratch buffer
exactly as on the device; then the host driver plays the NPU, in one of two ways (``npu=`` of
``run_pte``):

- ``"model"`` (the default): Vela's command stream, weights and scales run on the
  Ethos-U55/U65/U85 functional model (runtime/ethosu_ng/npu_model, docs/npu-model.md), which
  leaves the outputs in scratch as the NPU would. Works on a firmware .pte (no TOSA inside).
- ``"tosa"``: a registered Python callback runs the delegate's embedded TOSA flatbuffer (compile
  with ``EthosUNGCompileSpec(..., embed_tosa=True)``) on the TOSA reference model and writes the
  outputs into scratch. An Ethos-U85 program whose command stream uses something the model does
  not implement (a trial run says ``NotSupported``) defaults to it when it carries its TOSA graph.

Either way the backend copies the outputs out of scratch as on the device.

After that, ``load_pte(pte).method("forward").execute(inputs)`` runs the whole program: CPU ops
on ExecuTorch's kernels, delegates in our C++ code (``run_pte`` in one call).

The parts, by what they do:

- ``host_module``: finds, imports and checks the extension module (``load_host_runtime``);
- ``source_build``: in a source checkout, rebuilds the extension module with CMake when its C++
  sources are newer than the installed one (development only: an installed package never builds);
- ``tosa_callback``: the TOSA reference model behind ``npu="tosa"``;
- ``npu_model``: one command stream on the NPU model, its counters, the weight decoder;
- ``npu_selection``: which NPU runs a program's delegates (``default_npu_for``, ``set_npu``);
- ``dim_order``: inputs laid out as the program planned (``check_input_layouts``);
- ``program``: ``load_pte``, ``run_pte`` and the objects that keep a program's bytes alive.
"""

from ethosu_ng.compile_spec import BACKEND_ID
from ethosu_ng.runtime.dim_order import check_input_layouts, to_dim_order
from ethosu_ng.runtime.host_module import (
    HostRuntimeError,
    delegate_invocations,
    host_module_path,
    load_host_runtime,
)
from ethosu_ng.runtime.npu_model import NpuModelError, mlw_decode, npu_model_run, npu_model_stats
from ethosu_ng.runtime.npu_selection import (
    DEFAULT_NPU,
    MODEL_PRODUCTS,
    NPU_MODEL_NOT_SUPPORTED,
    NPU_MODES,
    PRODUCT_NAMES,
    default_npu_for,
    model_unsupported,
    npu_model_name,
    payload_product,
    set_npu,
)
from ethosu_ng.runtime.program import HostMethod, HostProgram, load_pte, run_pte
from ethosu_ng.runtime.tosa_callback import last_callback_error

__all__ = [
    "BACKEND_ID",
    "DEFAULT_NPU",
    "HostMethod",
    "HostProgram",
    "HostRuntimeError",
    "MODEL_PRODUCTS",
    "NPU_MODEL_NOT_SUPPORTED",
    "NPU_MODES",
    "NpuModelError",
    "PRODUCT_NAMES",
    "check_input_layouts",
    "default_npu_for",
    "delegate_invocations",
    "host_module_path",
    "last_callback_error",
    "load_host_runtime",
    "load_pte",
    "mlw_decode",
    "model_unsupported",
    "npu_model_name",
    "npu_model_run",
    "npu_model_stats",
    "payload_product",
    "run_pte",
    "set_npu",
    "to_dim_order",
]
