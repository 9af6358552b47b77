# SPDX-License-Identifier: BSD-3-Clause
"""ethosu_ng.tools.upstream_op_tests (run as bench/upstream_op_tests.py): upstream's Arm op
tests collected as (module, inputs) cases, and a few run end to end through the harness's own
per-case function and worker pool."""

from __future__ import annotations

import json

import pytest
import torch

from ethosu_ng.tools import upstream_op_tests as op_tests

# Upstream's test files use marks registered by their own conftest (flaky, tosa_ref_model).
pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnknownMarkWarning")


@pytest.fixture(scope="module")
def cases():
    errors = {}
    found = op_tests.collect(errors=errors)
    return found, errors


def _case(cases, file, function, param, target):
    found = [
        c
        for c in cases
        if (c.file, c.function, c.param, c.target) == (file, function, param, target)
    ]
    assert len(found) == 1, (file, function, param, target, found)
    return found[0]


def test_collector_finds_upstreams_ethos_u_cases(cases):
    found, errors = cases
    int8 = [c for c in found if c.variant == "int8"]
    by_target = {t: sum(c.target == t for c in int8) for t in ("u55", "u85")}
    assert by_target["u55"] > 1000 and by_target["u85"] > 1000, by_target
    assert len({c.file for c in int8}) > 100
    assert len({c.key for c in found}) == len(found), "case keys are not unique"
    # Most of upstream's files import and trace here; a few may not (a broken upstream test).
    assert len(errors) < 20, errors
    # Upstream's own expectations are read: xfail marks on a parametrization (common.parametrize
    # xfails=...) and not-delegated assertions.
    dot = _case(found, "test_matmul", "test_matmul_u55_INT", "double_input_randn_rand_1d_1d", "u55")
    assert dot.expect == "xfail" and "aten.dot" in dot.reason, dot
    mm = _case(found, "test_matmul", "test_matmul_u55_INT", "double_input_randn_rand_2d_2d", "u55")
    assert mm.expect == "pass", mm
    assert any(c.expect == "not_delegated" and c.target == "u55" for c in int8)
    assert any(c.variant == "a16w8" for c in found)


def test_avg_pool2d_cases_exclude_padding(cases):
    found, _ = cases
    pools = [
        c
        for c in found
        if c.function in ("test_avg_pool2d_u55_INT", "test_avg_pool2d_u85_INT") and c.call == 0
    ]
    assert len(pools) >= 40, len(pools)
    excluded = []
    for c in pools:
        if c.target != "u55":
            continue
        module, inputs = op_tests.materialize(c)
        if isinstance(module, torch.nn.AvgPool2d) and not module.count_include_pad:
            excluded.append(c.param)
        assert all(isinstance(t, torch.Tensor) for t in inputs)
    assert "non_divisible_window_adjust_padding_width" in excluded, excluded
    assert len(excluded) >= 3, excluded


def test_non_tensor_inputs_are_bound_into_the_module(cases):
    found, _ = cases
    case = _case(
        found, "test_select", "test_select_int_u55_INT", "select3d_0_dim_neg_1_index", "u55"
    )
    module, inputs = op_tests.materialize(case)
    assert len(inputs) == 1 and inputs[0].shape == (5, 3, 20)
    torch.testing.assert_close(module(*inputs), inputs[0].select(0, -1))
    # Tensors inside a tuple argument are inputs too, not constants.
    case = _case(found, "test_cat", "test_cat_u55_INT", "cat_ones_and_rand_three_tensors", "u55")
    module, inputs = op_tests.materialize(case)
    assert [tuple(t.shape) for t in inputs] == [(1, 2), (1, 5), (1, 1)]
    torch.testing.assert_close(module(*inputs), torch.cat(inputs, 1))


def test_avg_pool2d_excluding_padding_on_u55_is_within_1_lsb(cases):
    found, _ = cases
    case = _case(
        found,
        "test_avg_pool2d",
        "test_avg_pool2d_u55_INT",
        "non_divisible_window_adjust_padding_width",
        "u55",
    )
    rec = op_tests.run_case(case)
    assert rec["stage"] is None, rec.get("traceback")
    assert rec["lowered"] and rec["delegated"] and rec["fully_delegated"], rec
    assert rec["host_run"] and rec["unit"] == "lsb", rec
    assert rec["within_1lsb"], rec


