# SPDX-License-Identifier: BSD-3-Clause
"""Compiled partitions waiting for ``preprocess``: one cache per ``EthosUNGPartitioner``.

The partitioner compiles every partition before it answers (to move ops to the CPU when Vela
fails); ``preprocess`` must then take those blobs instead of compiling again. A blob is only right
for the settings it was compiled with, so an entry is keyed by the whole ``EthosUNGCompileSpec``
(target, system config, memory mode, Vela flags, ``embed_tosa``, ...) *and* the partition's
``fingerprint``: the same partition asked for another target or without the embedded TOSA graph is
a miss, never another export's blob.

``preprocess`` receives only a partition program and ExecuTorch ``CompileSpec``s, so the cache
travels in node meta of the tagged nodes (``attach``/``attached``), which ``to_backend`` copies
into the partition program; deep copies of the program share the cache instead of duplicating it.
A program tagged by anyone else carries no cache, and ``preprocess`` compiles.

Entries the partitioner compiled but did not hand out (fallback rounds that failed, bisection
candidates) are dropped when ``partition`` returns (``retain``); the rest is bounded in bytes,
oldest first, and every operation holds a lock (Vela worker threads and several lowering threads
may share one partitioner).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Hashable, Iterable, Optional, Tuple

from torch.export import ExportedProgram

if TYPE_CHECKING:
    from ethosu_ng.compile_spec import EthosUNGCompileSpec
    from ethosu_ng.compiler.pipeline import CompiledPartition

CACHE_META = "ethosu_ng_compiled_cache"

Key = Tuple[Hashable, str]

DEFAULT_CAPACITY_BYTES = 512 * 1024 * 1024


@dataclass
class _Entry:
    compiled: CompiledPartition
    uses: int  # final partitions with this key still to be taken by preprocess


class CompiledCache:
    """(compile spec, fingerprint) -> compiled partition. Thread-safe, bounded in blob bytes."""

    def __init__(self, capacity_bytes: int = DEFAULT_CAPACITY_BYTES):
        if isinstance(capacity_bytes, bool) or not isinstance(capacity_bytes, int):
            raise TypeError(f"capacity_bytes must be an int, got {type(capacity_bytes).__name__}")
        if capacity_bytes < 0:
            raise ValueError(f"capacity_bytes must be >= 0, got {capacity_bytes}")
        self.capacity_bytes = capacity_bytes
        self._lock = threading.Lock()
        self._entries: OrderedDict[Key, _Entry] = OrderedDict()
        self._bytes = 0

    @staticmethod
    def key(spec: EthosUNGCompileSpec, fingerprint: Optional[str]) -> Optional[Key]:
        # The whole (frozen, hashable) spec: a field that does not change the blob only costs a
        # miss, a field left out of the key could hand out a wrong blob.
        return None if fingerprint is None else (spec, fingerprint)

    # Copies of a program (executorch deep-copies them) must share the cache, not clone blobs.
    def __copy__(self) -> CompiledCache:
        return self

    def __deepcopy__(self, memo) -> CompiledCache:
        return self

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    @property
    def nbytes(self) -> int:
        with self._lock:
            return self._bytes

    def keys(self) -> list:
        with self._lock:
            return list(self._entries)

    def put(self, key: Optional[Key], compiled: CompiledPartition, uses: int = 1) -> None:
        """Keep ``compiled`` for ``uses`` takes (``set_uses`` changes it). An entry larger than
        the whole capacity is not kept (``preprocess`` will compile it again)."""
        if key is None:
            return
        size = len(compiled.blob)
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self._bytes -= len(old.compiled.blob)
            if size > self.capacity_bytes:
                return
            self._entries[key] = _Entry(compiled, uses)
            self._bytes += size
            while self._bytes > self.capacity_bytes:
                _, gone = self._entries.popitem(last=False)
                self._bytes -= len(gone.compiled.blob)

    def get(self, key: Optional[Key]) -> Optional[CompiledPartition]:
        with self._lock:
            e = self._entries.get(key) if key is not None else None
            return e.compiled if e is not None else None

    def take(self, key: Optional[Key]) -> Optional[CompiledPartition]:
        """The entry for ``key``; removed once taken as often as it was ``put`` for."""
        if key is None:
            return None
        with self._lock:
            e = self._entries.get(key)
            if e is None:
                return None
            e.uses -= 1
            if e.uses <= 0:
                del self._entries[key]
                self._bytes -= len(e.compiled.blob)
            return e.compiled

    def set_uses(self, key: Optional[Key], uses: int) -> None:
        with self._lock:
            e = self._entries.get(key) if key is not None else None
            if e is not None:
                e.uses = uses

    def discard(self, keys: Iterable[Key]) -> None:
        with self._lock:
            for key in keys:
                e = self._entries.pop(key, None)
                if e is not None:
                    self._bytes -= len(e.compiled.blob)

    def retain(self, candidates: Iterable[Key], final: Iterable[Key]) -> None:
        """Drop every key of ``candidates`` that is not in ``final``."""
        final = set(final)
        self.discard(k for k in set(candidates) if k not in final)


def attach(program: ExportedProgram, cache: CompiledCache) -> None:
    """Make ``cache`` reachable from the partition programs ``to_backend`` carves out of
    ``program``: every tagged node carries it (and only tagged nodes end up in a partition)."""
    for n in program.graph_module.graph.nodes:
        if n.meta.get("delegation_tag"):
            n.meta[CACHE_META] = cache
        else:
            n.meta.pop(CACHE_META, None)


def attached(program: ExportedProgram) -> Optional[CompiledCache]:
    """The cache of the partitioner that tagged ``program``'s nodes, if any."""
    for n in program.graph_module.graph.nodes:
        cache = n.meta.get(CACHE_META)
        if isinstance(cache, CompiledCache):
            return cache
    return None
