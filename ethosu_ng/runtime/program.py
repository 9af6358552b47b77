# SPDX-License-Identifier: BSD-3-Clause
"""Load and run a ``.pte`` on the host: ``load_pte``, ``run_pte`` and the objects that keep a
program's bytes alive while its methods run.

``executorch.runtime``'s ``Method`` does not keep its ``Program`` or the ``.pte`` bytes alive
while our delegate reads its blob from them in place; ``HostMethod`` does.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional, Sequence

from ethosu_ng.adapters import exir
from ethosu_ng.runtime.dim_order import check_input_layouts, to_dim_order
from ethosu_ng.runtime.host_module import load_host_runtime
from ethosu_ng.runtime.npu_selection import (
    NPU_MODEL_NOT_SUPPORTED,
    default_npu_for,
    set_npu,
    tosa_fallback_at_run,
)


class HostMethod:
    """One method of a ``HostProgram``; holds the program (and so its bytes) alive.

    ``executorch.runtime``'s ``Method`` keeps no reference to its ``Program``, and the
    ExecuTorch program reads its ``.pte`` buffer in place for as long as a method runs (our
    delegate's blob, IO table and TOSA section are read from it, not copied). A ``Method``
    whose ``Program`` was collected reads freed memory.
    """

    def __init__(self, owner: HostProgram, name: str, method):
        self.program = owner
        self.name = name
        self._method = method
        self._input_orders = exir.pte_input_dim_orders(owner.data, name)

    @property
    def metadata(self):
        return self._method.metadata

    def execute(self, inputs: Sequence, npu: Optional[str] = None) -> list:
        """Run with ``inputs`` (torch tensors laid out as the program planned:
        ``check_input_layouts``); returns the outputs as a list. ``npu``: what runs the delegates
        (``run_pte``); ``None`` is the program's default (``HostProgram.default_npu``)."""
        inputs = check_input_layouts(inputs, self._input_orders)
        chosen = npu or self.program.default_npu
        set_npu(chosen)
        try:
            return list(self._method.execute(inputs))
        except RuntimeError as e:
            not_supported = f"error {NPU_MODEL_NOT_SUPPORTED:#x}" in str(e)
            if npu is not None or chosen != "model" or not not_supported:
                raise
            if not self.program.tosa_fallback:
                raise
        # The model met a path of a U85 stream it does not implement (the trial run took
        # another): this program's delegates run on their TOSA graphs from now on.
        self.program.default_npu = "tosa"
        set_npu("tosa")
        return list(self._method.execute(inputs))

    def lay_out(self, inputs: Sequence) -> list:
        """``inputs`` (logical tensors of any layout) laid out in the dim orders this method
        takes (``to_dim_order``): for callers that hold the data, not its bytes."""
        orders = list(self._input_orders) + [None] * len(inputs)
        return [
            to_dim_order(t, o)
            if o is not None and hasattr(t, "stride") and t.dim() == len(o)
            else t
            for t, o in zip(inputs, orders)
        ]


class HostProgram:
    """A ``.pte`` loaded for the host runtime: its bytes, the ExecuTorch ``Program`` and the
    methods loaded from it, alive together for as long as any of them is referenced.

    ``Runtime.get().load_program(pte).load_method("forward")`` alone leaves the method
    pointing into a program (and bytes) nothing keeps alive; see ``load_pte``.
    """

    def __init__(self, data: bytes):
        from executorch.runtime import Runtime

        self.data = data
        self._program = Runtime.get().load_program(data)
        self._methods: dict = {}
        self.default_npu = default_npu_for(data)
        self.tosa_fallback = tosa_fallback_at_run(data)

    @property
    def method_names(self) -> set:
        return set(self._program.method_names)

    def method(self, name: str = "forward") -> HostMethod:
        if name not in self._program.method_names:
            raise ValueError(f"program has no method {name!r}: {sorted(self.method_names)}")
        if name not in self._methods:
            loaded = self._program.load_method(name)
            if loaded is None:
                raise ValueError(f"program has no method {name!r}: {sorted(self.method_names)}")
            self._methods[name] = HostMethod(self, name, loaded)
        return self._methods[name]

    def run(self, inputs: Sequence, method: str = "forward", npu: Optional[str] = None) -> list:
        return self.method(method).execute(inputs, npu)


def load_pte(pte) -> HostProgram:
    """Load a .pte (bytes, bytearray, memoryview or path) for the host runtime.

    Use this rather than ``executorch.runtime`` directly: the returned object and every
    ``HostMethod`` taken from it keep the program's bytes and the ExecuTorch program alive, so
    ``load_pte(pte).method("forward").execute(x)`` is safe as a one-liner and a method may
    outlive every other reference (docs/reliability.md, lifetime row).
    """
    if isinstance(pte, (str, os.PathLike)):
        data = Path(pte).read_bytes()
    elif isinstance(pte, (bytes, bytearray, memoryview)):
        data = bytes(pte)  # a private, immutable copy: the caller may reuse its buffer
    else:
        raise TypeError(f"pte must be bytes or a path to a .pte file, got {type(pte).__name__}")
    load_host_runtime()
    return HostProgram(data)


def run_pte(pte, inputs: Sequence, method: str = "forward", npu: Optional[str] = None) -> list:
    """Load a .pte (bytes or path) and run ``method`` with the C++ delegate runtime.

    ``npu`` selects what runs each delegate: ``"model"`` (Vela's command stream on the
    Ethos-U55/U65/U85 functional model) or ``"tosa"`` (the embedded TOSA graph on the reference
    model; needs ``embed_tosa=True``). ``None``: ``DEFAULT_NPU`` (the model), or ``"tosa"`` for
    an Ethos-U85 program whose stream uses something the model does not implement
    (``default_npu_for``); a default run whose cond or while_loop takes a path the model does
    not implement runs again on the TOSA graphs, as does every later run of the program.

    Inputs are torch tensors laid out in the dim order the program planned for each (its IO
    contract: ``--input-layout``): ``executorch.runtime`` copies an input's storage as is into
    the planned input buffer (it ignores torch strides), as ``Method::set_input`` does on the
    device, so a channels-last tensor fed to a program exported with contiguous inputs (or the
    reverse) would be silently misread. ``run_pte`` raises ``io_layout.LayoutError`` naming such
    an input instead (``check_input_layouts``); ``HostMethod.lay_out`` converts logical data.

    Returns the method's outputs (torch tensors, in the program's output dim order). A delegate
    or kernel error surfaces as the RuntimeError ``executorch.runtime`` raises; the C++ side
    logs the reason (input/output index, expected and got) on stderr.
    """
    return load_pte(pte).method(method).execute(inputs, npu)
