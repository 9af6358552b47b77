# SPDX-License-Identifier: BSD-3-Clause
# SPDX-License-Identifier: Apache-2.0
"""The precision advisor picks int16 modules by measurement and keeps to its cycle budget."""

from __future__ import annotations

import itertools

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from ethosu_ng import EthosUNGCompileSpec
from ethosu_ng.export import quantize
from ethosu_ng.precision import ModuleRow, PrecisionAdvice, advise, choose, choose_down


class Mixer(nn.Module):
    """Token-mixing residual block whose normalisation and softmax lose most in int8."""

    def __init__(self, dim: int):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.fc = nn.Linear(dim, dim)

    def forward(self, x):
        return x + torch.softmax(self.fc(self.norm(x)) * 4, -1)


class Stack(nn.Module):
    def __init__(self, depth: int = 6, dim: int = 16):
        super().__init__()
        self.blocks = nn.Sequential(*[Mixer(dim) for _ in range(depth)])
        self.head = nn.Linear(dim, 4)

    def forward(self, x):
        return self.head(self.blocks(x))


def _setup(seed=0):
    torch.manual_seed(seed)
    g = torch.Generator().manual_seed(seed)
    calib = [(torch.randn(1, 8, 16, generator=g) * 3,) for _ in range(2)]
    spec = EthosUNGCompileSpec("ethos-u85-256", verify_npu=False, verify_lowering=False)
    return Stack().eval(), calib, spec


def _rows():
    # module, gain alone (dB), int8 cycles, int16 cycles
    return [
        ModuleRow("a", 3.0, 100, 110),
        ModuleRow("b", 2.0, 100, 220),
        ModuleRow("c", 1.0, 100, 105),
        ModuleRow("d", 0.0, 100, 100),
        ModuleRow("e", -0.5, 100, 101),
    ]


def _fake(border_cycles: float):
    """SQNR of a set: the sum of its gains; its real cycles: int8 + extras + a border cost per
    module (the int8 <-> int16 requantizations the per-module figures do not contain)."""
    rows = {r.module: r for r in _rows()}
    measured, lowered = [], []

    def measure_set(chosen):
        measured.append(list(chosen))
        return 10.0 + sum(rows[m].sqnr_gain_db for m in chosen)

    def lower_set(chosen):
        lowered.append(list(chosen))
        return 500 + sum(rows[m].extra_cycles + border_cycles for m in chosen)

    return measure_set, lower_set, measured, lowered


def test_choice_by_gain_per_cycle_until_the_goal():
    rows = _rows()
    measure_set, lower_set, measured, _ = _fake(0)
    sqnr, cycles = choose(rows, 10.0, 16.0, 500, 0.9, 1.25, measure_set, lower_set)
    # a (0.3 dB/cycle), then c (0.2); b (120 extra cycles) would break 625; d, e gain nothing.
    assert [r.module for r in rows if r.chosen] == ["a", "c"]
    assert sqnr == 14.0 and cycles == 515
    assert measured == [["a"], ["a", "c"]]


def test_choice_backs_off_when_the_real_cycles_break_the_budget():
    rows = _rows()
    measure_set, lower_set, _, lowered = _fake(border_cycles=60)
    sqnr, cycles = choose(rows, 10.0, 16.0, 500, 0.9, 1.25, measure_set, lower_set)
    assert cycles <= 1.25 * 500, cycles
    # a + c cost 500 + 15 + 120 = 635 > 625: c (the smaller gain per cycle) leaves.
    assert [r.module for r in rows if r.chosen] == ["a"] and sqnr == 13.0 and cycles == 570
    assert lowered == [["a", "c"], ["a"]]


def test_choice_stops_once_the_goal_is_reached():
    rows = _rows()
    measure_set, lower_set, measured, _ = _fake(0)
    choose(rows, 10.0, 13.0, 500, 0.9, 1.25, measure_set, lower_set)  # goal: 2.7 dB
    assert [r.module for r in rows if r.chosen] == ["a"] and measured == [["a"]]


def _blocks():
    """A transformer's measurement: three blocks that gain next to nothing (or lose) alone from
    int8 but lose 9-11 dB each alone back in int8 from int16, and an embedding whose int16
    costs most and gives nothing (deit_tiny's shape, docs/accuracy.md)."""
    return [
        ModuleRow("embed", -0.1, 300, 600, sqnr_loss_db=0.0),
        ModuleRow("b0", 0.1, 100, 160, sqnr_loss_db=10.0),
        ModuleRow("b1", -0.05, 100, 160, sqnr_loss_db=9.0),
        ModuleRow("b2", 0.0, 100, 160, sqnr_loss_db=11.0),
    ]


