# SPDX-License-Identifier: BSD-3-Clause
"""Write the fuzzer's seed corpus (tests/runtime/corpus/seeds/): real delegate blobs.

Usage: python tests/runtime/make_seeds.py [OUT_DIR]
       python tests/runtime/make_seeds.py --crashers [DIR]

Each seed is the ``processed_bytes`` of one EthosUNGBackend delegate from a real compile
(``ethosu_ng.export.quantize`` + ``lower`` through Vela), plus the synthetic "good" blobs of
runtime/tests/gen_blobs.py (every dtype, rank 0 and 6, fast scratch, no IO). A bare blob is a
complete fuzz input (runtime/fuzz/fuzz_delegate.cpp): matching tensors, reaching the NPU driver.
A few seeds append an option trailer (channels-last / padded / dynamic IO tensors).
Deterministic up to Vela's output; rerun only to refresh the corpus (after a blob format change,
for one).

``--crashers`` brings the regression inputs of tests/runtime/corpus/crashers/ to the current
format version in place: each input's blob part gets the current version number and its
checksums rewritten (``write_checksums``, hostile layouts tolerated), its trailer is kept. They
then reach the code they once crashed rather than the version check.
"""

import os
import struct
import sys

import torch

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, REPO)
sys.path.insert(0, os.path.join(REPO, "tests"))
sys.path.insert(0, os.path.join(REPO, "runtime", "tests"))

from models import SmallConv  # noqa: E402

from ethosu_ng import DelegateBlob, EthosUNGCompileSpec  # noqa: E402
from ethosu_ng.blob import HEADER, VERSION, write_checksums  # noqa: E402
from ethosu_ng.export import lower, quantize  # noqa: E402

CALL_DELEGATE = torch.ops.higher_order.executorch_call_delegate


def _calib(example, n=4, seed=1):
    g = torch.Generator().manual_seed(seed)
    return [tuple(torch.randn(t.shape, generator=g) for t in example) for _ in range(n)]


def delegate_blobs(model, example, target, embed_tosa=False, cpu_ops=(), **qkw):
    torch.manual_seed(0)
    spec = EthosUNGCompileSpec(target, embed_tosa=embed_tosa)
    q = quantize(model.eval(), example, spec, calibration=_calib(example), **qkw)
    edge, _ = lower(q, example, spec, cpu_ops=list(cpu_ops))
    gm = edge.exported_program().graph_module
    return [
        getattr(gm, n.args[0].target).processed_bytes
        for n in gm.graph.nodes
        if n.op == "call_function" and n.target is CALL_DELEGATE
    ]


def real_blobs():
    from data.tiny_factory import Tiny
    from models import ConvSplitBmm

    torch.manual_seed(0)
    out = {}
    (b,) = delegate_blobs(Tiny(), (torch.randn(1, 3, 16, 16),), "ethos-u55-128")
    out["tiny_u55"] = b
    x = (torch.randn(1, 3, 6, 10).to(memory_format=torch.channels_last),)
    (b,) = delegate_blobs(
        SmallConv(),
        x,
        "ethos-u55-128",
        embed_tosa=True,
        input_dtype=torch.uint8,
        output_dtype=torch.int8,
    )
    out["smallconv_u8_cl_tosa_u55"] = b
    for k, b in enumerate(
        delegate_blobs(
            ConvSplitBmm(), ConvSplitBmm.example(), "ethos-u65-256", cpu_ops=["aten.bmm.default"]
        )
    ):
        out[f"conv_split_bmm_u65_{k}"] = b
    return out


def synthetic_blobs():
    from gen_blobs import good_blobs

    return {f"synthetic_{k}": v.to_bytes() for k, v in good_blobs().items()}


# Option trailers (see the header comment of fuzz_delegate.cpp): g, runtime alloc, temp, fast
# SRAM, driver, argc, runs, then 7 bytes per argument (kind, dtype, shape, shape_arg, order,
# dyn, pad).
def trailer(per_arg, runs=1):
    head = bytes([0, 0, 0, 0, 0, 0, runs])
    return head + b"".join(bytes(a) for a in per_arg)


def main(out_dir):
    os.makedirs(out_dir, exist_ok=True)
    blobs = {**real_blobs(), **synthetic_blobs()}
    for name, raw in blobs.items():
        DelegateBlob.from_bytes(raw)  # valid per the Python reader
        with open(os.path.join(out_dir, f"{name}.blob"), "wb") as f:
            f.write(raw)
    # Channels-last tensors (dim order 0,2,3,1 is permutation code 16), padded strides, a
    # dynamic output, run twice.
    cl = blobs["smallconv_u8_cl_tosa_u55"]
    with open(os.path.join(out_dir, "smallconv_cl_padded_dynamic.bin"), "wb") as f:
        f.write(cl + trailer([[0, 0, 0, 0, 16, 0, 0b101], [0, 0, 0, 0, 16, 1, 0b11]], runs=1))
    mixed = blobs["synthetic_mixed"]
    with open(os.path.join(out_dir, "mixed_permuted_dynamic.bin"), "wb") as f:
        f.write(
            mixed
            + trailer(
                [
                    [0, 0, 0, 0, 5, 0, 1],
                    [0, 0, 0, 0, 1, 0, 0],
                    [0] * 7,
                    [0, 0, 0, 0, 0, 2, 0],
                    [0, 0, 0, 0, 77, 1, 6],
                ]
            )
        )
    for name in sorted(os.listdir(out_dir)):
        print(f"{os.path.getsize(os.path.join(out_dir, name)):7d}  {name}")


def blob_size(data: bytes) -> int:
    """Where runtime/fuzz/fuzz_delegate.cpp splits an input into blob and trailer."""
    if len(data) >= 12:
        total = struct.unpack_from("<I", data, 8)[0]
        if HEADER.size <= total <= len(data):
            return total
    return len(data)


def refresh_crashers(crash_dir: str) -> None:
    for name in sorted(os.listdir(crash_dir)):
        path = os.path.join(crash_dir, name)
        if not name.startswith("crash-"):
            continue
        with open(path, "rb") as f:
            data = bytearray(f.read())
        n = blob_size(bytes(data))
        if n >= HEADER.size and data[:4] == b"EUNG":
            struct.pack_into("<H", data, 4, VERSION)
            data[:n] = write_checksums(bytes(data[:n]))
        with open(path, "wb") as f:
            f.write(bytes(data))
        print(f"{len(data):7d}  {name}")


if __name__ == "__main__":
    corpus = os.path.join(REPO, "tests", "runtime", "corpus")
    if len(sys.argv) > 1 and sys.argv[1] == "--crashers":
        refresh_crashers(sys.argv[2] if len(sys.argv) > 2 else os.path.join(corpus, "crashers"))
    else:
        main(sys.argv[1] if len(sys.argv) > 1 else os.path.join(corpus, "seeds"))
