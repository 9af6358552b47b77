# SPDX-License-Identifier: BSD-3-Clause
"""libFuzzer over the NPU model (runtime/fuzz/fuzz_npu_model.cpp), Ethos-U55/U65/U85 payloads.

Random driver payloads, command streams and register values against real-sized regions, under
ASan + UBSan: every committed input (tests/runtime/corpus_npu_model/seeds: real Vela payloads
with their weights; crashers: former findings) must run clean, and a FUZZ_SECONDS (30) run must
find nothing. Oracles besides the sanitizers: region 0 is never written, a failing run always
has a message. Skipped without clang (failed when ETHOSU_NG_REQUIRE_TOOLS is set).
"""

import re
import struct

from test_runtime_fuzz import FUZZ_SECONDS, FUZZ_SH, REPO, _run, fuzz_env  # noqa: F401

CORPUS = REPO / "tests" / "runtime" / "corpus_npu_model"


def _corpus_files():
    return sorted(p for p in CORPUS.rglob("*") if p.is_file() and p.suffix not in (".md", ""))


def test_seeds_are_real_payloads():
    seeds = sorted((CORPUS / "seeds").glob("*.bin"))
    assert len(seeds) >= 6, seeds
    for p in seeds:
        data = p.read_bytes()
        payload_len, weights_len, _, _ = struct.unpack_from("<4I", data)
        assert data[16:20] == b"COP1" and 16 + payload_len + weights_len == len(data)
    # Ethos-U85 payloads (optimizer config product 2) among them: the U85 decoder, weight streams
    # (standard and fast), chaining and LUTs are fuzzed from real streams too.
    products = {struct.unpack_from("<I", p.read_bytes(), 16 + 8)[0] >> 28 for p in seeds}
    assert products == {0, 1, 2}, products


def test_npu_model_corpus_replay(fuzz_env):  # noqa: F811
    env = dict(fuzz_env, FUZZ_TARGET="fuzz_npu_model")
    rc, out = _run(["bash", FUZZ_SH, "--replay"], env, timeout=1800)
    assert rc == 0, out[-12000:]
    for f in _corpus_files():
        rel = str(f.relative_to(REPO))
        assert re.search(rf"Executed \S*{re.escape(rel)} in", out), f"{rel} not replayed"


def test_npu_model_fuzz_for_ci_budget(fuzz_env):  # noqa: F811
    env = dict(fuzz_env, FUZZ_TARGET="fuzz_npu_model")
    before = set(_corpus_files())
    rc, out = _run(["bash", FUZZ_SH, str(FUZZ_SECONDS)], env, timeout=1800 + 2 * FUZZ_SECONDS)
    new = sorted(set(_corpus_files()) - before)
    assert rc == 0 and not new, (
        f"fuzzer finding(s) {[str(p) for p in new]} (fix the model, keep the file as a "
        f"regression input):\n{out[-12000:]}"
    )
    m = re.search(r"stat::number_of_executed_units: (\d+)", out)
    # At the real limits a unit can allocate gigabyte-sized feature maps and weight slots: a
    # fresh-clone CI run (2 cores, 30 s) executed 337 units at 10/s, peak RSS 1.4 GB. The slowest
    # are Ethos-U85 convolutions whose weight slots are built before their stream is checked.
    assert m and int(m.group(1)) > 100, out[-4000:]
