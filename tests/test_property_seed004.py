# SPDX-License-Identifier: BSD-3-Clause
"""Seed 004 as a property: uint8/int8 program IO on models with several inputs and outputs. Every
input and output has the requested integer dtype, no quantize/dequantize (or anything else) runs
on the CPU, the delegates' IO tables match the parent program, and the host run is within 1 LSB
of the eager quantized model; on both families.

Drawn: 1-3 inputs, each read by a conv, a linear over its last axis, or used raw (added into the
others: an IO cluster); 1-3 outputs, each a conv, a pooled linear, a flattening view, or a cat
with a raw input; uint8/int8 input and output dtypes; spatial sizes.
"""

import pytest
import torch
import torch.nn as nn
from hypothesis import strategies as st
from seed_property import DEPTHS, TARGETS, check_lowered, run_per_family

from ethosu_ng import EthosUNGCompileSpec
from ethosu_ng.export import quantize

C = 4


class MultiIO(nn.Module):
    def __init__(self, ins, outs, w):
        super().__init__()
        self.ins, self.outs = ins, outs
        self.in_mods = nn.ModuleList(
            nn.Conv2d(C, C, 1)
            if k == "conv"
            else nn.Linear(w, w)
            if k == "linear"
            else nn.Identity()
            for k in ins
        )
        self.out_mods = nn.ModuleList(
            nn.Linear(C, 3) if k == "pool_linear" else nn.Conv2d(C, C, 1) for k in outs
        )

    def forward(self, *xs):
        feats = [m(x) for m, x in zip(self.in_mods, xs)]
        mix = feats[0]
        for f in feats[1:]:
            mix = mix + f
        res = []
        for k, m in zip(self.outs, self.out_mods):
            if k == "conv":
                res.append(m(mix))
            elif k == "pool_linear":
                res.append(m(mix.mean((2, 3))))
            elif k == "view":
                res.append(m(mix).reshape(1, -1))
            else:  # cat_raw: an output cat touching a raw program input
                res.append(torch.cat((m(mix), xs[0]), 1))
        return tuple(res)


@st.composite
def multi_io_cases(draw):
    n_in = draw(st.integers(1, 3))
    # The first input is computed on, so there is NPU work whatever the others are.
    ins = ("conv",) + tuple(
        draw(st.sampled_from(["conv", "linear", "raw"])) for _ in range(n_in - 1)
    )
    outs = tuple(
        draw(
            st.lists(
                st.sampled_from(["conv", "pool_linear", "view", "cat_raw"]), min_size=1, max_size=3
            )
        )
    )
    return dict(
        ins=ins,
        outs=outs,
        h=draw(st.integers(1, 4)),
        w=draw(st.integers(2, 5)),
        input_dtype=draw(st.sampled_from([torch.uint8, torch.int8])),
        output_dtype=draw(st.sampled_from([torch.uint8, torch.int8])),
        seed=draw(st.integers(0, 2**16)),
    )


def check_multi_io(case, target):
    torch.manual_seed(case["seed"])
    model = MultiIO(case["ins"], case["outs"], case["w"]).eval()
    g = torch.Generator().manual_seed(case["seed"])
    shape = (1, C, case["h"], case["w"])
    batches = [
        tuple(torch.rand(shape, generator=g) * 2 - 0.5 for _ in case["ins"]) for _ in range(6)
    ]
    spec = EthosUNGCompileSpec(target, embed_tosa=True)
    in_dt, out_dt = case["input_dtype"], case["output_dtype"]
    q = quantize(
        model, batches[0], spec, calibration=batches[:4], input_dtype=in_dt, output_dtype=out_dt
    )
    check_lowered(
        q,
        batches[0],
        spec,
        steps=batches[4:],
        input_dtype=in_dt,
        output_dtype=out_dt,
        describe=f"{case} {target}",
    )


@pytest.mark.parametrize("examples", DEPTHS)
@pytest.mark.parametrize("target", TARGETS)
def test_integer_program_io(target, examples):
    run_per_family(multi_io_cases(), check_multi_io, target, examples)
