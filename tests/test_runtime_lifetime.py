# SPDX-License-Identifier: BSD-3-Clause
"""A method loaded with ``ethosu_ng.runtime.load_pte`` keeps its program and ``.pte`` bytes alive.

``executorch.runtime``'s ``Method`` holds no reference to its ``Program``; the program reads the
``.pte`` buffer in place (our delegate's blob, IO table and TOSA section included). With
``Runtime.get().load_program(bytes(pte)).load_method("forward")`` the bytes are freed at once and
``execute`` reads freed memory (measured on this script: a segfault; other runs showed "Invalid
TOSA graph" and a tensor of size -1100623411). The check runs in a child process so a regression
is a failed test, not a dead test session.

The same child also runs with the extension module built with ASan/UBSan (the sanitizer build of
tests/test_runtime_ctest.py) and the sanitizer runtimes preloaded into Python, where a read of
freed ``.pte`` bytes is a reported error rather than luck; the unsafe one-liner is run there too,
to show the harness sees the hazard.
"""

import os
import re
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

import pytest
import torch
from test_runtime_ctest import SANITIZER_ENV, configure_sanitize_build
from test_runtime_host import Lowered, SmallConv, _feeds

from ethosu_ng import runtime as ngrt

CHILD = textwrap.dedent(
    """
    import gc, os, sys, torch
    from ethosu_ng.runtime import load_pte

    pte_path, data_path = sys.argv[1:3]
    feed, want = torch.load(data_path)
    buf = bytearray(open(pte_path, "rb").read())
    method = load_pte(buf).method("forward")  # the only reference kept
    n = len(buf)
    buf[:] = os.urandom(n)  # the caller reuses its buffer ...
    del buf                  # ... and drops it
    gc.collect()
    # Churn the heap with blocks of the .pte's size so freed memory is reused with garbage.
    junk = [os.urandom(n) for _ in range(64)]
    del junk
    gc.collect()
    junk = [bytearray(os.urandom(n)) for _ in range(64)]
    for k in range(5):
        got = method.execute(feed)
        assert len(got) == 1 and torch.equal(got[0], want), f"run {k}: wrong output"
    print("LIFETIME-OK", n)
    """
)


# What the natural executorch.runtime one-liner does: nothing but the method holds on.
UNSAFE_CHILD = textwrap.dedent(
    """
    import gc, sys, torch
    from executorch.runtime import Runtime
    from ethosu_ng.runtime import load_host_runtime

    load_host_runtime()
    pte_path, data_path = sys.argv[1:3]
    feed, want = torch.load(data_path)
    method = Runtime.get().load_program(open(pte_path, "rb").read()).load_method("forward")
    gc.collect()
    method.execute(feed)
    print("UNSAFE-RAN")
    """
)


@pytest.fixture(scope="module")
def conv():
    ngrt.load_host_runtime()
    torch.manual_seed(0)
    x = SmallConv.example()
    return Lowered(SmallConv(), x, feeds=_feeds(x))


def _child(code, conv, tmp_path, env=None):
    pte, data = tmp_path / "m.pte", tmp_path / "io.pt"
    pte.write_bytes(conv.pte)
    torch.save((list(conv.feeds[0]), conv.tosa_refs[0][0]), data)
    return subprocess.run(
        [sys.executable, "-c", code, str(pte), str(data)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=600,
        env=env,
    )


def test_method_outlives_every_other_reference(conv, tmp_path):
    proc = _child(CHILD, conv, tmp_path)
    assert proc.returncode == 0 and "LIFETIME-OK" in proc.stdout, proc.stdout[-4000:]


@pytest.fixture(scope="module")
def asan_env():
    """Environment running Python with the sanitized extension module and the GCC sanitizer
    runtimes preloaded (they must come first in the process)."""
    cmake, build = configure_sanitize_build()
    cache = (Path(build) / "CMakeCache.txt").read_text()
    compiler = re.search(r"^CMAKE_CXX_COMPILER:\w+=(.+)$", cache, re.M).group(1)
    compiler_id = re.search(r"^CMAKE_CXX_COMPILER_ID:\w+=(.+)$", cache, re.M)
    runtimes = []
    for name in ("libasan.so", "libubsan.so"):
        out = subprocess.run([compiler, f"-print-file-name={name}"], capture_output=True, text=True)
        path = out.stdout.strip()
        assert os.path.isabs(path) and os.path.exists(path), (
            f"{compiler} ({compiler_id.group(1) if compiler_id else '?'}) has no {name}: "
            "the sanitized host library needs the GCC sanitizer runtimes"
        )
        runtimes.append(path)
    subprocess.run(
        [cmake, "--build", build, "--target", "_host_runtime"],
        check=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    return dict(
        os.environ,
        LD_PRELOAD=" ".join(runtimes),
        ETHOSU_NG_HOST_MODULE=str(
            Path(build) / ("_host_runtime" + sysconfig.get_config_var("EXT_SUFFIX"))
        ),
        # Python and the wheels are not instrumented: their allocations are not leak-checked.
        ASAN_OPTIONS="detect_leaks=0:abort_on_error=0",
        UBSAN_OPTIONS=SANITIZER_ENV["UBSAN_OPTIONS"],
    )


def test_method_outlives_every_other_reference_under_asan(conv, tmp_path, asan_env):
    proc = _child(CHILD, conv, tmp_path, env=asan_env)
    assert proc.returncode == 0 and "LIFETIME-OK" in proc.stdout, proc.stdout[-6000:]
    assert "AddressSanitizer" not in proc.stdout, proc.stdout[-6000:]


def test_asan_sees_the_unsafe_one_liner(conv, tmp_path, asan_env):
    """The harness can fail: the one-liner that drops the program reads freed .pte bytes."""
    proc = _child(UNSAFE_CHILD, conv, tmp_path, env=asan_env)
    assert proc.returncode != 0 and "heap-use-after-free" in proc.stdout, proc.stdout[-6000:]
    assert "UNSAFE-RAN" not in proc.stdout


def test_host_program_api(conv):
    prog = ngrt.load_pte(conv.pte)
    assert prog.method_names == {"forward"}
    m = prog.method()
    assert m is prog.method("forward") and m.program is prog
    assert torch.equal(m.execute(list(conv.feeds[0]))[0], conv.tosa_refs[0][0])
    assert torch.equal(prog.run(list(conv.feeds[1]))[0], conv.tosa_refs[1][0])
    with pytest.raises(ValueError, match="program has no method 'nope': \\['forward'\\]"):
        prog.method("nope")
    with pytest.raises(TypeError, match="pte must be bytes or a path to a .pte file, got int"):
        ngrt.load_pte(3)
