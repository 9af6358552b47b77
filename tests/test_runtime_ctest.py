# SPDX-License-Identifier: BSD-3-Clause
"""Build the C++ runtime tests with AddressSanitizer + UBSan and run them through ctest.

The C++ tests (runtime/tests/*.cpp) cover the blob parser (good blobs from our C++ builder; the
shared test vectors of runtime/tests/gen_blobs.py, one invalid blob per rule of
docs/blob-format.md, with the rule and Error each must get; fuzzed blobs rejected without
out-of-bounds reads), the layout copy against a naive reference, the
backend with a fake NPU driver, the Ethos-U core-driver glue and the host TOSA driver.
Also cross-compiles the firmware library for Cortex-M when arm-none-eabi-g++ is installed.
"""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from _tools import require_tool

from ethosu_ng.runtime.source_build import find_cmake

REPO = Path(__file__).resolve().parent.parent
CTESTS = ["blob", "layout_copy", "backend", "driver_ethosu", "driver_host"]


def _cmake_or_skip() -> str:
    # cmake>=3.28 is a test dependency: missing only on a hand-made environment.
    return require_tool("cmake", find=find_cmake)


def _run(cmd, **kw):
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw)
    assert proc.returncode == 0, f"$ {' '.join(map(str, cmd))}\n{proc.stdout[-12000:]}"
    return proc.stdout


def configure_sanitize_build():
    """(cmake, build dir) of the ASan + UBSan build of the C++ tests, configured."""
    cmake = _cmake_or_skip()
    build = Path(os.environ.get("ETHOSU_NG_SANITIZE_BUILD_DIR", REPO / "build" / "sanitize"))
    gen = ["-G", "Ninja"] if shutil.which("ninja") else []
    _run(
        [
            cmake,
            "-S",
            REPO,
            "-B",
            build,
            *gen,
            "-DCMAKE_BUILD_TYPE=Debug",
            "-DETHOSU_NG_SANITIZE=ON",
            "-DETHOSU_NG_WERROR=ON",
            # The extension module too, for Python runs under ASan (test_runtime_lifetime.py).
            "-DETHOSU_NG_PYTHON_MODULE=ON",
            f"-DETHOSU_NG_PYTHON={sys.executable}",
        ]
    )
    return cmake, build


# Leak checks on; a sanitizer report ends the process with an error.
SANITIZER_ENV = dict(
    ASAN_OPTIONS="detect_leaks=1:abort_on_error=0",
    UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1",
)


def test_ctest_with_sanitizers():
    cmake, build = configure_sanitize_build()
    _run([cmake, "--build", build, "--parallel", str(os.cpu_count() or 2)])
    ctest = Path(cmake).with_name("ctest")
    env = dict(os.environ, **SANITIZER_ENV)
    out = _run(
        [str(ctest) if ctest.exists() else "ctest", "--test-dir", build, "--output-on-failure"],
        env=env,
    )
    for name in CTESTS:
        assert "Test #" in out and f" {name} " in out, f"ctest did not run {name}:\n{out}"
    assert "100% tests passed" in out, out
    # The parser test really read the shared test vectors (runtime/tests/gen_blobs.py).
    blob_log = _run([build / "test_blob", build / "test_blobs"], env=env)
    assert re.search(r"test vectors: [3-9] ok, \d{2,} bad", blob_log), blob_log[-2000:]


def test_cortex_m_build():
    require_tool(
        "arm-none-eabi-g++",
        install="apt-get install gcc-arm-none-eabi libnewlib-arm-none-eabi "
        "libstdc++-arm-none-eabi-newlib",
    )
    cmake = _cmake_or_skip()
    env = dict(
        os.environ, PYTHON=sys.executable, CMAKE=cmake, BUILD_ROOT=str(REPO / "build" / "cortex-m")
    )
    out = _run(["bash", REPO / "runtime" / "build_cortex_m.sh", "all"], env=env)
    for cpu in ("cortex-m55", "cortex-m85"):
        assert (REPO / "build" / "cortex-m" / cpu / "libethosu_ng_delegate.a").exists()
        assert f"== {cpu}: text" in out
