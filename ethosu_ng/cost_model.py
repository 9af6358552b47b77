# SPDX-License-Identifier: BSD-3-Clause
"""End-to-end time of a lowered program on a Cortex-M55 + Ethos-U system, estimated.

- NPU: each delegate's time from Vela's performance estimate (``inference_time``: its cycles,
  memory-bound ones included, at the system config's core clock).
- CPU: every kernel call left outside a delegate (quantize/dequantize at the boundaries
  included) costs ``instructions_per_unit x units + per_call_instructions``, from
  ``cpu_op_costs.json`` (matrix-like ops add ``instructions_per_output`` per output element):
  ExecuTorch's CPU kernels built for the M55 and counted on the emulated
  M55 (``bench/cpu_op_costs.py`` measures them and says how). Units are output elements, or
  multiply-accumulates for convolutions and matrix products.
- One cycle per instruction, and the CPU at the NPU's clock: the assumption Vela's own
  ``inference_time`` makes of a system, stated so a user with another ratio can scale the CPU
  column.

Ops that ExecuTorch's memory planning turns into views cost nothing; an op without a measured
row takes the row of the measured kernel it resembles (``SAME_COST_AS``), else the median of the
elementwise rows, and is listed as such.
"""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Tuple

from ethosu_ng.ops import CALL_DELEGATE, op_name

COSTS_FILE = Path(__file__).with_name("cpu_op_costs.json")

# Edge ops ExecuTorch executes without a kernel call: view_copy becomes a view of its input
# (squeeze/unsqueeze do not: they call their copy kernels), and the memory planner's own nodes.
FREE_OPS = frozenset({"aten.view_copy", "aten._unsafe_view", "getitem", "alloc", "view"})
# Unmeasured kernel -> the measured kernel whose per-element work it shares.
SAME_COST_AS = {
    "aten.squeeze_copy": "aten.slice_copy",
    "aten.unsqueeze_copy": "aten.slice_copy",
    "aten.alias_copy": "aten.slice_copy",
    "aten.detach_copy": "aten.slice_copy",
    "aten.clone": "aten.slice_copy",
    "dim_order_ops._clone_dim_order": "aten.slice_copy",
    "aten.select_copy": "aten.slice_copy",
    "aten.split_copy": "aten.slice_copy",
    "aten.split_with_sizes_copy": "aten.slice_copy",
    "aten.unbind_copy": "aten.slice_copy",
    "dim_order_ops._to_dim_order_copy": "aten.permute_copy",
    "aten.expand_copy": "aten.permute_copy",
    "aten.repeat": "aten.permute_copy",
    "aten.transpose_copy": "aten.permute_copy",
    "aten.mm": "aten.addmm",
    "aten.linear": "aten.addmm",
    "aten.rsub": "aten.sub",
    "aten.hardtanh": "aten.clamp",
    "aten.neg": "aten.relu",
    "aten.abs": "aten.relu",
    "aten.max_pool2d": "aten.max_pool2d_with_indices",
    "aten.sum": "aten.mean",
    "aten.amax": "aten.mean",
    "aten.amin": "aten.mean",
    "aten.var": "aten.mean",
    "quantized_decomposed.quantize_per_channel": "quantized_decomposed.quantize_per_tensor",
    "quantized_decomposed.dequantize_per_channel": "quantized_decomposed.dequantize_per_tensor",
}


def base_name(name: str) -> str:
    """``aten.add`` for ``aten.add.Tensor``, ``aten::add.out`` or ``aten.add``."""
    name = name.replace("::", ".")
    parts = name.split(".")
    return ".".join(parts[:2]) if len(parts) > 2 else name


@dataclass(frozen=True)
class CpuCosts:
    per_call: float
    # base name -> (unit, instructions per unit, instructions per output element)
    rows: Dict[str, Tuple[str, float, float]]

    def median_elementwise(self) -> float:
        per = [v for u, v, _ in self.rows.values() if u == "element"]
        return statistics.median(per) if per else 0.0


@lru_cache(maxsize=4)
def load_costs(path: Path = COSTS_FILE) -> CpuCosts:
    try:
        table = json.loads(Path(path).read_text())
        rows = {
            base_name(k): (
                v["unit"],
                float(v["instructions_per_unit"]),
                float(v.get("instructions_per_output", 0.0)),
            )
            for k, v in table["ops"].items()
        }
        return CpuCosts(float(table["per_call_instructions"]), rows)
    except (OSError, KeyError, ValueError, TypeError) as e:
        raise ValueError(f"{path}: not a CPU cost table ({e})") from None


