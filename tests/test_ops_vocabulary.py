# SPDX-License-Identifier: BSD-3-Clause
"""Every op name in the op vocabulary (``ethosu_ng.ops``) names a registered operator: a set
matches by name, so a misspelled name would silently match nothing."""

from __future__ import annotations

import executorch.exir.passes.dim_order_ops_registry  # noqa: F401 - registers dim_order_ops
import pytest

from ethosu_ng import ops

# Names that are not operators: the FX node that picks one output of a multi-output op.
NOT_OPERATORS = {"getitem"}

NAME_SETS = {
    k: v
    for k, v in vars(ops).items()
    if k.isupper() and isinstance(v, frozenset) and all(isinstance(n, str) for n in v)
}


def test_the_vocabulary_has_name_sets():
    assert {"AVG_POOL_OPS", "PAD_OPS", "QDQ_OPS", "DATA_MOVEMENT_OPS"} <= set(NAME_SETS)


@pytest.mark.parametrize("name", sorted(NAME_SETS))
def test_every_name_is_a_registered_operator(name):
    names = NAME_SETS[name] - NOT_OPERATORS
    assert ops.resolve_op_names(sorted(names)) == set(names)
