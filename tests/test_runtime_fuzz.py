# SPDX-License-Identifier: BSD-3-Clause
"""libFuzzer over the C++ runtime: blob parsing + EthosUNGBackend init/execute (issue 7).

runtime/fuzz/fuzz_delegate.cpp reads a fuzz input as a delegate blob plus an option trailer
(IO tensor dtype / shape / dim order / dynamism / padding, allocator sizes, driver result) and
runs Blob::parse, init and execute under ASan + UBSan with a fake NPU driver that checks what
the backend hands it and writes deterministic bytes the outputs must then hold.

- every committed input (tests/runtime/corpus/seeds: real blobs; crashers: former findings,
  kept as regression inputs) must run clean;
- a 60-second fuzzing run (the CI budget; `bench/fuzz.sh SECONDS` for longer ones) must find
  nothing. A finding is written to tests/runtime/corpus/crashers/ and fails the test.

Needs clang with compiler-rt (apt-get install clang libclang-rt-14-dev): skipped without it,
failed when ETHOSU_NG_REQUIRE_TOOLS is set (CI).
"""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from _tools import require_tool

from ethosu_ng import DelegateBlob
from ethosu_ng.runtime.source_build import find_cmake

REPO = Path(__file__).resolve().parent.parent
CORPUS = REPO / "tests" / "runtime" / "corpus"
FUZZ_SH = REPO / "bench" / "fuzz.sh"
FUZZ_SECONDS = int(os.environ.get("ETHOSU_NG_FUZZ_SECONDS", "30"))


@pytest.fixture(scope="module")
def fuzz_env():
    for tool in ("clang", "clang++"):
        require_tool(tool, install="apt-get install clang libclang-rt-14-dev")
    cmake = require_tool("cmake", find=find_cmake)
    env = dict(os.environ, CMAKE=cmake, PYTHON=sys.executable)
    env.pop("ASAN_OPTIONS", None)
    env.pop("UBSAN_OPTIONS", None)
    return env


def _run(cmd, env, timeout):
    proc = subprocess.run(
        [str(c) for c in cmd],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        timeout=timeout,
    )
    return proc.returncode, proc.stdout


def _corpus_files():
    return sorted(p for p in CORPUS.rglob("*") if p.is_file() and p.suffix != ".md")


def test_seeds_are_real_blobs():
    """The seed blobs are what the compiler writes (the Python reader accepts them)."""
    blobs = sorted((CORPUS / "seeds").glob("*.blob"))
    assert len(blobs) >= 4, blobs
    for p in blobs:
        DelegateBlob.from_bytes(p.read_bytes())


def test_corpus_replay(fuzz_env):
    """Every seed and every former crasher runs clean through the (built if needed) fuzz target."""
    files = _corpus_files()
    rc, out = _run(["bash", FUZZ_SH, "--replay"], fuzz_env, timeout=1800)
    assert rc == 0, out[-12000:]
    for f in files:
        rel = str(f.relative_to(REPO))
        assert re.search(rf"Executed \S*{re.escape(rel)} in", out), (
            f"{rel} not replayed:\n{out[-4000:]}"
        )


def test_fuzz_for_ci_budget(fuzz_env):
    """FUZZ_SECONDS (30) of fuzzing from the committed corpus finds nothing."""
    before = set(_corpus_files())
    rc, out = _run(["bash", FUZZ_SH, str(FUZZ_SECONDS)], fuzz_env, timeout=1800 + 2 * FUZZ_SECONDS)
    new = sorted(set(_corpus_files()) - before)
    assert rc == 0 and not new, (
        f"fuzzer finding(s) {[str(p) for p in new]} (fix the runtime, keep the file as a "
        f"regression input):\n{out[-12000:]}"
    )
    m = re.search(r"stat::number_of_executed_units: (\d+)", out)
    assert m and int(m.group(1)) > 1000, out[-4000:]
