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
