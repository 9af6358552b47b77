# SPDX-License-Identifier: BSD-3-Clause
"""Compile report: per delegate ops, typed IO and Vela's estimates; CPU ops with reasons; totals.

Built once at compile time (``build_report``) and written as JSON next to the .pte; ``from_pte``
recovers what the .pte itself carries (IO tables, sizes) when the JSON is not at hand.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional

from ethosu_ng import cost_model, module_profile
from ethosu_ng.adapters import exir
from ethosu_ng.blob import DelegateBlob
from ethosu_ng.compile_spec import BACKEND_ID
from ethosu_ng.io_layout import (
    TRANSPOSE_SHARE_WORTH_NAMING,
    io_transposes,
    layout_of,
    program_dim_orders,
)
from ethosu_ng.io_quantization import io_quantization
from ethosu_ng.ops import CALL_DELEGATE, is_compute, op_name
from ethosu_ng.tensor_spec import TensorSpec
from ethosu_ng.tosa_optimize import copy_report, rescale_report

COPY_GROUPS_SHOWN = 8  # the text report's remaining-copy groups, largest first


def spec_dict(s: TensorSpec) -> Dict[str, Any]:
    return {
        "dtype": str(s.dtype).replace("torch.", ""),
        "shape": list(s.shape),
        "dim_order": list(s.dim_order),
        "layout": layout_of(s.dim_order),
        "scale": s.scale,
        "zero_point": s.zero_point,
    }


def _num(summary: Dict[str, str], key: str) -> Optional[float]:
    try:
        return float(summary[key])
    except (KeyError, ValueError, TypeError):
        return None


def _verdict(info, which: str = "npu_verification") -> Optional[Dict[str, Any]]:
    v = getattr(info, which, None)
    return v.as_dict() if v is not None else None


def vela_estimates(summary: Dict[str, str]) -> Dict[str, Optional[float]]:
    """The figures a user compares across targets, from Vela's per-network summary CSV."""
    t = _num(summary, "inference_time")
    return {
        "npu_cycles": _num(summary, "cycles_npu"),
        "total_cycles": _num(summary, "cycles_total"),
        "inference_ms": None if t is None else t * 1e3,
        "clock_hz": _num(summary, "core_clock"),
        "sram_kib": _num(summary, "sram_memory_used"),
        "dram_kib": _num(summary, "dram_memory_used"),
        "offchip_flash_kib": _num(summary, "off_chip_flash_memory_used"),
        "macs": _num(summary, "nn_macs"),
    }


