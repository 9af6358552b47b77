"""A method loaded with ``ethosu_ng.runtime.load_pte`` keeps its program and ``.pte`` bytes alive.

``executorch.runtime``'s ``Method`` holds no reference to its ``Program``; the program reads the
``.pte`` buffer in place (our delegate's blob, IO table and TOSA section included). With
``Runtime.get().load_program(bytes(pte)).load_method("forward")`` the bytes are freed at once and
``execute`` reads freed memory (measured on this script: a segfault; other runs showed "Invalid
TOSA graph" and a tensor of size -1100623411). The check runs in a child process so a regression
is a failed test, not a dead test session.
"""

import subprocess
import sys
import textwrap

import pytest
import torch
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


@pytest.fixture(scope="module")
def conv():
    ngrt.load_host_runtime()
    torch.manual_seed(0)
    x = SmallConv.example()
    return Lowered(SmallConv(), x, feeds=_feeds(x))


def test_method_outlives_every_other_reference(conv, tmp_path):
    pte, data = tmp_path / "m.pte", tmp_path / "io.pt"
    pte.write_bytes(conv.pte)
    torch.save((list(conv.feeds[0]), conv.tosa_refs[0][0]), data)
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(pte), str(data)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0 and "LIFETIME-OK" in proc.stdout, proc.stdout[-4000:]


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
