# SPDX-License-Identifier: BSD-3-Clause
"""What the firmware must provide to run a .pte: the memory plan.

Per method, the pools an ExecuTorch ``MemoryManager`` needs on the device:

- ``planned_arenas``: bytes of each memory-planned buffer (ExecuTorch's ``mem_id`` 1, 2, ...;
  id 0 is reserved and never planned), read from the program's ``non_const_buffer_sizes``;
- ``temp_allocator``: the largest NPU scratch any EthosUNG delegate takes from the Method's temp
  allocator at ``execute`` (the temp allocator is reset after every delegate call, so delegates
  share it); the pool must start 16-byte aligned. ``temp_allocator_without_fast_area``: the same
  when the firmware does not register a fast-scratch area (``ethosu_ng_set_fast_scratch``) and
  the fast scratch comes from the temp allocator too;
- ``fast_scratch``: the largest Vela fast scratch (region 2; non-zero e.g. on U65
  ``Dedicated_Sram``);
- ``pte_bytes``: the program, to flash (16-byte aligned; the blobs are used in place);
- ``io_buffers``: bytes of each input and output, and whether ExecuTorch planned them inside the
  arenas (the default) or the firmware must supply them;
- ``temp_allocator_host_peak`` (when every delegate embeds its TOSA graph): the temp allocator's
  high-water mark over one host run; ``temp_allocator`` is the larger of it and the scratch
  (ExecuTorch's CPU kernels may take temp memory too);
- ``method_allocator``: measured, not computed: the high-water mark of a counting method
  allocator while loading the method on the host the way firmware does (``Program::load`` +
  ``load_method`` over fixed pools, in the extension module). Host pointers are 8 bytes, so
  a 32-bit Cortex-M needs somewhat less; the figure is an upper bound there.
  ``measured_on_target`` replaces it (and the temp allocator) with the high-water marks the
  Cortex-M55 firmware image measures (``tools/firmware.py``, ``ethosu-ng verify --on m55``);
  ``planned_arena_needs`` is where each arena's furthest tensor ends.

``run_with_pools`` runs a method with pools of given sizes (the host test of the plan: the
reported sizes work, one byte less in the temp allocator fails).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from ethosu_ng.adapters import exir
from ethosu_ng.blob import DelegateBlob
from ethosu_ng.compile_spec import BACKEND_ID

ALIGN = 16
METHOD_ALLOCATOR_NOTE = (
    "measured on the host (64-bit pointers) by loading the method with a counting allocator; "
    "a 32-bit target needs at most this"
)
TARGET_NOTE = (
    "measured on a Cortex-M55 (32-bit pointers; QEMU mps3-an547): the high-water mark while the "
    "firmware image loads and runs the method (ethosu-ng verify --on m55)"
)
# Room for the method allocator while it is measured: far above any real method.
_MEASURE_CAP = 256 << 20


class SramBudgetError(ValueError):
    """The program's SRAM pools do not fit the compile spec's ``sram_budget``."""


def align(n: int, a: int = ALIGN) -> int:
    return (n + a - 1) // a * a


def temp_need(scratch: int, fast: int, fast_in_temp: bool) -> int:
    """Bytes one delegate call takes from a 16-byte aligned temp allocator (backend.cpp's order:
    scratch first, then the fast scratch when no fast area is registered)."""
    if fast_in_temp and fast > 0:
        return (align(scratch) if scratch else 0) + fast
    return scratch


def planned_arenas(pte: bytes, method: str = "forward") -> List[int]:
    """Bytes of each memory-planned buffer of ``method``, in mem_id order (1, 2, ...)."""
    plan = exir.pte_execution_plan(pte, method)
    return [int(s) for s in list(plan.non_const_buffer_sizes)[1:]]


# Bytes per element of an ExecuTorch ScalarType code (runtime/core/portable_type/scalar_type.h).
_ELEMENT_BYTES = {0: 1, 1: 1, 2: 2, 3: 4, 4: 8, 5: 2, 6: 4, 7: 8, 11: 1, 15: 2, 27: 2, 28: 4}


def planned_arena_needs(pte: bytes, method: str = "forward") -> List[int]:
    """Per planned arena, the end of the furthest tensor placed in it (offset + bytes): what the
    runtime touches. ``planned_arenas`` (the program's ``non_const_buffer_sizes``) can be larger:
    ExecuTorch's planner rounds each buffer up to its alignment."""
    plan = exir.pte_execution_plan(pte, method)
    need = [0] * (len(list(plan.non_const_buffer_sizes)) - 1)
    for v in plan.values:
        t = v.val
        info = getattr(t, "allocation_info", None)
        if info is None or not hasattr(t, "sizes") or info.memory_id < 1:
            continue
        offset = (info.memory_offset_high << 32) | info.memory_offset_low
        nbytes = int(np.prod(t.sizes, dtype=np.int64)) * _ELEMENT_BYTES[int(t.scalar_type)]
        k = info.memory_id - 1
        need[k] = max(need[k], offset + nbytes)
    return need


def delegate_scratch(pte: bytes) -> List[Tuple[int, int]]:
    """(scratch, fast scratch) bytes of every EthosUNG delegate in the program."""
    return [
        (b.scratch_size, b.fast_scratch_size)
        for b in (
            DelegateBlob.from_bytes(data)
            for backend, data in exir.pte_delegate_payloads(pte)
            if backend == BACKEND_ID
        )
    ]


def io_buffers(pte: bytes, method: str = "forward") -> Dict[str, Any]:
    """Bytes of each tensor input/output and whether it lives inside the planned arenas."""
    from executorch.runtime import Runtime

    meta = Runtime.get().load_program(bytes(pte)).metadata(method)
    ins = [meta.input_tensor_meta(i) for i in range(meta.num_inputs())]
    outs = [meta.output_tensor_meta(i) for i in range(meta.num_outputs())]
    return {
        "inputs": [int(t.nbytes()) for t in ins],
        "outputs": [int(t.nbytes()) for t in outs],
        "inputs_planned": all(t.is_memory_planned() for t in ins),
        "outputs_planned": all(t.is_memory_planned() for t in outs),
    }


def memory_plan(pte: bytes, method: str = "forward", measure: bool = True) -> Dict[str, Any]:
    """The memory plan of ``method`` (module docstring). ``measure=False`` (or a host without the
    runtime library) leaves ``method_allocator`` None with the reason in
    ``method_allocator_note``."""
    pte = bytes(pte)
    arenas = planned_arenas(pte, method)
    scratch = delegate_scratch(pte)
    plan: Dict[str, Any] = {
        "method": method,
        "planned_arenas": arenas,
        "temp_allocator": max((temp_need(s, f, False) for s, f in scratch), default=0),
        "temp_allocator_without_fast_area": max(
            (temp_need(s, f, True) for s, f in scratch), default=0
        ),
        "fast_scratch": max((f for _, f in scratch), default=0),
        "pte_bytes": len(pte),
        "alignment": ALIGN,
        "io_buffers": io_buffers(pte, method),
        "method_allocator": None,
        "method_allocator_note": "not measured",
    }
    if measure:
        try:
            plan.update(_measure(pte, plan, method))
        except Exception as e:  # noqa: BLE001 - the rest of the plan stands without it
            plan["method_allocator_note"] = f"not measured: {type(e).__name__}: {e}"
    return plan


def _measure(pte: bytes, plan: Dict[str, Any], method: str) -> Dict[str, Any]:
    """Host measurements: the temp allocator's peak over one run on zero inputs (CPU kernels may
    take temp memory too; needs every delegate's embedded TOSA), then the method allocator while
    loading with that temp allocator (ExecuTorch takes more from the method allocator when the
    temp allocator is empty, so it is measured with the pool the firmware will give)."""
    out: Dict[str, Any] = {}
    blobs = [
        DelegateBlob.from_bytes(data)
        for backend, data in exir.pte_delegate_payloads(pte)
        if backend == BACKEND_ID
    ]
    temp = plan["temp_allocator"]
    if all(b.tosa is not None for b in blobs):
        zeros = [np.zeros(n, np.uint8) for n in plan["io_buffers"]["inputs"]]
        _, usage = run_with_pools(
            pte, plan["planned_arenas"], _MEASURE_CAP, _MEASURE_CAP, zeros, method=method
        )
        out["temp_allocator_host_peak"] = usage.temp_allocator_peak
        # The host registers no fast-scratch area: the peak is the "without" figure, and the
        # one with a fast area only when there is no fast scratch at all.
        out["temp_allocator_without_fast_area"] = max(
            plan["temp_allocator_without_fast_area"], usage.temp_allocator_peak
        )
        if plan["fast_scratch"] == 0:
            temp = max(temp, usage.temp_allocator_peak)
            out["temp_allocator"] = temp
    _, usage = run_with_pools(pte, plan["planned_arenas"], _MEASURE_CAP, temp, method=method)
    out["method_allocator"] = usage.method_allocator_used
    out["method_allocator_note"] = METHOD_ALLOCATOR_NOTE
    return out


def measured_on_target(plan: Dict[str, Any], used: Dict[str, int]) -> Dict[str, Any]:
    """``plan`` with the pool sizes measured on the 32-bit target (``used``: the firmware image's
    high-water marks, ``method`` and ``temp``, ``tools/firmware.py``): the method allocator and
    the temp allocator are those; the host figures stay as ``*_host``."""
    out = dict(plan)
    out["method_allocator_host"] = plan.get("method_allocator")
    out["method_allocator"] = int(used["method"])
    out["method_allocator_note"] = TARGET_NOTE
    out["temp_allocator_host"] = plan["temp_allocator"]
    out["temp_allocator"] = int(used["temp"])
    out["planned_arenas_need"] = [int(n) for n in used.get("arena_needs", [])]
    out["measured_on"] = "cortex-m55"
    return out


def sram_bytes(plan: Dict[str, Any], memory_mode: Optional[str]) -> Dict[str, int]:
    """The pools of ``plan`` that sit in SRAM for Vela's ``memory_mode``, by name.

    ``Shared_Sram`` / ``Sram_Only``: the NPU scratch shares the SRAM with the activations, so the
    planned arenas, the temp allocator and any fast scratch are all SRAM. ``Dedicated_Sram*``
    (U65): scratch and arenas live in DRAM; only the fast scratch is SRAM. The method allocator
    is not counted (a host measurement; see ``method_allocator_note``)."""
    if (memory_mode or "").startswith("Dedicated_Sram"):
        return {"fast_scratch": plan["fast_scratch"]}
    return {
        "planned_arenas": sum(plan["planned_arenas"]),
        "temp_allocator": plan["temp_allocator"],
        "fast_scratch": plan["fast_scratch"],
    }


def check_sram_budget(plan: Dict[str, Any], spec) -> None:
    """Raise ``SramBudgetError`` (numbers in one line) when the SRAM pools exceed
    ``spec.sram_budget``; no budget, no check."""
    budget = getattr(spec, "sram_budget", None)
    if budget is None:
        return
    parts = sram_bytes(plan, spec.memory_mode)
    total = sum(parts.values())
    if total > budget:
        detail = " + ".join(f"{k} {v:,}" for k, v in parts.items())
        raise SramBudgetError(
            f"SRAM budget exceeded for {spec.target} ({spec.memory_mode}): needs {total:,} B "
            f"({detail}), sram_budget is {budget:,} B (over by {total - budget:,} B)"
        )


def check_delegate_budget(name: str, scratch: int, fast: int, spec) -> None:
    """Fail early (at ``preprocess``) when one delegate's SRAM scratch alone exceeds the budget;
    the whole plan is checked by ``check_sram_budget`` once the program is serialized."""
    budget = getattr(spec, "sram_budget", None)
    if budget is None:
        return
    plan = {"planned_arenas": [], "temp_allocator": scratch, "fast_scratch": fast}
    need = sum(sram_bytes(plan, spec.memory_mode).values())
    if need > budget:
        raise SramBudgetError(
            f"SRAM budget exceeded for {spec.target} ({spec.memory_mode}): delegate {name} alone "
            f"needs {need:,} B of NPU scratch (scratch {scratch:,} + fast scratch {fast:,}), "
            f"sram_budget is {budget:,} B (over by {need - budget:,} B)"
        )


# ------------------------------------------------------------------ host runs with fixed pools
POOLS_OK, POOLS_BAD_ARGUMENTS, POOLS_LOAD_PROGRAM, POOLS_LOAD_METHOD, POOLS_EXECUTE = range(5)
_STEP = {
    POOLS_BAD_ARGUMENTS: "arguments",
    POOLS_LOAD_PROGRAM: "load program",
    POOLS_LOAD_METHOD: "load method",
    POOLS_EXECUTE: "execute",
}


@dataclass(frozen=True)
class PoolUsage:
    method_allocator_used: int
    temp_allocator_peak: int
    error: int


class PoolRunError(RuntimeError):
    """A method failed to load or run with the pools given; ``step`` says where."""

    def __init__(self, step: str, message: str, usage: PoolUsage):
        self.step, self.usage = step, usage
        super().__init__(f"{step}: {message}")


def run_with_pools(
    pte: bytes,
    arenas: Sequence[int],
    method_allocator: int,
    temp_allocator: int,
    inputs: Optional[Sequence[np.ndarray]] = None,
    outputs: Optional[Sequence[Tuple[int, np.dtype]]] = None,
    method: str = "forward",
    npu: Optional[str] = None,
) -> Tuple[List[np.ndarray], PoolUsage]:
    """Load ``method`` with pools of exactly these sizes (and, given ``inputs``, run it).

    ``inputs``: arrays whose bytes are the method's inputs in the program's dim order.
    ``outputs``: (byte size, dtype) per output; default from the program's metadata.
    ``npu``: what runs the delegates, as in ``runtime.run_pte`` (default: the program's).
    Returns the outputs (flat arrays, program dim order) and what the pools used; raises
    ``PoolRunError`` when a step fails (e.g. an exhausted allocator)."""
    from ethosu_ng.runtime import default_npu_for, load_host_runtime, set_npu

    host = load_host_runtime()
    pte = bytes(pte)
    set_npu(npu or default_npu_for(pte))
    ins = [np.ascontiguousarray(a) for a in inputs] if inputs is not None else None
    if inputs is not None and outputs is None:
        from executorch.runtime import Runtime

        meta = Runtime.get().load_program(pte).metadata(method)
        outputs = [
            (int(meta.output_tensor_meta(i).nbytes()), np.uint8) for i in range(meta.num_outputs())
        ]
    outs = [np.empty(nbytes // np.dtype(dt).itemsize, dt) for nbytes, dt in (outputs or [])]
    step, message, usage = host.run_with_pools(
        pte, method, list(arenas), method_allocator, temp_allocator, ins, outs
    )
    u = PoolUsage(*(int(v) for v in usage))
    if step != POOLS_OK:
        raise PoolRunError(_STEP.get(step, f"step {step}"), message, u)
    return outs, u


def register_fast_scratch(area: Optional[bytearray]) -> None:
    """Register ``area`` (a writable buffer, kept alive while registered) as the fast SRAM the
    firmware dedicates to Vela's region 2 (``ethosu_ng_set_fast_scratch``); ``None`` clears it,
    and fast scratch comes from the temp allocator again."""
    from ethosu_ng.runtime import load_host_runtime

    load_host_runtime().set_fast_scratch(area)


def format_text(plan: Dict[str, Any]) -> str:
    """The plan as the few lines a firmware engineer sizes pools from."""

    def b(n):
        return "-" if n is None else f"{n:,} B"

    io = plan.get("io_buffers", {})
    where = (
        "inside the arenas"
        if io.get("inputs_planned") and io.get("outputs_planned")
        else ("inputs/outputs not all planned: the firmware provides them")
    )
    lines = [
        f"memory plan ({plan.get('method', 'forward')}; every pool {plan['alignment']}-byte "
        "aligned):",
        f"  planned arenas     {', '.join(b(n) for n in plan['planned_arenas']) or '-'}",
        f"  temp allocator     {b(plan['temp_allocator'])}"
        + (
            f" ({b(plan['temp_allocator_without_fast_area'])} without a fast-scratch area)"
            if plan["temp_allocator_without_fast_area"] != plan["temp_allocator"]
            else ""
        ),
        f"  fast scratch       {b(plan['fast_scratch'])}",
        f"  method allocator   {b(plan.get('method_allocator'))} "
        f"({plan.get('method_allocator_note', '')})",
        f"  .pte (flash)       {b(plan['pte_bytes'])}",
        f"  IO                 in {', '.join(b(n) for n in io.get('inputs', []))}; "
        f"out {', '.join(b(n) for n in io.get('outputs', []))} ({where})",
    ]
    return "\n".join(lines)
