# SPDX-License-Identifier: BSD-3-Clause
"""The partitioner's compiled-partition cache hands ``preprocess`` only a blob compiled for the
same compile spec (target, system config, memory mode, Vela flags, embed_tosa) and partition, one
cache per partitioner, entries that are not final partitions dropped when ``partition`` returns,
bounded in bytes, safe from several threads."""

import copy
import threading

import torch
from executorch.exir import to_edge_transform_and_lower
from executorch.exir.backend.partitioner import DelegationSpec, Partitioner, PartitionResult
from torch import nn

from ethosu_ng import DelegateBlob, EthosUNGCompileSpec, EthosUNGPartitioner
from ethosu_ng.compile_spec import BACKEND_ID
from ethosu_ng.compiler.compiled_cache import CompiledCache
from ethosu_ng.compiler.pipeline import CompiledPartition
from ethosu_ng.export import quantize
from ethosu_ng.vela import compiler as vela_compiler


def _entry(n: int) -> CompiledPartition:
    return CompiledPartition(b"x" * n, None)


def test_bounded_in_bytes_oldest_first():
    c = CompiledCache(capacity_bytes=100)
    spec = EthosUNGCompileSpec("ethos-u55-128")
    keys = [c.key(spec, f"fp{k}") for k in range(4)]
    for k in keys[:3]:
        c.put(k, _entry(40))
    assert c.keys() == keys[1:3] and c.nbytes == 80  # the third put evicted the first
    c.put(keys[3], _entry(101))  # larger than the whole cache: not kept
    assert c.keys() == keys[1:3] and c.nbytes == 80
    c.put(keys[3], _entry(60))
    assert c.keys() == keys[2:4] and c.nbytes == 100


def test_key_is_spec_and_fingerprint():
    c = CompiledCache()
    u55 = EthosUNGCompileSpec("ethos-u55-128")
    others = [
        EthosUNGCompileSpec("ethos-u85-256"),
        EthosUNGCompileSpec("ethos-u55-128", embed_tosa=True),
        EthosUNGCompileSpec("ethos-u55-128", memory_mode="Sram_Only"),
        EthosUNGCompileSpec("ethos-u55-128", system_config="Ethos_U55_Deep_Embedded"),
        EthosUNGCompileSpec("ethos-u55-128", extra_vela_flags=["--optimise", "Size"]),
    ]
    c.put(c.key(u55, "fp"), _entry(8))
    for s in others:
        assert c.get(c.key(s, "fp")) is None, s
    # preprocess rebuilds the spec from ExecuTorch's CompileSpec list: the same key
    again = EthosUNGCompileSpec.from_compile_specs(u55.to_compile_specs())
    assert c.get(c.key(again, "fp")) is not None
    assert c.key(u55, None) is None and c.get(None) is None


def test_take_once_per_use_and_retain():
    c = CompiledCache()
    spec = EthosUNGCompileSpec("ethos-u55-128")
    a, b, d = (c.key(spec, x) for x in "abd")
    c.put(a, _entry(4), uses=2)  # two identical partitions
    c.put(b, _entry(4))
    c.put(d, _entry(4))
    c.retain(candidates=[a, b, d], final=[a, b])
    assert sorted(c.keys()) == sorted([a, b])
    assert c.take(a) is not None and c.take(a) is not None and c.take(a) is None
    assert c.take(b) is not None and len(c) == 0 and c.nbytes == 0


def test_copies_share_the_cache():
    c = CompiledCache()
    assert copy.deepcopy({"meta": c})["meta"] is c and copy.copy(c) is c


def test_threads_keep_the_byte_count():
    c = CompiledCache(capacity_bytes=10_000)
    spec = EthosUNGCompileSpec("ethos-u55-128")

    def work(t):
        for k in range(300):
            key = c.key(spec, f"{t}-{k % 37}")
            c.put(key, _entry(1 + (k * 7 + t) % 200))
            if k % 3 == 0:
                c.take(key)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert c.nbytes == sum(len(c.get(k).blob) for k in c.keys())  # noqa: SIM118 <= 10_000


def test_bad_capacity_is_a_clear_error():
    import pytest

    with pytest.raises(TypeError, match="capacity_bytes must be an int"):
        CompiledCache(capacity_bytes="big")
    with pytest.raises(ValueError, match="capacity_bytes must be >= 0"):
        CompiledCache(capacity_bytes=-1)


