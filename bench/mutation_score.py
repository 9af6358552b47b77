# SPDX-License-Identifier: BSD-3-Clause
"""Mutation score of the core modules: do their tests fail when the code is wrong?

Mutants come from universalmutator (``pip install -e ".[mutation]"``; its ``mutate`` command, the
rules for Python and C++), one per changed line. A seeded sample of each module's mutants is run,
one at a time, against that module's tests in a copy of the working tree (the checkout itself is
never touched): a mutant is *killed* when a test fails or runs past its time limit, *survives*
when all pass, and is *invalid* when it does not compile (not counted). The score is killed /
(killed + survived) over the sample. Survivors are printed with their line so they can be read:
some are equivalent (the same behaviour written differently), the others are missing tests.

    python bench/mutation_score.py [--targets blob.py,blob.cpp,...] [--per-target 20] [--seed 0]
        [--results bench/results/mutation_score.jsonl] [--work /tmp/ethosu_ng_mutation]

Resumable: every verdict is appended to ``--results`` with the SHA-256 of the source and of its
tests; a rerun skips what is recorded for both and prints the table for the files as they are
(a test added since counts only in a new run: the same seed draws the same mutants). A target's
tests must pass on the unmutated copy first (else it is reported and skipped).

C++ targets are built as the C++ tests build them (ASan + UBSan, tests/test_runtime_ctest.py);
the extension module the Python tests load is rebuilt from the copy (runtime/source_build.py).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence

REPO = Path(__file__).resolve().parent.parent

# Runs pytest with ethosu_ng imported from the copy, whatever the install (an editable install's
# import hook would otherwise send every import to the checkout).
LAUNCHER = """
import sys
tree = sys.argv[1]
sys.meta_path[:] = [f for f in sys.meta_path if not type(f).__module__.startswith("_editable")]
sys.path.insert(0, tree)
import ethosu_ng
assert ethosu_ng.__file__.startswith(tree), ethosu_ng.__file__
if sys.argv[2] == "--build":
    # sys.argv[3]: "host" to rebuild the extension module too; then the C++ test executables,
    # built as tests/test_runtime_ctest.py builds them (ASan + UBSan)
    from pathlib import Path
    from ethosu_ng.runtime import source_build
    if sys.argv[4:]:
        source_build.build_targets(
            Path(tree) / "build" / "sanitize",
            targets=sys.argv[4:],
            extra_cmake_args=["-DCMAKE_BUILD_TYPE=Debug", "-DETHOSU_NG_SANITIZE=ON",
                              "-DETHOSU_NG_WERROR=ON"],
        )
    if sys.argv[3] == "host":
        source_build.build_host_module()
    sys.exit(0)
