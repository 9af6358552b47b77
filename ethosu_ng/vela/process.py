# SPDX-License-Identifier: BSD-3-Clause
"""Vela child processes, forked from a waiting process that has already imported Vela.

Vela runs outside the exporting process so that a Vela crash or hang cannot take the export down
(``vela_compiler``). Starting a fresh interpreter and importing Vela costs about 0.3 s of CPU per
partition (0.27-0.40 s user for the import alone, measured), which a program split into many
partitions pays many times. So a *zygote* is started
once: a small Python process that imports Vela and then, per request, forks a child that runs the
Vela entry point on the request's arguments. Each compile is still its own process, forked from
the same never-used state, so containment and results are as with a fresh interpreter.

Protocol (JSON lines): the request carries the entry point source, its arguments, the caller's
environment and directory, a log path and the time limit; the zygote answers ``{"pid"}`` once it
has forked and ``{"status": waitstatus}`` when the child has ended. The child writes its output to
``log``, and an alarm it sets itself ends it after ``timeout`` s even if the exporting process
has gone. A zygote that misbehaves is discarded and the compile runs in a fresh interpreter.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import queue
import select
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from typing import List, Optional, Tuple

_ZYGOTE = r"""
import json, os, signal, sys
import ethosu.vela.vela  # the import every compile would otherwise pay
# Dispositions and masks are inherited from the exporter: wait4 needs SIGCHLD, the time limit
# SIGALRM.
signal.signal(signal.SIGCHLD, signal.SIG_DFL); signal.signal(signal.SIGALRM, signal.SIG_DFL)
signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGCHLD, signal.SIGALRM})
try:
    import ctypes
    libc = ctypes.CDLL(None)
except Exception:
    libc = None
def die_with_zygote():
    # An orphaned compile must not run on next to the retry the exporter then starts.
    try:
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except Exception:
        pass