def _together(border_cycles: float = 0):
    """SQNR: 6 dB, plus 27 dB only with every block int16 (11 with two of them); cycles: int8
    plus extras plus a border cost per module."""
    rows = {r.module: r for r in _blocks()}
    lowered = []

    def measure_set(chosen):
        blocks = sum(m.startswith("b") for m in chosen)
        return 6.0 + {3: 27.0, 2: 11.0}.get(blocks, 0.0)

    def lower_set(chosen):
        lowered.append(sorted(chosen))
        return 600 + sum(rows[m].extra_cycles + border_cycles for m in chosen)

    return measure_set, lower_set, lowered


def test_choice_from_int16_keeps_the_blocks_and_drops_the_costly_embedding():
    rows = _blocks()
    measure_set, lower_set, lowered = _together()
    # Budget 1.4 x 600 = 840; all int16 is 1,080: the embedding (no loss, 300 cycles) leaves.
    sqnr, cycles = choose_down(rows, 6.0, 600, 1.4, measure_set, lower_set)
    assert [r.module for r in rows if r.chosen] == ["b0", "b1", "b2"]
    assert sqnr == 33.0 and cycles == 780 and lowered == [["b0", "b1", "b2"]]
    # From int8 the same rows find nothing: one block alone gains 0.1 dB, the others nothing.
    up = _blocks()
    up_sqnr, _ = choose(up, 6.0, 33.0, 600, 0.9, 1.4, measure_set, lower_set)
    assert [r.module for r in up if r.chosen] == ["b0"] and up_sqnr == 6.0


def test_choice_from_int16_re_measures_the_losses_in_the_set_it_shrinks():
    rows = _blocks()
    # In the all-int16 set b1 loses least (9 dB); without the embedding, b0 does (2 dB, b1
    # 12): the losses the set's second shrink goes by are measured in that set, not the table's.
    in_set = {"b0": 31.0, "b1": 21.0, "b2": 30.0}  # SQNR of the blocks but this one
    lowered = []

    def measure_set(chosen):
        blocks = sorted(m for m in chosen if m.startswith("b"))
        if len(blocks) == 2:
            return in_set[({"b0", "b1", "b2"} - set(blocks)).pop()]
        return 6.0 + {3: 27.0}.get(len(blocks), 0.0)

    def lower_set(chosen):
        lowered.append(sorted(chosen))
        return 600 + sum({"embed": 300}.get(m, 60) + 30 for m in chosen)

    # 780 + 3 x 30 = 870 > 840 real: one block leaves, b0.
    sqnr, cycles = choose_down(rows, 6.0, 600, 1.4, measure_set, lower_set)
    assert [r.module for r in rows if r.chosen] == ["b1", "b2"]
    assert cycles == 600 + 2 * 90 and sqnr == 31.0
    assert lowered == [["b0", "b1", "b2"], ["b1", "b2"]]


def _mobilevit_rows():
    """docs/accuracy.md's mobilevit_xxs table in thousands of cycles: the attention stage loses
    most and costs most; single-module losses add up here."""
    return [
        ModuleRow("attn", 2.3, 13_620, 16_590, sqnr_loss_db=4.5),
        ModuleRow("s3", 0.5, 3_160, 4_170, sqnr_loss_db=2.2),
        ModuleRow("s1", 0.7, 680, 2_240, sqnr_loss_db=1.1),
        ModuleRow("s0", 0.0, 460, 1_050, sqnr_loss_db=0.0),
        ModuleRow("stem", -0.5, 620, 690, sqnr_loss_db=0.2),
        ModuleRow("fc", 0.0, 20, 90, sqnr_loss_db=0.4),
    ]


