# SPDX-License-Identifier: BSD-3-Clause
"""Compile torchvision's MobileNetV2 (random weights, nothing downloaded) for Ethos-U, taking the
bytes a camera gives (uint8, interleaved HWC) as they are, and run one frame on the host.

python examples/export_mobilenet_v2.py --target ethos-u55-128 -o mobilenet_v2.pte

Writes the .pte and its .report.json (what ``ethosu-ng report`` reads); ``--emit-c DIR`` also
writes the program, its pools and its IO contract as C for a firmware build.
"""

import argparse
import time

import torch
import torchvision

import ethosu_ng


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--target", default="ethos-u55-128")
    ap.add_argument("-o", "--output", default="mobilenet_v2.pte")
    ap.add_argument("--calibration", type=int, default=2, help="random calibration batches")
    ap.add_argument("--emit-c", metavar="DIR")
    args = ap.parse_args()

    t0 = time.time()
    torch.manual_seed(0)
    model = torchvision.models.mobilenet_v2(weights=None).eval()
    x = (torch.rand(1, 3, 224, 224),)  # images in [0, 1]
    calib = [(torch.rand(1, 3, 224, 224),) for _ in range(args.calibration)]
    result = ethosu_ng.compile(
        model,
        x,
        args.target,
        calibration=calib,
        input_dtype="uint8",  # camera bytes in
        output_dtype="int8",  # int8 scores out: no quantize/dequantize on the CPU
        input_layout="nhwc",  # interleaved HWC: no NPU transpose of the input
    )
    written = result.save(args.output, emit_c=args.emit_c)
    print(result.report.summary())
    print(f"\nwrote {', '.join(written)} in {time.time() - t0:.1f} s")

    # One camera frame: H x W x 3 bytes, fed as they are (a view, no copy, no transpose).
    frame = (torch.rand(224, 224, 3) * 255).round().to(torch.uint8).numpy().tobytes()
    pixels = torch.frombuffer(bytearray(frame), dtype=torch.uint8)
    image = pixels.view(1, 224, 224, 3).permute(0, 3, 1, 2)  # logical NCHW, bytes still HWC
    from ethosu_ng.runtime import run_pte

    (scores,) = run_pte(result.pte, [image])
    io = ethosu_ng.io_quantization(result.edge)
    print(
        f"class {int(scores.argmax())}, score {float(io.outputs[0].dequantize(scores).max()):.3g}"
    )


if __name__ == "__main__":
    main()
