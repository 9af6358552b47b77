# SPDX-License-Identifier: BSD-3-Clause
# SPDX-License-Identifier: Apache-2.0
"""The memory layout of a program's rank-4 inputs and outputs, as the application asks for it.

``nchw`` is PyTorch's default; ``nhwc`` is what a camera or image sensor delivers (interleaved
HWC bytes) and what the NPU reads and writes natively. A program's IO layout is fixed at export:
an input takes the dim order of its example tensor, an output the dim order the model gives it.
``apply_input_layouts`` lays the example inputs out as asked, ``OutputLayouts`` makes the model's
outputs leave in the layout asked, and ``check_program_layouts`` checks the lowered program
against what was asked (a ``LayoutError`` naming the tensor otherwise).

When an input or output of a delegate stays NCHW, the NPU transposes it on entry or exit;
``io_transposes`` finds those layers among Vela's and what they cost.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import torch

LAYOUTS: Dict[str, Tuple[int, ...]] = {"nchw": (0, 1, 2, 3), "nhwc": (0, 2, 3, 1)}
# One share of a delegate's NPU cycles from which an IO transpose is worth a line in the report.
TRANSPOSE_SHARE_WORTH_NAMING = 0.05

Asked = Union[None, str, Sequence[Optional[str]]]


class LayoutError(ValueError):
    """A layout asked for a tensor that cannot take it, or a program whose IO does not have it."""


def layout_of(dim_order: Sequence[int]) -> Optional[str]:
    """``nchw`` / ``nhwc`` for a rank-4 dim order, None otherwise."""
    for name, order in LAYOUTS.items():
        if tuple(dim_order) == order:
            return name
    return None


def resolve(asked: Asked, shapes: Sequence[Tuple[int, ...]], what: str) -> List[Optional[str]]:
    """Per tensor: the layout asked for it, or None (as the model gives it).

    ``asked``: None; one layout for every rank-4 tensor (``"nhwc"``); or one entry per tensor,
    as a list or a comma-separated string (``"nhwc,-"``), ``-`` or None for a tensor left as is.
    ``what``: ``input`` or ``output``, for the messages.
    """
    if asked is None:
        return [None] * len(shapes)
    if isinstance(asked, str):
        entries = [e.strip() for e in asked.split(",")]
        if len(entries) == 1:
            name = check_name(entries[0], what)
            if name is None:
                return [None] * len(shapes)
            if not any(len(s) == 4 for s in shapes):
                raise LayoutError(
                    f"{what} layout {name}: the program has no rank-4 {what} "
                    f"({what} shapes {[list(s) for s in shapes]})"
                )
            return [name if len(s) == 4 else None for s in shapes]
    else:
        entries = list(asked)
    if len(entries) != len(shapes):
        raise LayoutError(
            f"{len(entries)} {what} layouts for {len(shapes)} {what}s; give one per {what} "
            f"(- for a {what} left as is) or one for all"
        )
    out: List[Optional[str]] = []
    for k, (e, shape) in enumerate(zip(entries, shapes)):
        name = check_name(e, what)
        if name is not None and len(shape) != 4:
            raise LayoutError(
                f"{what} {k}: layout {name} is for rank-4 tensors, this one has shape {list(shape)}"
            )
        out.append(name)
    return out


def check_name(entry: Optional[str], what: str) -> Optional[str]:
    if entry in (None, "-", ""):
        return None
    name = str(entry).lower()
    if name not in LAYOUTS:
        raise LayoutError(f"{what} layout {entry!r}: expected one of {', '.join(LAYOUTS)} or -")
    return name


def _memory_format(layout: str) -> torch.memory_format:
    return torch.channels_last if layout == "nhwc" else torch.contiguous_format


def apply_input_layouts(
    inputs: Sequence[torch.Tensor], layouts: Sequence[Optional[str]]
) -> Tuple[torch.Tensor, ...]:
    """The tensors laid out as asked (the example inputs fix the program's input layout)."""
    return tuple(
        t if lay is None else t.contiguous(memory_format=_memory_format(lay))
        for t, lay in zip(inputs, layouts)
    )


class OutputLayouts(torch.nn.Module):
    """``model`` with each output laid out as asked. Where the model already gives that layout
    the conversion is an identity export drops; otherwise it is a dim-order copy the partitioner
    places (on the NPU as a transpose, or on the CPU)."""

    def __init__(self, model: torch.nn.Module, layouts: Sequence[Optional[str]]):
        super().__init__()
        self.model, self.layouts = model, list(layouts)

    def forward(self, *args):
        out = self.model(*args)
        single = isinstance(out, torch.Tensor)
        outs = [out] if single else list(out)
        outs = [
            t if lay is None else t.contiguous(memory_format=_memory_format(lay))
            for t, lay in zip(outs, self.layouts)
        ]
        return outs[0] if single else type(out)(outs)


def output_shapes(model: torch.nn.Module, inputs: Sequence[torch.Tensor]) -> List[Tuple]:
    """Shapes of the model's outputs on ``inputs`` (one eager run)."""
    with torch.no_grad():
        out = model(*inputs)
    outs = [out] if isinstance(out, torch.Tensor) else list(out)
    return [tuple(t.shape) for t in outs]


def _user_io(program) -> Tuple[List[Tuple[str, torch.Tensor]], List[Tuple[str, torch.Tensor]]]:
    """([(name, fake tensor)] of the user inputs, same for the user outputs) of an
    EdgeProgramManager, ExecutorchProgramManager or ExportedProgram."""
    ep = program.exported_program() if hasattr(program, "exported_program") else program
    gm, sig = ep.graph_module, ep.graph_signature
    user_inputs = set(sig.user_inputs)
    ins = [
        (n.name, n.meta["val"])
        for n in gm.graph.nodes
        if n.op == "placeholder" and n.name in user_inputs
    ]
    outs = [
        (y.name, y.meta["val"])
        for spec, y in zip(sig.output_specs, gm.graph.output_node().args[0])
        if spec.kind.name == "USER_OUTPUT" and isinstance(y, torch.fx.Node)
    ]
    return ins, outs


def program_dim_orders(program) -> Tuple[List[Tuple[str, tuple]], List[Tuple[str, tuple]]]:
    """([(name, dim order)] of the user inputs, same for the user outputs) of an
    EdgeProgramManager, ExecutorchProgramManager or ExportedProgram."""
    ins, outs = _user_io(program)
    return (
        [(name, tuple(v.dim_order())) for name, v in ins],
        [(name, tuple(v.dim_order())) for name, v in outs],
    )


def same_bytes(shape: Sequence[int], a: Sequence[int], b: Sequence[int]) -> bool:
    """Whether dim orders ``a`` and ``b`` lay a tensor of ``shape`` out as the same bytes: they
    agree once its size-1 dims are dropped (one channel: NCHW and NHWC are one layout, and
    torch reports either)."""
    return [d for d in a if shape[d] != 1] == [d for d in b if shape[d] != 1]


def check_program_layouts(
    program, inputs: Sequence[Optional[str]], outputs: Sequence[Optional[str]]
) -> None:
    """Raise LayoutError naming the first program input or output whose layout is not the one
    asked for."""
    ins, outs = _user_io(program)
    for what, asked, got in (("input", inputs, ins), ("output", outputs, outs)):
        for k, (lay, (name, val)) in enumerate(zip(asked, got)):
            order = tuple(val.dim_order())
            if lay is not None and not same_bytes(val.shape, order, LAYOUTS[lay]):
                raise LayoutError(
                    f"{what} {k} ({name}): asked for {lay}, the program has dim order "
                    f"{list(order)}"
                    + (
                        ""
                        if what == "input"
                        else " (an op at the end of the model fixes its layout)"
                    )
                )


def edge_transposes(layers: Sequence[Dict[str, Any]]) -> Dict[str, int]:
    """NPU cycles of the Transpose layers before a delegate's first computing layer (``input``)
    and after its last (``output``), whatever its IO layout: where upstream's lowering puts the
    NCHW <-> NHWC conversion of the delegate's IO. ``layers``: attributed Vela layers
    (``module_profile.attribute``), in command-stream order."""
    computing = [k for k, layer in enumerate(layers) if not layer.get("data_movement_kind")]

    def cycles(span) -> int:
        return sum(
            int(layers[k].get("npu_cycles") or 0)
            for k in span
            if layers[k].get("data_movement_kind") == "Transpose"
        )

    first = computing[0] if computing else len(layers)
    last = computing[-1] if computing else len(layers)
    return {"input": cycles(range(first)), "output": cycles(range(last + 1, len(layers)))}


def io_transposes(delegate: Dict[str, Any]) -> Dict[str, int]:
    """NPU cycles a report delegate spends transposing its NCHW IO: ``edge_transposes`` of its
    layers, counted on the side that has a rank-4 NCHW tensor."""

    def nchw(specs) -> bool:
        return any(len(s["shape"]) == 4 and layout_of(s["dim_order"]) == "nchw" for s in specs)

    edges = edge_transposes(delegate.get("layers") or [])
    return {
        "input": edges["input"] if nchw(delegate.get("inputs", [])) else 0,
        "output": edges["output"] if nchw(delegate.get("outputs", [])) else 0,
    }
