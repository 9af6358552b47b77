# SPDX-License-Identifier: BSD-3-Clause
"""deferred_recompile: GraphModule code is generated lazily inside, eagerly outside, and the
process-wide patch survives nesting and threads."""

import threading

import torch
from torch.fx import GraphModule, symbolic_trace

from ethosu_ng.adapters import lazy_recompile
from ethosu_ng.adapters.lazy_recompile import deferred_recompile


class _AddOne(torch.nn.Module):
    def forward(self, x):
        return x + 1


def _retarget_to_mul(gm: GraphModule) -> None:
    for n in gm.graph.nodes:
        if n.op == "call_function":
            n.target = torch.mul
    gm.recompile()


def test_code_is_generated_when_run_or_read_and_on_exit():
    x = torch.tensor([3.0])
    a, b, c = (symbolic_trace(_AddOne()) for _ in range(3))
    with deferred_recompile():
        for gm in (a, b, c):
            _retarget_to_mul(gm)
        assert "mul" in a.code  # reading flushes
        assert torch.equal(b(x), torch.tensor([3.0]))  # running flushes: x * 1
    assert "mul" in c.code  # left marked inside: flushed on exit
    assert GraphModule.recompile is lazy_recompile._real_recompile


def test_nested_contexts_restore_only_at_the_outermost_exit():
    gm = symbolic_trace(_AddOne())
    with deferred_recompile():
        with deferred_recompile():
            assert lazy_recompile.is_active()
        assert lazy_recompile.is_active()  # the inner exit must not restore torch's methods
        _retarget_to_mul(gm)
    assert not lazy_recompile.is_active()
    assert "mul" in gm.code


def test_concurrent_contexts_share_one_patch():
    """Two threads entering and leaving in an interleaved order: torch's methods come back only
    when both have left, and every module is correct afterwards."""
    # Generous timeouts: they only bound a hang; a loaded CI machine is slow, not wrong.
    entered, release = threading.Barrier(2, timeout=300), threading.Event()
    modules, errors = [], []

    # Traced here: torch.fx's symbolic_trace patches torch globally and is not thread-safe (two
    # concurrent traces can leave nn.Module.__call__ patched for the rest of the process).
    traced = {True: symbolic_trace(_AddOne()), False: symbolic_trace(_AddOne())}

    def worker(wait: bool):
        try:
            gm = traced[wait]
            with deferred_recompile():
                entered.wait()
                _retarget_to_mul(gm)
                if wait:
                    release.wait(300)
            modules.append(gm)
        except Exception as e:  # noqa: BLE001 - reported by the assert below
            errors.append(e)

    slow = threading.Thread(target=worker, args=(True,))
    fast = threading.Thread(target=worker, args=(False,))
    slow.start()
    fast.start()
    try:
        fast.join(300)
        assert not fast.is_alive() and not errors, errors
        assert lazy_recompile.is_active()  # the slow thread is still inside
    finally:
        release.set()
        slow.join(300)
    assert not errors, errors
    assert not lazy_recompile.is_active()
    assert GraphModule.recompile is lazy_recompile._real_recompile
    assert all("mul" in gm.code for gm in modules) and len(modules) == 2