def test_the_excess_leaves_at_the_least_loss_not_by_loss_per_cycle():
    rows = _mobilevit_rows()
    loss = {r.module: r.sqnr_loss_db for r in rows}
    lowered = []

    def lower_set(chosen):  # the set's borders cost 30 % over the table
        lowered.append(sorted(chosen))
        return 19_700 + 1.3 * sum(r.extra_cycles for r in rows if r.module in chosen)

    def measure_set(chosen):
        return 26.5 + sum(loss[m] for m in chosen)

    # Budget 24,625: the table is 1,345 over (s0 and s1 cover it at 1.1 dB); lowered, 431 over:
    # s3 leaves (2.2 dB); by loss per cycle saved the attention stage would (4.5 dB).
    sqnr, cycles = choose_down(rows, 26.5, 19_700, 1.25, measure_set, lower_set)
    assert sorted(r.module for r in rows if r.chosen) == ["attn", "fc", "stem"]
    assert sqnr == pytest.approx(26.5 + 5.1) and cycles <= 1.25 * 19_700
    assert len(lowered) == 2


def test_the_cheapest_covers_are_measured_not_added():
    """Dropping three small modules together loses less than the sum of what each loses alone
    (mobilevit_xxs: its attention stage, or the stages around it): the covers are ranked by
    summed loss, then the set each leaves is measured and the best kept."""
    rows = [
        ModuleRow("attn", 2.4, 1000, 1300, sqnr_loss_db=4.0),
        ModuleRow("s3", 0.7, 1000, 1110, sqnr_loss_db=1.5),
        ModuleRow("s4", 0.4, 1000, 1110, sqnr_loss_db=1.5),
        ModuleRow("fc", 0.0, 1000, 1110, sqnr_loss_db=1.5),
    ]
    small = {"s3", "s4", "fc"}

    def measure_set(chosen):
        chosen = set(chosen)
        if not small & chosen:  # the three gain only together: 4.5 dB summed, 2.5 measured
            return 30.0 + 4.0 * ("attn" in chosen)
        return 26.0 + 4.0 * ("attn" in chosen) + 1.5 * len(small & chosen) + 2.0

    def lower_set(chosen):
        return 4000 + sum(r.extra_cycles for r in rows if r.module in chosen)

    # budget 4,350: 280 over; {attn} (4.0 dB summed) or {s3, s4, fc} (4.5 summed, 2.5 measured)
    sqnr, cycles = choose_down(rows, 26.0, 4000, 4350 / 4000, measure_set, lower_set)
    assert [r.module for r in rows if r.chosen] == ["attn"] and sqnr == 34.0 and cycles == 4300


@st.composite
def _additive_tables(draw):
    n = draw(st.integers(1, 8))
    rows = [
        ModuleRow(
            f"m{k}",
            0.0,
            100.0,
            100.0 + draw(st.sampled_from([-10, 0, 10, 40, 70, 150, 300])),
            sqnr_loss_db=draw(st.floats(0.0, 10.0)),
        )
        for k in range(n)
    ]
    return rows, draw(st.floats(500, 2000)), draw(st.floats(1.0, 2.0))


@settings(max_examples=300, deadline=None)
@given(_additive_tables())
def test_from_int16_the_choice_is_the_best_set_within_budget_when_losses_add_up(drawn):
    """Where each module's loss is the same in every set and the table's cycles are the
    lowering's, no subset of the candidates within budget measures higher than the choice."""
    rows, int8_cycles, budget_x = drawn
    loss = {r.module: r.sqnr_loss_db for r in rows}
    extra = {r.module: max(r.extra_cycles, 0.0) for r in rows}

    def measure_set(chosen):
        return 6.0 + sum(loss[m] for m in chosen)

    def lower_set(chosen):
        return int8_cycles + sum(extra[m] for m in chosen)

    sqnr, cycles = choose_down(rows, 6.0, int8_cycles, budget_x, measure_set, lower_set)
    best = max(
        measure_set(subset)
        for k in range(len(rows) + 1)
        for subset in itertools.combinations(loss, k)
        if lower_set(subset) <= budget_x * int8_cycles
    )
    assert cycles <= budget_x * int8_cycles
    assert sqnr == pytest.approx(best), [(r.module, r.chosen) for r in rows]


