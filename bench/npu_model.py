# SPDX-License-Identifier: BSD-3-Clause
"""Host time per inference and MAC/s of the Ethos-U55/U65/U85 NPU model (npu_model/).

    python bench/npu_model.py                       # the small models of tests/npu_models.py
    python bench/npu_model.py timm:mobilenetv2_100 --target ethos-u65-256 --repeat 3
    python bench/npu_model.py timm:deit_tiny_patch16_224 timm:resnet18 \
        --target ethos-u55-128 ethos-u85-256          # U55 and U85 side by side
    python bench/npu_model.py --zoo [--target T ...] # the zoo models of bench/zoo_table.py

Each model is quantized and lowered through the real pipeline (Vela), then every delegate's
driver payload is run on the NPU model directly (``ethosu_ng.runtime.npu_model_run``, inputs of
random bytes in scratch): the time is the model's alone, without the .pte runtime, layout copies
or CPU ops. Prints a markdown table: delegates, NPU kernels, MACs, fastest of ``--repeat`` runs
per inference in wall-clock and in this process's CPU time (the model is single-threaded, so CPU
time is one core's work whatever else runs on the machine), MAC/s by CPU time. Models:
``npu:NAME`` (tests/npu_models.py) or anything ``ethosu_ng.tools.model_source.load_model``
accepts (timm:, torchvision:, file.py:factory).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np
import torch

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
sys.path.insert(0, os.path.join(REPO, "tests"))

from conftest import calibration_batches  # noqa: E402
from npu_models import ALL  # noqa: E402

from ethosu_ng import DelegateBlob, EthosUNGCompileSpec  # noqa: E402
from ethosu_ng import runtime as rt  # noqa: E402
from ethosu_ng.export import lower, quantize  # noqa: E402
from ethosu_ng.tools.model_source import load_model  # noqa: E402

CALL_DELEGATE = torch.ops.higher_order.executorch_call_delegate


def _load(spec: str):
    if spec.startswith("npu:"):
        torch.manual_seed(0)
        return ALL[spec[4:]]()
    m = load_model(spec)
    return m.model, m.example_inputs


def _blobs(spec: str, target: str):
    model, example = _load(spec)
    # Vela's streams as emitted: the compile-time checks (lowering, stream on the model) would
    # only add compile time here.
    cs = EthosUNGCompileSpec(target, verify_lowering=False, verify_npu=False)
    q = quantize(model.eval(), example, cs, calibration=calibration_batches(example, n=2))
    gm = lower(q, example, cs)[0].exported_program().graph_module
    return [
        DelegateBlob.from_bytes(getattr(gm, n.args[0].target).processed_bytes)
        for n in gm.graph.nodes
        if n.op == "call_function" and n.target is CALL_DELEGATE
    ]


def bench(spec: str, target: str, repeat: int) -> str:
    blobs = _blobs(spec, target)
    rng = np.random.default_rng(0)
    best, best_cpu, ops, macs = float("inf"), float("inf"), 0, 0
    for _ in range(repeat):
        total = cpu = 0.0
        ops = macs = 0
        for b in blobs:
            scratch = bytearray(b.scratch_size)
            fast = bytearray(b.fast_scratch_size) if b.fast_scratch_size else None
            for s in b.inputs:
                scratch[s.offset : s.offset + s.byte_size] = rng.integers(
                    0, 256, s.byte_size, dtype=np.uint8
                ).tobytes()
            t0, c0 = time.perf_counter(), time.process_time()
            rt.npu_model_run(b.command_stream, b.weights, scratch, fast)
            total += time.perf_counter() - t0
            cpu += time.process_time() - c0
            st = rt.npu_model_stats()
            ops += st["ops"]
            macs += st["macs"]
        best = min(best, total)
        best_cpu = min(best_cpu, cpu)
    rate = macs / best_cpu if best_cpu > 0 else 0.0
    return (
        f"| {spec} | {target} | {len(blobs)} | {ops} | {macs / 1e6:.2f} M | "
        f"{best * 1e3:.1f} ms | {best_cpu * 1e3:.1f} ms | {rate / 1e6:.1f} M |"
    )


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="*", default=None)
    ap.add_argument("--target", nargs="+", default=["ethos-u55-128"])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--zoo", action="store_true", help="the zoo models (bench/zoo_table.py)")
    args = ap.parse_args(argv)
    if args.zoo:
        sys.path.insert(0, os.path.join(REPO, "bench"))
        from zoo_table import ZOO

        args.models = ZOO
    args.models = args.models or [f"npu:{n}" for n in ALL]
    rt.load_host_runtime()
    print(
        "| model | target | delegates | NPU kernels | MACs | host time / inference "
        "| CPU time / inference | MAC/s (CPU time) |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for spec in args.models:
        for target in args.target:
            try:
                print(bench(spec, target, args.repeat), flush=True)
            except Exception as e:  # noqa: BLE001 - one failing model does not end the table
                print(f"| {spec} | {target} | failed: {type(e).__name__}: {str(e)[:200]} ||||||")


if __name__ == "__main__":
    main()
