# SPDX-License-Identifier: BSD-3-Clause
"""The partition programs ``preprocess`` will receive, built ahead of time, and their fingerprint.

The partitioner compiles its partitions before returning them (so a Vela failure can still move
ops to the CPU, which is impossible once ``to_backend`` has fixed the split). It carves them the
way ``to_backend`` does, on a copy of the graph, with the real constant tensors: ``to_backend``
hands the partitioner a program whose state dict holds FakeTensors, so the real tensors are
remembered from ``transform_for_pre_decomposition``, which sees the real program.

``fingerprint`` names a partition program by what determines its compiled blob (graph structure,
tensor types, quantization parameters, constant bytes), never by node names, so the program the
partitioner carved and the one ``preprocess`` gets have the same fingerprint.
"""

from __future__ import annotations

import copy
import hashlib
from typing import Dict, Iterable, Mapping, Optional

import torch
from executorch.exir.backend.utils import tag_constant_data
from torch._subclasses.fake_tensor import FakeTensor
from torch.export import ExportedProgram
from torch.fx import Node

from ethosu_ng.adapters import exir
from ethosu_ng.ops import op_name
from ethosu_ng.partitioning.delegate_io import QPARAMS_META

# Node meta that upstream's lowering reads besides the graph itself.
_META_KEYS = ("custom", QPARAMS_META)


class RealTensors:
    """Name -> real tensor of a program's state dict and constants, kept to undo faking."""

    def __init__(self, program: ExportedProgram):
        self.tensors: Dict[str, torch.Tensor] = {}
        self.tensors.update(program.state_dict)
        self.tensors.update(program.constants)

    def _real(self, name: str, t: torch.Tensor) -> Optional[torch.Tensor]:
        if not isinstance(t, FakeTensor):
            return t
        real = self.tensors.get(name)
        if (
            not isinstance(real, torch.Tensor)
            or isinstance(real, FakeTensor)
            or real.shape != t.shape
            or real.dtype != t.dtype
        ):
            return None
        return real

    def covers(self, program: ExportedProgram) -> bool:
        """Whether every fake tensor of ``program`` has a real counterpart of the same type."""
        return all(self._real(k, t) is not None for k, t in program.state_dict.items()) and not any(
            isinstance(t, FakeTensor) for t in program.constants.values()
        )

    def real_program(self, program: ExportedProgram) -> ExportedProgram:
        """A private copy of ``program`` (graph and meta copied) with real tensors (``covers``)."""
        state = {k: self._real(k, t) for k, t in program.state_dict.items()}
        gm = copy.deepcopy(program.graph_module)
        return ExportedProgram(
            root=gm,
            graph=gm.graph,
            graph_signature=copy.deepcopy(program.graph_signature),
            state_dict=state,
            range_constraints=copy.deepcopy(program.range_constraints),
            module_call_graph=copy.deepcopy(program.module_call_graph),
            constants=dict(program.constants),
            verifiers=[program.verifier],
        )


def carve(
    program: ExportedProgram, parts: Mapping[str, Iterable[str]]
) -> Dict[str, ExportedProgram]:
    """One program per partition (tag -> node names), as ``to_backend`` would build it.

    ``program`` must be a private copy (``RealTensors.real_program``): its graph is re-tagged and
    cut."""
    gm = program.graph_module
    by_name = {n.name: n for n in gm.graph.nodes}
    for n in gm.graph.nodes:
        n.meta.pop("delegation_tag", None)
    for tag, names in parts.items():
        for name in names:
            by_name[name].meta["delegation_tag"] = tag
    tag_constant_data(program)
    for tag in parts:
        exir.duplicate_shared_constants(program, tag)
    return {tag: exir.carve_partition(gm, program, tag) for tag in parts}


def _tensor_digest(t: torch.Tensor) -> str:
    # Flattened first: a rank-0 tensor cannot be viewed as bytes of another element size.
    t = t.detach().contiguous().cpu().reshape(-1)
    return hashlib.sha256(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"").hexdigest()


def _val_desc(v) -> str:
    if isinstance(v, torch.Tensor):
        return f"{v.dtype}{tuple(v.shape)}{tuple(v.stride())}"
    if isinstance(v, (list, tuple)):
        return "[" + ",".join(_val_desc(x) for x in v) + "]"
    return type(v).__name__


def fingerprint(program: ExportedProgram) -> Optional[str]:
    """Structural hash of a partition program; None if a constant is not real data."""
    h = hashlib.sha256()
    index: Dict[Node, int] = {}
    inputs = {s.arg.name: s for s in program.graph_signature.input_specs if hasattr(s.arg, "name")}

    def arg(a):
        if isinstance(a, Node):
            return f"%{index[a]}"
        if isinstance(a, (list, tuple)):
            return "(" + ",".join(arg(x) for x in a) + ")"
        if isinstance(a, dict):
            return "{" + ",".join(f"{k}:{arg(v)}" for k, v in sorted(a.items())) + "}"
        return repr(a)

    def graph_lines(gm: torch.fx.GraphModule, depth: int) -> None:
        """A control-flow graph's nodes, as the top-level ones below, prefixed by depth."""
        sub_index: Dict[Node, int] = {}

        def sub_arg(a):
            if isinstance(a, Node):
                return f"%{sub_index[a]}"
            if isinstance(a, (list, tuple)):
                return "(" + ",".join(sub_arg(x) for x in a) + ")"
            return repr(a)

        for i, n in enumerate(gm.graph.nodes):
            sub_index[n] = i
            target = op_name(n.target) if n.op == "call_function" else n.op
            val = _val_desc(n.meta.get("val")) if n.op != "output" else ""
            h.update(
                f"{'>' * depth} {target} {sub_arg(n.args)} {sub_arg(n.kwargs)} | {val}\n".encode()
            )
            if n.op == "get_attr" and isinstance(
                getattr(gm, str(n.target), None), torch.fx.GraphModule
            ):
                graph_lines(getattr(gm, str(n.target)), depth + 1)

    for i, n in enumerate(program.graph_module.graph.nodes):
        index[n] = i
        if n.op == "get_attr":
            sub = getattr(program.graph_module, str(n.target), None)
            if isinstance(sub, torch.fx.GraphModule):  # a cond branch or while_loop graph
                graph_lines(sub, 1)
        if n.op == "placeholder":
            spec = inputs.get(n.name)
            line = f"P {spec.kind.name if spec else '?'}"
            if spec is not None and spec.target is not None:
                t = program.state_dict.get(spec.target, program.constants.get(spec.target))
                if not isinstance(t, torch.Tensor) or isinstance(t, FakeTensor):
                    return None
                line += " " + _tensor_digest(t)
        elif n.op == "call_function":
            line = f"C {op_name(n.target)} {arg(n.args)} {arg(n.kwargs)}"
        else:
            line = f"{n.op} {arg(n.args)}"
        meta = ";".join(repr(n.meta.get(k)) for k in _META_KEYS)
        # The output node's meta differs between to_backend's two code paths; it adds nothing.
        val = _val_desc(n.meta.get("val")) if n.op != "output" else ""
        h.update(f"{line} | {val} | {meta}\n".encode())
    for s in program.graph_signature.output_specs:
        h.update(f"O {s.kind.name}\n".encode())
    return h.hexdigest()