def test_the_table_says_which_end_the_choice_came_from():
    rows = _blocks()
    for r in rows[1:]:
        r.chosen = True
    a = PrecisionAdvice(6.0, 33.0, 33.0, 600, 1080, 780, 0.9, 1.4, 1, rows, "down")
    assert a.reached and "down from int16" in a.table() and "loss dB" in a.table()
    int8 = [r.module for r in rows if not r.chosen]
    assert a.quantizer_args == {
        "activation_dtype": torch.int16,
        "module_dtypes": {m: torch.int8 for m in int8},
    }
    assert a.cli_args == "--precision int16" + "".join(f" --int8-module {m}" for m in int8)
    # given candidates, the down choice keeps the rest of the model int8
    a.base = "int8"
    assert "down from the candidates in int16" in a.table()
    int16 = [r.module for r in rows if r.chosen]
    assert a.module_dtypes == {m: torch.int16 for m in int16} and int16
    assert a.cli_args == "--precision int8" + "".join(f" --int16-module {m}" for m in int16)


@pytest.fixture(scope="module")
def whole_int16():
    model, calib, spec = _setup()
    return advise(model, calib[0], spec, calibration=calib, cycle_budget=10.0)


@pytest.mark.slow
def test_whole_int16_within_budget_is_the_choice(whole_int16):
    a = whole_int16
    assert a.strategy == "int16" and a.rows == [] and a.reached, a.table()
    assert a.int8_cycles < a.int16_cycles <= a.cycle_budget * a.int8_cycles
    assert a.chosen_sqnr_db == a.int16_sqnr_db and a.chosen_cycles == a.int16_cycles
    assert a.quantizer_args == {"activation_dtype": torch.int16, "module_dtypes": {}}
    assert "the whole model int16" in a.table()
    assert a.table().endswith("ethosu-ng compile ... --precision int16")


@pytest.fixture(scope="module")
def advice(whole_int16):
    """The advice with the budget halfway to the all-int16 cycles (whole int16 does not fit)
    and the whole gain asked for (from int8, the blocks gain too little alone)."""
    model, calib, spec = _setup()
    budget = 1 + (whole_int16.int16_cycles / whole_int16.int8_cycles - 1) / 2
    a = advise(model, calib[0], spec, calibration=calib, cycle_budget=budget, gain_share=1.0)
    return a, model, calib, spec


@pytest.mark.slow
def test_the_advice_is_measured_and_kept_to_its_budget(advice):
    a, model, calib, spec = advice
    # Depth 2 of the module tree: the first with six modules that own NPU cycles.
    assert [r.module for r in a.rows] == [f"blocks.{k}" for k in range(6)] + ["head"]
    assert a.int16_sqnr_db > a.int8_sqnr_db  # the premise: int16 is worth something here
    assert a.int16_cycles > a.cycle_budget * a.int8_cycles
    assert all(r.int8_cycles > 0 and r.int16_cycles > 0 for r in a.rows)
    assert a.chosen_cycles <= a.cycle_budget * a.int8_cycles
    if a.reached:
        assert a.chosen_sqnr_db - a.int8_sqnr_db >= a.gain_share * (
            a.int16_sqnr_db - a.int8_sqnr_db
        )
    # The choice is a quantizer argument a user keeps; it reproduces the measured SQNR.
    from ethosu_ng.precision import batch_outputs, sqnr_db

    q = quantize(model, calib[0], spec, calibration=calib, **a.quantizer_args)
    assert sqnr_db(batch_outputs(q, calib), batch_outputs(model, calib)) == pytest.approx(
        a.chosen_sqnr_db, abs=1e-6
    )
    table = a.table()
    assert all(r.module in table for r in a.rows) and "chosen" in table
    # chosen rows are int16: modules made int16 in an int8 model, or the rest int8 in int16
    int16 = {r.module for r in a.rows if r.chosen}
    want = "int16" if a.base == "int8" else "int8"
    assert a.as_dict()["module_dtypes"] == {
        r.module: want for r in a.rows if (r.module in int16) == (a.base == "int8")
    }
    assert a.as_dict()["activation_dtype"] == a.base == ("int8" if a.strategy == "up" else "int16")
    # the command line that rebuilds the choice
    flag = "--int16-module" if a.base == "int8" else "--int8-module"
    assert table.endswith(
        f"--precision {a.as_dict()['activation_dtype']}"
        + "".join(f" {flag} {m}" for m in a.module_dtypes)
    )


