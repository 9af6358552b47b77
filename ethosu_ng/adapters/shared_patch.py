# SPDX-License-Identifier: BSD-3-Clause
"""A process-wide patch of torch that nested and concurrent contexts share.

The adapters that speed up upstream's lowering (``lazy_recompile``, ``signature_lookups``)
replace class attributes, which every thread sees. So the first context in installs the patch,
the last one out removes it, and a count under one lock says which is which.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Callable, Iterator, Optional


class SharedPatch:
    """``install()`` on the first entry; ``remove()`` on the last exit, under the lock. What
    ``remove`` returns, if anything, is called after the lock is released (work that may take
    the lock itself)."""

    def __init__(
        self, install: Callable[[], None], remove: Callable[[], Optional[Callable[[], None]]]
    ):
        self.lock = threading.RLock()
        self._install = install
        self._remove = remove
        self._depth = 0

    @contextmanager
    def __call__(self) -> Iterator[None]:
        with self.lock:
            if self._depth == 0:
                self._install()
            self._depth += 1
        try:
            yield
        finally:
            after = None
            with self.lock:
                self._depth -= 1
                if self._depth == 0:
                    after = self._remove()
            if after is not None:
                after()

    def active(self) -> bool:
        with self.lock:
            return self._depth > 0