t = os.times()
sys.stdout.write("ready %f\n" % (t.user + t.system)); sys.stdout.flush()
for line in sys.stdin:
    req = json.loads(line)
    pid = os.fork()
    if pid == 0:
        try:
            die_with_zygote()
            os.environ.clear(); os.environ.update(req["env"]); os.chdir(req["cwd"])
            null = os.open(os.devnull, os.O_RDONLY)
            log = os.open(req["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            os.dup2(null, 0); os.dup2(log, 1); os.dup2(log, 2)
            signal.alarm(max(1, int(min(req["timeout"] + 0.999, 2 ** 31 - 1))))
            sys.argv = ["vela", *req["argv"]]
            exec(compile(req["main"], "<vela>", "exec"), {"__name__": "__main__"})
            code = 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        except BaseException:
            import traceback; traceback.print_exc(); code = 1
        sys.stdout.flush(); sys.stderr.flush()
        os._exit(code)
    sys.stdout.write(json.dumps({"pid": pid}) + "\n"); sys.stdout.flush()
    _, status, ru = os.wait4(pid, 0)
    t = os.times()
    sys.stdout.write(json.dumps({"status": status, "child_cpu": ru.ru_utime + ru.ru_stime,
                                 "own_cpu": t.user + t.system}) + "\n"); sys.stdout.flush()
"""

# Extra seconds the exporting process waits beyond the child's own alarm before it gives up on
# the zygote as well.
_GRACE_S = 30.0


@dataclass
class Outcome:
    returncode: Optional[int]  # negative: killed by that signal; None: timed out
    output: str
    cpu_seconds: Optional[float] = None  # the child's own CPU time, when a zygote ran it


class _Zygote:
    def __init__(self) -> None:
        env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")  # fork-safe numpy
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _ZYGOTE],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
        )
        try:
            self._start()
        except BaseException:
            self.close()
            raise

    def _start(self) -> None:
        self.out, self.pending = self.proc.stdout.fileno(), b""
        self.poller = select.poll()
        self.poller.register(self.out, select.POLLIN)
        self.child_cpu = self.own_cpu = 0.0  # CPU seconds, as last reported by the zygote
        ready = (self._readline(60.0) or "").split()
        if not ready or ready[0] != "ready":
            raise OSError("Vela zygote did not start")
        self.own_cpu = float(ready[1])  # the Vela import

    def _readline(self, timeout: float) -> Optional[str]:
        # Own buffer over the raw pipe: a buffered reader may hold the next answer already,
        # and select() would then wait for bytes that have arrived.
        deadline = time.monotonic() + timeout
        while b"\n" not in self.pending:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            # poll, not select: select() refuses descriptors >= 1024 and infinite timeouts
            if not self.poller.poll(int(min(left, 3600.0) * 1000) + 1):
                continue
            chunk = os.read(self.out, 1 << 16)
            if not chunk:
                raise OSError("Vela zygote has gone")
            self.pending += chunk
        line, _, self.pending = self.pending.partition(b"\n")
        return line.decode().strip()

    def run(
        self, main: str, argv: List[str], log: str, timeout: float
    ) -> Tuple[Optional[int], float]:
        """The child's wait status, or None if it outlived its alarm by ``_GRACE_S``, and its
        CPU seconds. Raises OSError if the zygote itself failed."""
        req = json.dumps(
            {
                "main": main,
                "argv": argv,
                "log": log,
                "timeout": timeout,
                "env": dict(os.environ),
                "cwd": os.getcwd(),
            }
        )
        self.proc.stdin.write(req.encode() + b"\n")
        self.proc.stdin.flush()
        line = self._readline(_GRACE_S)
        if not line:
            raise OSError("Vela zygote did not fork")
        json.loads(line)["pid"]  # the zygote has forked: from here on, silence is the child's
        line = self._readline(timeout + _GRACE_S)
        if not line:
            return None, 0.0  # the pool kills this zygote, and the child with it (PDEATHSIG)
        answer = json.loads(line)
        self.child_cpu += float(answer["child_cpu"])
        self.own_cpu = float(answer["own_cpu"])
        return int(answer["status"]), float(answer["child_cpu"])

    def close(self) -> None:
        try:
            self.proc.kill()
            self.proc.wait(5)
        except Exception:
            pass
        for f in (self.proc.stdin, self.proc.stdout):
            with contextlib.suppress(Exception):
                f.close()


class _NoZygote(Exception):
    """No zygote could run the compile (none can start, or it failed mid-way)."""


class _ZygotePool:
    """Idle zygotes; a thread takes one for a compile, so parallel compiles use separate ones."""

    def __init__(self) -> None:
        self.idle: queue.SimpleQueue[_Zygote] = queue.SimpleQueue()
        self.all: List[_Zygote] = []
        self.lock = threading.Lock()
        self.broken = False
        self.starting: Optional[threading.Thread] = None  # a prestart in flight or done
        atexit.register(self.close)
        # A forked copy of this process must not talk to (or kill) its parent's zygotes.
        os.register_at_fork(after_in_child=self._forget)

    def _forget(self) -> None:
        self.idle = queue.SimpleQueue()
        self.all = []
        self.lock = threading.Lock()
        self.starting = None

    def prestart(self) -> None:
        """Start a zygote in the background if none exists or is starting, so that its Vela
        import overlaps what the exporter does before its first compile."""
        with self.lock:
            if self.broken or self.all or self.starting is not None:
                return
            self.starting = threading.Thread(target=self._start_one, daemon=True)
            self.starting.start()

    def _start_one(self) -> None:
        z = self._new_zygote()
        if z is not None:
            self.idle.put(z)

    def _new_zygote(self) -> Optional[_Zygote]:
        try:
            z = _Zygote()
        except Exception:
            self.broken = True  # e.g. Vela cannot be imported: fresh interpreters from now on
            return None
        with self.lock:
            self.all.append(z)
        return z

    def run(
        self, main: str, argv: List[str], log: str, timeout: float
    ) -> Tuple[Optional[int], float]:
        """The child's wait status, None when it hung past its own alarm, and its CPU seconds.
        Raises _NoZygote when no zygote could run it."""
        starting = self.starting
        if starting is not None:
            starting.join()  # one zygote at a time, unless compiles run in parallel
        if self.broken:
            raise _NoZygote
        try:
            z = self.idle.get_nowait()
        except queue.Empty:
            z = self._new_zygote()
            if z is None:
                raise _NoZygote from None
        try:
            status, cpu = z.run(main, argv, log, timeout)
        except Exception:
            self._discard(z)
            raise _NoZygote from None
        if status is None:
            self._discard(z)  # its late answer about the killed child would pass for the next one's
        else:
            self.idle.put(z)
        return status, cpu

    def _discard(self, z: _Zygote) -> None:
        # Reaped by us, so its CPU (and its children's) now shows in os.times() instead.
        with self.lock:
            if z in self.all:
                self.all.remove(z)
        z.close()

    def cpu_seconds(self) -> float:
        with self.lock:
            return sum(z.child_cpu + z.own_cpu for z in self.all)

    def close(self) -> None:
        with self.lock:
            for z in self.all:
                z.close()
            self.all.clear()


# Linux only: fork without exec after numpy is loaded is not safe everywhere (macOS).
_POOL = _ZygotePool() if sys.platform.startswith("linux") else None


def cpu_seconds() -> float:
    """CPU seconds used so far by this process's zygotes and the Vela children they reaped:
    children of children, which ``os.times()`` of this process does not count."""
    return _POOL.cpu_seconds() if _POOL is not None else 0.0


def prestart(wait: bool = False) -> None:
    """Start a zygote now, in the background (``EthosUNGPartitioner`` does, at construction);
    ``wait``: until it has imported Vela (or failed to)."""
    if _POOL is not None:
        _POOL.prestart()
        starting = _POOL.starting
        if wait and starting is not None:
            starting.join()


def run_vela(main: str, argv: List[str], workdir: str, timeout: float) -> Outcome:
    """Run the Vela entry point source ``main`` with ``argv`` in a child process."""
    log = os.path.join(workdir, "vela.log")
    try:
        if _POOL is None:
            raise _NoZygote
        status, cpu = _POOL.run(main, argv, log, timeout)
    except _NoZygote:
        return _run_fresh(main, argv, timeout)
    output = ""
    if os.path.exists(log):
        with open(log, errors="replace") as f:
            output = f.read()
    code = None if status is None else os.waitstatus_to_exitcode(status)
    return Outcome(None if code == -signal.SIGALRM else code, output, cpu)


def _run_fresh(main: str, argv: List[str], timeout: float) -> Outcome:
    """In a fresh interpreter: not on Linux, or the zygote failed."""
    try:
        proc = subprocess.run(
            [sys.executable, "-c", main, *argv],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
            timeout=timeout if timeout < 1e6 else None,
        )  # (no overflow)
    except subprocess.TimeoutExpired as e:
        out = e.stdout if isinstance(e.stdout, str) else (e.stdout or b"").decode(errors="replace")
        return Outcome(None, out)
    return Outcome(proc.returncode, proc.stdout)