@pytest.mark.slow
def test_given_candidates_only_they_may_be_int16(whole_int16):
    """With candidates given the rest of the model stays int8: no whole-int16 choice (even with
    the budget for it), no down choice from the all-int16 model."""
    model, calib, spec = _setup()
    names = ["blocks.0", "blocks.3", "head"]
    for budget in (10.0, 1 + (whole_int16.int16_cycles / whole_int16.int8_cycles - 1) / 2):
        a = advise(
            model,
            calib[0],
            spec,
            calibration=calib,
            candidates=names,
            cycle_budget=budget,
            gain_share=1.0,
        )
        assert a.strategy != "int16" and a.activation_dtype == torch.int8, a.table()
        assert set(a.module_dtypes) <= set(names) and a.base == "int8", a.table()
        assert all(d == torch.int16 for d in a.module_dtypes.values())
        q = quantize(model, calib[0], spec, calibration=calib, **a.quantizer_args)
        from ethosu_ng.precision import batch_outputs, sqnr_db

        got = sqnr_db(batch_outputs(q, calib), batch_outputs(model, calib))
        assert got == pytest.approx(a.chosen_sqnr_db, abs=1e-6)


@pytest.mark.slow
def test_no_cycle_budget_means_no_module_that_costs_cycles(caplog):
    model, calib, spec = _setup(1)
    with caplog.at_level("INFO", logger="ethosu_ng.precision"):
        a = advise(model, calib[0], spec, calibration=calib, cycle_budget=1.0)
    assert all(r.extra_cycles <= 0 for r in a.rows if r.chosen), a.table()
    # progress goes to the module's logger (the CLI prints it): each measurement, each lowering
    said = [r.getMessage() for r in caplog.records if r.name == "ethosu_ng.precision"]
    assert said[0].startswith("int8 ") and any(line.startswith("blocks.0: ") for line in said)


def test_bad_advisor_arguments_name_the_culprit():
    model, calib, spec = _setup()
    with pytest.raises(ValueError, match="cycle_budget"):
        advise(model, calib[0], spec, cycle_budget=0.5)
    with pytest.raises(ValueError, match="gain_share"):
        advise(model, calib[0], spec, gain_share=0)
    with pytest.raises(ValueError, match=r"\['blocks\.9'\] are not modules"):
        advise(model, calib[0], spec, candidates=["blocks.9"])


@st.composite
def _tables(draw):
    """Measured rows (extras may be 0 or negative), the int8 cycles, a budget and how much the
    lowered sets cost over the table: a uniform factor on every chosen module's extra (its
    border requantizations), 1x to 3x."""
    n = draw(st.integers(1, 10))
    rows = [
        ModuleRow(
            f"m{k}",
            draw(st.floats(-0.5, 5.0)),
            100.0,
            100.0 + draw(st.sampled_from([-10, 0, 10, 40, 70, 150, 300])),
            sqnr_loss_db=draw(st.floats(-0.1, 10.0)),
        )
        for k in range(n)
    ]
    return rows, draw(st.floats(500, 2000)), draw(st.floats(1.0, 2.0)), draw(st.floats(1.0, 3.0))


@settings(max_examples=300, deadline=None)
@given(_tables(), st.sampled_from(["up", "down", "down from int16"]), st.floats(0.0, 0.3))
def test_the_choice_fits_the_budget_in_at_most_two_lowerings(drawn, end, rest):
    """Over measured tables: the set reported is within budget and its cycles are those of its
    lowering; when the table is off by one factor, the first lowering shows it and the second
    fits (one lowering per dropped module cost deit_tiny a Vela run each). From the all-int16
    model, the set without candidates keeps the rest of the model int16 (``rest``: its extra
    cycles over int8, a share of the int8 cycles); that set's figures are ``empty()``'s."""
    rows, int8_cycles, budget_x, border = drawn
    extra = {r.module: max(r.extra_cycles, 0.0) for r in rows}
    base = int8_cycles * (1 + rest) if end == "down from int16" else int8_cycles
    lowered = []

    def lower_set(chosen):
        lowered.append(sorted(chosen))
        return base + border * sum(extra[m] for m in chosen)

    def measure_set(chosen):
        return 6.0 + len(chosen)

    if end == "up":
        sqnr, cycles = choose(
            rows, 6.0, 6.0 + len(rows), int8_cycles, 1.0, budget_x, measure_set, lower_set
        )
    elif end == "down":
        sqnr, cycles = choose_down(rows, 6.0, int8_cycles, budget_x, measure_set, lower_set)
    else:
        sqnr, cycles = _down_from_int16(rows, int8_cycles, budget_x, base, measure_set, lower_set)
    chosen = sorted(r.module for r in rows if r.chosen)
    if chosen or end != "down from int16":
        assert cycles <= budget_x * int8_cycles
    if chosen or end == "down from int16":
        assert cycles == lower_set(chosen)
        lowered.pop()  # the check's own call
    else:
        assert cycles == int8_cycles
    assert sqnr == measure_set(chosen)
    assert len(lowered) <= 2, lowered
    assert all(set(b) < set(a) for a, b in zip(lowered, lowered[1:])), lowered


