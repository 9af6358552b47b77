# SPDX-License-Identifier: BSD-3-Clause
"""TOSA-to-TOSA rewrites, one per module; ``tosa_optimize.pipeline`` declares their order."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar, Optional, Tuple

if TYPE_CHECKING:
    from ethosu_ng.compile_spec import EthosUNGCompileSpec
    from ethosu_ng.tosa_optimize.graph import Graph


class TosaRewrite:
    """One rewrite: ``apply`` changes the graph in place and returns how often it applied.

    ``runs_after``: rewrites that must run before it (checked by the pipeline). ``families``:
    the target families it pays on (None: every target). ``family``: the target family the
    pipeline runs for (None: no target named), for a rewrite whose cost rule differs by target;
    ``spec``: the compile spec Vela compiles the graph with (None: not known), for a rewrite that
    pays only under some of Vela's memory modes or asks Vela what it costs.
    """

    runs_after: ClassVar[Tuple[type, ...]] = ()
    families: ClassVar[Optional[Tuple[str, ...]]] = None

    def __init__(self, family: Optional[str] = None, spec: Optional[EthosUNGCompileSpec] = None):
        self.family = family
        self.spec = spec

    def apply(self, graph: Graph) -> int:
        raise NotImplementedError
