# SPDX-License-Identifier: BSD-3-Clause
"""The pass pipeline keeps every ordering constraint its passes' aspects imply, and disabling is by
parameter."""

import re

import pytest

from ethosu_ng import EthosUNGCompileSpec, EthosUNGPartitioner
from ethosu_ng.passes import (
    PRE_PARTITION_PASSES,
    Aspect,
    CommuteQDQThroughPassThroughPass,
    FoldQuantizedConstantsPass,
    PassOrderError,
    ProgramPass,
    SliceOnMergedAxisPass,
    check_order,
    pass_pipeline,
)
from ethosu_ng.passes.pipeline import must_run_after


def test_every_pass_is_a_program_pass_with_its_aspects():
    for p in PRE_PARTITION_PASSES:
        assert issubclass(p, ProgramPass), p.__name__
        assert p.modifies, f"{p.__name__} modifies nothing"
        assert not hasattr(p, "runs_after"), f"{p.__name__}: ordering is by aspects"
    check_order(PRE_PARTITION_PASSES)
    # Every aspect some pass requires is modified by another: a requirement binds something.
    modified = set().union(*(p.modifies for p in PRE_PARTITION_PASSES))
    for p in PRE_PARTITION_PASSES:
        assert p.requires <= modified, (p.__name__, p.requires - modified)


@pytest.mark.parametrize("k", range(len(PRE_PARTITION_PASSES) - 1))
def test_swapping_a_constrained_pair_is_an_error(k):
    """Every adjacent pair whose order the aspects imply fails the check when swapped."""
    a, b = PRE_PARTITION_PASSES[k], PRE_PARTITION_PASSES[k + 1]
    swapped = list(PRE_PARTITION_PASSES)
    swapped[k], swapped[k + 1] = b, a
    if must_run_after(b, a):
        with pytest.raises(PassOrderError, match=f"{b.__name__}.*must run after {a.__name__}"):
            check_order(swapped)
    else:
        check_order(swapped)


def test_a_pass_runs_after_every_pass_that_modifies_what_it_requires():
    pairs = 0
    for p in PRE_PARTITION_PASSES:
        for q in PRE_PARTITION_PASSES:
            shared = p.requires & q.modifies
            if p is q or not shared:
                continue
            aspect = sorted(a.value for a in shared)[0]
            with pytest.raises(
                PassOrderError, match=f"{p.__name__}.*{q.__name__}.*{re.escape(aspect)}"
            ):
                check_order([p, q])
            pairs += 1
    assert pairs >= 24  # the orderings the pipeline relied on before aspects were declared


def test_a_new_pass_is_ordered_by_what_it_declares():
    """A pass that changes qparams, added after the Q/DQ commute, is an error naming the commute:
    nobody has to remember that the commute reads final qparams."""

    class RetuneQParamsPass(ProgramPass):
        modifies = frozenset({Aspect.QPARAMS})

    with pytest.raises(PassOrderError, match="CommuteQDQThroughPassThroughPass.*RetuneQParams"):
        check_order(list(PRE_PARTITION_PASSES) + [RetuneQParamsPass])
    k = PRE_PARTITION_PASSES.index(CommuteQDQThroughPassThroughPass)
    check_order(
        list(PRE_PARTITION_PASSES[:k]) + [RetuneQParamsPass] + list(PRE_PARTITION_PASSES[k:])
    )


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
