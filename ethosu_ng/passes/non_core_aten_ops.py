# SPDX-License-Identifier: BSD-3-Clause
"""Ops outside core ATen that upstream lowers: kept whole where the NPU takes them, in a form
ExecuTorch's CPU runs where it does not.

Edge generation decomposes a program to core ATen and its verifier rejects any other op, unless
a partitioner asks to keep that op whole (``ops_to_not_decompose``): then executorch adds it to
the edge program's exception list, which holds for the nodes left on the CPU too. So each such
op is one of:

- ``KEPT_WHOLE``: kept whole everywhere. The partition lowers it where the target can (TOSA
  LOGICAL_LEFT_SHIFT / ARITHMETIC_RIGHT_SHIFT on integer tensors), and ExecuTorch's portable
  library has its kernel for the CPU (``bitwise_*_shift.Tensor_out``).
- ``KEPT_WHEN_QUANTIZED``: kept whole between a dequantize and quantizes, where the partition
  lowers it as a TOSA TABLE (``erfinv``); anywhere else (float on the CPU, pinned by
  ``cpu_ops``, not finite on some input code) ``DecomposeNonCoreAtenPass`` writes it in core
  ATen (``CORE_ATEN_FORMS``), as the portable library has no kernel for it.

A ``KEPT_WHEN_QUANTIZED`` node that the partition still leaves on the CPU (Vela or the
verified compile failed on it and the fallback moved it) has no CPU kernel: the partitioner
lists it (``PartitionReport.no_cpu_kernel``) and warns, and ``ethosu_ng.export.lower`` lowers
again with its op in ``cpu_ops``, so this pass writes it in core ATen.
"""

from __future__ import annotations

from typing import Dict, List, Set

import torch
from torch.export import ExportedProgram
from torch.fx import Node

from ethosu_ng.ops import CPU_PINNED_META, is_per_tensor_dequantize, is_quantize, op_name
from ethosu_ng.passes.base import Aspect, ProgramPass

aten = torch.ops.aten

KEPT_WHOLE = frozenset(
    {
        aten.bitwise_left_shift.Tensor,
        aten.bitwise_right_shift.Tensor,
        aten.bitwise_left_shift.Tensor_Scalar,
        aten.bitwise_right_shift.Tensor_Scalar,
    }
)
# Python's operator spellings of the shifts (``x << y``): the same op under the name that has a
# TOSA lowering and a portable kernel.
SPELLINGS = {
    aten.__lshift__.Tensor: aten.bitwise_left_shift.Tensor,
    aten.__rshift__.Tensor: aten.bitwise_right_shift.Tensor,
    aten.__lshift__.Scalar: aten.bitwise_left_shift.Tensor_Scalar,
    aten.__rshift__.Scalar: aten.bitwise_right_shift.Tensor_Scalar,
}
KEPT_WHEN_QUANTIZED = frozenset({aten.erfinv.default})
NON_CORE_ATEN_OPS = KEPT_WHOLE | KEPT_WHEN_QUANTIZED
# Names of the kept ops that ExecuTorch's portable library has no kernel for.
WITHOUT_CPU_KERNEL = frozenset(op_name(op) for op in KEPT_WHEN_QUANTIZED)


def _erfinv(x: torch.Tensor) -> torch.Tensor:
    """erfinv in core ATen: Giles' single-precision approximation ("Approximating the erfinv
    function", GPU Computing Gems, 2011) and two Newton steps on erf; +-inf at +-1, NaN
    beyond, as torch.erfinv. torch's own decomposition is a prim (``prims.erf_inv``) that
    ExecuTorch has no kernel for."""
    w = -torch.log((1.0 - x) * (1.0 + x))
    c = w - 2.5
    p_central = 2.81022636e-08
    for k in (
        3.43273939e-07,
        -3.5233877e-06,
        -4.39150654e-06,
        0.00021858087,
        -0.00125372503,
        -0.00417768164,
        0.246640727,
        1.50140941,
    ):
        p_central = k + p_central * c
    t = torch.sqrt(torch.clamp(w, min=5.0)) - 3.0
    p_tail = -0.000200214257
    for k in (
        0.000100950558,
        0.00134934322,
        -0.00367342844,
        0.00573950773,
        -0.0076224613,
        0.00943887047,
        1.00167406,
        2.83297682,
    ):
        p_tail = k + p_tail * t
    y = torch.where(w < 5.0, p_central, p_tail) * x
    for _ in range(2):  # Newton: erf(y) = x
        step = (torch.erf(y) - x) / (1.1283791670955126 * torch.exp(-y * y))
        y = torch.where(torch.isfinite(step), y - step, y)
    edge = torch.where(x > 0, float("inf"), float("-inf"))
    y = torch.where(torch.abs(x) == 1.0, edge, y)
    return torch.where(torch.abs(x) > 1.0, float("nan"), y)


