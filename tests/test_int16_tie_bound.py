# SPDX-License-Identifier: BSD-3-Clause
"""The verified compile's bound on how far an int16 partition's near ties move its hardware
reading (``numerics.tie_bound``): sound op by op, and containing the TOSA graph on every element
of the verification samples over int16 lookups, LayerNorm and softmax blocks, shapes, input
scales and targets. A wrong lookup table stays a deviation (tests/test_int16.py)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch import nn

from ethosu_ng import EthosUNGCompileSpec
from ethosu_ng.export import lower, quantize
from ethosu_ng.numerics.int16_table import table_lookup
from ethosu_ng.numerics.tie_bound import table_delta, ties_within


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    span=st.sampled_from([64, 4096, 32767]),
    reach=st.sampled_from([0.0, 0.4, 3.0, 100.0, 200.0, 700.0]),
    shift=st.integers(-12, 1),
)
def test_table_delta_bounds_every_code_within_reach(seed, span, reach, shift):
    """Over every input code within ``reach`` of each code (tables of small and full-range,
    non-monotone slopes, any rescale shift), the lookup moves no more than ``table_delta``."""
    rng = np.random.default_rng(seed)
    table = torch.from_numpy(
        np.clip(np.cumsum(rng.integers(-span // 8, span // 8 + 1, 513)), -32768, 32767).astype(
            np.int16
        )
    )
    codes = torch.from_numpy(rng.integers(-32768, 32768, 64))
    dcodes = torch.full((64,), reach, dtype=torch.float64)
    bound = table_delta(codes, dcodes, table, shift)
    r = int(np.ceil(reach))
    offsets = torch.arange(-r, r + 1)
    near = (codes[:, None] + offsets[None, :]).clamp(-32768, 32767)
    moved = (table_lookup(near, table, shift) - table_lookup(codes, table, shift)[:, None]).abs()
    assert bool((moved.max(1).values <= bound).all()), (moved.max(1).values - bound).max()


@settings(max_examples=50, deadline=None)
@given(
    v=st.floats(-40000, 40000, allow_nan=False),
    dv=st.floats(0, 20, allow_nan=False),
    at=st.floats(-1, 1),
)
def test_ties_within_bounds_the_rounding_of_every_value_within_reach(v, dv, at):
    """A value ``at * dv`` (plus up to the near-tie width) from ``v`` rounds, half up and
    saturated to int16, at most ``ties_within`` steps from ``v``'s rounding."""
    near = 1e-3
    t = torch.tensor([v], dtype=torch.float64)
    bound = float(ties_within(t, torch.tensor([dv], dtype=torch.float64), near, -32768, 32767))
    for w in (v + at * dv, v + at * dv + near * np.sign(at)):

        def q(x):
            return min(max(np.floor(x + 0.5), -32768), 32767)

        assert abs(q(w) - q(v)) <= bound


class Unary(nn.Module):
    """An int16 block around one lookup, a LayerNorm or a softmax, as a transformer has them."""

    def __init__(self, kind: str, dim: int):
        super().__init__()
        self.kind = kind
        self.fc = nn.Linear(dim, dim)
        self.norm = nn.LayerNorm(dim)
        self.out = nn.Linear(dim, dim)

    def forward(self, x):
        y = self.fc(x)
        if self.kind == "layernorm":
            return self.out(self.norm(y))
        if self.kind == "softmax":
            return torch.softmax(y, -1)
        fn = {
            "sigmoid": torch.sigmoid,
            "tanh": torch.tanh,
            "gelu": nn.functional.gelu,
            "exp": torch.exp,
            "reciprocal": lambda v: torch.reciprocal(v.abs() + 0.5),
            "rsqrt": lambda v: torch.rsqrt(v.abs() + 0.25),
        }[self.kind]
        return fn(y) + x


def _hardware_reading_contains_tosa(kind, target, tokens, dim, spread, seed):
    with pytest.MonkeyPatch.context() as monkeypatch:
        _check_tie_bound(monkeypatch, kind, target, tokens, dim, spread, seed)