def build_report(
    edge, partitioner, pte: bytes, spec, model: str = "", stages=None
) -> Dict[str, Any]:
    program = edge.exported_program()
    gm = program.graph_module
    delegates = []
    profiled = []
    for n in gm.graph.nodes:
        if n.op != "call_function" or n.target is not CALL_DELEGATE:
            continue
        lowered = getattr(gm, n.args[0].target)
        blob = DelegateBlob.from_bytes(lowered.processed_bytes)
        info = (lowered.meta or {}).get("_delegate_info_meta")
        profiled.append((n.args[0].target, getattr(info, "layers", None) or []))
        ops = [
            op_name(m.target)
            for m in lowered.original_module.graph.nodes
            if m.op == "call_function"
        ]
        delegates.append(
            {
                "name": n.args[0].target,
                "ops": sorted(set(o for o in ops if is_compute(o))),
                "n_compute_ops": sum(1 for o in ops if is_compute(o)),
                "inputs": [spec_dict(s) for s in blob.inputs],
                "outputs": [spec_dict(s) for s in blob.outputs],
                "blob_bytes": len(lowered.processed_bytes),
                "weights_bytes": len(blob.weights),
                "command_stream_bytes": len(blob.command_stream),
                "scratch_bytes": blob.scratch_size,
                "vela": vela_estimates(getattr(info, "vela_summary", {}) or {}),
                # Vela's layers with their TOSA operator, FX node and module (module_profile).
                "layers": getattr(info, "layers", None) or [],
                "data_movement": module_profile.data_movement(getattr(info, "layers", None) or []),
                # Each standalone RESCALE layer: its TOSA pattern and what blocked Vela's fold
                # (tosa_optimize/rescale_report.py); needs the TOSA graph (embed_tosa) without
                # control flow.
                "standalone_rescales": None
                if blob.tosa is None
                else rescale_report.standalone_rescales(
                    blob.tosa, getattr(info, "layers", None) or [], spec.target
                ),
                # Each copy Vela runs as a layer of its own and why it remains
                # (tosa_optimize/copy_report.py).
                "copies": getattr(info, "copies", None),
                # compiler.verify_npu: NPU model vs TOSA on this stream at compile time.
                "npu_verification": _verdict(info),
                # compiler.verify_lowering: TOSA vs the quantized partition, exactly evaluated.
                "lowering_verification": _verdict(info, "lowering_verification"),
            }
        )
    cpu = []
    rep = partitioner.report
    for n in gm.graph.nodes:
        if n.op == "call_function" and n.target is not CALL_DELEGATE:
            name = op_name(n.target)
            if is_compute(name):
                mod = module_profile.node_module(n)
                cpu.append(
                    {
                        "node": n.name,
                        "op": name,
                        "reason": rep.cpu_reasons.get(n.name, "not supported on the NPU"),
                        "module": mod[0] if mod else None,
                        "module_type": mod[1] if mod else None,
                    }
                )
    npu_ops = sum(d["n_compute_ops"] for d in delegates)
    ioq = io_quantization(edge)
    in_orders, out_orders = program_dim_orders(edge)

    def io_entry(p, order):
        return {
            "name": p.name,
            "dtype": str(p.dtype).replace("torch.", ""),
            "shape": list(p.shape),
            "dim_order": list(order),
            "layout": layout_of(order),
            "scale": p.scale,
            "zero_point": p.zero_point,
        }

    io = {
        "inputs": [io_entry(p, o) for p, (_, o) in zip(ioq.inputs, in_orders)],
        "outputs": [io_entry(p, o) for p, (_, o) in zip(ioq.outputs, out_orders)],
    }
    cycles = [d["vela"]["npu_cycles"] for d in delegates if d["vela"]["npu_cycles"] is not None]
    moved = module_profile.data_movement(layer for d in delegates for layer in d["layers"])
    ms = [d["vela"]["inference_ms"] for d in delegates]
    clocks = [d["vela"]["clock_hz"] for d in delegates if d["vela"]["clock_hz"]]
    end_to_end = cost_model.estimate(
        gm,
        [None if t is None else t / 1e3 for t in ms],
        clocks[0] if clocks else cost_model.system_clock_hz(spec),
    )
    return {
        "model": model,
        "target": spec.target,
        "system_config": spec.system_config,
        "memory_mode": spec.memory_mode,
        "stages_s": dict(stages or {}),
        "delegates": delegates,
        "cpu_ops": cpu,
        # Ops the NPU compiler failed on, moved to the CPU by the partitioner (culprit_search).
        "compiler_fallback": [
            {"node": n, "op": rep.cpu_targets.get(n, "?"), "reason": why}
            for n, why in getattr(rep, "compiler_fallback", {}).items()
        ],
        "program_io": io,
        # Leaf rows of the per-module profile (module_profile); the tree is in the dotted paths.
        "by_module": module_profile.by_module(profiled, cpu),
        # The whole program on a Cortex-M55 + Ethos-U at the system config's clock (cost_model).
        "end_to_end": end_to_end.as_dict(),
        "totals": {
            "partitions": len(delegates),
            "npu_compute_ops": npu_ops,
            "cpu_compute_ops": len(cpu),
            "npu_op_share": npu_ops / max(1, npu_ops + len(cpu)),
            "npu_cycles": sum(cycles) if cycles else None,
            # NPU cycles of layers that only move or rescale bytes, by Vela operator.
            "data_movement_cycles": moved["npu_cycles"],
            "data_movement_by_op": moved["by_op"],
            "sram_kib_max": max((d["vela"]["sram_kib"] or 0 for d in delegates), default=0),
            "pte_bytes": len(pte),
        },
    }


def from_pte(pte: bytes) -> Dict[str, Any]:
    """What a .pte alone tells: each of our delegates' IO table and section sizes."""
    delegates = []
    for k, (backend, data) in enumerate(exir.pte_delegate_payloads(pte)):
        if backend != BACKEND_ID:
            continue
        blob = DelegateBlob.from_bytes(data)
        delegates.append(
            {
                "name": f"delegate_{k}",
                "ops": [],
                "n_compute_ops": None,
                "inputs": [spec_dict(s) for s in blob.inputs],
                "outputs": [spec_dict(s) for s in blob.outputs],
                "blob_bytes": len(data),
                "weights_bytes": len(blob.weights),
                "command_stream_bytes": len(blob.command_stream),
                "scratch_bytes": blob.scratch_size,
                "vela": vela_estimates({}),
            }
        )
    return {
        "model": "",
        "target": None,
        "delegates": delegates,
        "cpu_ops": [],
        "stages_s": {},
        "totals": {"partitions": len(delegates), "pte_bytes": len(pte)},
    }


