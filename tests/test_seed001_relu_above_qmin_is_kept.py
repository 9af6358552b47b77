# SPDX-License-Identifier: BSD-3-Clause
"""Seed 001: conv -> relu -> cat(relu_out, y) where the shared cat domain gives the relu output a
zero point != qmin (the seed's recipe: zp = -111). The class (producers, activations, both
families, host numerics) is tests/test_property_seed001.py; here the seed's recipe and the
premise that upstream alone loses the relu."""

import torch
import torch.nn as nn
import torch.nn.functional as F
from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

from ethosu_ng import EthosUNGCompileSpec, EthosUNGQuantizer
from ethosu_ng.adapters import arm as upstream
from ethosu_ng.export import lower
from ethosu_ng.numerics.tosa_reference import check_delegates


class TinyConvReluCat(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(4, 4, 3, padding=1)
        self.conv2 = nn.Conv2d(8, 4, 1)
        with torch.no_grad():
            for p in self.parameters():
                p.uniform_(-0.1, 0.1)

    def forward(self, x, y):
        relu_out = F.relu(self.conv1(x))
        return self.conv2(torch.cat((relu_out, y), dim=1))


def seed_recipe(target):
    torch.manual_seed(0)
    model = TinyConvReluCat().eval()
    x = torch.rand(1, 4, 16, 16)
    y = torch.rand(1, 4, 16, 16) - 0.065
    spec = EthosUNGCompileSpec(target, embed_tosa=True)
    quantizer = EthosUNGQuantizer(spec)
    quantizer.set_global(
        upstream.get_symmetric_quantization_config(
            is_per_channel=True, act_qmin=-127, act_qmax=127, weight_qmin=-127, weight_qmax=127
        )
    )
    prepared = prepare_pt2e(
        torch.export.export(model, (x, y)).module(check_guards=False), quantizer
    )
    prepared(x, y)
    return convert_pt2e(prepared), (x, y), spec


def relu_output_zero_point(q):
    for n in q.graph.nodes:
        if (
            n.op == "call_function"
            and "quantize_per_tensor" in str(n.target)
            and getattr(n.args[0], "name", "") == "relu"
        ):
            return int(n.args[2])
    return None


def test_seed_recipe_gives_the_non_fuseable_domain():
    """The seed's exact recipe has the class's premise (zero point -111, not qmin); the class
    itself is checked by tests/test_property_seed001.py."""
    q, _, _ = seed_recipe("ethos-u55-128")
    assert relu_output_zero_point(q) == -111


def test_without_our_pass_upstream_loses_the_relu():
    """The premise: with upstream's fusion alone, negative conv outputs miss the relu (17 LSB)."""
    from ethosu_ng.passes import RequantizeNonFuseableActivationPass

    q, inputs, _ = seed_recipe("ethos-u55-128")
    # The lowering check would keep the wrong fusion off the NPU (test_verified_compile.py).
    spec = EthosUNGCompileSpec("ethos-u55-128", embed_tosa=True, verify_lowering=False)
    edge, _ = lower(q, inputs, spec, disabled_passes=[RequantizeNonFuseableActivationPass])
    assert max(r.worst for r in check_delegates(edge, inputs)) > 1
