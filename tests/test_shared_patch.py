# SPDX-License-Identifier: BSD-3-Clause
"""SharedPatch: installed by the first context in, removed by the last one out, whatever the
nesting and however many threads; a failed install leaves nothing counted."""

import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ethosu_ng.adapters import signature_lookups
from ethosu_ng.adapters.shared_patch import SharedPatch


def _recording_patch():
    log = []
    patch = SharedPatch(lambda: log.append("install"), lambda: log.append("remove"))
    return patch, log


@settings(max_examples=60, deadline=None)
@given(st.lists(st.booleans(), max_size=30))
def test_install_and_remove_follow_the_outermost_context(steps):
    """Each step enters a context (True) or leaves the innermost one (False)."""
    patch, log = _recording_patch()
    open_contexts = []
    expected = []
    for enter in steps + [False] * len(steps):
        if enter:
            cm = patch()
            cm.__enter__()
            if not open_contexts:
                expected.append("install")
            open_contexts.append(cm)
        elif open_contexts:
            open_contexts.pop().__exit__(None, None, None)
            if not open_contexts:
                expected.append("remove")
        assert patch.active() == bool(open_contexts)
    assert log == expected


def test_the_work_after_removal_runs_outside_the_lock():
    taken_elsewhere = []

    def take_and_give_back():
        got = patch.lock.acquire(timeout=2)
        taken_elsewhere.append(got)
        if got:
            patch.lock.release()

    def after():
        t = threading.Thread(target=take_and_give_back)
        t.start()
        t.join()

    patch = SharedPatch(lambda: None, lambda: after)
    with patch():
        pass
    assert taken_elsewhere == [True]


def test_concurrent_contexts_share_one_install():
    patch, log = _recording_patch()
    inside = threading.Barrier(4)

    def worker():
        with patch():
            inside.wait(timeout=10)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert log == ["install", "remove"]
    assert not patch.active()


def test_a_refused_signature_patch_leaves_no_class_patched():
    """A watched class that defines ``__setattr__`` itself stops the install before any class
    is changed."""
    last = signature_lookups.WATCHED[-1]
    last.__setattr__ = object.__setattr__
    try:
        with (
            pytest.raises(TypeError, match=last.__name__),
            signature_lookups.memoized_signature_lookups(),
        ):
            pass
        assert not signature_lookups._patch.active()
        for cls in signature_lookups.WATCHED[:-1]:
            assert "__setattr__" not in cls.__dict__
    finally:
        del last.__setattr__