def _fmt(v, unit="", digits=0) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:,.{digits}f}{unit}"
    return f"{v:,}{unit}"


def _io_text(specs: List[Dict[str, Any]]) -> str:
    parts = []
    for s in specs:
        q = f" s={s['scale']:.4g} zp={s['zero_point']}" if s.get("scale") is not None else ""
        lay = f" {s['layout']}" if s.get("layout") and len(s["shape"]) == 4 else ""
        parts.append(f"{s['dtype']}{s['shape']}{lay}{q}")
    return ", ".join(parts)


def transpose_notes(r: Dict[str, Any]) -> List[str]:
    """A line per delegate whose NCHW program IO costs the NPU a transpose worth naming."""
    lines = []
    for d in r.get("delegates", []):
        total = d.get("vela", {}).get("npu_cycles")
        if not total or not d.get("layers"):
            continue
        cost = io_transposes(d)
        for what, option in (("input", "--input-layout nhwc"), ("output", "--output-layout nhwc")):
            if cost[what] >= TRANSPOSE_SHARE_WORTH_NAMING * total:
                lines.append(
                    f"{d['name']}: transposing its NCHW {what} costs {cost[what]:,} NPU cycles "
                    f"({100 * cost[what] / total:.1f}% of {total:,.0f}); {option} "
                    f"({what}_layout='nhwc') {'takes' if what == 'input' else 'gives'} the "
                    f"{what} in NHWC and removes it"
                )
    return lines


def _verdict_text(v: Optional[Dict[str, Any]]) -> str:
    if not v:
        return "not verified (verify_npu off)"
    if v["status"] == "skipped":
        return f"skipped: {v['reason']}"
    text = (
        f"{v['status']}: {v['samples']} input sample(s), max difference {v['max_diff']}, "
        f"{v['seconds']:.2f} s (TOSA reference {v.get('reference_seconds', 0):.2f} s beside Vela"
        + (f", by {v['reference_engine']}" if v.get("reference_engine") else "")
        + ")"
    )
    if v.get("retried_with"):
        text += f" (Vela {' '.join(v['retried_with'])})"
    return text


def _lowering_text(v: Optional[Dict[str, Any]]) -> str:
    if not v:
        return "not verified (verify_lowering off)"
    if v["status"] == "skipped":
        return f"skipped: {v['reason']}"
    return (
        f"{v['status']}: {v['samples']} input sample(s), max {v['max_lsb']} LSB, "
        f"{v['seconds']:.2f} s (exact evaluation {v.get('exact_seconds', 0):.2f} s beside Vela)"
    )