# Each op that may be written in core ATen: its form there.
CORE_ATEN_FORMS = {aten.erfinv.default: _erfinv}


def _pinned(node: Node) -> bool:
    return bool((node.meta.get("custom") or {}).get(CPU_PINNED_META))


def _as_table(node: Node) -> bool:
    """Read from per-tensor dequantized values and written only to quantizes, with a finite
    value for every input code: the TABLE form. Where the op is infinite or NaN (erfinv at and
    beyond +-1) eager quantization and a table disagree on what the code is (the verified
    compile measured 127 LSB), so such a node runs on the CPU."""
    x = node.args[0] if node.args else None
    if not (
        isinstance(x, Node)
        and is_per_tensor_dequantize(x)
        and node.users
        and all(is_quantize(u) for u in node.users)
    ):
        return False
    scale, zero_point, qmin, qmax = x.args[1:5]
    codes = torch.arange(int(qmin), int(qmax) + 1, dtype=torch.float32)
    return bool(torch.isfinite(node.target((codes - zero_point) * scale)).all())


def kept_whole(node: Node) -> bool:
    """Whether ``node`` (a non-core-ATen op) stays whole through edge generation."""
    if node.op != "call_function" or node.target not in NON_CORE_ATEN_OPS:
        return False
    if node.target in KEPT_WHOLE:
        return True
    return _as_table(node) and not _pinned(node)


def present(program: ExportedProgram) -> Set[torch._ops.OpOverload]:
    """The non-core-ATen ops of ``program`` that stay whole (top-level graph and sub-graphs)."""
    found = set()
    for gm in program.graph_module.modules():
        if isinstance(gm, torch.fx.GraphModule):
            found |= {n.target for n in gm.graph.nodes if kept_whole(n)}
    return found


class DecomposeNonCoreAtenPass(ProgramPass):
    """Runs last: whether a node stays whole reads its final Q/DQ neighbours. Writes the
    ``SPELLINGS`` of an op under its own name first.

    Writes each non-core-ATen node that does not stay whole in core ATen (torch's own
    decomposition, traced on the node's inputs), so edge generation's verifier accepts it and
    ExecuTorch's CPU kernels run it."""

    modifies = frozenset({Aspect.CORE_ATEN})
    requires = frozenset({Aspect.QDQ_PLACEMENT, Aspect.QUANTIZED_MARKS})

    def __call__(self, program: ExportedProgram) -> ExportedProgram:
        from ethosu_ng.adapters import exir
        from ethosu_ng.passes.decompose_in_place import DecomposeInPlacePass

        self.decomposed: Dict[str, str] = {}
        table = exir.decomposition_table()
        table.update(CORE_ATEN_FORMS)
        splicer = DecomposeInPlacePass(table)
        for gm in list(program.graph_module.modules()):
            if not isinstance(gm, torch.fx.GraphModule):
                continue
            respelled = [
                n for n in gm.graph.nodes if n.op == "call_function" and n.target in SPELLINGS
            ]
            for n in respelled:
                n.target = SPELLINGS[n.target]
            todo = [
                n
                for n in gm.graph.nodes
                if n.op == "call_function" and n.target in CORE_ATEN_FORMS and not kept_whole(n)
            ]
            for node in todo:
                name, target = node.name, op_name(node.target)
                if not splicer.splice(gm.graph, node):
                    raise RuntimeError(
                        f"{name} ({target}) is not in core ATen and could not be decomposed "
                        f"into it for the CPU"
                    )
                self.decomposed[name] = target
            if todo or respelled:
                gm.graph.lint()
                gm.recompile()
        return program

    def ensures(self, program: ExportedProgram) -> List[str]:
        """Every op outside core ATen left in the program stays whole through edge generation."""
        return [
            f"{n.name} ({op_name(n.target)}) is outside core ATen and does not stay whole"
            for gm in program.graph_module.modules()
            if isinstance(gm, torch.fx.GraphModule)
            for n in gm.graph.nodes
            if n.op == "call_function"
            and (n.target in SPELLINGS or n.target in CORE_ATEN_FORMS)
            and not kept_whole(n)
        ]
