# SPDX-License-Identifier: BSD-3-Clause
"""Write the NPU-model fuzzer's seed corpus (tests/runtime/corpus_npu_model/seeds/).

Usage: python tests/runtime/make_npu_model_seeds.py [OUT_DIR]

Each seed is one real delegate's Vela driver payload and weights in the input layout of
runtime/fuzz/fuzz_npu_model.cpp: ``[u32 payload_len][u32 weights_len][u32 scratch_len]
[u32 fast_len][payload][weights]``, with the delegate's own scratch size, so an unmutated seed
runs to completion. Models from tests/npu_models.py, compiled for ethos-u55-128 and
ethos-u65-256, and for ethos-u85-256 and ethos-u85-512 (one and two cores; fast and standard
weight streams, chaining, LUTs, transposes); and the programs of tests/test_npu_model_u85_ops.py
for ethos-u85-256 and ethos-u85-512 (16-bit IFM convolutions, 16-bit LUTs, resize, comparisons,
bitwise logic, shifts); and Ethos-U85 streams with branches (a cond and a while loop) and indexed
DMA (index_put, gather). Deterministic up to Vela's output; rerun only to refresh the corpus.
"""

import os
import struct
import sys

import torch

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, REPO)
sys.path.insert(0, os.path.join(REPO, "tests"))

from conftest import calibration_batches  # noqa: E402
from npu_models import ALL  # noqa: E402

from ethosu_ng import DelegateBlob, EthosUNGCompileSpec  # noqa: E402
from ethosu_ng.export import lower, quantize  # noqa: E402

CALL_DELEGATE = torch.ops.higher_order.executorch_call_delegate
MODELS = ("conv_relu", "conv_wide", "add", "mean", "sigmoid", "mobilenetv2_block")
U85_MODELS = ("conv_wide", "depthwise_9x9", "layer_norm", "softmax", "transpose_conv")
TARGETS = {
    "ethos-u55-128": MODELS,
    "ethos-u65-256": MODELS,
    "ethos-u85-256": U85_MODELS,
    "ethos-u85-512": U85_MODELS,
}


# (kind, activation or integer dtype) of tests/test_npu_model_u85_ops.py's Op.
U85_OPS = (
    ("combo", torch.int16),
    ("linear", torch.int16),
    ("resize_bilinear_ac", torch.int8),
    ("where_and", torch.int8),
    ("shr", torch.int16),
)


def _write(out_dir: str, stem: str, blob: DelegateBlob) -> None:
    head = struct.pack(
        "<4I",
        len(blob.command_stream),
        len(blob.weights),
        blob.scratch_size,
        blob.fast_scratch_size,
    )
    path = os.path.join(out_dir, f"{stem}.bin")
    with open(path, "wb") as f:
        f.write(head + blob.command_stream + blob.weights)
    print(path)


def u85_op_seeds(out_dir: str) -> None:
    from test_npu_model_u85_ops import INT_KINDS, Op, _compile, _float_inputs, _int_inputs

    from ethosu_ng.adapters.exir import pte_delegate_payloads
    from ethosu_ng.compile_spec import BACKEND_ID

    for target in ("ethos-u85-256", "ethos-u85-512"):
        for kind, dtype in U85_OPS:
            torch.manual_seed(0)
            shape = (1, 4, 5, 6)
            if kind in INT_KINDS:
                example = _int_inputs(kind, shape, dtype, 0)
                pte, _ = _compile(Op(kind, 4), example, target)
            else:
                example = _float_inputs(shape, 0)
                pte, _ = _compile(Op(kind, 4), example, target, activation_dtype=dtype)
            payloads = [p for b, p in pte_delegate_payloads(pte) if b == BACKEND_ID]
            for k, payload in enumerate(payloads):
                blob = DelegateBlob.from_bytes(payload)
                _write(out_dir, f"u85op_{kind}_{str(dtype)[6:]}_{target}_{k}", blob)


def branch_and_indexed_seeds(out_dir: str) -> None:
    """Ethos-U85 streams with NPU_OP_BRANCH (a cond and a while loop of upstream's op tests,
    tests/control_flow_graphs.py) and with indexed DMA (index_put with a repeated index, a 3-D
    gather), for ethos-u85-256."""
    from control_flow_graphs import fixture_tosa
    from test_npu_model_u85_indexed import FAST

    from ethosu_ng.adapters.exir import pte_delegate_payloads
    from ethosu_ng.compile_spec import BACKEND_ID
    from ethosu_ng.vela.compiler import compile_tosa

    target = "ethos-u85-256"
    for test, case in (
        ("test_cond", "one_arg_one_output"),
        ("test_while", "two_in_one_captured_out"),
    ):
        vela = compile_tosa(fixture_tosa(test, case), EthosUNGCompileSpec(target))
        _write(out_dir, f"{test[5:]}_{case}_{target}_0", vela)
    for name, model, sets, _ in FAST[:2]:
        torch.manual_seed(0)
        spec = EthosUNGCompileSpec(target)
        q = quantize(model.eval(), sets[0], spec, calibration=[sets[0]])
        pte = lower(q, sets[0], spec)[0].to_executorch().buffer
        payloads = [p for b, p in pte_delegate_payloads(pte) if b == BACKEND_ID]
        for k, payload in enumerate(payloads):
            _write(out_dir, f"{name}_{target}_{k}", DelegateBlob.from_bytes(payload))


def main(out_dir: str) -> None:
    os.makedirs(out_dir, exist_ok=True)
    branch_and_indexed_seeds(out_dir)
    u85_op_seeds(out_dir)
    for target, models in TARGETS.items():
        for name in models:
            torch.manual_seed(0)
            model, example = ALL[name]()
            spec = EthosUNGCompileSpec(target)
            q = quantize(model.eval(), example, spec, calibration=calibration_batches(example))
            gm = lower(q, example, spec)[0].exported_program().graph_module
            for k, n in enumerate(
                n for n in gm.graph.nodes if n.op == "call_function" and n.target is CALL_DELEGATE
            ):
                blob = DelegateBlob.from_bytes(getattr(gm, n.args[0].target).processed_bytes)
                _write(out_dir, f"{name}_{target}_{k}", blob)


if __name__ == "__main__":
    main(
        sys.argv[1]
        if len(sys.argv) > 1
        else os.path.join(REPO, "tests", "runtime", "corpus_npu_model", "seeds")
    )
