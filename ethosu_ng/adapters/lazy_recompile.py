# SPDX-License-Identifier: BSD-3-Clause
"""Generate a GraphModule's Python code only when someone runs or reads it.

Each of upstream's ~150 TOSA passes builds a new GraphModule and regenerates its ``forward``
source (``GraphModule.recompile``), which nothing reads: measured 17 s of an 82 s mobilenetv2
lowering (cProfile). Inside ``deferred_recompile()`` ``recompile`` only marks the module; its code
is generated when it is called or its ``code`` read, and on exit for every module still alive,
so no module leaves the context stale. Same idea as torch's own ``_LazyGraphModule``, which only
applies to modules built through torch's private factory.

The patch is process-wide (it replaces two ``GraphModule`` attributes), so nested and
concurrent contexts share one (``shared_patch``): the last one out restores torch's methods and
flushes every module still marked.
"""

from __future__ import annotations

import weakref
from typing import Callable, ContextManager

from torch.fx import GraphModule

from ethosu_ng.adapters.shared_patch import SharedPatch

_dirty: weakref.WeakSet[GraphModule] = weakref.WeakSet()
_real_recompile = GraphModule.recompile
_real_code = GraphModule.code


def _flush(gm: GraphModule) -> None:
    with _lock:
        marked = gm in _dirty
        _dirty.discard(gm)
    if marked:
        _real_recompile(gm)


def _run_lazily(self, *args, **kwargs):
    _flush(self)
    return self(*args, **kwargs)


def _mark(self) -> None:
    with _lock:
        _dirty.add(self)
    type(self).forward = _run_lazily  # each GraphModule has its own class


def _code(self) -> str:
    _flush(self)
    return _real_code.fget(self)


def _install() -> None:
    GraphModule.recompile, GraphModule.code = _mark, property(_code)


def _remove() -> Callable[[], None]:
    GraphModule.recompile, GraphModule.code = _real_recompile, _real_code
    pending = list(_dirty)

    def flush_pending() -> None:
        for gm in pending:
            _flush(gm)

    return flush_pending


_patch = SharedPatch(_install, _remove)
_lock = _patch.lock


def deferred_recompile() -> ContextManager[None]:
    return _patch()


def is_active() -> bool:
    """Whether a deferred_recompile context is open (for tests)."""
    return _patch.active()