def _check_tie_bound(monkeypatch, kind, target, tokens, dim, spread, seed):
    from ethosu_ng.compiler import verify_lowering

    seen = []
    real = verify_lowering._exact_all

    def exact_all(gm, samples):
        result = real(gm, samples)
        seen.append((gm, samples, result[0]))
        return result

    monkeypatch.setattr(verify_lowering, "_exact_all", exact_all)
    refs = []
    real_verify = verify_lowering.verify

    def verify(name, reference, exact, outputs, spec):
        refs.append((reference, outputs))
        return real_verify(name, reference, exact, outputs, spec)

    monkeypatch.setattr(verify_lowering, "verify", verify)
    import ethosu_ng.compiler.pipeline as pipeline

    monkeypatch.setattr(pipeline, "verify_lowering", verify_lowering)
    g = torch.Generator().manual_seed(seed)
    model = Unary(kind, dim).eval()
    with torch.no_grad():
        for p in model.fc.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.5)
    batches = [(torch.randn(1, tokens, dim, generator=g) * spread,) for _ in range(2)]
    spec = EthosUNGCompileSpec(target, strict=True)
    q = quantize(model, batches[0], spec, calibration=batches, activation_dtype=torch.int16)
    lower(q, batches[0], spec)
    checked = 0
    for (_gm, _samples, runs), (reference, outputs) in zip(seen, refs):
        tosa_runs = reference.result("p", target)[0]
        for (_base, _flipped, hardware), got_all in zip(runs, tosa_runs):
            assert hardware is not None and hardware.tie_bounds is not None, kind
            for j, (got, s) in enumerate(zip(got_all, outputs)):
                reading = verify_lowering._npu(hardware.saturated[j], s)
                reach = torch.ceil(hardware.tie_bounds[j].expand(hardware.saturated[j].shape))
                reach = verify_lowering.logical_to_npu(reach.to(torch.int64), s).reshape(-1)
                got = np.asarray(got).reshape(-1).astype(np.int64)
                off = np.abs(got - reading) - (verify_lowering.LSB_TOLERANCE + reach)
                assert int(off.max()) <= 0, (
                    f"{kind} on {target}: TOSA {int(off.max())} steps beyond the hardware "
                    f"reading's tie bound at element {int(off.argmax())}"
                )
                checked += 1
    assert checked


@pytest.mark.slow
@settings(max_examples=16, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    kind=st.sampled_from(
        ["layernorm", "softmax", "sigmoid", "tanh", "gelu", "exp", "reciprocal", "rsqrt"]
    ),
    target=st.sampled_from(["ethos-u55-128", "ethos-u85-256"]),
    tokens=st.integers(2, 9),
    dim=st.sampled_from([8, 16, 24]),
    spread=st.sampled_from([0.05, 1.0, 8.0]),
    seed=st.integers(0, 2**16),
)
def test_tosa_lies_within_the_hardware_readings_tie_bound(kind, target, tokens, dim, spread, seed):
    """On the verified compile's samples (int16's whole range), every element of an a16w8
    block's TOSA graph is within one step plus the tie bound of the hardware reading, over
    lookups, LayerNorm and softmax, targets, widths and input scales."""
    _hardware_reading_contains_tosa(kind, target, tokens, dim, spread, seed)


@pytest.mark.slow
def test_an_a16w8_encoder_lowers_to_one_partition_on_ethos_u85():
    """timm deit_tiny (two blocks, 112 px, random weights), a16w8 on ethos-u85-256: one
    partition, no compute op on the CPU, its TOSA graph within the lowering check and its
    command stream bit-exact on the U85 model."""
    timm = pytest.importorskip("timm")
    from ethosu_ng.ops import QDQ_OPS, op_name

    torch.manual_seed(0)
    model = timm.create_model("deit_tiny_patch16_224", pretrained=False, depth=2, img_size=112)
    x = (torch.randn(1, 3, 112, 112),)
    spec = EthosUNGCompileSpec("ethos-u85-256", strict=True)
    q = quantize(model.eval(), x, spec, calibration=[x], activation_dtype=torch.int16)
    edge, part = lower(q, x, spec)
    assert len(part.report.partitions) == 1, part.report.cpu_reasons
    gm = edge.exported_program().graph_module
    on_cpu = [
        op_name(n.target)
        for n in gm.graph.nodes
        if n.op == "call_function"
        and op_name(n.target) not in QDQ_OPS
        and "call_delegate" not in op_name(n.target)
        and "getitem" not in op_name(n.target)
    ]
    assert not on_cpu, on_cpu
    (lowered,) = [getattr(gm, n.target) for n in gm.graph.nodes if n.op == "get_attr"]
    io = lowered.meta["_delegate_info_meta"]
    assert io.lowering_verification.status == "verified", io.lowering_verification
    assert io.npu_verification.status == "verified", io.npu_verification


