# SPDX-License-Identifier: BSD-3-Clause
"""vela_process: each compile is its own child (crash, hang and exit code are seen as from a fresh
interpreter), forked from one reused zygote that sees the caller's current environment."""

import os
import signal
import time

import pytest
from _tools import require_tool

from ethosu_ng.vela import process as vela_process


@pytest.fixture
def pool(monkeypatch):
    p = vela_process._ZygotePool()
    monkeypatch.setattr(vela_process, "_POOL", p)
    yield p
    p.close()


def test_exit_code_output_and_zygote_reuse(pool, tmp_path):
    src = "import os, sys; print('child', os.getpid(), sys.argv[1:]); sys.exit(3)"
    a = vela_process.run_vela(src, ["--x", "1"], str(tmp_path), 10)
    b = vela_process.run_vela(src, ["--y"], str(tmp_path), 10)
    assert a.returncode == 3 and "['--x', '1']" in a.output
    assert b.returncode == 3 and "['--y']" in b.output
    assert a.output.split()[1] != b.output.split()[1]  # two children...
    assert len(pool.all) == 1  # ...of one zygote


def test_segfault_is_a_signal_not_a_crash_of_ours(pool, tmp_path):
    src = (
        "import os, signal; print('about to crash', flush=True); "
        "os.kill(os.getpid(), signal.SIGSEGV)"
    )
    r = vela_process.run_vela(src, [], str(tmp_path), 10)
    assert r.returncode == -signal.SIGSEGV and "about to crash" in r.output
    ok = vela_process.run_vela("print('still fine')", [], str(tmp_path), 10)
    assert ok.returncode == 0 and "still fine" in ok.output and len(pool.all) == 1


def test_hang_is_ended_by_the_time_limit(pool, tmp_path):
    t = time.monotonic()
    r = vela_process.run_vela(
        "import time; print('waiting', flush=True); time.sleep(60)", [], str(tmp_path), 1
    )
    assert r.returncode is None and "waiting" in r.output
    assert time.monotonic() - t < 10
    assert len(pool.all) == 1  # the zygote's child timed out, not a fresh interpreter


def test_child_sees_the_environment_and_directory_of_the_call(pool, tmp_path, monkeypatch):
    src = "import os; print(os.environ.get('ETHOSU_NG_PROBE'), os.getcwd())"
    vela_process.run_vela(src, [], str(tmp_path), 10)  # zygote started before the change
    monkeypatch.setenv("ETHOSU_NG_PROBE", "late-value")
    monkeypatch.chdir(tmp_path)
    r = vela_process.run_vela(src, [], str(tmp_path), 10)
    assert r.output.split() == ["late-value", str(tmp_path)]
    assert len(pool.all) == 1


def test_forked_process_does_not_share_the_parents_zygotes(pool, tmp_path):
    vela_process.run_vela("pass", [], str(tmp_path), 10)
    assert len(pool.all) == 1
    pid = os.fork()
    if pid == 0:
        os._exit(0 if pool.all == [] and pool.idle.empty() else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert len(pool.all) == 1


def test_without_a_zygote_a_fresh_interpreter_runs_it(pool, tmp_path):
    pool.broken = True
    r = vela_process.run_vela("import sys; print('fresh'); sys.exit(2)", [], str(tmp_path), 10)
    assert r.returncode == 2 and "fresh" in r.output and pool.all == []


def test_cpu_of_zygote_children_is_accounted(pool, tmp_path):
    vela_process.run_vela("pass", [], str(tmp_path), 10)  # the zygote's own start-up is counted now
    before = vela_process.cpu_seconds()
    r = vela_process.run_vela(
        "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.5: pass",
        [],
        str(tmp_path),
        10,
    )
    assert r.returncode == 0
    assert vela_process.cpu_seconds() - before >= 0.5  # the child's burn


def test_unbounded_time_limit_is_accepted(pool, tmp_path):
    r = vela_process.run_vela("print('ok')", [], str(tmp_path), float("inf"))
    assert r.returncode == 0 and "ok" in r.output and len(pool.all) == 1


def test_dead_zygote_means_a_retry_in_a_fresh_interpreter(pool, tmp_path):
    # The first run kills the zygote it was forked from; the retry (a fresh interpreter, whose
    # parent is this process) must not, so it is told apart by a marker file.
    marker = tmp_path / "tried"
    src = (
        f"import os, pathlib, signal, sys\nm = pathlib.Path({str(marker)!r})\n"
        "if not m.exists():\n    m.write_text('x'); os.kill(os.getppid(), signal.SIGKILL)\n"
        "    import time; time.sleep(30)\nprint('retried'); sys.exit(4)"
    )
    t = time.monotonic()
    r = vela_process.run_vela(src, [], str(tmp_path), 60)
    assert r.returncode == 4 and "retried" in r.output, r
    assert time.monotonic() - t < 20 and pool.all == []  # not a timeout; the dead one is dropped


def test_exporter_ignoring_sigchld_does_not_break_compiles(pool, tmp_path):
    old = signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # inherited by the zygote it starts
    try:
        r = vela_process.run_vela("import sys; sys.exit(5)", [], str(tmp_path), 10)
    finally:
        signal.signal(signal.SIGCHLD, old)
    assert r.returncode == 5 and len(pool.all) == 1


def test_high_descriptor_numbers_are_fine(pool, tmp_path):
    import resource

    def limits():
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if hard != resource.RLIM_INFINITY and hard < 1200:
            raise OSError(f"hard RLIMIT_NOFILE is {hard}")
        return soft, hard

    soft, hard = require_tool("1200 open file descriptors", find=limits, install="ulimit -Hn")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 1200), hard))
    fds = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]  # the zygote's pipe gets > 1024
    try:
        r = vela_process.run_vela("print('fine')", [], str(tmp_path), 10)
    finally:
        for fd in fds:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert r.returncode == 0 and "fine" in r.output and len(pool.all) == 1


def test_a_partitioner_starts_the_zygote_its_first_compile_uses(pool, tmp_path):
    """Constructing EthosUNGPartitioner starts one zygote in the background (its Vela import
    overlaps edge generation); the compile then uses it, and its import CPU is counted from the
    moment it is ready."""
    from ethosu_ng import EthosUNGCompileSpec, EthosUNGPartitioner

    EthosUNGPartitioner(EthosUNGCompileSpec("ethos-u55-128"))
    EthosUNGPartitioner(EthosUNGCompileSpec("ethos-u85-256"))  # no second zygote
    vela_process.prestart(wait=True)
    assert len(pool.all) == 1
    assert vela_process.cpu_seconds() > 0  # the Vela import, reported at "ready"
    r = vela_process.run_vela("print('compiled')", [], str(tmp_path), 10)
    assert r.returncode == 0 and "compiled" in r.output and len(pool.all) == 1
