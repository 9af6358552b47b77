# SPDX-License-Identifier: BSD-3-Clause
"""An op between quantized neighbours that upstream's annotators skip (its spelling is not in their
lists: ``clamp_min``, ``clamp_max``, ``expand_as``, ...) is quantized and delegated: the idiom
stays inside one partition, nothing float runs on the CPU, on both families.

``F.normalize`` (norm -> clamp_min(eps) -> expand_as -> div) inside attention lowered as several
partitions with float ``clamp``/``expand_copy`` on the CPU between them without the rewrite. A
composite upstream does not annotate (``addcmul`` in ConvNeXt-V2's GRN, ``addcdiv``) is
decomposed before annotation (``annotation_composites``).
"""

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.fx import Graph, GraphModule
from torchao.quantization.pt2e.quantize_pt2e import prepare_pt2e

from ethosu_ng import EthosUNGCompileSpec, EthosUNGQuantizer, io_quantization
from ethosu_ng.annotation_aliases import ALIASES, canonicalize_aliases
from ethosu_ng.export import lower, quantize
from ethosu_ng.numerics.tosa_reference import check_delegates
from ethosu_ng.partitioning.boundary import float_boundary_tensors

aten = torch.ops.aten
TARGETS = ["ethos-u55-128", "ethos-u85-256"]


class NormalizedAttention(nn.Module):
    """Attention whose q and k are L2-normalized (cosine attention), as in Swin v2."""

    def __init__(self, dim=8, heads=2):
        super().__init__()
        self.h = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        b, n, c = x.shape
        qkv = self.qkv(x).reshape(b, n, 3, self.h, c // self.h).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        q = F.normalize(q, dim=-1)
        k = F.normalize(k, dim=-1)
        a = (q @ k.transpose(-2, -1) * 10.0).softmax(-1)
        return self.proj((a @ v).transpose(1, 2).reshape(b, n, c)) + x


class Between(nn.Module):
    """``f`` between two linear layers: every input and user of ``f`` is quantized."""

    def __init__(self, f):
        super().__init__()
        self.f, self.a, self.b = f, nn.Linear(8, 8), nn.Linear(8, 8)

    def forward(self, x):
        return self.b(self.f(self.a(x)))


class GlobalResponseNorm(nn.Module):
    """ConvNeXt-V2's GRN on channels-last tokens, written as timm writes it (``addcmul``)."""

    def __init__(self, dim=8):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(dim))
        self.bias = nn.Parameter(torch.randn(dim))
        self.a, self.b = nn.Linear(dim, dim), nn.Linear(dim, dim)

    def forward(self, x):
        x = self.a(x)
        g = x.norm(p=2, dim=(1, 2), keepdim=True)
        n = g / (g.mean(dim=-1, keepdim=True) + 1e-6)
        return self.b(x + torch.addcmul(self.bias, self.weight, x * n))


IDIOMS = {
    "normalize_attention": (NormalizedAttention, (1, 4, 8)),
    "normalize": (lambda: Between(lambda y: F.normalize(y, dim=-1)), (1, 4, 8)),
    "clamp_min": (lambda: Between(lambda y: y.clamp_min(0.05)), (1, 4, 8)),
    "clamp_max": (lambda: Between(lambda y: y.clamp_max(0.1)), (1, 4, 8)),
    "expand_as": (lambda: Between(lambda y: y[..., :1].expand_as(y) * y), (1, 4, 8)),
    "relu6": (lambda: Between(lambda y: F.relu6(y * 8)), (1, 4, 8)),
    # Composites upstream does not annotate, decomposed before annotation.
    "grn": (GlobalResponseNorm, (1, 3, 4, 8)),
    "addcmul": (
        lambda: Between(lambda y: torch.addcmul(y, y, torch.sigmoid(y), value=0.5)),
        (1, 4, 8),
    ),
    "addcdiv": (
        lambda: Between(lambda y: torch.addcdiv(y, y, y.abs() + 1.0, value=0.5)),
        (1, 4, 8),
    ),
}


def _batch(shape, seed):
    return (torch.randn(shape, generator=torch.Generator().manual_seed(seed)),)


