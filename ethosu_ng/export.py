# SPDX-License-Identifier: BSD-3-Clause
"""The whole export flow in two calls, as a user's script (or our CLI and tests) runs it."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterable, Mapping, Optional, Sequence, Tuple

import torch
from executorch.exir import EdgeProgramManager, to_edge_transform_and_lower
from torchao.quantization.pt2e.observer import _is_activation_post_process
from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

from ethosu_ng.adapters import arm as upstream
from ethosu_ng.compile_spec import EthosUNGCompileSpec
from ethosu_ng.partitioner import EthosUNGPartitioner
from ethosu_ng.passes import non_core_aten_ops
from ethosu_ng.passes.control_flow_constants import inline_uniform_constants
from ethosu_ng.passes.loop_carried_grid import requantize_loop_results
from ethosu_ng.quantizer import EthosUNGQuantizer


def quantize(
    model: torch.nn.Module,
    example_inputs: Tuple[torch.Tensor, ...],
    spec: EthosUNGCompileSpec,
    calibration: Optional[Iterable[Tuple[torch.Tensor, ...]]] = None,
    input_dtype: Optional[torch.dtype] = None,
    output_dtype: Optional[torch.dtype] = None,
    activation_dtype: torch.dtype = torch.int8,
    module_dtypes: Optional[Mapping] = None,
) -> torch.fx.GraphModule:
    """PT2E: export, annotate with EthosUNGQuantizer, calibrate, convert."""
    model = model.eval()
    gm = torch.export.export(model, tuple(example_inputs)).module(check_guards=False)
    quantizer = EthosUNGQuantizer(
        spec,
        input_dtype=input_dtype,
        output_dtype=output_dtype,
        activation_dtype=activation_dtype,
        module_dtypes=module_dtypes,
    )
    batches = calibration if calibration is not None else [example_inputs]
    if upstream.control_flow_submodules(gm):
        batches = list(batches)  # upstream's calibration takes a list
        with torch.no_grad(), _calibration_errors(gm, lambda: enumerate(batches)):
            quantized = upstream.quantize_with_control_flow(quantizer, gm, batches)
        inline_uniform_constants(quantized)
        requantize_loop_results(quantized)
        return quantized
    prepared = prepare_pt2e(gm, quantizer)
    current = []  # the batch being calibrated on, for the error
    with torch.no_grad(), _calibration_errors(prepared, lambda: current):
        for batch in enumerate(batches):
            current[:] = [batch]
            prepared(*batch[1])
    return convert_pt2e(prepared)


class CalibrationError(ValueError):
    """A calibration batch gives an activation no finite value an observer can range."""


@contextmanager
def _calibration_errors(gm: torch.fx.GraphModule, suspects):
    """An observer's failure on non-finite values (torch's "range of [nan, nan] is not finite")
    becomes a ``CalibrationError`` naming the first node whose output is not finite."""
    try:
        yield
    except RuntimeError as e:
        if "not finite" not in str(e):
            raise
        for k, batch in suspects():
            culprit = _first_non_finite(gm, batch)
            if culprit is not None:
                node, bad, total = culprit
                raise CalibrationError(
                    f"calibration batch {k}: node {_describe(node)} gives {bad} of {total} "
                    "values NaN or infinite, which no quantization grid holds; calibrate with "
                    "inputs inside the op's domain" + _source_line(node)
                ) from None
        raise


def _describe(node: torch.fx.Node) -> str:
    """``name (op)``, with the op the model wrote where a quantizer transform rewrote it."""
    origin = node.meta.get("from_node") or []
    while origin and origin[0].from_node:
        origin = origin[0].from_node
    own = f"{node.name} ({node.target}"
    if origin and origin[0].target != str(node.target):
        own += f", from {origin[0].name}: {origin[0].target}"
    return own + ")"


def _source_line(node: torch.fx.Node) -> str:
    """ " (file, line N: code)" of the innermost frame of the model's own code, or ""."""
    lines = [ln.strip() for ln in node.meta.get("stack_trace", "").strip().splitlines()]
    frames = [
        (lines[i], lines[i + 1]) for i in range(len(lines) - 1) if lines[i].startswith("File ")
    ]
    own = [f for f in frames if "site-packages" not in f[0] and "/ethosu_ng/" not in f[0]]
    return f" ({own[-1][0]}: {own[-1][1]})" if own else ""


def _first_non_finite(gm: torch.fx.GraphModule, batch):
    """(node, non-finite count, element count) of the first float output that is not finite on
    ``batch``, running ``gm``'s nodes in order with its observers passed through."""
    found = []

    class Finder(torch.fx.Interpreter):
        def call_module(self, target, args, kwargs):
            if _is_activation_post_process(self.fetch_attr(target)):
                return args[0]
            return super().call_module(target, args, kwargs)

        def run_node(self, n):
            out = super().run_node(n)
            if not found and isinstance(out, torch.Tensor) and out.is_floating_point():
                bad = int((~torch.isfinite(out)).sum())
                if bad:
                    found.append((n, bad, out.numel()))
            return out

    with torch.no_grad():
        Finder(gm).run(*batch)
    return found[0] if found else None


def serialize(edge: EdgeProgramManager, spec: EthosUNGCompileSpec) -> Tuple[bytes, dict]:
    """``edge.to_executorch()`` bytes and the memory plan (without host measurements), checked
    against ``spec.sram_budget``: a program whose pools do not fit raises ``SramBudgetError``."""
    from ethosu_ng.memory_plan import check_sram_budget, memory_plan

    pte = edge.to_executorch().buffer
    plan = memory_plan(pte, measure=False)
    check_sram_budget(plan, spec)
    return pte, plan


def lower(
    quantized: torch.nn.Module,
    example_inputs: Tuple[torch.Tensor, ...],
    spec: EthosUNGCompileSpec,
    cpu_ops: Sequence = (),
    disabled_passes: Sequence[type] = (),
) -> Tuple[EdgeProgramManager, EthosUNGPartitioner]:
    """Export the quantized module and lower it with EthosUNGPartitioner. An op kept whole for
    the NPU that ends on the CPU, which has no kernel for it (``PartitionReport.no_cpu_kernel``:
    an aten.pad or an erfinv TABLE that Vela or the verified compile failed), is lowered again
    written in core ATen: decomposed everywhere (a pad becomes constant_pad_nd, on the NPU where
    it can run there), or for erfinv, which has no decomposition, pinned to the CPU."""
    cpu_ops, decomposed = list(cpu_ops), []
    while True:
        ep = torch.export.export(quantized, tuple(example_inputs))
        partitioner = EthosUNGPartitioner(
            spec, cpu_ops=cpu_ops, disabled_passes=disabled_passes, decomposed_ops=decomposed
        )
        edge = to_edge_transform_and_lower(ep, partitioner=[partitioner])
        stranded = set(partitioner.report.no_cpu_kernel.values()) - set(cpu_ops) - set(decomposed)
        if not stranded:
            return edge, partitioner
        # erfinv has no core ATen decomposition to fall back on; ours runs on the CPU.
        cpu_ops += sorted(stranded & non_core_aten_ops.WITHOUT_CPU_KERNEL)
        decomposed += sorted(stranded - non_core_aten_ops.WITHOUT_CPU_KERNEL)