def _one_entry_off(pipeline, monkeypatch):
    """Lower every partition with each int16 TABLE's entry 100 one step off."""
    from ethosu_ng.tosa_optimize import graph as tosa_graph

    real = pipeline.upstream.lower_to_tosa

    def off_by_one(*a, **k):
        g = tosa_graph.read(real(*a, **k))
        for op in g.ops:
            if op.op == "TABLE" and g.tensors[op.inputs[0]].dtype == "INT16":
                t = g.tensors[op.inputs[1]]
                vals = np.frombuffer(bytes(t.data), np.int16).astype(np.int32)
                vals[100] += 1 if vals[100] < 32767 else -1
                t.data = list(vals.astype(np.int16).tobytes())
        return tosa_graph.write(g)

    monkeypatch.setattr(pipeline.upstream, "lower_to_tosa", off_by_one)


@pytest.mark.slow
@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    kind=st.sampled_from(["sigmoid", "tanh", "gelu", "exp", "reciprocal", "rsqrt", "layernorm"]),
    target=st.sampled_from(["ethos-u55-128", "ethos-u85-256"]),
    tokens=st.integers(2, 6),
    dim=st.sampled_from([8, 16]),
    spread=st.sampled_from([0.05, 1.0, 8.0]),
    planted=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_the_graphs_int16_tables_are_compared_entry_for_entry(
    kind, target, tokens, dim, spread, planted, seed
):
    """Every int16 TABLE of the TOSA graph is compared with the lookup the quantized partition
    asks for (its op at its qparams), entry for entry and with the rescale after it: the graphs
    upstream lowers verify with every table checked, and one entry one step off is a deviation
    naming the table, over lookups, targets, widths and input scales."""
    import ethosu_ng.compiler.pipeline as pipeline
    from ethosu_ng.compiler.verify_lowering import LoweringDeviation

    g = torch.Generator().manual_seed(seed)
    model = Unary(kind, dim).eval()
    batches = [(torch.randn(1, tokens, dim, generator=g) * spread,) for _ in range(2)]
    spec = EthosUNGCompileSpec(target, strict=True)
    q = quantize(model, batches[0], spec, calibration=batches, activation_dtype=torch.int16)
    if planted:
        with pytest.MonkeyPatch.context() as monkeypatch:
            _one_entry_off(pipeline, monkeypatch)
            with pytest.raises(LoweringDeviation, match=r"TABLE of \w+: 1 of 513 entries differ"):
                lower(q, batches[0], spec)
        return
    edge, _ = lower(q, batches[0], spec)
    gm = edge.exported_program().graph_module
    (lowered,) = [getattr(gm, n.target) for n in gm.graph.nodes if n.op == "get_attr"]
    verdict = lowered.meta["_delegate_info_meta"].lowering_verification
    assert verdict.status == "verified" and verdict.tables_checked >= 1, verdict


def test_a_table_one_entry_off_is_a_deviation_naming_it(monkeypatch):
    """The fast case of the property above: an int16 sigmoid on ethos-u85-256."""
    import ethosu_ng.compiler.pipeline as pipeline
    from ethosu_ng.compiler.verify_lowering import LoweringDeviation

    _one_entry_off(pipeline, monkeypatch)
    x = (torch.linspace(-3, 3, 16).reshape(1, 2, 8),)
    spec = EthosUNGCompileSpec("ethos-u85-256", strict=True)
    model = Unary("sigmoid", 8).eval()
    q = quantize(model, x, spec, calibration=[x], activation_dtype=torch.int16)
    with pytest.raises(LoweringDeviation, match=r"TABLE of aten_sigmoid_default: 1 of 513"):
        lower(q, x, spec)
