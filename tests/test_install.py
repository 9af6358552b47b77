# SPDX-License-Identifier: BSD-3-Clause
"""A regular install runs a .pte on the host as it is: the wheel ``pip wheel`` builds from this
checkout (scikit-build-core compiles the extension module ``ethosu_ng._host_runtime`` at build
time), installed into a new environment, run from a directory with no source tree, with no
compiler or cmake on PATH and an empty home (so an empty ``~/.cache/ethosu_ng``), gives the bytes
the development install gives and builds nothing.

The new environment takes torch, executorch and the rest from this one (a path entry; this one's
own ethosu_ng stays out) so the test needs no second download of them; ethosu_ng itself comes only
from the wheel. Slow: the wheel build compiles the runtime (docs/packaging.md has the time)."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from models import SmallConv

from ethosu_ng import compile as compile_model
from ethosu_ng.runtime import run_pte

REPO = Path(__file__).resolve().parent.parent

CHILD = textwrap.dedent(
    """
    import os, shutil, sys, torch
    import ethosu_ng
    from ethosu_ng.runtime import host_module_path, run_pte, source_build

    site = sys.argv[3]
    assert ethosu_ng.__file__.startswith(site), ethosu_ng.__file__
    assert source_build.source_tree() is None, source_build.source_tree()
    for tool in ("cc", "gcc", "c++", "g++", "clang++", "cmake", "ninja"):
        assert shutil.which(tool) is None, f"{tool} is on PATH: {shutil.which(tool)}"
    x, = torch.load(sys.argv[2])
    got = run_pte(sys.argv[1], [x])
    assert str(host_module_path()).startswith(site), host_module_path()
    torch.save(got, sys.argv[2] + ".out")
    print("INSTALLED-RUN-OK", host_module_path())
    """
)


def _run(cmd, **kw):
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw)
    assert proc.returncode == 0, f"$ {' '.join(map(str, cmd))}\n{proc.stdout[-8000:]}"
    return proc.stdout


@pytest.mark.slow
def test_a_wheel_installed_without_the_source_tree_runs_a_pte(tmp_path):
    torch.manual_seed(0)
    (x,) = SmallConv.example()
    pte = tmp_path / "small_conv.pte"
    pte.write_bytes(compile_model(SmallConv().eval(), (x,), "ethos-u55-128", calibration=1).pte)
    want = run_pte(pte, [x])
    torch.save((x,), tmp_path / "x.pt")

    wheels = tmp_path / "wheels"
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", wheels, REPO])
    (wheel,) = wheels.glob("ethosu_ng-*.whl")
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", venv])
    python = venv / "bin" / "python"
    _run([sys.executable, "-m", "pip", "--python", python, "install", "--no-deps", "-q", wheel])
    site = _run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"])
    site = site.strip()
    # This environment's packages (torch, executorch, ...) as plain path entries: their .pth
    # files, the editable ethosu_ng's among them, are not read there, and the venv's own site
    # comes first.
    here = [p for p in sys.path if p.endswith("site-packages") and Path(p).is_dir()]
    Path(site, "_this_env.pth").write_text("\n".join(here) + "\n")

    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    keep = {"LANG", "LC_ALL", "TMPDIR", "OMP_NUM_THREADS"}
    env = {k: v for k, v in os.environ.items() if k in keep}
    env.update(PATH=str(venv / "bin"), HOME=str(home))
    out = _run([python, "-c", CHILD, pte, tmp_path / "x.pt", site], cwd=work, env=env, timeout=900)
    assert "INSTALLED-RUN-OK" in out, out
    got = torch.load(tmp_path / "x.pt.out")
    assert len(got) == len(want) and all(torch.equal(g, w) for g, w in zip(got, want))
    assert not (home / ".cache" / "ethosu_ng").exists()
    assert list(work.iterdir()) == []  # no build directory either
