# SPDX-License-Identifier: BSD-3-Clause
"""An a16w8 convolution whose output a residual ADD and another convolution both read (every
inverted residual of a MobileNet) lowers with its INT48 accumulator read once: the residual's
operand reads the int16 output, as the quantized model does, so Vela folds the requantization
into the convolution. Upstream's lowering forks the accumulator there (``RewriteConvPass``): two
standalone per-channel RESCALEs over INT48 on Ethos-U85, and on Ethos-U55/U65 a convolution Vela
cannot run (``adapters/arm.py``, ``_a16w8_convolutions_narrowed``). Over targets, channels and
sizes the block lowers whole, its lowering and command stream verify, and no layer of the stream
is a RESCALE of an accumulator. Upstream's int32 RESCALE of an accumulator only the ADD reads
skips the int16 clamp of the quantized model: on a drawn BasicBlock, ethos-u55-128, 301 int16
steps from it (the lowering check refuses it)."""

from __future__ import annotations

import torch
from _pte import delegate_infos
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from torch import nn

from ethosu_ng import DelegateBlob, EthosUNGCompileSpec
from ethosu_ng.export import lower, quantize
from ethosu_ng.tosa_graph import tosa_ops
from ethosu_ng.tosa_optimize import graph as tosa_ir


class InvertedResidual(nn.Module):
    """``y = proj(x)``, read by the block's expansion and by its residual ADD."""

    def __init__(self, channels: int, hidden: int):
        super().__init__()
        self.proj = nn.Conv2d(channels, channels, 1)
        self.expand = nn.Conv2d(channels, hidden, 1)
        self.reduce = nn.Conv2d(hidden, channels, 1)

    def forward(self, x):
        y = self.proj(x)
        return y + self.reduce(torch.relu(self.expand(y)))


class BasicBlock(nn.Module):
    """``conv2(relu(conv1(x))) + x``: the second convolution's only consumer is the ADD."""

    def __init__(self, channels: int, hidden: int):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, hidden, 3, padding=1)
        self.conv2 = nn.Conv2d(hidden, channels, 3, padding=1)

    def forward(self, x):
        return self.conv2(torch.relu(self.conv1(x))) + x


class Consumers(nn.Module):
    """A convolution whose output an int32 elementwise operator reads (``add``, ``sub``, ``mul``
    with the input; ``tokens``: flattened to tokens and a position embedding added, a ViT's
    patch embedding; ``channels_last``: permuted first, upstream's other fork, its int32 RESCALE
    behind the permute), and, ``shared``, another convolution too."""

    def __init__(self, channels: int, size: int, kind: str, shared: bool):
        super().__init__()
        self.kind, self.shared = kind, shared
        self.proj = nn.Conv2d(channels, channels, 1)
        self.next = nn.Conv2d(channels, channels, 1)
        self.pos = nn.Parameter(torch.randn(1, size * size, channels))

    def forward(self, x):
        y = self.proj(x)
        if self.kind == "tokens":
            out = y.flatten(2).transpose(1, 2) + self.pos
        elif self.kind == "channels_last":
            out = y.permute(0, 2, 3, 1) + self.pos.view(1, *x.shape[2:], -1)
        else:
            out = {"add": y + x, "sub": y - x, "mul": y * x}[self.kind]
        return (out, self.next(y)) if self.shared else out


def _int32_rescales_of_accumulators(tosa: bytes) -> int:
    g = tosa_ir.read(tosa)
    return sum(
        o.op == "RESCALE"
        and g.tensors[o.inputs[0]].dtype == "INT48"
        and g.tensors[o.outputs[0]].dtype == "INT32"
        for o in g.ops
    )


def _accumulators_read_twice(tosa: bytes):
    g = tosa_ir.read(tosa)
    reads = {}
    for o in g.ops:
        for t in o.inputs:
            if t in g.tensors and g.tensors[t].dtype == "INT48":
                reads[t] = reads.get(t, 0) + 1
    return {t: n for t, n in reads.items() if n > 1}


def _lower(model, batches, target):
    spec = EthosUNGCompileSpec(target, embed_tosa=True, strict=True)
    q = quantize(model, batches[0], spec, calibration=batches, activation_dtype=torch.int16)
    edge, part = lower(q, batches[0], spec)  # strict: a check that fails raises
    assert len(part.report.partitions) == 1, part.report.cpu_reasons
    (info,) = delegate_infos(edge)
    blob = DelegateBlob.from_bytes(
        next(m.processed_bytes for _, m in edge.exported_program().graph_module.named_children())
    )
    assert info.lowering_verification.status == "verified", info.lowering_verification
    assert info.npu_verification.status == "verified", info.npu_verification
    return info, blob


@settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    kind=st.sampled_from(["add", "sub", "mul", "tokens", "channels_last"]),
    shared=st.booleans(),
    target=st.sampled_from(["ethos-u55-128", "ethos-u65-256", "ethos-u85-256"]),
    channels=st.sampled_from([4, 8, 16]),
    size=st.integers(2, 6),
    seed=st.integers(0, 2**16),
)
# upstream's two forks, each on a target family, every run
@example(kind="channels_last", shared=True, target="ethos-u85-256", channels=8, size=4, seed=0)
@example(kind="add", shared=True, target="ethos-u55-128", channels=8, size=4, seed=0)
def test_every_int32_consumer_of_an_a16w8_convolution_reads_its_int16_output(
    kind, shared, target, channels, size, seed
):
    g = torch.Generator().manual_seed(seed)
    batches = [(torch.randn(1, channels, size, size, generator=g),) for _ in range(2)]
    model = Consumers(channels, size, kind, shared).eval()
    _, blob = _lower(model, batches, target)
    assert _accumulators_read_twice(blob.tosa) == {}
    assert _int32_rescales_of_accumulators(blob.tosa) == 0


@settings(max_examples=5, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    block=st.sampled_from([InvertedResidual, BasicBlock]),
    target=st.sampled_from(["ethos-u55-128", "ethos-u65-256", "ethos-u85-256"]),
    channels=st.sampled_from([4, 8, 16]),
    hidden=st.sampled_from([8, 24]),
    size=st.integers(2, 9),
    seed=st.integers(0, 2**16),
)
def test_an_a16w8_residual_reads_the_int16_output_and_folds(
    block, target, channels, hidden, size, seed
):
    g = torch.Generator().manual_seed(seed)
    batches = [(torch.randn(1, channels, size, size, generator=g),) for _ in range(2)]
    info, blob = _lower(block(channels, hidden).eval(), batches, target)
    assert _accumulators_read_twice(blob.tosa) == {}
    # no int32 RESCALE of an accumulator either (upstream's, for the convolution only the ADD
    # reads, skips the int16 clamp: 301 steps from the quantized model on a drawn BasicBlock)
    assert _int32_rescales_of_accumulators(blob.tosa) == 0
    # no layer of the stream rescales an accumulator on its own
    ops, dtypes = (
        tosa_ops(blob.tosa),
        {t: v.dtype for t, v in tosa_ir.read(blob.tosa).tensors.items()},
    )
    alone = [
        x["name"]
        for x in info.layers
        if x.get("data_movement_kind") == "Rescale"
        and dtypes.get(ops[x["tosa_index"]].inputs[0]) == "INT48"
    ]
    assert alone == [], alone