# -- real exports ------------------------------------------------------------------------------
class Small(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.fc = nn.Linear(8, 4)

    def forward(self, x):
        return self.fc(torch.relu(self.conv(x)).mean((2, 3)))


def _quantized():
    torch.manual_seed(0)
    x = (torch.randn(1, 3, 8, 8),)
    # The quantized model does not depend on the target's family for this model.
    return quantize(Small().eval(), x, EthosUNGCompileSpec("ethos-u55-128")), x


def _blobs(edge):
    gm = edge.exported_program().graph_module
    return [
        DelegateBlob.from_bytes(getattr(gm, n.args[0].target).processed_bytes)
        for n in gm.graph.nodes
        if n.op == "call_function" and n.target is torch.ops.higher_order.executorch_call_delegate
    ]


def _check_blob(blob, spec, other_family_stream):
    assert (blob.tosa is not None) == spec.embed_tosa
    assert blob.command_stream != other_family_stream


def test_partitioner_path_gives_each_spec_its_own_blob():
    q, x = _quantized()
    specs = [
        EthosUNGCompileSpec("ethos-u55-128"),
        EthosUNGCompileSpec("ethos-u55-128", embed_tosa=True),
        EthosUNGCompileSpec("ethos-u85-256", embed_tosa=True),
        EthosUNGCompileSpec("ethos-u85-256"),
    ]
    got = {}
    for spec in specs:
        part = EthosUNGPartitioner(spec)
        edge = to_edge_transform_and_lower(torch.export.export(q, x), partitioner=[part])
        (blob,) = _blobs(edge)
        got[spec] = blob
        assert len(part.compiled) == 0  # every final partition taken, nothing else left
    for spec, blob in got.items():
        assert (blob.tosa is not None) == spec.embed_tosa, spec
    u55, u55_t, u85_t, u85 = (got[s] for s in specs)
    assert u55.command_stream == u55_t.command_stream
    assert u85.command_stream == u85_t.command_stream
    assert u55.command_stream != u85.command_stream
    # Each blob's command stream is what Vela makes of its TOSA graph for its own target.
    assert vela_compiler.compile_tosa(u55_t.tosa, specs[1]).command_stream == u55.command_stream
    assert vela_compiler.compile_tosa(u85_t.tosa, specs[2]).command_stream == u85.command_stream


class _TaggedAsOtherSpec(Partitioner):
    """Tags with one EthosUNGPartitioner (which compiles for its own spec) but hands the
    partitions to to_backend with another spec: ``preprocess`` must not take the first spec's
    blobs."""

    def __init__(self, inner: EthosUNGPartitioner, spec: EthosUNGCompileSpec):
        self.inner = inner
        self.delegation_spec = DelegationSpec(BACKEND_ID, spec.to_compile_specs())

    def transform_for_pre_decomposition(self, program):
        return self.inner.transform_for_pre_decomposition(program)

    def ops_to_not_decompose(self, program):
        return self.inner.ops_to_not_decompose(program)

    def partition(self, program):
        res = self.inner.partition(program)
        tags = {t: self.delegation_spec for t in res.partition_tags}
        return PartitionResult(
            tagged_exported_program=res.tagged_exported_program, partition_tags=tags
        )


def test_to_backend_with_another_spec_compiles_its_own_blob():
    q, x = _quantized()
    first = EthosUNGPartitioner(EthosUNGCompileSpec("ethos-u55-128"))
    other = EthosUNGCompileSpec("ethos-u85-256", embed_tosa=True)
    wrapper = _TaggedAsOtherSpec(first, other)
    edge = to_edge_transform_and_lower(torch.export.export(q, x), partitioner=[wrapper])
    (blob,) = _blobs(edge)
    assert blob.tosa is not None  # compiled for ``other``, not the u55 blob without TOSA
    assert vela_compiler.compile_tosa(blob.tosa, other).command_stream == blob.command_stream
    # The partitioner's own u55 blob was compiled and is still waiting, never handed out.
    assert len(first.compiled) == 1
    (waiting,) = [first.compiled.get(k) for k in first.compiled.keys()]  # noqa: SIM118
    assert DelegateBlob.from_bytes(waiting.blob).command_stream != blob.command_stream


class _TwoRounds(Partitioner):
    """Partitions normally, then replays what a CPU-fallback round does on the same program:
    round 1 compiles the final partition P, round 2 compiles what remains of P without its first
    compute op (re-proposed under the boundary contract, as culprit search does). Checks what
    ``partition`` would leave in the cache after such rounds."""

    def __init__(self, inner: EthosUNGPartitioner):
        self.inner = inner
        self.delegation_spec = inner.delegation_spec
        self.seen = None

    def transform_for_pre_decomposition(self, program):
        return self.inner.transform_for_pre_decomposition(program)

    def ops_to_not_decompose(self, program):
        return self.inner.ops_to_not_decompose(program)

    def partition(self, program):
        from ethosu_ng.partitioner import _Allowed, _is_compute, _TrialCompiler
        from ethosu_ng.partitioning.boundary import BoundaryContract

        res = self.inner.partition(program)
        ((tag, names),) = self.inner.report.partitions.items()
        nodes = [n for n in program.graph_module.graph.nodes if n.name in names]
        first = next(n for n in nodes if _is_compute(n))
        contract = BoundaryContract(program)
        trial = _TrialCompiler(self.inner, program, contract)
        assert trial.enabled
        cache = self.inner.compiled
        before = set(cache.keys())  # P, waiting for preprocess
        assert not trial.compile_final([set(nodes)])  # round 1: P
        rest, _ = self.inner._propose(program, _Allowed(set(nodes)), contract, {first: "moved"})
        assert rest and not trial.compile_final(rest)  # round 2
        trial.keep_only_final()
        self.seen = (before, set(cache.keys()), set(trial.put), len(rest))
        return res


def test_entries_that_are_not_final_are_dropped():
    q, x = _quantized()
    inner = EthosUNGPartitioner(EthosUNGCompileSpec("ethos-u55-128"))
    probe = _TwoRounds(inner)
    to_edge_transform_and_lower(torch.export.export(q, x), partitioner=[probe])
    before, after, put, n_rest = probe.seen
    assert len(before) == 1 and before <= put  # round 1 stored P
    assert len(after) == n_rest and after <= put  # round 2 stored its partitions ...
    assert not before & after  # ... and P is gone: not a final partition of the last round
