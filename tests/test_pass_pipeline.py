# SPDX-License-Identifier: BSD-3-Clause
"""The pass pipeline keeps every declared ordering constraint, and disabling is by parameter."""

import pytest

from ethosu_ng import EthosUNGCompileSpec, EthosUNGPartitioner
from ethosu_ng.passes import (
    PRE_PARTITION_PASSES,
    CommuteQDQThroughPassThroughPass,
    FoldQuantizedConstantsPass,
    PassOrderError,
    SliceOnMergedAxisPass,
    check_order,
    pass_pipeline,
)


def test_every_declared_constraint_holds_in_the_pipeline():
    position = {p: k for k, p in enumerate(PRE_PARTITION_PASSES)}
    declared = 0
    for p in PRE_PARTITION_PASSES:
        for before in p.runs_after if hasattr(p, "runs_after") else ():
            assert before in position, f"{p.__name__} runs after {before.__name__}, not a pass"
            assert position[before] < position[p], (p.__name__, before.__name__)
            declared += 1
    assert declared >= len(PRE_PARTITION_PASSES) - 3  # all but the first passes declare some
    check_order(PRE_PARTITION_PASSES)


@pytest.mark.parametrize("k", range(len(PRE_PARTITION_PASSES) - 1))
def test_swapping_a_constrained_pair_is_an_error(k):
    """Every adjacent pair whose order is declared fails the check when swapped."""
    a, b = PRE_PARTITION_PASSES[k], PRE_PARTITION_PASSES[k + 1]
    swapped = list(PRE_PARTITION_PASSES)
    swapped[k], swapped[k + 1] = b, a
    if a in getattr(b, "runs_after", ()):
        with pytest.raises(PassOrderError, match=f"{b.__name__}.*must run after {a.__name__}"):
            check_order(swapped)
    else:
        check_order(swapped)


def test_commute_runs_last_among_qparam_passes():
    with pytest.raises(PassOrderError, match="CommuteQDQThroughPassThroughPass"):
        check_order([CommuteQDQThroughPassThroughPass, FoldQuantizedConstantsPass])


def test_disabling_removes_exactly_that_pass():
    passes = pass_pipeline([SliceOnMergedAxisPass])
    assert SliceOnMergedAxisPass not in passes
    assert len(passes) == len(PRE_PARTITION_PASSES) - 1
    part = EthosUNGPartitioner(
        EthosUNGCompileSpec("ethos-u55-128"), disabled_passes=[SliceOnMergedAxisPass]
    )
    assert SliceOnMergedAxisPass not in part.passes


def test_disabling_an_unknown_pass_names_it():
    class NotAPass:
        pass

    with pytest.raises(PassOrderError, match="NotAPass"):
        pass_pipeline([NotAPass])
