# SPDX-License-Identifier: BSD-3-Clause
"""Vela 5.1.0 drops a partition output that is also consumed inside the partition, when upstream's
layout pass routes the internal consumer through the output's NCHW transpose and straight back:
Vela cancels the transpose pair and loses the output (measured: TOSA 2 outputs, Vela 1).

The workaround: lower such a partition again with every shared rank-4 output declared
channels-last, which removes the pair; the runtime's layout copy turns the NHWC buffer into the
ExecuTorch tensor's dim order. ``may_drop_output`` says whether a partition needs the pristine
copy that retry lowers (upstream's lowering edits the program in place).
"""

from __future__ import annotations

from typing import Set

import torch
from torch.export import ExportedProgram


def _internal_rank4_exits(program: ExportedProgram):
    for k, a in enumerate(program.graph_module.graph.output_node().args[0]):
        if isinstance(a, torch.fx.Node) and len(a.users) >= 2:
            v = a.meta.get("val")
            if isinstance(v, torch.Tensor) and v.dim() == 4:
                yield k, a, v


def may_drop_output(program: ExportedProgram) -> bool:
    return next(_internal_rank4_exits(program), None) is not None


def emit_shared_rank4_outputs_nhwc(program: ExportedProgram) -> Set[int]:
    """Declare every rank-4 output that is also consumed inside the partition channels-last;
    return their output indices."""
    changed: Set[int] = set()
    for k, a, v in list(_internal_rank4_exits(program)):
        n, c, h, w = v.shape
        with v.fake_mode:
            a.meta["val"] = torch.empty_strided(v.shape, (h * w * c, 1, w * c, c), dtype=v.dtype)
        changed.add(k)
    return changed
