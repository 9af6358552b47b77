# SPDX-License-Identifier: BSD-3-Clause
"""The per-module profile in the HTML report: an interactive treemap (Apache ECharts).

ECharts is vendored (``vendor/echarts.min.js``, see ``vendor/README.md``) and inlined, so the page
works offline. Rendered with ECharts' SVG renderer: module names end up as SVG text in the page,
which the headless-Chromium test reads back. Click a module to zoom into it, the breadcrumb to go
back; the tooltip gives NPU cycles, share, MACs, data movement and SRAM traffic.
"""

from __future__ import annotations

import html
import json
from importlib import resources
from typing import Any, Dict, List, Sequence

from ethosu_ng.module_profile import TOP_LEVEL_LABEL, UNMAPPED, unmapped_share

CHART_ID = "by-module-treemap"
_SELF = "(own ops)"


def _echarts() -> str:
    return (resources.files("ethosu_ng") / "tools" / "vendor" / "echarts.min.js").read_text("utf-8")


def tree(rows: Sequence[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """Leaf rows -> nested ECharts treemap data (value = NPU cycles). A module with layers of its
    own and submodules gets an ``(own ops)`` child, so every node's value is its children's sum."""
    root: Dict[str, Any] = {"children": {}}

    def node_at(path: List[str]) -> Dict[str, Any]:
        cur = root
        for k, part in enumerate(path):
            cur = cur["children"].setdefault(
                part, {"name": part, "path": ".".join(path[: k + 1]), "children": {}}
            )
        return cur

    for r in rows:
        if r["npu_cycles"] <= 0:
            continue
        if r["module"] == UNMAPPED:
            path = [UNMAPPED]
        elif r["module"] == "":
            path = [TOP_LEVEL_LABEL]
        else:
            path = r["module"].split(".")
        n = node_at(path)
        n["own"] = {
            k: r[k] for k in ("npu_cycles", "macs", "data_movement_cycles", "sram_bytes", "layers")
        }
        n["module_type"] = r.get("module_type")

    def finish(n: Dict[str, Any]) -> Dict[str, Any]:
        kids = [finish(c) for c in n["children"].values()]
        own = n.get("own")
        if own and kids:
            kids.append({"name": _SELF, "path": n["path"], "value": own["npu_cycles"], **own})
            own = None
        out = {"name": n["name"], "path": n["path"]}
        if n.get("module_type"):
            out["module_type"] = n["module_type"]
        if kids:
            out["children"] = kids
            out["value"] = sum(k["value"] for k in kids)
            for key in ("macs", "data_movement_cycles", "sram_bytes", "layers"):
                out[key] = sum(k.get(key, 0) for k in kids)
        else:
            out.update(own or {})
            out["value"] = (own or {}).get("npu_cycles", 0)
        return out

    return [finish(c) for c in root["children"].values()]


_INIT = """
(function () {
  var data = %(data)s, total = %(total)d;
  var el = document.getElementById("%(id)s");
  var chart = echarts.init(el, null, {renderer: "svg"});
  function fmt(n) { return Number(n || 0).toLocaleString("en-US"); }
  chart.setOption({
    animation: false,
    tooltip: {formatter: function (p) {
      var d = p.data || {};
      return "<b>" + (d.path || d.name) + "</b>" + (d.module_type ? "<br>" + d.module_type : "") +
        "<br>NPU cycles " + fmt(d.value) + " (" + (100 * d.value / total).toFixed(1) + "%%)" +
        "<br>MACs " + fmt(d.macs) + "<br>data movement " + fmt(d.data_movement_cycles) +
        " cycles<br>SRAM traffic " + fmt(d.sram_bytes) + " B<br>Vela layers " + fmt(d.layers);
    }},
    series: [{
      type: "treemap", name: "NPU cycles", data: data, leafDepth: 2, roam: false,
      visibleMin: 1, breadcrumb: {show: true},
      label: {show: true, lineHeight: 16, formatter: function (p) {
        return p.name + "\\n" + (100 * p.value / total).toFixed(1) + "%%";
      }},
      upperLabel: {show: true, height: 20, formatter: function (p) {
        return p.name + "  " + (100 * p.value / total).toFixed(1) + "%%";
      }},
      levels: [
        {itemStyle: {borderColor: "#555", borderWidth: 2, gapWidth: 2}},
        {itemStyle: {borderColor: "#999", borderWidth: 1, gapWidth: 1},
         colorSaturation: [0.35, 0.6]},
        {colorSaturation: [0.3, 0.55], itemStyle: {gapWidth: 1}}
      ]
    }]
  });
  el.setAttribute("data-rendered", "1");
})();
"""


def render(rows: Sequence[Dict[str, Any]]) -> str:
    """The report section: the treemap, the unmapped share and the CPU ops by module."""
    data = tree(rows)
    total = sum(r["npu_cycles"] for r in rows)
    # "</" cannot end the script element early inside a JSON string.
    payload = json.dumps(data).replace("</", "<\\/")
    cpu = "".join(
        f"<tr><td>{html.escape(TOP_LEVEL_LABEL if r['module'] == '' else r['module'])}</td>"
        f"<td>{html.escape(c['node'])}</td><td>{html.escape(c['op'])}</td>"
        f"<td>{html.escape(c['reason'])}</td></tr>"
        for r in rows
        for c in r["cpu_ops"]
    )
    return (
        f"<h2>NPU cycles by module</h2>\n<p>{total:,} NPU cycles over {len(rows)} module(s); "
        f"unmapped {100 * unmapped_share(rows):.1f}%. Click a module to zoom in.</p>\n"
        f'<div id="{CHART_ID}" style="width: 960px; height: 560px;"></div>\n'
        + (
            "<h3>CPU ops by module</h3>\n<table><tr><th>module</th><th>node</th><th>op</th>"
            f"<th>why not on the NPU</th></tr>{cpu}</table>\n"
            if cpu
            else ""
        )
        + f"<script>{_echarts()}</script>\n"
        + f"<script>{_INIT % {'data': payload, 'total': max(total, 1), 'id': CHART_ID}}</script>\n"
    )