def _down_from_int16(rows, int8_cycles, budget_x, base, measure_set, lower_set):
    """``choose_down`` from the all-int16 model (``base`` cycles), SQNR 6 dB a module."""
    empty = lambda: (measure_set([]), lower_set([]))  # noqa: E731
    return choose_down(
        rows, 6.0, int8_cycles, budget_x, measure_set, lower_set, base_cycles=base, empty=empty
    )


@settings(max_examples=300, deadline=None)
@given(_tables(), st.floats(0.0, 0.3), st.floats(0.0, 0.2))
def test_from_int16_each_int8_island_costs_its_borders(drawn, rest, island):
    """From the all-int16 model the borders come from the modules made int8: each costs
    ``island`` x int8 cycles more, however few the int16 rows (not a factor on their extras,
    which the estimate assumes). Whatever the set it ends on, its cycles are its lowering's,
    within budget unless no module is left int16 (``empty()``'s figures, which ``advise``
    rejects when over), and each lowering is of a strictly smaller set."""
    rows, int8_cycles, budget_x, _ = drawn
    extra = {r.module: max(r.extra_cycles, 0.0) for r in rows}
    base = int8_cycles * (1 + rest)
    lowered = []

    def lower_set(chosen):
        lowered.append(sorted(chosen))
        islands = len(rows) - len(chosen)
        return base + sum(extra[m] for m in chosen) + island * int8_cycles * islands

    def measure_set(chosen):
        return 6.0 + len(chosen)

    sqnr, cycles = _down_from_int16(rows, int8_cycles, budget_x, base, measure_set, lower_set)
    chosen = sorted(r.module for r in rows if r.chosen)
    assert cycles == lower_set(chosen) and sqnr == measure_set(chosen)
    lowered.pop()  # the check's own call
    if chosen:
        assert cycles <= budget_x * int8_cycles
    assert all(set(b) < set(a) for a, b in zip(lowered, lowered[1:])), lowered
    assert len(lowered) <= len(rows) + 1


@settings(max_examples=200, deadline=None)
@given(_additive_tables(), st.floats(0.0, 1.0, exclude_min=True), st.booleans())
def test_a_cover_covers_and_no_row_with_a_loss_could_leave_it(drawn, share, exact):
    """Both searches (every subset; least loss per cycle above ``EXACT_COVER_ROWS`` rows) return
    covers of the excess (every paying row where they cannot) in which no row that loses
    something is spare; the exhaustive one's first is the cheapest of all covers."""
    import ethosu_ng.precision as precision

    rows, _, _ = drawn
    loss = {r.module: r.sqnr_loss_db for r in rows}
    paying = [r for r in rows if r.extra_cycles > 0]
    need = share * sum(r.extra_cycles for r in paying) or share  # no paying row: any excess
    limit = precision.EXACT_COVER_ROWS if exact else 0
    old, precision.EXACT_COVER_ROWS = precision.EXACT_COVER_ROWS, limit
    try:
        covers = precision._least_loss_covers(rows, need, loss, count=3)
    finally:
        precision.EXACT_COVER_ROWS = old
    assert 1 <= len(covers) <= 3
    for cover in covers:
        saved = sum(r.extra_cycles for r in cover if r.extra_cycles > 0)
        if not paying:
            assert len(cover) == 1
            continue
        assert saved >= need
        assert not any(loss[r.module] > 0 and saved - r.extra_cycles >= need for r in cover)
    if exact and paying:
        cheapest = min(
            sum(loss[m] for m in subset)
            for k in range(1, len(paying) + 1)
            for subset in itertools.combinations([r.module for r in paying], k)
            if sum(r.extra_cycles for r in paying if r.module in subset) >= need
        )
        assert sum(loss[r.module] for r in covers[0]) == pytest.approx(cheapest)
    with pytest.raises(ValueError, match="a cover of 0 cycles"):
        precision._least_loss_covers(rows, 0, loss)
