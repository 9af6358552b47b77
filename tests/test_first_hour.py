# SPDX-License-Identifier: BSD-3-Clause
# SPDX-License-Identifier: Apache-2.0
"""The first hour of a new user, as they meet it: the ``ethosu-ng`` command in a fresh process
(its exit code and its last line on stderr), the README's Python snippet run as written, and the
Python API a script calls. Every mistake is a one-line error naming the culprit, before any work
where it can be; every output a firmware engineer needs is there."""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from _tools import require_tool

REPO = Path(__file__).resolve().parent.parent
DATA = REPO / "tests" / "data"
TINY = f"{DATA / 'tiny_factory.py'}:make"
SIBLING = f"{DATA / 'sibling_factory' / 'model.py'}:make"
SORTS = f"{DATA / 'first_hour_models.py'}:sorts"


def cli(*argv, cwd, timeout=600):
    """``ethosu-ng ARGV`` as a user runs it: the console script, a fresh process."""
    exe = shutil.which("ethosu-ng") or os.path.join(os.path.dirname(sys.executable), "ethosu-ng")
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])
    )
    return subprocess.run(
        [exe, *map(str, argv)], capture_output=True, text=True, timeout=timeout, cwd=cwd, env=env
    )


def cli_in_process(*argv, cwd):
    """``ethosu-ng ARGV`` run by its ``main`` in this process, what a fresh process would print
    and return, without importing torch again (about 12 s a call on CI's machine). For the
    checks of bad options; ``cli`` runs the console script itself."""
    from ethosu_ng.tools.cli import main

    out, err = io.StringIO(), io.StringIO()
    level, here = logging.getLogger().level, os.getcwd()
    os.chdir(cwd)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main([str(a) for a in argv])
            except SystemExit as e:  # argparse's usage errors
                code = e.code if isinstance(e.code, int) else 1
    finally:
        os.chdir(here)
        logging.getLogger().setLevel(level)
    return subprocess.CompletedProcess(list(argv), code, out.getvalue(), err.getvalue())


def last_line(proc) -> str:
    lines = proc.stderr.strip().splitlines()
    return lines[-1] if lines else ""


def assert_clean_error(proc, *needles, code=2):
    assert proc.returncode == code, (proc.returncode, proc.stderr[-2000:])
    assert "Traceback" not in proc.stderr
    line = last_line(proc)
    for n in needles:
        assert n in line, (n, proc.stderr[-2000:])


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    return tmp_path_factory.mktemp("first_hour")


