# SPDX-License-Identifier: BSD-3-Clause
"""Answer a graph signature's name lookups from the last answer while its input specs stand.

``ExportGraphSignature.inputs_to_parameters`` (and ``..._buffers``, ``..._lifted_tensor_
constants``) build a new dict from every input spec on each access. Upstream's TOSA passes and
ExecuTorch's ``to_backend`` ask it once per node (``is_param_node``, ``get_param_tensor``,
``is_buffer``), so a pass over a graph costs nodes x inputs: on a 32-block ViT stack 66 of
1,054 CPU s of the lowering (cProfile), 17 times the 8-block figure for 4 times the blocks.
``adapters.arm.lower_to_tosa`` runs upstream's lowering inside the context below, and
``adapters.exir.carve_partition`` runs ``to_backend``'s node list inside it.

Inside ``memoized_signature_lookups()`` each lookup keeps its last answer with a shallow copy
of the input-spec list it was built from and a count of attribute writes on input specs and
their arguments. The answer is reused while the signature asked holds the same specs in the
same order (a list comparison, an identity check per element in C) and no spec or argument was
written since; anything else (an insertion, a removal, a replaced spec, a renamed argument)
builds it again with torch's own property.
Patched process-wide and shared by nested and concurrent contexts (``shared_patch``); when the
last one exits torch's properties and ``__setattr__`` are back and the kept answers dropped.
"""

from __future__ import annotations

import typing
from typing import ContextManager, Dict

from torch.export import graph_signature as gs

from ethosu_ng.adapters.shared_patch import SharedPatch

LOOKUPS = ("inputs_to_parameters", "inputs_to_buffers", "inputs_to_lifted_tensor_constants")
# The classes whose attributes an answer is built from: a spec and every kind of argument.
WATCHED = (gs.InputSpec, *typing.get_args(gs.ArgumentSpec))

_real = {name: gs.ExportGraphSignature.__dict__[name] for name in LOOKUPS}
_writes = 0
# lookup -> (the input specs it answered, as they were; writes then; answer). The answer is a
# function of the specs alone, so any signature holding the same specs shares it.
_last: Dict[str, tuple] = {}


def _counted_setattr(self, name, value) -> None:
    global _writes
    _writes += 1
    object.__setattr__(self, name, value)


def _memoized(name: str) -> property:
    real = _real[name].fget

    def lookup(self: gs.ExportGraphSignature):
        with _lock:
            last = _last.get(name)
            if last is not None and last[1] == _writes and last[0] == self.input_specs:
                return last[2]
            writes = _writes
        answer = real(self)
        with _lock:
            _last[name] = (list(self.input_specs), writes, answer)
        return answer

    return property(lookup, doc=_real[name].__doc__)


def _install() -> None:
    for cls in WATCHED:
        if "__setattr__" in cls.__dict__:  # a class of its own making: not ours to wrap
            raise TypeError(f"{cls.__name__} defines __setattr__")
    for cls in WATCHED:
        cls.__setattr__ = _counted_setattr
    for name in LOOKUPS:
        setattr(gs.ExportGraphSignature, name, _memoized(name))


def _remove() -> None:
    for name in LOOKUPS:
        setattr(gs.ExportGraphSignature, name, _real[name])
    for cls in WATCHED:
        del cls.__setattr__
    _last.clear()


_patch = SharedPatch(_install, _remove)
_lock = _patch.lock


def memoized_signature_lookups() -> ContextManager[None]:
    return _patch()