# Kernels whose outputs are all values they write (a split's pieces); other multi-output
# kernels carry companions of their first output (max_pool2d's indices, layer_norm's statistics),
# and their rows are per element of that first output.
ALL_OUTPUTS_ARE_VALUES = frozenset(
    {
        "aten.split_copy",
        "aten.split_with_sizes_copy",
        "aten.split_with_sizes",
        "aten.unbind_copy",
    }
)


def _numel(val, all_outputs: bool = False) -> int:
    """Elements of a tensor; of a multi-output kernel's first output, or of all its outputs."""
    if isinstance(val, (list, tuple)):
        if all_outputs:
            return sum(_numel(v) for v in val)
        return _numel(val[0]) if val else 0
    shape = getattr(val, "shape", None)
    return math.prod(int(d) for d in shape) if shape is not None else 0


def _units(node, unit: str) -> int:
    """Units of work of ``node``: output elements, input elements or multiply-accumulates."""
    name = base_name(op_name(node.target))
    out = _numel(node.meta.get("val"), name in ALL_OUTPUTS_ARE_VALUES)
    if unit == "element":
        return out
    first = node.args[0] if node.args else None
    if unit == "input element":
        return _numel(getattr(first, "meta", {}).get("val"))
    # mac: output elements x the reduction length
    if name == "aten.convolution":
        w = getattr(node.args[1], "meta", {}).get("val")
        return out * (math.prod(int(d) for d in w.shape[1:]) if w is not None else 1)
    if name in ("aten.addmm", "aten.mm", "aten.bmm", "aten.linear"):
        a = node.args[1] if name == "aten.addmm" else node.args[0]
        v = getattr(a, "meta", {}).get("val")
        return out * (int(v.shape[-1]) if v is not None else 1)
    return out


@dataclass
class CpuOp:
    node: str
    op: str
    unit: str
    units: int
    instructions: float
    basis: str  # "measured", "as <op>", "median elementwise"


@dataclass
class EndToEnd:
    clock_hz: Optional[float]
    npu_s: List[Optional[float]] = field(default_factory=list)  # per delegate
    cpu_ops: List[CpuOp] = field(default_factory=list)

    @property
    def cpu_instructions(self) -> float:
        return sum(o.instructions for o in self.cpu_ops)

    @property
    def cpu_s(self) -> Optional[float]:
        return self.cpu_instructions / self.clock_hz if self.clock_hz else None

    @property
    def total_s(self) -> Optional[float]:
        if self.cpu_s is None or any(t is None for t in self.npu_s):
            return None
        return self.cpu_s + sum(self.npu_s)

    def as_dict(self) -> Dict:
        return {
            "clock_hz": self.clock_hz,
            "npu_ms": [None if t is None else t * 1e3 for t in self.npu_s],
            "cpu_ms": None if self.cpu_s is None else self.cpu_s * 1e3,
            "total_ms": None if self.total_s is None else self.total_s * 1e3,
            "cpu_instructions": self.cpu_instructions,
            "cpu_ops": [o.__dict__ for o in self.cpu_ops],
            "assumes": "one instruction per cycle; the CPU at the NPU's core clock",
        }


def cpu_op_cost(node, costs: Optional[CpuCosts] = None) -> Optional[CpuOp]:
    """The estimated cost of one kernel call outside a delegate; None for a view or no call."""
    costs = costs or load_costs()
    if node.op != "call_function" or node.target is CALL_DELEGATE:
        return None
    full = op_name(node.target)
    name = base_name(full)
    if name in FREE_OPS or name.startswith("executorch_prim"):
        return None
    basis = "measured"
    row = costs.rows.get(name)
    if row is None and name in SAME_COST_AS:
        row = costs.rows.get(SAME_COST_AS[name])
        basis = f"as {SAME_COST_AS[name]}"
    if row is None:
        row = ("element", costs.median_elementwise(), 0.0)
        basis = "median elementwise"
    unit, per, per_output = row
    units = _units(node, unit)
    extra = per_output * _units(node, "element") if per_output else 0.0
    return CpuOp(node.name, full, unit, units, per * units + extra + costs.per_call, basis)


def system_clock_hz(spec) -> Optional[float]:
    """The clock the estimate runs at: the NPU core clock of ``spec``'s Vela system config."""
    from ethosu_ng.vela.config import core_clock_hz

    return core_clock_hz(spec.system_config) if spec.system_config else None


def estimate(
    graph_module, npu_seconds: Iterable[Optional[float]], clock_hz: Optional[float]
) -> EndToEnd:
    """``graph_module``: the lowered program's graph (delegate calls and CPU ops);
    ``npu_seconds``: each delegate's Vela ``inference_time`` in graph order."""
    costs = load_costs()
    result = EndToEnd(clock_hz=clock_hz, npu_s=list(npu_seconds))
    for n in graph_module.graph.nodes:
        c = cpu_op_cost(n, costs)
        if c is not None:
            result.cpu_ops.append(c)
    return result
