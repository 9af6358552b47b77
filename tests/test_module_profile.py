# SPDX-License-Identifier: BSD-3-Clause
"""The per-module profile accounts for every Vela cycle, by the modules the model really has."""

import os
import re
import shutil
import subprocess

import pytest
import torch.nn as nn
from conftest import calibration_batches
from models import AttentionBlock, SmallCNN

from ethosu_ng import EthosUNGCompileSpec
from ethosu_ng.export import lower, quantize
from ethosu_ng.module_profile import (
    UNMAPPED,
    aggregate,
    attribute,
    by_module,
    data_movement,
    format_table,
    tosa_op_modules,
    unmapped_share,
)
from ethosu_ng.tools.cli import main
from ethosu_ng.tools.report import build_report
from ethosu_ng.tosa_graph import TosaOpInfo
from ethosu_ng.vela.layers import VelaLayer


class TwoBlocks(nn.Module):
    """Nested modules (blocks.0.conv, ...) and a CPU op between them."""

    def __init__(self):
        super().__init__()
        self.blocks = nn.Sequential(
            *[nn.Sequential(nn.Conv2d(8, 8, 3, padding=1), nn.ReLU()) for _ in range(2)]
        )
        self.stem = nn.Conv2d(3, 8, 1)

    def forward(self, x):
        return self.blocks(self.stem(x)).flatten(1)

    @staticmethod
    def example():
        import torch

        return (torch.randn(1, 3, 8, 8),)


CASES = {
    "small_cnn_u55": (SmallCNN, "ethos-u55-128", ["aten.add.Tensor"]),
    "attention_u85": (AttentionBlock, "ethos-u85-256", []),
    "two_blocks_u55": (TwoBlocks, "ethos-u55-128", []),
}


@pytest.fixture(scope="module", params=sorted(CASES))
def lowered(request):
    cls, target, cpu_ops = CASES[request.param]
    spec = EthosUNGCompileSpec(target)
    model, example = cls().eval(), cls.example()
    q = quantize(model, example, spec, calibration=calibration_batches(example, n=1))
    edge, part = lower(q, example, spec, cpu_ops=cpu_ops)
    return model, build_report(edge, part, b"", spec)


def test_module_sums_equal_velas_summary_and_nothing_is_unmapped(lowered):
    model, rep = lowered
    rows = rep["by_module"]
    assert rep["delegates"] and rows
    for key, vela_key in (
        ("npu_cycles", "npu_cycles"),
        ("macs", "macs"),
        ("cycles", "total_cycles"),
    ):
        want = sum(d["vela"][vela_key] for d in rep["delegates"])
        assert sum(r[key] for r in rows) == want > 0, key
    assert unmapped_share(rows) == 0.0
    assert all(r["module"] != UNMAPPED for r in rows)
    # Every module named is one the model has ("" is its own forward).
    names = {n for n, _ in model.named_modules()}
    assert {r["module"] for r in rows} <= names
    assert any(r["module"] and r["npu_cycles"] > 0 for r in rows)


def test_cpu_ops_sit_in_the_tree_with_their_reason(lowered):
    _, rep = lowered
    listed = [c for r in rep["by_module"] for c in r["cpu_ops"]]
    assert len(listed) == len(rep["cpu_ops"])
    assert sorted(c["node"] for c in listed) == sorted(c["node"] for c in rep["cpu_ops"])
    assert all(c["reason"] for c in listed)


@pytest.mark.parametrize("lowered", ["two_blocks_u55"], indirect=True)
def test_nested_modules_aggregate_by_depth(lowered):
    model, rep = lowered
    leaves = {r["module"] for r in rep["by_module"] if r["npu_cycles"]}
    assert {"stem", "blocks.0.0", "blocks.1.0"} <= leaves
    top = {r["module"]: r for r in aggregate(rep["by_module"], 1)}
    assert top["blocks"]["npu_cycles"] == sum(
        r["npu_cycles"] for r in rep["by_module"] if r["module"].startswith("blocks.")
    )


def test_vela_layers_point_at_the_tosa_operator_they_compute(lowered):
    """ext_key is the TOSA operator index: a conv layer's source is a TOSA conv, and so on."""
    _, rep = lowered
    kinds = {
        "Conv2D": {"CONV2D"},
        "DepthwiseConv2D": {"DEPTHWISE_CONV2D"},
        "FullyConnected": {"CONV2D", "MATMUL"},
        "MatMul": {"MATMUL"},
        "Add": {"ADD"},
        "Mul": {"MUL"},
    }
    checked = 0
    for d in rep["delegates"]:
        for layer in d.get("layers", []):
            if layer["vela_op"] in kinds:
                assert layer["tosa_op"] in kinds[layer["vela_op"]], layer
                checked += 1
    assert checked > 0


# ------------------------------------------------------------------ unit level


def _ops():
    # quantize -> transpose (helper-made, no debug event) -> conv -> rescale -> output
    return [
        TosaOpInfo("CONST", (), ("w",)),
        TosaOpInfo("TRANSPOSE", ("x",), ("x_nhwc",)),
        TosaOpInfo("CONV2D", ("x_nhwc", "w"), ("conv",)),
        TosaOpInfo("RESCALE", ("conv",), ("out",)),
    ]


SOURCES = [
    {
        "tosa_output": "conv",
        "node": "tosa_conv2d_default",
        "target": "tosa.CONV2D.default",
        "nn_module_stack": {"a": ("", "M"), "b": ("features.3.conv", "Conv2d")},
    },
    {
        "tosa_output": "out",
        "node": "tosa_rescale_default",
        "target": "tosa.RESCALE.default",
        "nn_module_stack": {"a": ("", "M"), "b": ("features.3.act", "ReLU")},
    },
]


