# SPDX-License-Identifier: BSD-3-Clause
"""Seed 001 as a property: a conv / depthwise conv / linear followed by relu, relu6, hardtanh or
clamp whose output zero point is forced away from qmin (the activation output is cat's first
input, so it shares the cat's domain, which the other input pulls below zero) keeps its
activation: delegated whole, nothing on the CPU, within 1 LSB of the eager quantized model on the
host runtime; on both families.

Drawn: producer, activation and its bounds, how far below zero the cat's other input reaches,
the quantization config (default symmetric int8, or the seed's [-127, 127] recipe), sizes.
"""

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from hypothesis import strategies as st
from seed_property import DEPTHS, TARGETS, check_lowered, run_per_family
from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

from ethosu_ng import EthosUNGCompileSpec, EthosUNGQuantizer
from ethosu_ng.adapters import arm as upstream
from ethosu_ng.ops import QUANTIZE_PER_TENSOR

C = 4


class ProducerActCat(nn.Module):
    def __init__(self, producer, act, lo, hi):
        super().__init__()
        self.producer, self.act, self.lo, self.hi = producer, act, lo, hi
        if producer == "conv":
            self.p = nn.Conv2d(C, C, 3, padding=1)
            self.head = nn.Conv2d(2 * C, C, 1)
        elif producer == "depthwise":
            self.p = nn.Conv2d(C, C, 3, padding=1, groups=C)
            self.head = nn.Conv2d(2 * C, C, 1)
        else:
            self.p = nn.Linear(C, C)
            self.head = nn.Linear(2 * C, C)

    def activation(self, y):
        if self.act == "relu":
            return F.relu(y)
        if self.act == "relu6":
            return F.relu6(y)
        if self.act == "hardtanh":
            return F.hardtanh(y, self.lo, self.hi)
        return torch.clamp(y, self.lo, self.hi)

    def forward(self, x, y):
        a = self.activation(self.p(x))
        axis = 1 if self.producer != "linear" else -1
        return self.head(torch.cat((a, y), axis))


@st.composite
def cases(draw):
    act = draw(st.sampled_from(["relu", "relu6", "hardtanh", "clamp"]))
    lo = draw(st.sampled_from([0.0, 0.1, 0.25])) if act in ("hardtanh", "clamp") else 0.0
    hi = lo + draw(st.sampled_from([0.3, 0.6, 1.0]))
    return dict(
        producer=draw(st.sampled_from(["conv", "depthwise", "linear"])),
        act=act,
        lo=lo,
        hi=hi,
        y_below=draw(st.sampled_from([0.05, 0.2, 0.5])),
        recipe=draw(st.booleans()),
        h=draw(st.integers(2, 5)),
        seed=draw(st.integers(0, 2**16)),
    )


def _activation_zero_point(q, act_targets):
    for n in q.graph.nodes:
        if n.op == "call_function" and n.target in act_targets:
            (user,) = n.users
            assert user.target == QUANTIZE_PER_TENSOR
            return int(user.args[2]), int(user.args[3])
    raise AssertionError("activation not found")


def check_case(case, target):
    torch.manual_seed(case["seed"])
    model = ProducerActCat(case["producer"], case["act"], case["lo"], case["hi"]).eval()
    g = torch.Generator().manual_seed(case["seed"])
    shape = (1, C, case["h"], case["h"]) if case["producer"] != "linear" else (1, case["h"], C)

    def batch():
        x = torch.rand(shape, generator=g) * 2 - 1
        y = torch.rand(shape, generator=g) - case["y_below"]
        return x, y

    batches = [batch() for _ in range(6)]
    spec = EthosUNGCompileSpec(target, embed_tosa=True)
    quantizer = EthosUNGQuantizer(spec, input_dtype=torch.int8, output_dtype=torch.int8)
    if case["recipe"]:
        quantizer.set_global(
            upstream.get_symmetric_quantization_config(
                is_per_channel=True, act_qmin=-127, act_qmax=127, weight_qmin=-127, weight_qmax=127
            )
        )
    gm = torch.export.export(model, batches[0]).module(check_guards=False)
    prepared = prepare_pt2e(gm, quantizer)
    for b in batches[:4]:
        prepared(*b)
    q = convert_pt2e(prepared)
    aten = torch.ops.aten
    zp, qmin = _activation_zero_point(
        q, {aten.relu.default, aten.hardtanh.default, aten.clamp.default}
    )
    assert zp > qmin  # the class: the activation cannot be fused into the producer's clamp
    check_lowered(
        q,
        batches[0],
        spec,
        steps=batches[4:],
        input_dtype=torch.int8,
        output_dtype=torch.int8,
        describe=f"{case} {target}",
    )


@pytest.mark.parametrize("examples", DEPTHS)
@pytest.mark.parametrize("target", TARGETS)
def test_non_fuseable_activation(target, examples):
    run_per_family(cases(), check_case, target, examples)
