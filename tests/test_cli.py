# SPDX-License-Identifier: BSD-3-Clause
"""The ethosu-ng command line: compile, report (text/JSON/HTML), and one-line errors."""

import json
import os
import re
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from _tools import require_tool

from ethosu_ng.tools.cli import main

HERE = os.path.dirname(__file__)
FACTORY = os.path.join(HERE, "data", "tiny_factory.py")


def run(argv, capsys):
    code = main(argv)
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    d = tmp_path_factory.mktemp("cli")
    pte = str(d / "tiny.pte")
    code = main(
        [
            "compile",
            f"{FACTORY}:make",
            "--target",
            "ethos-u55-128",
            "-o",
            pte,
            "--cpu-op",
            "aten.add.Tensor",
            "--calibration",
            "2",
        ]
    )
    assert code == 0
    return pte


def test_compile_writes_pte_and_report(compiled):
    assert os.path.getsize(compiled) > 0
    rep = json.loads(Path(compiled.replace(".pte", ".report.json")).read_text())
    assert rep["target"] == "ethos-u55-128"
    assert rep["totals"]["partitions"] == 2  # the pinned add splits convs | mean+fc
    assert rep["totals"]["pte_bytes"] == os.path.getsize(compiled)
    assert any(c["op"] == "aten.add.Tensor" and "pinned" in c["reason"] for c in rep["cpu_ops"])
    for d in rep["delegates"]:
        assert d["vela"]["npu_cycles"] > 0 and d["vela"]["sram_kib"] is not None
        assert all(s["dtype"] == "int8" for s in d["inputs"] + d["outputs"])
    assert set(rep["stages_s"]) >= {"load", "calibrate + quantize", "partition + Vela", "serialize"}
    # The verified compile ran on every delegate (on by default) and says so in the report.
    assert [d["npu_verification"]["status"] for d in rep["delegates"]] == ["verified"] * 2
    assert [d["lowering_verification"]["status"] for d in rep["delegates"]] == ["verified"] * 2


def test_report_text_shows_the_verified_compile(compiled, capsys):
    code, out, _ = run(["report", compiled], capsys)
    from ethosu_ng.compiler.verify_npu import SAMPLES

    assert code == 0 and "verified compile" in out
    assert out.count(f"lowering: verified: {SAMPLES} input sample") == 2
    assert out.count(f"stream:   verified: {SAMPLES} input sample") == 2


def test_no_verify_npu_flag(tmp_path):
    pte = str(tmp_path / "t.pte")
    argv = ["compile", f"{FACTORY}:make", "--target", "ethos-u55-128", "-o", pte]
    assert main([*argv, "--no-verify-npu", "--no-verify-lowering", "--strict"]) == 0
    rep = json.loads(Path(pte.replace(".pte", ".report.json")).read_text())
    assert [d["npu_verification"] for d in rep["delegates"]] == [None]
    assert [d["lowering_verification"] for d in rep["delegates"]] == [None]


def test_report_from_pte_and_json(compiled, capsys, tmp_path):
    code, out, _ = run(["report", compiled], capsys)
    assert code == 0 and "NPU op share" in out and "aten.add.Tensor" in out
    # Without the JSON, the .pte alone still yields each delegate's typed IO.
    lone = tmp_path / "lone.pte"
    shutil.copy(compiled, lone)
    code, out, _ = run(["report", str(lone)], capsys)
    assert code == 0 and "int8[1, 3, 16, 16]" in out


def test_report_html_renders_in_headless_chromium(compiled, capsys, tmp_path):
    page = tmp_path / "r.html"
    code, _, _ = run(["report", compiled, "--html", str(page)], capsys)
    assert code == 0
    text = page.read_text()
    assert "<svg" in text and "NPU cycles per partition" in text
    # Scripts only inline (the vendored treemap library): nothing is fetched.
    assert "<script src" not in text and 'src="http' not in text
    chromium = require_tool("chromium", "chromium-browser", install="apt-get install chromium")
    common = [
        chromium,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={tmp_path / 'profile'}",
    ]

    def chrome(*args):
        return subprocess.run(
            [*common, *args, f"file://{page}"],
            check=True,
            timeout=120,
            capture_output=True,
            text=True,
        ).stdout

    # The document Chromium built holds every delegate and every CPU op of the report as a
    # table cell (an error page or an unparsed file would not).
    dom = chrome("--dump-dom")
    rep = json.loads(Path(compiled.replace(".pte", ".report.json")).read_text())
    cells = [d["name"] for d in rep["delegates"]] + [c["node"] for c in rep["cpu_ops"]]
    assert len(cells) >= 3
    for cell in cells:
        assert f"<td>{cell}</td>" in dom, cell

    # Pixels: each bar's colour covers exactly the area of its class's <rect>s. The bars are
    # axis-aligned integer rectangles drawn at device scale 1, so there is no anti-aliasing and
    # the count is exact (measured: 26876 NPU and 2400 CPU pixels for this report, equal to the
    # rect areas).
    png = tmp_path / "r.png"
    chrome(
        f"--screenshot={png}",
        "--window-size=900,900",
        "--force-device-scale-factor=1",
        "--hide-scrollbars",
    )
    image = require_tool("PIL.Image", module=True, install="pip install pillow")
    pixels = image.open(png).convert("RGB").tobytes()
    counts = Counter(pixels[k : k + 3] for k in range(0, len(pixels), 3))
    for cls in ("npu", "cpu"):
        colour = re.search(rf"rect\.{cls} {{ fill: #([0-9a-f]{{6}}); }}", text).group(1)
        rects = re.findall(
            rf'<rect class="{cls}" x="\d+" y="\d+" width="(\d+)" height="(\d+)"', text
        )
        area = sum(int(w) * int(h) for w, h in rects)
        assert area > 0 and counts[bytes.fromhex(colour)] == area, (cls, area)


