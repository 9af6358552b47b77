# SPDX-License-Identifier: BSD-3-Clause
"""Memoized graph-signature lookups answer as torch's properties do, whatever changed between
two lookups: a spec inserted, removed or replaced, an argument renamed, a kind or target
written, the list reassigned, a new signature."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from torch.export.graph_signature import (
    ConstantArgument,
    ExportGraphSignature,
    InputKind,
    InputSpec,
    TensorArgument,
)

from ethosu_ng.adapters.signature_lookups import LOOKUPS, _real, memoized_signature_lookups

KINDS = [InputKind.PARAMETER, InputKind.BUFFER, InputKind.CONSTANT_TENSOR, InputKind.USER_INPUT]
NAMES = [f"n{i}" for i in range(6)]


def _spec(kind, name, target):
    if kind == InputKind.USER_INPUT:
        return InputSpec(kind, TensorArgument(name), None)
    return InputSpec(kind, TensorArgument(name), target, True if kind == InputKind.BUFFER else None)


specs = st.builds(_spec, st.sampled_from(KINDS), st.sampled_from(NAMES), st.sampled_from(NAMES))
steps = st.lists(
    st.one_of(
        st.tuples(st.just("lookup"), st.sampled_from(LOOKUPS)),
        st.tuples(st.just("insert"), st.integers(0, 8), specs),
        st.tuples(st.just("remove"), st.integers(0, 8)),
        st.tuples(st.just("replace"), st.integers(0, 8), specs),
        st.tuples(st.just("rename"), st.integers(0, 8), st.sampled_from(NAMES)),
        st.tuples(st.just("target"), st.integers(0, 8), st.sampled_from(NAMES)),
        st.tuples(st.just("kind"), st.integers(0, 8), st.sampled_from(KINDS[:3])),
        st.tuples(st.just("constant_arg"), st.integers(0, 8)),
        st.tuples(st.just("reassign"), st.lists(specs, max_size=5)),
        st.tuples(
            st.just("new_signature"),
        ),
    ),
    max_size=40,
)


@settings(max_examples=300, deadline=None)
@given(st.lists(specs, max_size=6), steps)
def test_memoized_lookups_answer_as_torch_does(initial, script):
    signature = ExportGraphSignature(list(initial), [])
    with memoized_signature_lookups():
        for step in script:
            items = signature.input_specs
            op, args = step[0], step[1:]
            if op == "lookup":
                got = getattr(signature, args[0])
                assert dict(got) == dict(_real[args[0]].fget(signature)), step
            elif op == "insert":
                items.insert(args[0], args[1])
            elif items and op == "remove":
                items.pop(args[0] % len(items))
            elif items and op == "replace":
                items[args[0] % len(items)] = args[1]
            elif items and op == "rename":
                items[args[0] % len(items)].arg.name = args[1]
            elif items and op == "target":
                items[args[0] % len(items)].target = args[1]
            elif items and op == "kind":
                items[args[0] % len(items)].kind = args[1]
            elif items and op == "constant_arg":
                spec = items[args[0] % len(items)]
                spec.arg = ConstantArgument(spec.arg.name, 1)
            elif op == "reassign":
                signature.input_specs = list(args[0])
            elif op == "new_signature":
                signature = ExportGraphSignature(list(items), [])
    for name in LOOKUPS:  # torch's own properties again outside the context
        assert type(ExportGraphSignature.__dict__[name]) is property
        assert ExportGraphSignature.__dict__[name] is _real[name]
    assert "__setattr__" not in TensorArgument.__dict__


def test_a_repeated_lookup_is_not_rebuilt():
    signature = ExportGraphSignature(
        [_spec(InputKind.BUFFER, f"b{i}", f"t{i}") for i in range(100)], []
    )
    with memoized_signature_lookups():
        first = signature.inputs_to_buffers
        assert signature.inputs_to_buffers is first
        signature.input_specs[3].arg.name = "renamed"
        assert "renamed" in signature.inputs_to_buffers
