# SPDX-License-Identifier: BSD-3-Clause
"""TOSA-to-TOSA rewrites, one per module; ``tosa_optimize.pipeline`` declares their order."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar, Optional, Tuple

if TYPE_CHECKING:
    from ethosu_ng.tosa_optimize.graph import Graph


class TosaRewrite:
    """One rewrite: ``apply`` changes the graph in place and returns how often it applied.

    ``runs_after``: rewrites that must run before it (checked by the pipeline). ``families``:
    the target families it pays on (None: every target). ``family``: the target family the
    pipeline runs for (None: no target named), for a rewrite whose cost rule differs by target.
    """

    runs_after: ClassVar[Tuple[type, ...]] = ()
    families: ClassVar[Optional[Tuple[str, ...]]] = None

    def __init__(self, family: Optional[str] = None):
        self.family = family

    def apply(self, graph: Graph) -> int:
        raise NotImplementedError
