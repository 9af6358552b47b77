# SPDX-License-Identifier: BSD-3-Clause
"""Model zoo on the NPU model (slow): for ethos-u55-128 and ethos-u65-256, every delegate output
of Vela's command stream executed on the NPU model (runtime/ethosu_ng/npu_model) equals the
delegate's TOSA graph on the TOSA reference model bit for bit, on the same integer inputs; and
the model's weight decoder equals Vela's ``mlw_codec.decode`` on every weight stream the kernels
read. The check is ``bench/zoo_table.py``'s ``npu_model_one`` (``--npu-model`` writes the table
in docs/zoo.md). No tolerance: a difference must be fixed in the model or be a Vela deviation
listed in docs/npu-model.md (none is known on the zoo).
"""

import importlib.util
import os

import pytest
from _tools import require_tool

require_tool("timm", module=True, install="pip install -e .[zoo]")
_spec = importlib.util.spec_from_file_location(
    "zoo_table", os.path.join(os.path.dirname(__file__), "..", "..", "bench", "zoo_table.py")
)
zoo_table = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(zoo_table)


@pytest.mark.slow
@pytest.mark.parametrize("target", zoo_table.NPU_MODEL_TARGETS)
@pytest.mark.parametrize("model", zoo_table.ZOO)
def test_npu_model_zoo_bit_exact_to_tosa(model, target):
    r = zoo_table.npu_model_one(model, target)
    assert r["delegates"] >= 1 and r["ops"] > 0, r
    where = [
        (k, d["lsb"], d["differing"]) for k, d in enumerate(r["per_delegate"]) if any(d["lsb"])
    ]
    assert r["worst_lsb"] == 0, f"{model} {target}: (delegate, LSB per output, differing) {where}"
    # Vela's matmul over aliased OFM tiles (docs/npu-model.md) would show up here first.
    assert r["aliased_ofm_ops"] == 0, r["aliased_ofm_ops"]
    assert r["weight_streams"] > 0 and r["untraced_streams"] == 0, r
    bad = [d["weight_streams_differing"] for d in r["per_delegate"]]
    assert r["weight_streams_differing"] == 0, f"streams (offset, length) differing: {bad}"
