# SPDX-License-Identifier: BSD-3-Clause
# SPDX-License-Identifier: Apache-2.0
"""Each RESCALE Vela leaves standalone is named with its TOSA pattern and what blocked the fold
(tosa_optimize/rescale_report.py), on graphs compiled by Vela."""

import pytest
from test_rescale_rewrites import _vela, add_sub, square

from ethosu_ng.tosa_optimize.rescale_report import standalone_rescales, summarize


def explained(tosa, target):
    _, _, vela = _vela(tosa, target)
    return {(e["pattern"], e["blocker"]) for e in standalone_rescales(tosa, vela.layers, target)}


@pytest.mark.parametrize("target", ["ethos-u85-256", "ethos-u55-128"])
def test_a_square_names_the_second_consumer_and_the_int32_mul(target):
    got = explained(square([1, 8, 8, 16]), target)
    assert (
        "operand of MUL (from input)",
        "into reader: a second consumer (read 2 times); into writer: its input is a graph input",
    ) in got
    assert (
        "result of MUL (into output)",
        "into reader: its output is a graph output; "
        "into writer: MUL with a 32-bit operand or result takes only a shift",
    ) in got


def test_equal_add_operand_scales_are_outside_the_u55_forms():
    tosa = add_sub("SUB", [1, 8, 8, 16], 19, 19, 6, 6, 2061775431, 50, -1)
    got = explained(tosa, "ethos-u55-128")
    blocker = "into reader: SUB operand scale outside U55/U65's forms (equal scales or a shift)"
    assert (
        "operand of SUB (from input)",
        f"{blocker}; into writer: its input is a graph input",
    ) in got
    assert not explained(tosa, "ethos-u85-256") & {p for p in got if p[0].startswith("operand")}


def test_the_summary_counts_every_layer_once():
    _, _, vela = _vela(square([1, 8, 8, 16]), "ethos-u55-128")
    entries = standalone_rescales(square([1, 8, 8, 16]), vela.layers, "ethos-u55-128")
    rows = summarize(entries)
    assert sum(r["layers"] for r in rows) == len(entries) == 3  # U55: the operand is two layers
    assert sum(r["npu_cycles"] for r in rows) == sum(e["npu_cycles"] for e in entries) > 0