import pytest
sys.exit(pytest.main(sys.argv[2:]))
"""


@dataclass
class Target:
    name: str
    source: str  # path in the tree
    pytest: List[str] = field(default_factory=list)  # test files, run with -m "not slow"
    ctest: List[str] = field(default_factory=list)  # C++ test executables (sanitizer build)
    # pytest arguments of slower tests, run on the survivors only (``--recheck``)
    recheck: List[str] = field(default_factory=list)

    def test_files(self) -> List[str]:
        return self.pytest + [f"runtime/tests/{exe}.cpp" for exe in self.ctest]

    @property
    def language(self) -> str:
        return "python" if self.source.endswith(".py") else "cpp"

    @property
    def rebuilds_host_module(self) -> bool:
        """A C++ source the Python tests load through the extension module."""
        return self.language == "cpp" and bool(self.pytest or self.recheck)


TARGETS: Dict[str, Target] = {
    t.name: t
    for t in [
        Target(
            "blob.py", "ethosu_ng/blob.py", pytest=["tests/test_blob.py", "tests/test_blob_fuzz.py"]
        ),
        Target(
            "tensor_spec.py",
            "ethosu_ng/tensor_spec.py",
            pytest=["tests/test_tensor_spec.py", "tests/test_blob.py", "tests/test_blob_fuzz.py"],
        ),
        Target("io_layout.py", "ethosu_ng/io_layout.py", pytest=["tests/test_io_layout.py"]),
        Target(
            "integer_program_io.py",
            "ethosu_ng/passes/integer_program_io.py",
            pytest=["tests/test_seed004_integer_program_io.py", "tests/test_pass_contracts.py"],
        ),
        Target(
            "boundary.py",
            "ethosu_ng/partitioning/boundary.py",
            pytest=[
                "tests/test_seed000_split_boundary_is_integer.py",
                "tests/test_seed004_integer_program_io.py",
                "tests/test_float_boundary_tensors.py",
                "tests/test_partition_io.py",
            ],
        ),
        Target(
            "partitioner.py",
            "ethosu_ng/partitioner.py",
            pytest=[
                "tests/test_seed000_split_boundary_is_integer.py",
                "tests/test_culprit_search.py",
                "tests/test_quantized_islands.py",
                "tests/test_bool_boundary.py",
            ],
            # the trial compiles' fallback (a failing Vela, a failing lowering), the CPU reasons,
            # ops outside core ATen kept whole (erfinv, the shifts)
            recheck=[
                "tests/test_vela_fallback.py",
                "tests/test_lowering_failure_falls_back.py",
                "tests/test_cpu_ops_reason.py",
                "tests/test_upstream_op_classes.py",
                "-m",
                "not slow",
            ],
        ),
        Target(
            "delegate_io.py",
            "ethosu_ng/partitioning/delegate_io.py",
            # the lowering tests: every delegate's IO specs and qparams come from here
            pytest=[
                "tests/test_seed000_split_boundary_is_integer.py",
                "tests/test_seed004_integer_program_io.py",
                "tests/test_delegate_io_qparams.py",
            ],
        ),
        Target(
            "blob.cpp",
            "runtime/ethosu_ng/blob.cpp",
            pytest=["tests/test_blob_fuzz.py"],
            ctest=["test_blob"],
        ),
        Target("layout_copy.cpp", "runtime/ethosu_ng/layout_copy.cpp", ctest=["test_layout_copy"]),
        Target(
            "front_end.cpp",
            "runtime/ethosu_ng/npu_model/front_end.cpp",
            pytest=[
                "tests/test_npu_model_registers.py",
                "tests/test_npu_model_hazards.py",
                "tests/test_npu_model_bounds.py",
                "tests/test_npu_model_dma.py",
            ],
            ctest=["test_scale_round"],
            # compiles five small models for U55 and six random U85 convolutions and runs them
            # against the TOSA reference; the malformed-payload tests of test_npu_model.py
            recheck=[
                "tests/test_npu_model.py",
                "tests/test_npu_model_u85.py",
                "-k",
                "(bit_exact_to_tosa and ethos-u55-128) or random_convolutions or truncated_stream",
            ],
        ),
    ]
}


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def tests_sha(target: Target, tree: Path) -> str:
    """One digest of the target's test files: a verdict holds for these tests only."""
    h = hashlib.sha256()
    for name in target.test_files():
        h.update(sha256(tree / name).encode())
    return h.hexdigest()


def copy_tree(work: Path) -> Path:
    """The working tree (tracked and new files, not ignored ones, as on disk) in ``work/tree``."""
    tree = work / "tree"
    files = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        check=True,
        capture_output=True,
    ).stdout.split(b"\0")
    for name in filter(None, files):
        src = REPO / name.decode()
        if src.is_file():
            dst = tree / name.decode()
            if not dst.exists() or dst.read_bytes() != src.read_bytes():
                dst.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, dst)
    return tree


class Runner:
    def __init__(self, tree: Path, work: Path):
        self.tree = tree
        self.work = work
        self.log = work / "log.txt"
        self.env = dict(
            os.environ,
            OMP_NUM_THREADS="1",
            ETHOSU_NG_BUILD_DIR=str(tree / "build" / "host"),
            ETHOSU_NG_SANITIZE_BUILD_DIR=str(tree / "build" / "sanitize"),
            ASAN_OPTIONS="detect_leaks=1:abort_on_error=0",
            UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1",
        )
        self.env.pop("ETHOSU_NG_HOST_MODULE", None)

    def run(self, cmd: Sequence[str], timeout: Optional[float] = None) -> Optional[int]:
        """Return code, or None when ``timeout`` passed (the process group is killed)."""
        with open(self.log, "a") as log:
            log.write(f"\n$ {' '.join(map(str, cmd))}\n")
            log.flush()
            proc = subprocess.Popen(
                list(map(str, cmd)),
                cwd=self.tree,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            try:
                return proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, 9)
                proc.wait()
                return None

    def build(self, target: Target) -> bool:
        """Build what ``target``'s tests run; False when it does not compile."""
        if target.language != "cpp":
            return True
        host = "host" if target.rebuilds_host_module else "-"
        return (
            self.run([sys.executable, "-c", LAUNCHER, self.tree, "--build", host, *target.ctest])
            == 0
        )

    def test(
        self, target: Target, timeout: Optional[float], pytest_args: Optional[List[str]] = None
    ) -> Optional[int]:
        """0 when every test passes, None on timeout, else the first failing return code."""
        start = time.monotonic()
        build = self.tree / "build" / "sanitize"
        for exe in target.ctest:
            args = [build / "test_blobs"] if exe == "test_blob" else []
            rc = self.run([build / exe, *args], timeout=timeout)
            if rc != 0:
                return rc
        if target.pytest or pytest_args:
            shutil.rmtree(self.tree / ".hypothesis", ignore_errors=True)
            left = None if timeout is None else max(timeout - (time.monotonic() - start), 1)
            cmd = [sys.executable, "-c", LAUNCHER, self.tree, "-x", "-q", "-m", "not slow"]
            cmd += ["-p", "no:cacheprovider", "--hypothesis-seed=0"]
            cmd += target.pytest if pytest_args is None else pytest_args
            return self.run(cmd, timeout=left)
        return 0