def test_verify_runs_the_pte_on_the_host_runtime(tmp_path, capsys):
    pte = str(tmp_path / "v.pte")
    assert (
        main(
            [
                "compile",
                f"{FACTORY}:make",
                "-o",
                pte,
                "--embed-tosa",
                "--calibration",
                "2",
                "--input-dtype",
                "int8",
                "--output-dtype",
                "int8",
            ]
        )
        == 0
    )
    capsys.readouterr()
    code, out, err = run(["verify", pte, "-n", "2"], capsys)
    assert code == 0, err
    assert "output 0: max |pte - eager quantized|" in out and "top-1 agreement: " in out


def test_verify_needs_embedded_tosa(compiled, capsys):
    code, _, err = run(["verify", compiled, "--npu", "tosa"], capsys)
    assert code != 0 and "--embed-tosa" in err


def test_verify_runs_a_firmware_pte_on_the_npu_model_by_default(compiled, capsys):
    """No TOSA inside, no --npu: the delegates run on the NPU model, and verify says so."""
    code, out, err = run(["verify", compiled, "-n", "2"], capsys)
    assert code == 0, err
    assert "delegates run on the Ethos-U55 NPU model (default, --npu model)" in out
    assert "output 0: max |pte - eager quantized|" in out


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["compile", "timm:no_such_model_xyz"], "no such timm model"),
        (
            ["compile", "tests/data/tiny_factory.py:make", "--target", "ethos-u99-1"],
            "valid targets",
        ),
        (["compile", "/no/such/file.py:make"], "no such file"),
        (["compile", f"{FACTORY}:broken"], "factory exploded"),
        (["compile", f"{FACTORY}:missing"], "defines no 'missing'"),
        (
            ["compile", f"{FACTORY}:make", "--cpu-op", "aten.nope.default"],
            "names no registered operator",
        ),
        (["compile", "resnet18"], "expected timm:NAME"),
        (["report", "/no/such.pte"], "no such file"),
        (["verify", "/no/such.pte"], "no such file"),
    ],
)
def test_bad_input_is_one_line_and_nonzero(argv, needle, capsys):
    code, out, err = run(argv, capsys)
    assert code != 0
    lines = [ln for ln in err.splitlines() if ln.startswith("ethosu-ng: error")]
    assert len(lines) == 1 and needle in lines[0], err
    assert "Traceback" not in err


def test_report_of_a_non_pte_file(tmp_path, capsys):
    junk = tmp_path / "junk.pte"
    junk.write_bytes(b"not a program at all" * 10)
    code, _, err = run(["report", str(junk)], capsys)
    assert code != 0 and err.count("\n") == 1 and "Traceback" not in err


def test_console_script_is_installed():
    exe = shutil.which("ethosu-ng") or os.path.join(os.path.dirname(sys.executable), "ethosu-ng")
    out = subprocess.run([exe, "--help"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "compile" in out.stdout


def test_bad_model_is_exactly_one_line_on_stderr(tmp_path):
    """As a user runs it (a fresh process): no third-party start-up warnings (torch logs two
    _pytree deprecations while torchao loads) and no stage progress before the error."""
    require_tool("timm", module=True, install="pip install -e .[zoo]")
    exe = shutil.which("ethosu-ng") or os.path.join(os.path.dirname(sys.executable), "ethosu-ng")
    repo = str(Path(__file__).resolve().parent.parent)  # the tree under test, not an install
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([repo, os.environ.get("PYTHONPATH", "")]))
    argv = ["compile", "timm:no_such_model", "--target", "ethos-u55-128", "-o", "x.pte"]
    proc = subprocess.run(
        [exe, *argv], capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path
    )
    assert proc.returncode != 0
    assert proc.stderr.splitlines() == ["ethosu-ng: error: timm:no_such_model: no such timm model"]
