# SPDX-License-Identifier: BSD-3-Clause
"""Fold quantized constant subgraphs exactly as the eager quantized model computes them.

Keeps seed 003's guarantee: a quantized ``cat`` (or any op chain) of constant tensors folds to the
very int8 values the eager quantized model produces (max diff 0), whatever the qparams of each
input. Upstream 1.5.1's ``FuseConstantArgsPass`` applies the qparams of a list argument's index
to *every* element of the list, so ``cat((a, b, c))`` with three different input qparams folds
to wrong values (measured: 68 LSB off downstream). We do not patch that convention; we take the
work away from it: every quantize whose whole input cone is constant (parameters, non-mutated
buffers, lifted constants, and ops on them) is evaluated here in PyTorch, on the ATen program
before decomposition, and replaced by an int8 constant. What reaches upstream's lowering is then
``int8 constant -> dequantize``, the same shape convert_pt2e gives a weight.
"""

from __future__ import annotations

from typing import Dict, Set

import torch
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind, InputSpec, TensorArgument
from torch.fx import Node

from ethosu_ng.ops import is_quantize
from ethosu_ng.passes.base import Aspect, ProgramPass


def _written_in_graph(program: ExportedProgram) -> Set[str]:
    """Placeholders an op in the graph writes to (``state.copy_(new)`` before functionalization:
    the signature's ``buffers_to_mutate`` does not list those yet)."""
    written: Set[str] = set()
    for n in program.graph_module.graph.nodes:
        schema = getattr(n.target, "_schema", None) if n.op == "call_function" else None
        if schema is None:
            continue
        for arg, a in zip(schema.arguments, n.args):
            info = arg.alias_info
            if info is not None and info.is_write and isinstance(a, Node):
                written.add(a.name)
    return written


def _constant_values(program: ExportedProgram) -> Dict[str, torch.Tensor]:
    """Placeholder name -> value, for placeholders whose value is fixed at export."""
    sig = program.graph_signature
    mutated = set(sig.buffers_to_mutate.values())
    written = _written_in_graph(program)
    out: Dict[str, torch.Tensor] = {}
    for spec in sig.input_specs:
        if spec.kind == InputKind.PARAMETER:
            out[spec.arg.name] = program.state_dict[spec.target]
        elif (
            spec.kind == InputKind.BUFFER
            and spec.target not in mutated
            and spec.arg.name not in written
        ):
            src = program.state_dict if spec.persistent else program.constants
            out[spec.arg.name] = src[spec.target]
        elif spec.kind == InputKind.CONSTANT_TENSOR:
            out[spec.arg.name] = program.constants[spec.target]
    return out


def _deterministic(target) -> bool:
    tags = getattr(target, "tags", ())
    return torch.Tag.nondeterministic_seeded not in tags


class FoldQuantizedConstantsPass(ProgramPass):
    # Folds with the final IO qparams.
    modifies = frozenset({Aspect.CONSTANTS})
    requires = frozenset({Aspect.PROGRAM_IO})

    def __call__(self, program: ExportedProgram) -> ExportedProgram:
        graph = program.graph_module.graph
        consts = _constant_values(program)
        is_const: Set[Node] = set()
        for n in graph.nodes:
            if n.op == "placeholder":
                if n.name in consts:
                    is_const.add(n)
            elif n.op == "get_attr":
                is_const.add(n)
            elif n.op == "call_function" and _deterministic(n.target):
                if n.all_input_nodes and all(i in is_const for i in n.all_input_nodes):
                    is_const.add(n)
                elif not n.all_input_nodes and not is_quantize(n):
                    is_const.add(n)  # e.g. linspace / arange / full with literal arguments

        # Fold the frontier: constant quantize nodes whose value leaves the constant cone and
        # that are computed (not just an already-frozen parameter).
        def leaves_cone(n: Node) -> bool:
            # Directly, or through the dequantize that reads it.
            return any(
                u not in is_const
                or (
                    u.op == "call_function"
                    and "dequantize" in str(u.target)
                    and any(w not in is_const for w in u.users)
                )
                for u in n.users
            )

        targets = [
            n
            for n in graph.nodes
            if n in is_const and is_quantize(n) and leaves_cone(n) and n.args[0].op != "placeholder"
        ]
        self.folded = 0
        if not targets:
            return program
        values = self._evaluate(program, graph, is_const, consts, set(targets))
        first_user_input = (
            next(n for n in graph.nodes if n.op == "placeholder" and n.name not in consts)
            if any(n.op == "placeholder" and n.name not in consts for n in graph.nodes)
            else None
        )
        for q in targets:
            self._replace_with_constant(program, graph, q, values[q], first_user_input)
            self.folded += 1
        graph.eliminate_dead_code()
        graph.lint()
        program.graph_module.recompile()
        return program

    @staticmethod
    def _evaluate(program, graph, is_const, consts, wanted):
        env: Dict[Node, object] = {}
        gm = program.graph_module

        def load(a):
            return env[a] if isinstance(a, Node) else a

        remaining = set(wanted)
        for n in graph.nodes:
            if not remaining:
                break
            if n not in is_const:
                continue
            if n.op == "placeholder":
                env[n] = consts[n.name]
            elif n.op == "get_attr":
                env[n] = getattr(gm, n.target)
            else:
                args = torch.fx.node.map_arg(n.args, load)
                kwargs = torch.fx.node.map_arg(n.kwargs, load)
                env[n] = n.target(*args, **kwargs)
            remaining.discard(n)
        return {q: env[q] for q in wanted}

    @staticmethod
    def _replace_with_constant(program, graph, q: Node, value: torch.Tensor, before) -> None:
        name = f"_ethosu_ng_folded_{q.name}"
        value = value.detach().contiguous().clone()
        program.constants[name] = value
        if before is not None:
            ctx = graph.inserting_before(before)
        else:
            ctx = graph.inserting_before(next(iter(graph.nodes)))
        with ctx:
            ph = graph.placeholder(name)
        fake = q.meta["val"]
        ph.meta = {k: v for k, v in q.meta.items() if k in ("val", "tensor_meta")}
        ph.meta["val"] = fake
        q.replace_all_uses_with(ph)
        specs = program.graph_signature.input_specs
        index = [n for n in graph.nodes if n.op == "placeholder"].index(ph)
        specs.insert(
            index,
            InputSpec(
                kind=InputKind.CONSTANT_TENSOR, arg=TensorArgument(name=ph.name), target=name
            ),
        )