def generate(target: Target, tree: Path, out: Path) -> List[Path]:
    """universalmutator's mutants of ``target``'s source, in the tool's order."""
    if not out.exists():
        mutate = shutil.which("mutate") or str(Path(sys.executable).with_name("mutate"))
        if not Path(mutate).exists():
            raise SystemExit('universalmutator is not installed: pip install -e ".[mutation]"')
        tmp = out.with_suffix(".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        src = tmp / Path(target.source).name
        shutil.copy2(tree / target.source, src)
        # Python mutants are checked to compile by the tool; C++ ones by our build.
        check = [] if target.language == "python" else ["--noCheck"]
        cmd = [mutate, src.name, target.language, "--mutantDir", "mutants", *check]
        subprocess.run(cmd, cwd=tmp, check=True, capture_output=True)
        (tmp / "mutants").rename(out)
        shutil.rmtree(tmp)
    return sorted(out.iterdir(), key=lambda p: int(re.search(r"mutant\.(\d+)\.", p.name)[1]))


def work_mutants(target: Target, tree: Path, work: Path) -> Path:
    """Where ``target``'s mutants of its current source are kept."""
    return work / "mutants" / f"{target.name}-{sha256(tree / target.source)[:12]}"


def changed_line(original: List[str], mutant: List[str]) -> tuple:
    """(line number, original line, mutated line) of a one-line mutant."""
    for k, (a, b) in enumerate(zip(original, mutant)):
        if a != b:
            if len(original) == len(mutant):
                return k + 1, a.strip(), b.strip()
            if len(mutant) > len(original):
                return k + 1, a.strip(), b.strip() + " [inserted]"
            return k + 1, a.strip(), "[deleted]"
    k = min(len(original), len(mutant))
    return k + 1, "", (mutant[k].strip() if k < len(mutant) else "") + " [appended]"


def run_mutant(
    target: Target, runner: Runner, mutant: Path, timeout: Optional[float], pytest_args=None
) -> str:
    """The verdict of ``mutant`` put in place of ``target``'s source in the copy (restored
    after, whatever happens): invalid, killed, timeout or survived."""
    src = runner.tree / target.source
    original = src.read_bytes()
    try:
        shutil.copyfile(mutant, src)
        os.utime(src)
        if not runner.build(target):
            return "invalid"
        rc = runner.test(target, timeout=timeout, pytest_args=pytest_args)
        return "timeout" if rc is None else "survived" if rc == 0 else "killed"
    finally:
        src.write_bytes(original)
        os.utime(src)


def append_result(path: Path, records: List[dict], record: dict) -> None:
    records.append(record)
    with open(path, "a") as f:
        f.write(json.dumps(record) + "\n")


def load_results(path: Path) -> List[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def run_target(target, runner, tree, work, results_path, per_target, seed, records) -> None:
    src = tree / target.source
    original_bytes = src.read_bytes()
    digest = hashlib.sha256(original_bytes).hexdigest()
    tests = tests_sha(target, tree)
    done = {
        r["mutant"]: r
        for r in records
        if r.get("target") == target.name and r["sha"] == digest and r["tests"] == tests
    }
    counted = sum(r["verdict"] in ("killed", "survived", "timeout") for r in done.values())
    if counted >= per_target:
        return
    mutants = generate(target, tree, work_mutants(target, tree, work))
    order = list(mutants)
    random.Random(seed).shuffle(order)
    original_lines = original_bytes.decode().splitlines()

    # Baseline: the tests pass on the unmutated copy; their time sets the limit.
    if not runner.build(target):
        print(f"{target.name}: does not build unmutated, skipped (see {runner.log})")
        return
    start = time.monotonic()
    if runner.test(target, timeout=None) != 0:
        print(f"{target.name}: tests fail unmutated, skipped (see {runner.log})")
        return
    limit = 3 * (time.monotonic() - start) + 20
    print(f"{target.name}: {len(mutants)} mutants, tests take {(limit - 20) / 3:.0f} s", flush=True)

    for mutant in order:
        if counted >= per_target:
            break
        if mutant.name in done:
            continue
        line, before, after = changed_line(original_lines, mutant.read_text().splitlines())
        t0 = time.monotonic()
        verdict = run_mutant(target, runner, mutant, limit)
        record = dict(
            target=target.name,
            sha=digest,
            tests=tests,
            mutant=mutant.name,
            line=line,
            before=before,
            after=after,
            verdict=verdict,
            seconds=round(time.monotonic() - t0, 1),
        )
        append_result(results_path, records, record)
        counted += verdict != "invalid"
        print(f"  {mutant.name} line {line}: {verdict} ({record['seconds']} s)", flush=True)
    # Leave the builds matching the unmutated source.
    runner.build(target)


def recheck_survivors(target, runner, tree, results_path, records) -> None:
    """Run the survivors of ``target`` (its current source and tests) against its slower tests."""
    key = (sha256(tree / target.source), tests_sha(target, tree))
    mutants = work_mutants(target, tree, runner.work)
    checked = {
        r["mutant"] for r in records if r.get("recheck_of") == target.name and r["key"] == list(key)
    }
    for r in list(records):
        if r.get("target") != target.name or (r["sha"], r["tests"]) != key:
            continue
        if r["verdict"] != "survived" or r["mutant"] in checked:
            continue
        t0 = time.monotonic()
        verdict = run_mutant(target, runner, mutants / r["mutant"], None, target.recheck)
        verdict = "survived" if verdict == "survived" else "killed"
        record = dict(recheck_of=target.name, key=list(key), mutant=r["mutant"], verdict=verdict)
        append_result(results_path, records, record)
        print(
            f"  {r['mutant']} line {r['line']}: {verdict} by the slower tests "
            f"({time.monotonic() - t0:.0f} s)",
            flush=True,
        )
    runner.build(target)


def table(records: List[dict], tree: Path) -> None:
    current = {}
    for name, t in TARGETS.items():
        if (tree / t.source).exists():
            current[name] = (sha256(tree / t.source), tests_sha(t, tree))
    rechecked = {
        (r["recheck_of"], r["mutant"], *r["key"]): r["verdict"]
        for r in records
        if "recheck_of" in r
    }
    # One row per module and version of its tests (the source as it is now); survivors are
    # listed for the current tests only.
    print("\n| module | tests | counted | invalid | killed | survived | score | slower tests |")
    print("|---|---|---|---|---|---|---|---|")
    survivors = []
    groups: Dict[tuple, List[dict]] = {}
    for r in records:
        if "target" in r and current.get(r["target"], (None,))[0] == r["sha"]:
            groups.setdefault((r["target"], r["tests"]), []).append(r)
    for (name, tests), rs in groups.items():
        now = tests == current[name][1]
        invalid = sum(r["verdict"] == "invalid" for r in rs)
        killed = sum(r["verdict"] in ("killed", "timeout") for r in rs)
        alive = [r for r in rs if r["verdict"] == "survived"]
        counted = killed + len(alive)
        score = f"{100 * killed / counted:.0f} %" if counted else "-"
        later = [rechecked.get((name, r["mutant"], r["sha"], r["tests"])) for r in alive]
        slower = "-"
        if TARGETS[name].recheck and alive and all(later):
            slower = f"{100 * (killed + later.count('killed')) / counted:.0f} %"
        which = "current" if now else "earlier"
        print(
            f"| {name} | {which} | {counted} | {invalid} | {killed} | {len(alive)} | {score} "
            f"| {slower} |"
        )
        if now:
            survivors += list(zip(alive, later))
    if survivors:
        print("\nSurvivors:")
        for r, v in survivors:
            note = " (killed by the slower tests)" if v == "killed" else ""
            print(f"- {r['target']}:{r['line']}: `{r['before']}` -> `{r['after']}`{note}")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--targets", default=",".join(TARGETS), help="comma-separated, of: " + ", ".join(TARGETS)
    )
    p.add_argument("--per-target", type=int, default=20, help="mutants counted per target")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--results", type=Path, default=REPO / "bench" / "results" / "mutation_score.jsonl"
    )
    p.add_argument("--work", type=Path, default=Path("/tmp/ethosu_ng_mutation"))
    p.add_argument("--table", action="store_true", help="print the table of --results and stop")
    p.add_argument(
        "--recheck", action="store_true", help="run the survivors against the slower tests too"
    )
    args = p.parse_args(argv)
    names = [n for n in args.targets.split(",") if n]
    unknown = [n for n in names if n not in TARGETS]
    if unknown:
        p.error(f"unknown targets {unknown}; known: {', '.join(TARGETS)}")
    args.work.mkdir(parents=True, exist_ok=True)
    args.results.parent.mkdir(parents=True, exist_ok=True)
    tree = copy_tree(args.work)
    records = load_results(args.results)
    if not args.table:
        runner = Runner(tree, args.work)
        for name in names:
            target = TARGETS[name]
            run_target(
                target,
                runner,
                tree,
                args.work,
                args.results,
                args.per_target,
                args.seed,
                records,
            )
            if args.recheck and target.recheck:
                recheck_survivors(target, runner, tree, args.results, records)
    table(records, tree)
    return 0


if __name__ == "__main__":
    sys.exit(main())
