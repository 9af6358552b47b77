# SPDX-License-Identifier: BSD-3-Clause
"""Where the NPU cycles go, by ``nn.Module``: Vela's layers mapped back to the PyTorch source.

The chain, by name at every step:

1. Vela layer -> TOSA operator: the debug database's ``source.ext_key`` is the operator's index in
   the TOSA block (``vela_layers``).
2. TOSA operator -> FX node: upstream's serializer names each operator's output tensor after the
   FX node it serialized; its debug hook (``upstream.lower_to_tosa(..., op_sources)``) records
   that name with the node and the node's ``nn_module_stack``.
3. FX node -> module: the innermost entry of ``nn_module_stack`` (``features.3.conv.1``); ``""``
   is the model's own ``forward``.

A TOSA operator no node visitor serialized (a helper-made operator) or whose node lost its module
stack takes the module of the nearest operator in the TOSA graph that has one (consumers first:
a layout transpose belongs to the layer it feeds), marked ``mapped_by: "neighbour"``. A Vela
layer without a TOSA operator is ``"<unmapped>"`` under its Vela name.

Data movement (Vela layers that only move bytes: transposes, reshapes, concatenations, pads, ...,
and stand-alone RESCALE layers, which only change the quantization of bytes on their way) is
counted in ``data_movement_cycles`` of the module that caused it; ``data_movement`` totals it by
kind for a delegate or a program.
"""

from __future__ import annotations

from collections import Counter, defaultdict, deque
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

UNMAPPED = "<unmapped>"
TOP_LEVEL_LABEL = "(top level)"
DATA_MOVEMENT_OPS = frozenset(
    {
        "Transpose",
        "Reshape",
        "Concat",
        "ConcatSliceWrite",
        "SplitSliceRead",
        "Slice",
        "StridedSlice",
        "Pad",
        "Tile",
        "MemoryCopy",
        "Identity",
        "Reverse",
        "Gather",
        "Scatter",
    }
)
RESCALE_KIND = "Rescale"  # a Vela layer made from a TOSA RESCALE (Vela calls it Mul/Add on U55)
_NUMERIC = ("npu_cycles", "cycles", "macs", "sram_bytes", "dram_bytes", "flash_bytes")


def data_movement_kind(vela_op: str, tosa_op: Optional[str]) -> Optional[str]:
    """What a Vela layer that only moves or rescales bytes is (its Vela operator, or
    ``RESCALE_KIND``); None for a layer that computes."""
    if vela_op in DATA_MOVEMENT_OPS:
        return vela_op
    if tosa_op == "RESCALE":
        return RESCALE_KIND
    return None


def data_movement(layers: Iterable[Dict]) -> Dict[str, Any]:
    """NPU cycles of the data-movement layers among attributed ``layers`` (``attribute``), in
    total and by kind (largest first)."""
    by_op: Dict[str, int] = defaultdict(int)
    for layer in layers:
        kind = layer.get("data_movement_kind")
        if kind:
            by_op[kind] += int(layer.get("npu_cycles") or 0)
    return {
        "npu_cycles": sum(by_op.values()),
        "by_op": dict(sorted(by_op.items(), key=lambda kv: (-kv[1], kv[0]))),
    }


def grouped(entries: Iterable[Dict], keys: Sequence[str]) -> List[Dict]:
    """Layer entries grouped by the values of ``keys``: layers and NPU cycles per group, largest
    first (a TOSA operator Vela splits into several layers counts once per layer)."""
    cycles: Counter = Counter()
    count: Counter = Counter()
    for e in entries:
        key = tuple(e[k] for k in keys)
        cycles[key] += e["npu_cycles"]
        count[key] += 1
    return [
        {**dict(zip(keys, k)), "layers": count[k], "npu_cycles": c} for k, c in cycles.most_common()
    ]


def stack_module(stack: Optional[Dict[str, Any]]) -> Optional[Tuple[str, str]]:
    """(dotted module path, module type) of the innermost ``nn_module_stack`` entry."""
    if not stack:
        return None
    path, typ = list(stack.values())[-1]
    return str(path), str(typ)