@pytest.fixture(scope="module")
def sibling(work):
    """The sibling-importing factory compiled with integer IO and C output (one compile serves
    the factory, header, report and verify tests)."""
    proc = cli(
        "compile",
        SIBLING,
        "-o",
        "sib.pte",
        "--calibration",
        "1",
        "--input-dtype",
        "uint8",
        "--output-dtype",
        "int8",
        "--emit-c",
        "csrc",
        cwd=work,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return work / "sib.pte"


# ------------------------------------------------------------------ options checked first
BAD_OPTIONS = [
    (
        ["--system-config", "Ethos_U55_High_End_Embeded"],
        ["'Ethos_U55_High_End_Embeded'", "Ethos_U55_High_End_Embedded"],
    ),
    (["--memory-mode", "Shared_SRAM"], ["'Shared_SRAM'", "Shared_Sram"]),
    (["--memory-mode", "Dedicated_Sram"], ["Dedicated_Sram", "Vela refuses", "Shared_Sram"]),
    (
        ["--extra-vela-flag=--optimize=Size"],
        ["'--optimize=Size'", "did you mean --optimise?"],
    ),
    (["--calibration", "0"], ["--calibration", "'0'"]),
    (["--calibration-dir", "nope"], ["--calibration-dir nope: no such directory"]),
    (["--seed", "-3"], ["--seed"]),
    (["--input-layout", "hwc"], ["'hwc'", "nchw, nhwc"]),
    (["--input-layout", "nhwc,nhwc"], ["2 input layouts for 1 inputs"]),
    (["--output-layout", "nhwc"], ["no rank-4 output"]),
    (["--emit-c", "tiny_factory.py"], ["--emit-c", "not a directory"]),
]


@pytest.mark.parametrize(
    "argv, needles",
    BAD_OPTIONS,
    ids=lambda v: "_".join(v) if isinstance(v, list) and v and v[0].startswith("-") else None,
)
def test_a_bad_option_is_one_line_before_any_work(argv, needles, tmp_path):
    """A misspelled --system-config once exited 0 with everything on the CPU after eight
    bisection compiles; every option is now checked before the first stage."""
    shutil.copy(DATA / "tiny_factory.py", tmp_path)
    # The first as a user runs it; the rest through main() in this process.
    run = cli if argv == BAD_OPTIONS[0][0] else cli_in_process
    proc = run("compile", TINY, "-o", "t.pte", *argv, cwd=tmp_path)
    assert_clean_error(proc, *needles)
    assert "partition + Vela" not in proc.stderr or "--layout" in " ".join(argv)
    assert not (tmp_path / "t.pte").exists()


def test_version_and_debug_after_the_subcommand(tmp_path):
    proc = cli("--version", cwd=tmp_path)
    assert proc.returncode == 0 and re.fullmatch(r"ethosu-ng \S+\n", proc.stdout), proc
    proc = cli("report", "/no/such.pte", "--debug", cwd=tmp_path)
    assert_clean_error(proc, "no such file")


# ------------------------------------------------------------------ report trusts the program
def test_report_of_random_bytes_says_not_a_program(tmp_path):
    (tmp_path / "junk.pte").write_bytes(os.urandom(4096))
    proc = cli("report", "junk.pte", cwd=tmp_path)
    assert_clean_error(proc, "junk.pte is not an ExecuTorch program")
    assert proc.stderr.count("\n") == 1


@pytest.mark.parametrize(
    "name, make, needle",
    [
        ("d.pte", lambda p: p.mkdir(), "d.pte is a directory, not a .pte"),
        ("e.report.json", lambda p: p.write_text("{}"), "not a report JSON that ethosu-ng"),
    ],
)
def test_report_of_what_is_not_a_program_or_report(name, make, needle, tmp_path):
    make(tmp_path / name)
    assert_clean_error(cli_in_process("report", name, cwd=tmp_path), needle)


def test_report_of_a_truncated_pte_ignores_its_report_json(sibling, tmp_path):
    """The truncated program sits beside the report JSON of the whole one: the report used to be
    printed from that JSON with exit 0."""
    data = sibling.read_bytes()
    (tmp_path / "sib.pte").write_bytes(data[: len(data) // 2])
    shutil.copy(sibling.with_suffix(".report.json"), tmp_path / "sib.report.json")
    proc = cli("report", "sib.pte", cwd=tmp_path)
    assert_clean_error(proc, "sib.pte is not a valid ExecuTorch program", "truncated")


def test_report_ignores_a_report_json_written_for_another_program(sibling, tmp_path):
    shutil.copy(sibling, tmp_path / "sib.pte")
    rep = json.loads(sibling.with_suffix(".report.json").read_text())
    assert proc_ok(cli("report", str(sibling), cwd=tmp_path)).stdout.startswith(
        f"model {rep['model']}"
    )
    rep["pte_sha256"] = "0" * 64  # written for a program compiled before this one
    (tmp_path / "sib.report.json").write_text(json.dumps(rep))
    proc = proc_ok(cli("report", "sib.pte", cwd=tmp_path))
    assert proc.stderr.splitlines() == [
        "ethosu-ng: warning: sib.report.json was not written for sib.pte as it is now (SHA-256 "
        "differs): ignored; reporting what the .pte carries"
    ]
    assert not proc.stdout.startswith(f"model {rep['model']}")  # not from the stale JSON


def proc_ok(proc):
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


# ------------------------------------------------------------------ verify
def test_verify_lsb_budget_out_of_range(tmp_path):
    proc = cli("verify", "x.pte", "--lsb-budget", "-1", cwd=tmp_path)
    assert_clean_error(proc, "--lsb-budget", "'-1' is not a number >= 0")


def test_verify_beyond_its_budget_says_what_failed(sibling, monkeypatch, capsys):
    """A verify that fails ends on the line saying which output and by how much (it used to
    exit 1 after "max |pte - eager quantized| = 0.00 LSB" and nothing else). The program is
    bit-exact to the eager quantized model, so the host run is replaced by a result 3 LSB off."""
    from ethosu_ng import api
    from ethosu_ng.tools.cli import main

    monkeypatch.setattr(
        api, "verify", lambda *a, **k: api.VerifyResult("model", k["lsb_budget"], {0: 3.0})
    )
    code = main(["verify", str(sibling), "--lsb-budget", "2"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1
    assert err[-1] == (
        "ethosu-ng: error: output 0: 3.00 LSB from the eager quantized model, above the budget "
        "of 2 LSB"
    )


def test_verify_inputs_of_the_wrong_shape(sibling, tmp_path):
    import numpy as np

    np.savez(tmp_path / "x.npz", x=np.zeros((1, 8, 8, 3), np.float32))  # HWC, not CHW
    proc = cli("verify", sibling, "--inputs", tmp_path / "x.npz", cwd=tmp_path)
    assert_clean_error(proc, "input 0 has shape [1, 8, 8, 3], the program takes [1, 3, 8, 8]")


def test_verify_from_a_script(sibling):
    """``verify`` and ``report`` are Python functions too; a script gets the report JSON."""
    script = f"""
import json, ethosu_ng
rep = ethosu_ng.report({str(sibling)!r})
assert rep["pte_sha256"] and "CPU kernels to link" in str(rep)
res = ethosu_ng.verify({str(sibling)!r}, n=1)
print(json.dumps({{"passed": res.passed, "max_lsb": res.max_lsb, "target": rep["target"]}}))
"""
    proc = proc_ok(run_python(script, sibling.parent))
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["passed"] and got["target"] == "ethos-u55-128"


def run_python(script: str, cwd):
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])
    )
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=cwd,
        env=env,
    )


# ------------------------------------------------------------------ CPU kernels
def test_compile_refuses_a_cpu_op_without_a_kernel(tmp_path):
    """torch.sort stays on the CPU and ExecuTorch's portable library has no kernel for it:
    ``compile`` used to write a program the host runtime cannot load."""
    proc = cli("compile", SORTS, "-o", "s.pte", "--calibration", "1", cwd=tmp_path)
    assert_clean_error(proc, "aten::sort", "no kernel", "--allow-missing-kernels")
    assert not (tmp_path / "s.pte").exists()
    proc = proc_ok(
        cli(
            "compile",
            SORTS,
            "-o",
            "s.pte",
            "--calibration",
            "1",
            "--allow-missing-kernels",
            cwd=tmp_path,
        )
    )
    assert (
        "ethosu-ng: warning: no kernel in ExecuTorch's portable or quantized library for "
        "aten::sort" in proc.stderr
    )
    rep = json.loads((tmp_path / "s.report.json").read_text())
    assert any(k.startswith("aten::sort") for k in rep["missing_host_kernels"])
    assert "quantized_decomposed::quantize_per_tensor.out" in rep["cpu_kernels"]
    assert "CPU kernels to link: " in proc.stdout


# ------------------------------------------------------------------ firmware outputs
def test_header_carries_the_io_contract(sibling):
    """Compiled and run as C: the header's IO contract equals the report's program IO."""
    gcc = require_tool("gcc", "cc", install="apt-get install gcc")
    work = sibling.parent
    rep = json.loads(sibling.with_suffix(".report.json").read_text())
    io = rep["program_io"]
    assert io["inputs"][0]["dtype"] == "uint8" and io["outputs"][0]["dtype"] == "int8"
    main_c = work / "main.c"
    main_c.write_text(
        '#include <stdio.h>\n#include "sib.h"\n'
        "int main(void) {\n"
        '  printf("%d %u %u %u %u %u %u %u %u %.9g %d\\n", SIB_INPUT_0_DTYPE, SIB_INPUT_0_RANK,\n'
        "    SIB_INPUT_0_DIM_0, SIB_INPUT_0_DIM_1, SIB_INPUT_0_DIM_2, SIB_INPUT_0_DIM_3,\n"
        "    SIB_INPUT_0_DIM_ORDER_1, SIB_INPUT_0_DIM_ORDER_3, SIB_INPUT_0_LAYOUT_NCHW,\n"
        "    (double)SIB_INPUT_0_SCALE, SIB_INPUT_0_ZERO_POINT);\n"
        '  printf("%d %.9g %d\\n", SIB_OUTPUT_0_DTYPE, (double)SIB_OUTPUT_0_SCALE,\n'
        "    SIB_OUTPUT_0_ZERO_POINT);\n"
        "  return sib_pte[4] == 'E' ? 0 : 1;\n}\n"
    )
    exe = work / "contract"
    subprocess.run(
        [gcc, "-std=c11", "-Wall", "-Wextra", "-Werror", "-pedantic", "-I", work / "csrc"]
        + [main_c, work / "csrc" / "sib.c", "-o", exe],
        check=True,
        capture_output=True,
    )
    out = subprocess.run([exe], check=True, capture_output=True, text=True).stdout.split("\n")
    i, o = io["inputs"][0], io["outputs"][0]
    first = out[0].split()
    assert first[:9] == ["0", "4", *map(str, i["shape"]), "1", "3", "1"]
    assert float(first[9]) == pytest.approx(i["scale"], rel=1e-7)  # float literal
    assert int(first[10]) == i["zero_point"]
    second = out[1].split()
    assert second[0] == "1" and int(second[2]) == o["zero_point"]
    assert float(second[1]) == pytest.approx(o["scale"], rel=1e-7)


def test_a_factory_may_import_its_sibling_module(sibling):
    assert sibling.stat().st_size > 0  # the fixture compiled it; before, the import failed


@pytest.mark.slow
def test_extra_vela_flag_reaches_vela(sibling):
    """``--extra-vela-flag`` is the spec's ``extra_vela_flags``: Vela's size-optimised schedule
    is recorded and differs from the default one."""
    work = sibling.parent
    base = json.loads(sibling.with_suffix(".report.json").read_text())
    proc_ok(
        cli(
            "compile",
            SIBLING,
            "-o",
            "size.pte",
            "--calibration",
            "1",
            "--input-dtype",
            "uint8",
            "--output-dtype",
            "int8",
            "--extra-vela-flag=--optimise=Size",
            "--no-verify-npu",
            "--no-verify-lowering",
            cwd=work,
        )
    )
    rep = json.loads((work / "size.report.json").read_text())
    assert rep["compile_args"]["extra_vela_flags"] == ["--optimise=Size"]
    assert base["compile_args"]["extra_vela_flags"] == []


def test_package_ships_py_typed_and_its_data():
    """scikit-build-core puts every file of wheel.packages in the wheel but wheel.exclude's."""
    import fnmatch

    import tomllib

    wheel = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["scikit-build"]["wheel"]
    assert "ethosu_ng" in wheel["packages"]
    data = [
        "py.typed",
        "cpu_op_costs.json",
        *(p.name for p in (REPO / "ethosu_ng/tools/vendor").iterdir()),
    ]
    for name in data:
        path = next(REPO.glob(f"ethosu_ng/**/{name}")).relative_to(REPO).as_posix()
        excluded = [pat for pat in wheel.get("exclude", []) if fnmatch.fnmatch(path, pat)]
        assert not excluded, f"{path} is left out of the wheel by {excluded}"


# ------------------------------------------------------------------ the README, as written
def readme_block(heading: str) -> str:
    text = (REPO / "README.md").read_text()
    section = text.split(heading, 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S)[1]


def test_readme_export_snippet_runs_as_written(tmp_path):
    """The README's export script, as written (with its own small model), run in a fresh
    interpreter: it reaches the partitioner's report and the readable summary."""
    code = readme_block("## Use it in an export script")
    proc = proc_ok(run_python(code, tmp_path))
    assert "delegate" in proc.stdout and (tmp_path / "model.pte").stat().st_size > 0
    assert (tmp_path / "model.report.json").exists()


@pytest.mark.slow
def test_example_script_writes_the_program_its_report_and_runs_a_frame(tmp_path):
    """examples/export_mobilenet_v2.py as a user runs it: the .pte, its report and the C files,
    then one camera frame (uint8 HWC bytes) through the host runtime."""
    proc = subprocess.run(
        [sys.executable, str(REPO / "examples" / "export_mobilenet_v2.py"), "-o", "m.pte"]
        + ["--emit-c", "fw", "--calibration", "1"],
        capture_output=True,
        text=True,
        timeout=1800,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    rep = json.loads((tmp_path / "m.report.json").read_text())
    assert rep["program_io"]["inputs"][0]["layout"] == "nhwc"
    assert rep["program_io"]["inputs"][0]["dtype"] == "uint8"
    assert "#define M_INPUT_0_LAYOUT_NHWC 1" in (tmp_path / "fw" / "m.h").read_text()
    assert re.search(r"^class \d+, score ", proc.stdout, re.M)
