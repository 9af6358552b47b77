# SPDX-License-Identifier: BSD-3-Clause
"""What a serialized program must carry: the delegates that were lowered, each a blob the reader
accepts whose IO table matches what ExecuTorch hands the delegate."""

from __future__ import annotations

from typing import List, Tuple

import torch

from ethosu_ng import DelegateBlob
from ethosu_ng.adapters import exir
from ethosu_ng.ops import CALL_DELEGATE

Typed = List[Tuple[torch.dtype, Tuple[int, ...]]]


def lowered_delegates(edge) -> List[Tuple[bytes, Typed, Typed]]:
    """(blob bytes, typed inputs, typed outputs) of every call_delegate in the lowered program, the
    types taken from the parent graph (what ExecuTorch allocates). Call before to_executorch(),
    which rewrites the graph."""
    gm = edge.exported_program().graph_module
    out = []
    for n in gm.graph.nodes:
        if n.op == "call_function" and n.target is CALL_DELEGATE:
            vals = n.meta["val"]
            vals = vals if isinstance(vals, (list, tuple)) else [vals]
            ins = [(a.meta["val"].dtype, tuple(a.meta["val"].shape)) for a in n.args[1:]]
            outs = [(v.dtype, tuple(v.shape)) for v in vals]
            out.append((getattr(gm, n.args[0].target).processed_bytes, ins, outs))
    return out


def delegate_infos(edge) -> list:
    """What preprocess recorded for each lowered delegate (its typed IO and the verified compile's
    verdicts), in the order of the lowered modules."""
    return [
        m.meta["_delegate_info_meta"]
        for _, m in edge.exported_program().graph_module.named_children()
        if hasattr(m, "processed_bytes")
    ]


def assert_pte_carries(delegates, pte: bytes) -> None:
    """The .pte holds exactly these delegates, in order, byte for byte, for EthosUNGBackend; each
    parses, and its IO table has the dtypes and shapes of the parent's call_delegate."""
    payloads = exir.pte_delegate_payloads(pte)
    assert [b for b, _ in payloads] == ["EthosUNGBackend"] * len(delegates), payloads
    assert len(delegates) > 0
    for k, ((_, data), (blob_bytes, ins, outs)) in enumerate(zip(payloads, delegates)):
        assert data == blob_bytes, f"delegate {k}: .pte payload differs from the lowered blob"
        blob = DelegateBlob.from_bytes(data)
        assert [(s.dtype, tuple(s.shape)) for s in blob.inputs] == ins, k
        assert [(s.dtype, tuple(s.shape)) for s in blob.outputs] == outs, k


# Targets whose command streams the NPU model executes whatever they use (U55, U65); on Ethos-U85
# it runs the programs whose streams it implements (runtime.model_unsupported).
NPU_MODEL_TARGETS = ("ethos-u55", "ethos-u65")


class CrossCheckedMethod:
    """A .pte's method run on every NPU path the host has for it, asserting they agree bit for bit.

    The TOSA reference model always (the .pte needs ``embed_tosa=True``); the NPU model as well
    where ``runtime.default_npu_for`` picks it: always for a program compiled for a target in
    ``NPU_MODEL_TARGETS`` (asserted, so the model check cannot silently not run), and for an
    Ethos-U85 program whose streams the model implements (``runtime.model_unsupported``).
    Each path runs its own loaded copy of the program, so state buffers advance once per step on
    each. The model runs last (``runtime.npu_model_stats()`` then describes its run);
    ``execute`` returns its outputs where it ran, else the TOSA ones.
    """

    def __init__(self, pte: bytes, target: str, method: str = "forward"):
        from ethosu_ng.runtime import default_npu_for, load_pte

        default = default_npu_for(pte)
        self.runs_npu_model = default == "model"
        if target.startswith(NPU_MODEL_TARGETS):
            assert self.runs_npu_model, f"a {target} program defaults to npu={default!r}"
        npus = ["tosa"] + (["model"] if self.runs_npu_model else [])
        self.paths = {npu: load_pte(pte).method(method) for npu in npus}

    def execute(self, inputs, describe: str = "") -> list:
        outs = {npu: m.execute(list(inputs), npu) for npu, m in self.paths.items()}
        want = outs["tosa"]
        got = outs.get("model", want)
        assert len(got) == len(want), f"NPU model: {len(got)} outputs, TOSA {len(want)} {describe}"
        for k, (g, w) in enumerate(zip(got, want)):
            assert (g.dtype, g.shape) == (w.dtype, w.shape), (
                f"output {k}: NPU model {g.dtype} {tuple(g.shape)}, TOSA {w.dtype} "
                f"{tuple(w.shape)} {describe}"
            )
            if not torch.equal(g, w):
                diff = (g.double() - w.double()).abs()
                raise AssertionError(
                    f"NPU model vs TOSA, output {k}: {int((diff > 0).sum())} of {diff.numel()} "
                    f"elements differ, max {diff.max().item()} {describe}"
                )
        return got


def zoo_case_on_u85_model(model_spec: str, target: str, verify_npu: bool = True) -> str:
    """A model compiled for a U85 size (verified compile on unless ``verify_npu=False``), run on
    the U85 model by default and cross-checked against the TOSA reference model on its two
    calibration batches: one line saying so, or an ``AssertionError`` carrying that line and the
    difference (or what the model does not run)."""
    import time

    from ethosu_ng import EthosUNGCompileSpec
    from ethosu_ng import runtime as rt
    from ethosu_ng.export import lower, quantize
    from ethosu_ng.tools.model_source import load_model

    t0 = time.time()
    m = load_model(model_spec)
    g = torch.Generator().manual_seed(1)
    calib = [tuple(torch.randn(t.shape, generator=g) for t in m.example_inputs) for _ in range(2)]
    spec = EthosUNGCompileSpec(target, embed_tosa=True, verify_npu=verify_npu)
    q = quantize(m.model, m.example_inputs, spec, calibration=calib)
    edge, part = lower(q, m.example_inputs, spec)
    pte = edge.to_executorch().buffer
    moved = dict(part.report.compiler_fallback)
    line = (
        f"ZOO-U85 {model_spec} {target}: partitions {len(part.report.partitions)}, "
        f"moved {sorted(moved)}, default npu {rt.default_npu_for(pte)}, "
        f"compile {time.time() - t0:.0f} s"
    )
    unsupported = rt.model_unsupported(pte)
    assert unsupported is None, f"{line}; not run on the model: {unsupported}"
    method = CrossCheckedMethod(pte, target)
    assert method.runs_npu_model, line
    t1 = time.time()
    try:
        for k, batch in enumerate(calib):
            method.execute(list(batch), f"{model_spec} {target} batch {k}")
    except AssertionError as e:
        raise AssertionError(f"{line}; DIFFERS: {str(e)[:300]}") from None
    for why in moved.values():
        assert why.startswith("verified compile:"), f"{line}; {moved}"
    return f"{line}; bit-exact on 2 batches ({(time.time() - t1) / 2:.1f} s per batch, both paths)"