def test_a_failing_case_is_a_record_not_an_exception(cases):
    found, _ = cases
    case = _case(found, "test_add", "test_add_tensor_u85_INT", "5d_float", "u85")
    missing = op_tests.Case(**{**case.__dict__, "param": "no such parametrization"})
    rec = op_tests.run_case(missing)
    assert rec["stage"] == "collect" and "parametrization not found" in rec["reason"], rec
    assert not rec["lowered"] and not rec["within_1lsb"]


def test_compare_counts_lsb_on_the_output_grid():
    class IO:
        scale, zero_point, grid_scale = None, None, 0.1

    class IOQ:
        outputs = [IO()]

    want = torch.tensor([0.3, -0.2, 1.0])
    assert op_tests.compare([want.clone()], [want], IOQ()) == (0.0, "lsb")
    # 1 and 2 grid steps off, computed in float32 (0.1 is not exact): counted as integers.
    off = want + torch.tensor([0.1, 0.0, -0.2])
    assert op_tests.compare([off], [want], IOQ()) == (2.0, "lsb")
    no_grid = type("NoGrid", (), {"outputs": []})()
    assert op_tests.compare([torch.tensor([1, 0])], [torch.tensor([1, 1])], no_grid) == (1.0, "abs")


def test_run_resumes_and_tables(tmp_path, capsys):
    """Through the command line and a spawned worker: one add case on U85 runs and is
    recorded; a rerun would not run it again; the table counts it."""
    results = tmp_path / "r.jsonl"
    argv = ["--ops", "add", "--targets", "u85", "--limit", "1", "--results", str(results)]
    assert op_tests.main(argv) == 0
    lines = results.read_text().splitlines()
    assert len(lines) == 1
    rec = json.loads(lines[0])
    assert rec["stage"] is None and rec["within_1lsb"] and rec["target"] == "u85", rec
    capsys.readouterr()
    assert op_tests.main([*argv, "--list"]) == 0
    listed = capsys.readouterr()
    assert rec["key"] not in listed.out and "1 already recorded" in listed.err, listed.err
    second = [lines[0]]
    results.write_text(second[0] + "\n" + '{"key": "cut sh')  # an interrupted write
    assert list(op_tests.load_results(str(results))) == [rec["key"]]
    capsys.readouterr()
    assert op_tests.main(["--table", "--results", str(results), "--targets", "u85"]) == 0
    out = capsys.readouterr().out
    assert "| add u85 | 1 | 1/1 | 1/1 | 1/1 | 1/1 |" in out, out


@pytest.mark.parametrize(
    "file, function, param",
    [
        ("test_eq", "test_eq_scalar_u85_INT_tensor", "eq_tensor_rank1_ones"),
        ("test_logical", "test_logical_and_u85_INT", "rand_rank2"),
    ],
)
def test_bool_results_and_operands_cross_u85_boundaries_bit_exact(cases, file, function, param):
    """A comparison's bool output and a logical op's bool operands cross the delegate boundary
    typed as bool: the whole op is delegated and the host run equals the eager quantized model."""
    found, _ = cases
    rec = op_tests.run_case(_case(found, file, function, param, "u85"))
    assert rec["stage"] is None, rec.get("traceback")
    assert rec["delegated"] and rec["fully_delegated"], rec["cpu_reasons"]
    assert rec["host_run"] and rec["bit_exact"], rec


def test_while_loop_on_u85_is_delegated_whole_and_bit_exact(cases):
    """Upstream's while_loop case on the U85: the loop and its graphs form one partition, and the
    host run equals the eager quantized model."""
    found, _ = cases
    rec = op_tests.run_case(
        _case(found, "test_while", "test_while_loop_u85_INT", "two_in_two_out", "u85")
    )
    assert rec["stage"] is None, rec.get("traceback")
    assert rec["fully_delegated"] and rec["partitions"] == 1, rec["cpu_reasons"]
    assert rec["host_run"] and rec["bit_exact"], rec


def test_while_loop_with_an_additional_input_is_delegated_whole_and_bit_exact(cases):
    """Upstream's while_loop with a threshold buffer as additional input: upstream's annotation
    puts its result on another grid than its entry, and its lowering reads both on one; with the
    loop's values on one grid (``EthosUNGQuantizer``) and every body result requantized to it
    (``passes/loop_carried_grid.py``) the loop is delegated and equals the quantized model."""
    found, _ = cases
    rec = op_tests.run_case(
        _case(found, "test_while", "test_while_loop_u85_INT", "additional_arg", "u85")
    )
    assert rec["stage"] is None, rec.get("reason")
    assert rec["fully_delegated"] and rec["partitions"] == 1, rec["cpu_reasons"]
    assert rec["host_run"] and rec["bit_exact"], rec
