# SPDX-License-Identifier: BSD-3-Clause
"""Write the NPU-model fuzzer's seed corpus (tests/runtime/corpus_npu_model/seeds/).

Usage: python tests/runtime/make_npu_model_seeds.py [OUT_DIR]

Each seed is one real delegate's Vela driver payload and weights in the input layout of
runtime/fuzz/fuzz_npu_model.cpp: ``[u32 payload_len][u32 weights_len][u32 scratch_len]
[u32 fast_len][payload][weights]``, with the delegate's own scratch size, so an unmutated seed
runs to completion. Models from tests/npu_models.py, compiled for ethos-u55-128 and
ethos-u65-256, and for ethos-u85-256 and ethos-u85-512 (one and two cores; fast and standard
weight streams, chaining, LUTs, transposes). Deterministic up to Vela's output; rerun only to
refresh the corpus.
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


def main(out_dir: str) -> None:
    os.makedirs(out_dir, exist_ok=True)
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
                head = struct.pack(
                    "<4I",
                    len(blob.command_stream),
                    len(blob.weights),
                    blob.scratch_size,
                    blob.fast_scratch_size,
                )
                path = os.path.join(out_dir, f"{name}_{target}_{k}.bin")
                with open(path, "wb") as f:
                    f.write(head + blob.command_stream + blob.weights)
                print(path)


if __name__ == "__main__":
    main(
        sys.argv[1]
        if len(sys.argv) > 1
        else os.path.join(REPO, "tests", "runtime", "corpus_npu_model", "seeds")
    )
