"""Model zoo (slow): every zoo model compiles for u55-128 and u85-256 with zero float boundary
tensors and a report; numerics within the stated LSB budget (see test_mobilevit_* for why deep
partitions get a budget above 1 LSB)."""

import importlib.util
import os

import pytest

pytest.importorskip("timm")
_spec = importlib.util.spec_from_file_location(
    "zoo_table", os.path.join(os.path.dirname(__file__), "..", "..", "bench", "zoo_table.py"))
zoo_table = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(zoo_table)

LSB_BUDGET = 8


@pytest.mark.slow
@pytest.mark.parametrize("target", zoo_table.TARGETS)
@pytest.mark.parametrize("model", zoo_table.ZOO)
def test_zoo_model(model, target):
    r = zoo_table.run(model, target, timeout=3600)
    assert r["ok"], r.get("why")
    assert r["float_boundary"] == 0
    assert r["partitions"] >= 1
    assert r["worst_lsb"] <= LSB_BUDGET, r
