"""Compile torchvision's MobileNetV2 (random weights, nothing downloaded) to a .pte for Ethos-U.

python examples/export_mobilenet_v2.py --target ethos-u55-128 -o mobilenet_v2.pte
"""

import argparse
import time

import torch
import torchvision

from ethosu_ng import DelegateBlob, EthosUNGCompileSpec
from ethosu_ng.export import lower, quantize
from ethosu_ng.partitioning.boundary import float_boundary_tensors


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--target", default="ethos-u55-128")
    ap.add_argument("-o", "--output", default="mobilenet_v2.pte")
    ap.add_argument("--calibration", type=int, default=2, help="random calibration batches")
    args = ap.parse_args()

    t0 = time.time()
    torch.manual_seed(0)
    model = torchvision.models.mobilenet_v2(weights=None).eval()
    x = (torch.randn(1, 3, 224, 224),)
    spec = EthosUNGCompileSpec(args.target)
    calib = [(torch.randn(1, 3, 224, 224),) for _ in range(args.calibration)]
    quantized = quantize(model, x, spec, calibration=calib)
    edge, partitioner = lower(quantized, x, spec)
    program = edge.exported_program()
    assert not float_boundary_tensors(program)
    pte = edge.to_executorch()
    with open(args.output, "wb") as f:
        f.write(pte.buffer)

    print(f"{args.output}: {len(pte.buffer)} bytes for {spec.target} in {time.time() - t0:.1f} s")
    for tag, nodes in partitioner.report.partitions.items():
        print(f"  {tag}: {len(nodes)} nodes on the NPU")
    cpu = {n: r for n, r in partitioner.report.cpu_reasons.items()}
    print(f"  {len(cpu)} nodes on the CPU")
    for name in list(program.graph_module._modules):
        if name.startswith("lowered_module"):
            blob = DelegateBlob.from_bytes(getattr(program.graph_module, name).processed_bytes)
            ins = ", ".join(s.describe() for s in blob.inputs)
            outs = ", ".join(s.describe() for s in blob.outputs)
            print(
                f"  {name}: in [{ins}] out [{outs}] scratch {blob.scratch_size} B, "
                f"weights {len(blob.weights)} B"
            )


if __name__ == "__main__":
    main()