def test_a_helper_made_operator_takes_its_consumers_module():
    mods = tosa_op_modules(_ops(), SOURCES)
    assert mods[2]["module"] == "features.3.conv" and mods[2]["mapped_by"] == "node"
    assert mods[1]["module"] == "features.3.conv" and mods[1]["mapped_by"] == "neighbour"
    assert mods[3]["module"] == "features.3.act"


def _layer(op, idx, npu):
    return VelaLayer(op, f"v{idx}", idx, npu + 10, npu, 100 if op == "Conv2D" else 0, 64)


def test_unmapped_layers_are_listed_with_their_share():
    layers = [_layer("Transpose", 1, 30), _layer("Conv2D", 2, 60), _layer("Conv2D", None, 10)]
    rows = by_module([("d0", attribute(layers, _ops(), SOURCES))], [])
    by = {r["module"]: r for r in rows}
    assert by["features.3.conv"]["npu_cycles"] == 90
    assert by["features.3.conv"]["data_movement_cycles"] == 30
    assert by[UNMAPPED]["vela_layers"] == ["d0:vNone"]
    assert unmapped_share(rows) == pytest.approx(0.1)
    text = format_table(rows, depth=2)
    assert re.search(r"features\.3\s+90\s+90\.0%", text)
    assert "unmapped 10.0%" in text


def test_data_movement_is_totalled_by_kind():
    ops = _ops() + [TosaOpInfo("RESCALE", ("x",), ("r",)), TosaOpInfo("CONV2D", ("r",), ("c",))]
    n = len(_ops())
    layers = [
        _layer("Transpose", 1, 30),
        _layer("MemoryCopy", 1, 5),
        _layer("Mul", n, 7),  # U55 runs a RESCALE as a Mul: still only a rescale
        _layer("Conv2D", n + 1, 60),
        _layer("Transpose", 2, 4),
    ]
    moved = data_movement(attribute(layers, ops, SOURCES))
    assert moved == {"npu_cycles": 46, "by_op": {"Transpose": 34, "Rescale": 7, "MemoryCopy": 5}}


@pytest.fixture(scope="module")
def tiny_pte(tmp_path_factory):
    factory = os.path.join(os.path.dirname(__file__), "data", "tiny_factory.py")
    pte = str(tmp_path_factory.mktemp("bymod") / "t.pte")
    assert main(["compile", f"{factory}:make", "-o", pte, "--calibration", "1"]) == 0
    return pte


def test_report_by_module_cli(tiny_pte, capsys):
    pte = tiny_pte
    capsys.readouterr()
    assert main(["report", pte, "--by-module", "--top", "2"]) == 0
    out = capsys.readouterr().out
    assert "by module (depth leaf, top 2):" in out and "unmapped 0.0%" in out
    assert re.search(r"^c1\s+[\d,]+\s+\d+\.\d%", out, re.M)
    with pytest.raises(SystemExit):
        main(["report", pte, "--by-module", "--depth", "0"])


def test_html_treemap_renders_offline_in_headless_chromium(tiny_pte, tmp_path, capsys):
    """The vendored ECharts draws the module treemap (SVG renderer) with no network at all."""
    page = tmp_path / "r.html"
    assert main(["report", tiny_pte, "--html", str(page)]) == 0
    capsys.readouterr()
    text = page.read_text()
    assert 'id="by-module-treemap"' in text and "echarts" in text
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        if os.environ.get("ETHOSU_NG_REQUIRE_TOOLS"):
            pytest.fail("chromium is required (ETHOSU_NG_REQUIRE_TOOLS is set)")
        pytest.skip("chromium not installed")
    dom = subprocess.run(
        [
            chromium,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            # Offline: any fetch the page tried would fail, and the chart would not render.
            "--proxy-server=127.0.0.1:9",
            f"--user-data-dir={tmp_path / 'profile'}",
            "--virtual-time-budget=5000",
            "--dump-dom",
            f"file://{page}",
        ],
        check=True,
        timeout=120,
        capture_output=True,
        text=True,
    ).stdout
    chart = dom[dom.index('id="by-module-treemap"') :]
    assert re.search(r'<div id="by-module-treemap"[^>]*data-rendered="1"', dom)
    labels = set(re.findall(r"<text[^>]*>([^<]+)</text>", chart))
    # The modules with a visible share are drawn with their names (fc's box is too small).
    assert {"c1", "c2", "(top level)"} <= labels, sorted(labels)[:20]


def test_recording_op_sources_leaves_the_tosa_graph_unchanged(monkeypatch):
    """The debug hook that names each operator's node must not change what Vela compiles."""
    import copy

    from ethosu_ng.adapters import arm as upstream

    real, seen = upstream.lower_to_tosa, []

    def both(program, spec, op_sources=None):
        twin = copy.deepcopy(program)
        recorded = real(program, spec, op_sources)
        with upstream.lowering_context(spec, twin):
            plain = real(twin, spec)
        seen.append((recorded == plain, len(op_sources or [])))
        return recorded

    monkeypatch.setattr(upstream, "lower_to_tosa", both)
    spec = EthosUNGCompileSpec("ethos-u55-128")
    example = SmallCNN.example()
    q = quantize(SmallCNN().eval(), example, spec, calibration=calibration_batches(example, n=1))
    lower(q, example, spec)
    assert seen and all(same and n > 0 for same, n in seen), seen
