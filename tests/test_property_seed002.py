# SPDX-License-Identifier: BSD-3-Clause
"""Seed 002 as a property: IO-boundary shared-qspec clusters (state buffers updated through
``slice -> cat -> copy_``, view/reshape/cat at the program's inputs and outputs) are delegated in
int8, never left in float on the CPU, for uint8 and int8 program IO, on both families.

Drawn: a state buffer of rank 2-4, the window on any axis with any length and step, the newest
chunk appended or prepended, the new state read by ``copy_`` and by one or more compute ops
(directly or through reshape/view/permute), the input also read elsewhere, uint8/int8 input and
output, and the output produced by a view or a cat. Checks: ``seed_property.check_lowered`` plus
an int8 state buffer; three streaming steps from the zero state, state carried.
"""

import pytest
import torch
import torch.nn as nn
from hypothesis import strategies as st
from seed_property import DEPTHS, TARGETS, check_lowered, run_per_family

from ethosu_ng import EthosUNGCompileSpec
from ethosu_ng.export import quantize

READERS = ("flat_linear", "last_linear", "permute_linear", "view_linear")
FEATURES = 3


class Streaming(nn.Module):
    def __init__(self, state_shape, axis, step, prepend, readers, input_elsewhere, out_kind):
        super().__init__()
        self.axis, self.step, self.prepend = axis, step, prepend
        self.readers, self.input_elsewhere, self.out_kind = readers, input_elsewhere, out_kind
        self.register_buffer("state", torch.zeros(state_shape))
        numel = 1
        for d in state_shape:
            numel *= d
        last = state_shape[-1]
        before_last = state_shape[-2] if len(state_shape) >= 2 else 1
        self.fcs = nn.ModuleList()
        for r in readers:
            if r in ("flat_linear", "view_linear"):
                self.fcs.append(nn.Linear(numel, FEATURES))
            elif r == "last_linear":
                self.fcs.append(nn.Linear(last, FEATURES))
            else:  # permute_linear: the last two axes swapped
                self.fcs.append(nn.Linear(before_last, FEATURES))
        chunk = list(state_shape)
        chunk[axis] = step
        chunk_numel = numel // state_shape[axis] * step
        self.fx = nn.Linear(chunk_numel, FEATURES) if input_elsewhere else None

    def forward(self, x):
        w = self.state.shape[self.axis]
        if self.prepend:
            new = torch.cat((x, self.state.narrow(self.axis, 0, w - self.step)), self.axis)
        else:
            new = torch.cat((self.state.narrow(self.axis, self.step, w - self.step), x), self.axis)
        self.state.copy_(new)
        outs = []
        for r, fc in zip(self.readers, self.fcs):
            if r == "flat_linear":
                y = fc(new.reshape(1, -1))
            elif r == "view_linear":
                y = fc(new.view(1, -1))
            elif r == "last_linear":
                y = fc(new).reshape(1, -1)
            else:
                y = fc(new.transpose(-1, -2)).reshape(1, -1)
            outs.append(y)
        if self.fx is not None:
            outs.append(self.fx(x.reshape(1, -1)))
        y = torch.cat(outs, 1)
        if self.out_kind == "view":
            return y.view(-1, 1)
        if self.out_kind == "cat_input":  # the output is a cat touching the raw input
            return torch.cat((y, x.reshape(1, -1)), 1)
        return y


@st.composite
def streaming_cases(draw):
    rank = draw(st.integers(2, 4))
    shape = [1] + [draw(st.integers(1, 3)) for _ in range(rank - 1)]
    axis = draw(st.integers(0, rank - 1))
    shape[axis] = draw(st.integers(2, 6))  # window length
    step = draw(st.integers(1, shape[axis] - 1))
    readers = draw(st.lists(st.sampled_from(READERS), min_size=1, max_size=2))
    return dict(
        state_shape=tuple(shape),
        axis=axis,
        step=step,
        prepend=draw(st.booleans()),
        readers=tuple(readers),
        input_elsewhere=draw(st.booleans()),
        out_kind=draw(st.sampled_from(["plain", "view", "cat_input"])),
        input_dtype=draw(st.sampled_from([torch.uint8, torch.int8])),
        output_dtype=draw(st.sampled_from([torch.uint8, torch.int8])),
        seed=draw(st.integers(0, 2**16)),
    )


def streaming_model(case):
    """A drawn case's (model, seven input batches, input dtype, output dtype)."""
    case = dict(case)
    in_dt, out_dt, seed = case.pop("input_dtype"), case.pop("output_dtype"), case.pop("seed")
    torch.manual_seed(seed)
    model = Streaming(**case).eval()
    chunk = list(case["state_shape"])
    chunk[case["axis"]] = case["step"]
    g = torch.Generator().manual_seed(seed)
    batches = [(torch.rand(chunk, generator=g),) for _ in range(7)]
    return model, batches, in_dt, out_dt


def check_streaming(case, target):
    model, batches, in_dt, out_dt = streaming_model(case)
    spec = EthosUNGCompileSpec(target, embed_tosa=True)
    q = quantize(
        model, batches[0], spec, calibration=batches[:4], input_dtype=in_dt, output_dtype=out_dt
    )
    q.state.zero_()  # calibration advanced the eager state; the program starts from this one
    describe = f"{case} {in_dt} {out_dt} {target}"

    def state_is_int8(edge):
        program = edge.exported_program()
        assert program.state_dict["state"].dtype == torch.int8, describe

    check_lowered(
        q,
        batches[0],
        spec,
        steps=batches[4:],
        input_dtype=in_dt,
        output_dtype=out_dt,
        inspect=state_is_int8,
        describe=describe,
    )


@pytest.mark.parametrize("examples", DEPTHS)
@pytest.mark.parametrize("target", TARGETS)
def test_streaming_state_buffers(target, examples):
    run_per_family(streaming_cases(), check_streaming, target, examples)