def node_module(node) -> Optional[Tuple[str, str]]:
    return stack_module(node.meta.get("nn_module_stack"))


def tosa_op_modules(ops: Sequence, op_sources: Iterable[Dict[str, Any]]) -> List[Optional[Dict]]:
    """Per TOSA operator (``tosa_graph.tosa_ops``): its node, module and how it was found."""
    by_output = {s["tosa_output"]: s for s in op_sources if s.get("tosa_output")}
    direct: List[Optional[Dict]] = []
    for op in ops:
        src = by_output.get(op.outputs[0]) if op.outputs else None
        mod = stack_module(src["nn_module_stack"]) if src else None
        direct.append(
            None
            if mod is None
            else {"node": src["node"], "module": mod[0], "module_type": mod[1], "mapped_by": "node"}
        )
    producers: Dict[str, int] = {}
    consumers: Dict[str, List[int]] = defaultdict(list)
    for k, op in enumerate(ops):
        for t in op.outputs:
            producers[t] = k
        for t in op.inputs:
            consumers[t].append(k)

    def neighbour(k: int) -> Optional[Dict]:
        seen, queue = {k}, deque([k])
        while queue:
            j = queue.popleft()
            nxt = [c for t in ops[j].outputs for c in consumers.get(t, ())]
            nxt += [producers[t] for t in ops[j].inputs if t in producers]
            for n in nxt:
                if n in seen or ops[n].op in ("CONST", "CONST_SHAPE"):
                    continue
                if direct[n] is not None:
                    src = by_output.get(ops[k].outputs[0]) if ops[k].outputs else None
                    return {
                        **direct[n],
                        "node": src["node"] if src else direct[n]["node"],
                        "mapped_by": "neighbour",
                    }
                seen.add(n)
                queue.append(n)
        return None

    return [d if d is not None else neighbour(k) for k, d in enumerate(direct)]


def attribute(layers: Sequence, ops: Sequence, op_sources: Iterable[Dict[str, Any]]) -> List[Dict]:
    """Vela layers (``vela_layers.VelaLayer``) with their TOSA operator, node and module."""
    mods = tosa_op_modules(ops, op_sources)
    out = []
    for layer in layers:
        row = layer.to_dict()
        k = layer.tosa_index
        info = mods[k] if k is not None and 0 <= k < len(ops) else None
        row["tosa_op"] = ops[k].op if k is not None and 0 <= k < len(ops) else None
        row["data_movement_kind"] = data_movement_kind(layer.vela_op, row["tosa_op"])
        row["data_movement"] = row["data_movement_kind"] is not None
        if info is None:
            row.update(node=None, module=UNMAPPED, module_type=None, mapped_by=None)
        else:
            row.update(info)
        out.append(row)
    return out


def by_module(delegates: Sequence[Tuple[str, Sequence[Dict]]], cpu_ops: Sequence[Dict]) -> List:
    """Leaf rows, one per module that has NPU layers or CPU ops (the tree is in the dotted paths).

    ``delegates``: (delegate name, attributed layers); ``cpu_ops``: report entries with
    ``module``. Rows are sorted by NPU cycles, largest first."""
    rows: Dict[str, Dict[str, Any]] = {}

    def row(module: str, module_type: Optional[str]) -> Dict[str, Any]:
        if module not in rows:
            rows[module] = {
                "module": module,
                "module_type": module_type,
                **{k: 0 for k in _NUMERIC},
                "data_movement_cycles": 0,
                "layers": 0,
                "delegates": [],
                "cpu_ops": [],
            }
        return rows[module]

    for name, layers in delegates:
        for layer in layers:
            r = row(layer["module"], layer.get("module_type"))
            for k in _NUMERIC:
                r[k] += int(layer.get(k) or 0)
            if layer.get("data_movement"):
                r["data_movement_cycles"] += int(layer.get("npu_cycles") or 0)
            r["layers"] += 1
            if name not in r["delegates"]:
                r["delegates"].append(name)
            if layer["module"] == UNMAPPED:
                r.setdefault("vela_layers", []).append(f"{name}:{layer['name']}")
    for c in cpu_ops:
        module = c.get("module")
        r = row(UNMAPPED if module is None else module, c.get("module_type"))
        r["cpu_ops"].append({"node": c["node"], "op": c["op"], "reason": c["reason"]})
    return sorted(rows.values(), key=lambda r: (-r["npu_cycles"], -len(r["cpu_ops"]), r["module"]))