def format_text(r: Dict[str, Any]) -> str:
    lines = [
        f"model {r.get('model') or '?'}  target {r.get('target') or '?'}  "
        f"({r.get('system_config') or '-'}, {r.get('memory_mode') or '-'})"
    ]
    if r.get("stages_s"):
        lines.append("stages: " + ", ".join(f"{k} {v:.1f}s" for k, v in r["stages_s"].items()))
    lines.append("")
    lines.append(
        f"{'delegate':<18}{'ops':>6}{'NPU cycles':>14}{'time ms':>10}{'SRAM KiB':>10}"
        f"{'flash KiB':>11}{'MACs':>14}  IO"
    )
    for d in r["delegates"]:
        v = d["vela"]
        lines.append(
            f"{d['name']:<18}{_fmt(d['n_compute_ops']):>6}{_fmt(v['npu_cycles']):>14}"
            f"{_fmt(v['inference_ms'], digits=3):>10}{_fmt(v['sram_kib'], digits=1):>10}"
            f"{_fmt(v['offchip_flash_kib'], digits=1):>11}{_fmt(v['macs']):>14}"
            f"  in [{_io_text(d['inputs'])}] out [{_io_text(d['outputs'])}]"
        )
    verdicts = [
        (d["name"], d.get("lowering_verification"), d.get("npu_verification"))
        for d in r["delegates"]
    ]
    if any(lv or nv for _, lv, nv in verdicts):
        lines.append("")
        lines.append(
            "verified compile (TOSA vs the quantized partition; NPU model vs TOSA on the stream):"
        )
        for name, lv, nv in verdicts:
            lines.append(f"  {name:<16} lowering: {_lowering_text(lv)}")
            lines.append(f"  {'':<16} stream:   {_verdict_text(nv)}")
    if r.get("program_io"):
        lines.append("")
        for what in ("inputs", "outputs"):
            for k, p in enumerate(r["program_io"][what]):
                lines.append(f"program {what[:-1]} {k} {p['name']}: {_io_text([p])}")
    notes = transpose_notes(r)
    if notes:
        lines.append("")
        lines += notes
    if r["cpu_ops"]:
        lines.append("")
        lines.append("on the CPU:")
        for c in r["cpu_ops"]:
            lines.append(f"  {c['node']:<40} {c['op']:<36} {c['reason']}")
    if r.get("compiler_fallback"):
        lines.append("")
        lines.append(
            f"moved to the CPU because the NPU compiler failed or its stream failed the verified "
            f"compile: "
            f"{len(r['compiler_fallback'])} op(s) (reasons above)"
        )
    if r.get("cpu_kernels") is not None:
        lines.append("")
        lines.append(
            "CPU kernels to link: " + (", ".join(r["cpu_kernels"]) or "none (all on the NPU)")
        )
        if r.get("missing_host_kernels"):
            lines.append(
                "  not in ExecuTorch's portable/quantized library: "
                + ", ".join(r["missing_host_kernels"])
            )
    t = r["totals"]
    if t.get("data_movement_by_op") is not None and t.get("npu_cycles"):
        lines.append("")
        kinds = ", ".join(f"{k} {v:,}" for k, v in t["data_movement_by_op"].items()) or "-"
        lines.append(
            f"data movement {t['data_movement_cycles']:,} NPU cycles "
            f"({100 * t['data_movement_cycles'] / t['npu_cycles']:.1f}% of NPU): {kinds}"
        )
    copies = [e for d in r["delegates"] for e in d.get("copies") or []]
    if copies:
        groups = copy_report.summarize(copies)
        lines.append(f"copies that remain ({len(copies)} layer(s); why each does):")
        for g in groups[:COPY_GROUPS_SHOWN]:
            lines.append(
                f"  {g['npu_cycles']:,} cycles, {g['layers']} {g['vela_op']} layer(s): "
                f"{g['reason']}"
            )
        if len(groups) > COPY_GROUPS_SHOWN:
            rest = groups[COPY_GROUPS_SHOWN:]
            lines.append(
                f"  {sum(g['npu_cycles'] for g in rest):,} cycles in "
                f"{sum(g['layers'] for g in rest)} more layer(s) (report.json: copies)"
            )
    rescales = [e for d in r["delegates"] for e in d.get("standalone_rescales") or []]
    if rescales:
        lines.append("standalone RESCALE layers (pattern; what blocked the fold):")
        for g in rescale_report.summarize(rescales):
            lines.append(
                f"  {g['npu_cycles']:,} cycles, {g['layers']} layer(s): {g['pattern']}; "
                f"{g['blocker']}"
            )
    e2e = r.get("end_to_end")
    if e2e and e2e.get("total_ms") is not None:
        lines.append("")
        npu = sum(x for x in e2e["npu_ms"] if x is not None)
        lines.append(
            f"end to end (estimate, {e2e['clock_hz'] / 1e6:,.0f} MHz, {e2e['assumes']}): "
            f"{e2e['total_ms']:.3f} ms = NPU {npu:.3f} ms + CPU {e2e['cpu_ms']:.3f} ms "
            f"({len(e2e['cpu_ops'])} kernel call(s), {e2e['cpu_instructions']:,.0f} instructions)"
        )
        top = sorted(e2e["cpu_ops"], key=lambda o: -o["instructions"])[:5]
        for o in top:
            lines.append(
                f"  {o['node']:<40} {o['op']:<36} {o['instructions']:>12,.0f} instr "
                f"({o['units']:,} {o['unit']}s, {o['basis']})"
            )
    lines.append("")
    share = t.get("npu_op_share")
    lines.append(
        f"partitions {t['partitions']}  NPU op share "
        f"{'-' if share is None else f'{100 * share:.1f}%'}  .pte {_fmt(t['pte_bytes'])} B"
    )
    if r.get("memory_plan"):
        from ethosu_ng.memory_plan import format_text as plan_text

        lines += ["", plan_text(r["memory_plan"])]
    return "\n".join(lines)
