# SPDX-License-Identifier: BSD-3-Clause
"""A self-contained HTML page for a compile report: cycles per partition and the NPU/CPU split.

No external assets: inline SVG and CSS; the per-module treemap (``html_profile``, when the report
has ``by_module``) inlines its vendored charting library, so the page renders anywhere, offline
(checked in headless Chromium by the tests)."""

from __future__ import annotations

import html
from typing import Any, Dict

from ethosu_ng.tools import html_profile


def _bar_chart(delegates) -> str:
    values = [(d["name"], d["vela"].get("npu_cycles") or 0) for d in delegates]
    if not values:
        return "<p>No delegates.</p>"
    top = max(v for _, v in values) or 1
    width, bar_h, gap, label_w = 640, 22, 6, 150
    height = len(values) * (bar_h + gap) + gap
    rows = []
    for k, (name, v) in enumerate(values):
        y = gap + k * (bar_h + gap)
        w = max(1, int((width - label_w - 90) * v / top))
        rows.append(
            f'<text x="{label_w - 6}" y="{y + 15}" text-anchor="end">{html.escape(name)}</text>'
            f'<rect class="npu" x="{label_w}" y="{y}" width="{w}" height="{bar_h}"/>'
            f'<text x="{label_w + w + 6}" y="{y + 15}">{int(v):,}</text>'
        )
    return (
        f'<svg id="cycles" width="{width}" height="{height}" role="img" '
        f'aria-label="NPU cycles per partition">{"".join(rows)}</svg>'
    )


def _split_bar(npu: int, cpu: int) -> str:
    total = max(1, npu + cpu)
    w = 640
    npu_w = int(w * npu / total)
    return (
        f'<svg id="split" width="{w}" height="30" role="img" aria-label="NPU/CPU op split">'
        f'<rect class="npu" x="0" y="0" width="{npu_w}" height="30"/>'
        f'<rect class="cpu" x="{npu_w}" y="0" width="{w - npu_w}" height="30"/></svg>'
        f"<p>{npu} compute ops on the NPU, {cpu} on the CPU ({100 * npu / total:.1f}% NPU)</p>"
    )


def render(r: Dict[str, Any]) -> str:
    t = r["totals"]
    rows = []
    for d in r["delegates"]:
        v = d["vela"]

        def io(specs):
            return "<br>".join(
                html.escape(
                    f"{s['dtype']}{s['shape']}"
                    + (f" {s['layout']}" if s.get("layout") and len(s["shape"]) == 4 else "")
                    + (
                        f" s={s['scale']:.4g} zp={s['zero_point']}"
                        if s.get("scale") is not None
                        else ""
                    )
                )
                for s in specs
            )

        rows.append(
            "<tr>"
            + "".join(
                f"<td>{c}</td>"
                for c in (
                    html.escape(d["name"]),
                    d.get("n_compute_ops") or "-",
                    f"{int(v['npu_cycles']):,}" if v.get("npu_cycles") else "-",
                    f"{v['inference_ms']:.3f}" if v.get("inference_ms") else "-",
                    f"{v['sram_kib']:.1f}" if v.get("sram_kib") is not None else "-",
                    io(d["inputs"]),
                    io(d["outputs"]),
                )
            )
            + "</tr>"
        )
    cpu_rows = "".join(
        f"<tr><td>{html.escape(c['node'])}</td><td>{html.escape(c['op'])}</td>"
        f"<td>{html.escape(c['reason'])}</td></tr>"
        for c in r.get("cpu_ops", [])
    )
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>ethosu_ng report: {html.escape(r.get("model") or "")}</title>
<style>
body {{ font-family: sans-serif; margin: 2em; color: #222; }}
table {{ border-collapse: collapse; margin: 1em 0; }}
td, th {{ border: 1px solid #ccc; padding: 4px 8px; font-size: 13px; vertical-align: top; }}
svg text {{ font-size: 12px; font-family: sans-serif; }}
rect.npu {{ fill: #2a7ab0; }} rect.cpu {{ fill: #d9822b; }}
</style></head><body>
<h1>{html.escape(r.get("model") or "model")} on {html.escape(str(r.get("target")))}</h1>
<p>{t["partitions"]} partition(s), .pte {t["pte_bytes"]:,} bytes</p>
<h2>NPU/CPU split</h2>
{_split_bar(t.get("npu_compute_ops") or 0, t.get("cpu_compute_ops") or 0)}
<h2>NPU cycles per partition</h2>
{_bar_chart(r["delegates"])}
{html_profile.render(r["by_module"]) if r.get("by_module") else ""}
<h2>Delegates</h2>
<table><tr><th>delegate</th><th>ops</th><th>NPU cycles</th><th>ms</th><th>SRAM KiB</th>
<th>inputs</th><th>outputs</th></tr>
{"".join(rows)}</table>
<h2>On the CPU</h2>
<table><tr><th>node</th><th>op</th><th>why not on the NPU</th></tr>{cpu_rows}</table>
</body></html>
"""
