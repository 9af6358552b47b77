# SPDX-License-Identifier: BSD-3-Clause
"""The TOSA rewrites in the compile pipeline: on by default, checked bit for bit against
upstream's TOSA at compile time when asked, the per-module profile still names every cycle, and
the report carries the data-movement cycles."""

import torch
from conftest import calibration_batches
from models import AttentionBlock

from ethosu_ng import EthosUNGCompileSpec
from ethosu_ng.compiler import pipeline as compiler_pipeline
from ethosu_ng.export import lower, quantize
from ethosu_ng.module_profile import unmapped_share
from ethosu_ng.numerics.tosa_reference import check_delegates
from ethosu_ng.tools.report import build_report
from ethosu_ng.tosa_optimize import pipeline as tosa_pipeline


def test_attention_is_optimised_verified_and_fully_attributed(monkeypatch):
    assert EthosUNGCompileSpec("ethos-u85-256").tosa_optimize
    applied = []
    real = tosa_pipeline.optimize

    def spy(*args, **kwargs):
        result = real(*args, **kwargs)
        applied.append((result.applied, kwargs.get("verify")))
        return result

    monkeypatch.setattr(compiler_pipeline.tosa_optimize, "optimize", spy)
    spec = EthosUNGCompileSpec("ethos-u85-256", embed_tosa=True, tosa_optimize_verify=True)
    torch.manual_seed(0)
    model, example = AttentionBlock().eval(), AttentionBlock.example()
    q = quantize(model, example, spec, calibration=calibration_batches(example, n=1))
    edge, part = lower(q, example, spec)
    # The rewrites ran, verified against upstream's TOSA on the reference model.
    assert applied and all(verify for _, verify in applied)
    assert any(a for a, _ in applied)
    # The optimised TOSA the delegate carries matches the eager quantized model.
    assert all(r.worst <= 1 for r in check_delegates(edge, example))
    rep = build_report(edge, part, b"", spec)
    assert unmapped_share(rep["by_module"]) == 0.0
    t = rep["totals"]
    assert 0 < t["data_movement_cycles"] < t["npu_cycles"]
    assert sum(t["data_movement_by_op"].values()) == t["data_movement_cycles"]
    from ethosu_ng.tools.report import format_text

    assert "data movement" in format_text(rep)
