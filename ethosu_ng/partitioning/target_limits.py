# SPDX-License-Identifier: BSD-3-Clause
"""Operator limits of a target that Vela does not reject cleanly, checked before partitioning.

Each rule exists because Vela 5.1.0 crashes (not errors) on the pattern, or because the target
computes another answer than PyTorch where the verified compile cannot tell; keeping the op on
the CPU up front is cheaper and kinder than compiling, crashing and falling back. Every
rejection carries a reason that the partition report shows.
"""

from __future__ import annotations

import math
from typing import Dict

import torch
from torch.fx import Node
from torch.fx.passes.operator_support import OperatorSupportBase

from ethosu_ng.compile_spec import EthosUNGCompileSpec
from ethosu_ng.ops import DEQUANTIZE_OPS, RIGHT_SHIFT_OPS, SLICING_OPS, VIEW_OPS, op_name

# What a sliced value may pass through and still reach the element-wise op of the crash pattern.
_PASSES_VALUE = VIEW_OPS | DEQUANTIZE_OPS | {"aten.permute_copy.default"}
_ELEMENTWISE = {"aten.add.Tensor", "aten.sub.Tensor", "aten.mul.Tensor"}


def _feeds_elementwise(node: Node, depth: int = 8) -> bool:
    """Whether the value reaches an add/sub/mul directly or through views (and dequantize)."""
    frontier = [node]
    for _ in range(depth):
        nxt = []
        for n in frontier:
            for u in n.users:
                name = op_name(u.target) if u.op == "call_function" else ""
                if name in _ELEMENTWISE:
                    return True
                if name in _PASSES_VALUE:
                    nxt.append(u)
        frontier = nxt
    return False


class TargetLimits(OperatorSupportBase):
    def __init__(self, spec: EthosUNGCompileSpec, reasons: Dict[str, str]):
        self.spec, self.reasons = spec, reasons

    def is_node_supported(self, submodules, node: Node) -> bool:
        if node.op != "call_function":
            return True
        reason = self.why_not(node)
        if reason is None:
            return True
        self.reasons.setdefault(node.name, reason)
        return False

    def why_not(self, node: Node):
        name = op_name(node.target)
        if self.spec.is_u55_subset and name in RIGHT_SHIFT_OPS:
            # Upstream lowers it to the U55's SHR, which rounds where PyTorch floors (measured:
            # 1 off on every odd quotient), and the TOSA reference calls the graph unpredictable
            # on the verified compile's full-range shift amounts, so nothing would catch it.
            return (
                f"{self.spec.family}: the NPU's right shift rounds, PyTorch's floors "
                "(1 off); kept on CPU"
            )
        if self.spec.is_u55_subset and name in SLICING_OPS and len(node.args) > 1:
            src, dim = node.args[0], node.args[1]
            val = src.meta.get("val") if isinstance(src, Node) else None
            step = node.args[4] if name == "aten.slice_copy.Tensor" and len(node.args) > 4 else 1
            if (
                isinstance(val, torch.Tensor)
                and val.dim() >= 5
                and isinstance(dim, int)
                and dim % val.dim() <= val.dim() - 3
                and step == 1
                and math.prod(val.shape[dim % val.dim() + 1 : -1]) > 1
                and _feeds_elementwise(node)
            ):
                # Measured: a rank-5 SLICE of an outer dim -> RESHAPE to rank 4 -> MUL/ADD/CLAMP
                # makes Vela 5.1.0 SIGSEGV for ethos-u55-128 (``x[1] * 0.5``, x: (3, 4, 2, 16, 8)).
                # SliceOnMergedAxisPass rewrites every such slice of the ATen program (swin and
                # mobilevit q, k, v) into a rank-2/3 slice that compiles; this only catches one
                # that a decomposition creates after it (same conditions as the pass). Strided
                # slices and slices of the two innermost dims compile (measured).
                return (
                    f"{self.spec.family}: slicing a rank-{val.dim()} tensor crashes Vela 5.1.0; "
                    "kept on CPU (int8 data movement)"
                )
        return None