@pytest.mark.parametrize("idiom", sorted(IDIOMS))
def test_every_op_is_annotated(idiom):
    """After prepare_pt2e no op of the idiom is left without a quantization annotation."""
    make, shape = IDIOMS[idiom]
    torch.manual_seed(0)
    x = _batch(shape, 0)
    gm = torch.export.export(make().eval(), x).module(check_guards=False)
    prepared = prepare_pt2e(gm, EthosUNGQuantizer(EthosUNGCompileSpec("ethos-u85-256")))
    bare = [
        f"{n.name} ({n.target})"
        for n in prepared.graph.nodes
        if n.op == "call_function"
        and not getattr(n.meta.get("quantization_annotation"), "_annotated", False)
    ]
    assert bare == []


# The composites' annotation is checked in the fast suite; their lowering under -m slow.
SLOW_IDIOMS = {"addcmul", "addcdiv"}


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize(
    "idiom",
    [pytest.param(i, marks=pytest.mark.slow) if i in SLOW_IDIOMS else i for i in sorted(IDIOMS)],
)
def test_idiom_is_one_partition_with_nothing_float_on_cpu(idiom, target):
    make, shape = IDIOMS[idiom]
    torch.manual_seed(0)
    x = _batch(shape, 0)
    # What is checked here is the annotation. The verified compile is off: on U55 Vela 5.1
    # miscompiles the first linear of some of these (1, 4, 8) graphs, which it would move to the
    # CPU (tests/test_verified_compile.py pins that).
    spec = EthosUNGCompileSpec(target, embed_tosa=True, verify_npu=False)
    # int8 program IO: with no IO quantize on the CPU, any CPU op is a float op of the idiom.
    q = quantize(
        make().eval(),
        x,
        spec,
        calibration=[_batch(shape, k) for k in range(1, 5)],
        input_dtype=torch.int8,
        output_dtype=torch.int8,
    )
    edge, part = lower(q, x, spec)
    assert len(part.report.partitions) == 1, part.report.partitions
    assert part.report.cpu_targets == {}, part.report.cpu_reasons
    assert float_boundary_tensors(edge.exported_program()) == []
    ioq = io_quantization(edge)
    for k in range(2):
        xi = (ioq.inputs[0].quantize(_batch(shape, 10 + k)[0]),)
        assert max(r.worst for r in check_delegates(edge, xi)) <= 1


# Example arguments per alias: (graph inputs, args builder from placeholders).
_ALIAS_CASES = {
    aten.clamp_min.default: (1, lambda x: (x[0], 0.1)),
    aten.clamp_max.default: (1, lambda x: (x[0], -0.1)),
    aten.clamp_min.Tensor: (2, lambda x: (x[0], x[1])),
    aten.clamp_max.Tensor: (2, lambda x: (x[0], x[1])),
    aten.clip.default: (1, lambda x: (x[0], -0.2, 0.3)),
    aten.clip.Tensor: (2, lambda x: (x[0], x[1], None)),
    aten.expand_as.default: (2, lambda x: (x[0], x[1])),
    aten.relu6.default: (1, lambda x: (x[0],)),
}


@pytest.mark.parametrize("op", sorted(ALIASES, key=str), ids=str)
def test_alias_rewrite_keeps_values(op):
    n_in, build = _ALIAS_CASES[op]
    g = Graph()
    phs = [g.placeholder(f"x{k}") for k in range(n_in)]
    shapes = [(3, 4), (3, 4)] if op is not aten.expand_as.default else [(3, 1), (3, 4)]
    # Spread past relu6's 6 and the clamp bounds.
    gen = torch.Generator().manual_seed(0)
    ins = [torch.randn(s, generator=gen) * 8 for s in shapes]
    for p, t in zip(phs, ins):
        p.meta["val"] = t
    out = g.call_function(op, build(phs))
    g.output(out)
    gm = GraphModule(torch.nn.Module(), g)
    want = gm(*ins[:n_in])
    assert canonicalize_aliases(gm) == 1
    assert op not in {n.target for n in gm.graph.nodes}
    assert torch.equal(gm(*ins[:n_in]), want)