def unmapped_share(rows: Sequence[Dict]) -> float:
    """Fraction of all NPU cycles that could not be given a module."""
    total = sum(r["npu_cycles"] for r in rows)
    lost = sum(r["npu_cycles"] for r in rows if r["module"] == UNMAPPED)
    return lost / total if total else 0.0


def at_depth(module: str, depth: Optional[int]) -> str:
    if depth is None or module == UNMAPPED or not module:
        return module
    return ".".join(module.split(".")[:depth])


def aggregate(rows: Sequence[Dict], depth: Optional[int]) -> List[Dict]:
    """Rows summed over module-path prefixes of ``depth`` components (None: leaves)."""
    out: Dict[str, Dict[str, Any]] = {}
    for r in rows:
        key = at_depth(r["module"], depth)
        a = out.setdefault(
            key,
            {
                "module": key,
                **{k: 0 for k in _NUMERIC},
                "data_movement_cycles": 0,
                "layers": 0,
                "cpu_ops": [],
            },
        )
        for k in (*_NUMERIC, "data_movement_cycles", "layers"):
            a[k] += r[k]
        a["cpu_ops"] += r["cpu_ops"]
    return sorted(out.values(), key=lambda r: (-r["npu_cycles"], -len(r["cpu_ops"]), r["module"]))


def label(module: str) -> str:
    return TOP_LEVEL_LABEL if module == "" else module


def format_table(rows: Sequence[Dict], depth: Optional[int] = None, top: int = 20) -> str:
    """Top-``top`` modules by NPU cycles, with shares of the total."""
    agg = aggregate(rows, depth)
    total = sum(r["npu_cycles"] for r in agg) or 1
    macs = sum(r["macs"] for r in agg) or 1
    head = (
        f"{'module':<44}{'NPU cycles':>14}{'%':>7}{'cum %':>7}{'MACs %':>8}"
        f"{'data mv %':>10}{'SRAM rw KiB':>12}{'CPU ops':>8}"
    )
    lines = [f"by module (depth {'leaf' if depth is None else depth}, top {top}):", head]
    cum = 0
    for r in agg[:top]:
        cum += r["npu_cycles"]
        dm = 100 * r["data_movement_cycles"] / r["npu_cycles"] if r["npu_cycles"] else 0.0
        lines.append(
            f"{label(r['module'])[:43]:<44}{r['npu_cycles']:>14,}"
            f"{100 * r['npu_cycles'] / total:>6.1f}%{100 * cum / total:>6.1f}%"
            f"{100 * r['macs'] / macs:>7.1f}%{dm:>9.1f}%{r['sram_bytes'] / 1024:>12.1f}"
            f"{len(r['cpu_ops']):>8}"
        )
    rest = agg[top:]
    if rest:
        lines.append(
            f"{f'... {len(rest)} more':<44}{sum(r['npu_cycles'] for r in rest):>14,}"
            f"{100 * sum(r['npu_cycles'] for r in rest) / total:>6.1f}%"
        )
    lines.append(
        f"total {sum(r['npu_cycles'] for r in agg):,} NPU cycles; unmapped "
        f"{100 * unmapped_share(rows):.1f}%"
    )
    cpu = [(r["module"], c) for r in rows for c in r["cpu_ops"]]
    if cpu:
        lines.append("CPU ops by module:")
        for m, c in cpu:
            lines.append(f"  {label(m)[:40]:<42}{c['op']:<36}{c['reason']}")
    return "\n".join(lines)
