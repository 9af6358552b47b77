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
from hypothesis import HealthCheck, given, settings
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
    spec = EthosUNGCompileSpec(target, embed_tosa=True, strict=True)
    model = block(channels, hidden).eval()
    q = quantize(model, batches[0], spec, calibration=batches, activation_dtype=torch.int16)
    edge, part = lower(q, batches[0], spec)  # strict: a check that fails raises
    assert len(part.report.partitions) == 1, part.report.cpu_reasons
    (info,) = delegate_infos(edge)
    blob = DelegateBlob.from_bytes(
        next(m.processed_bytes for _, m in edge.exported_program().graph_module.named_children())
    )
    assert _accumulators_read_twice(blob.tosa) == {}
    # no int32 RESCALE of an accumulator either (upstream's, for the convolution only the ADD
    # reads, skips the int16 clamp: 301 steps from the quantized model on a drawn BasicBlock)
    assert _int32_rescales_of_accumulators(blob.tosa) == 0
    assert info.lowering_verification.status == "verified", info.lowering_verification
    assert info.npu_verification.status == "verified", info.npu_verification
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
