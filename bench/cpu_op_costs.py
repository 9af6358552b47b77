# SPDX-License-Identifier: BSD-3-Clause
"""Instructions per element (or per MAC) of ExecuTorch's CPU kernels on a Cortex-M55.

Each op kind is exported alone as a CPU-only program (no delegate) at a size large enough that
the per-call cost is noise, built into the firmware image of ``firmware/`` (ExecuTorch's portable
and quantized kernels, MinSizeRel, ``-mcpu=cortex-m55``) and run under ``qemu-system-arm -icount
shift=0``, where QEMU's clock advances per executed instruction. The runner times each execute()
with SysTick and calibrates ticks against a loop of known length (``ethosu_ng.tools.firmware``).
The fixed cost of one kernel call is the intercept of ``add`` measured at two sizes.

Writes ``ethosu_ng/cpu_op_costs.json`` (read by ``ethosu_ng.cost_model``) and prints the table:

    OMP_NUM_THREADS=1 python bench/cpu_op_costs.py [--only add,mul] [--out PATH]

Instructions, not cycles: the M55 issues most scalar instructions in one cycle, so the cost
model takes one cycle per instruction; loads feeding the next instruction and taken branches cost
more, MVE code less (../shared/context/firmware-notes.md: QEMU's own timing says nothing about the
M55, its instruction count is exact).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

REPO = Path(__file__).resolve().parent.parent
DEFAULT_OUT = REPO / "ethosu_ng" / "cpu_op_costs.json"


class Fn(torch.nn.Module):
    def __init__(self, fn, params=None):
        super().__init__()
        self.fn = fn
        for k, v in (params or {}).items():
            setattr(self, k, torch.nn.Parameter(v, requires_grad=False))

    def forward(self, *xs):
        return self.fn(self, *xs)


def _q(x):
    return torch.ops.quantized_decomposed.quantize_per_tensor.default(
        x, 0.05, 3, -128, 127, torch.int8
    )


def _dq(x):
    return torch.ops.quantized_decomposed.dequantize_per_tensor.default(
        x, 0.05, 3, -128, 127, torch.int8
    )


def cases(n: int):
    """op name -> (module, example inputs, unit, units of work). ``n``: elements of the main
    tensor; matmul-like ops are sized to a comparable amount of work."""
    r = torch.randn
    side = int(round((n / 16) ** 0.5))  # a (1, 16, side, side) feature map of about n elements
    fmap = (r(1, 16, side, side),)
    e = 16 * side * side
    ch = 32
    rows = max(1, n // 64)
    w_conv = r(16, 16, 3, 3)
    out = {
        "aten::add.out": (Fn(lambda m, a, b: a + b), (r(1, n), r(1, n)), "element", n),
        "aten::sub.out": (Fn(lambda m, a, b: a - b), (r(1, n), r(1, n)), "element", n),
        "aten::mul.out": (Fn(lambda m, a, b: a * b), (r(1, n), r(1, n)), "element", n),
        "aten::div.out": (Fn(lambda m, a, b: a / b), (r(1, n), r(1, n) + 4), "element", n),
        "aten::relu.out": (Fn(lambda m, a: torch.relu(a)), (r(1, n),), "element", n),
        "aten::clamp.out": (Fn(lambda m, a: a.clamp(-1, 1)), (r(1, n),), "element", n),
        "aten::sigmoid.out": (Fn(lambda m, a: torch.sigmoid(a)), (r(1, n),), "element", n),
        "aten::tanh.out": (Fn(lambda m, a: torch.tanh(a)), (r(1, n),), "element", n),
        "aten::exp.out": (Fn(lambda m, a: torch.exp(a)), (r(1, n),), "element", n),
        "aten::gelu.out": (Fn(lambda m, a: F.gelu(a)), (r(1, n),), "element", n),
        "aten::permute_copy.out": (
            Fn(lambda m, a: a.permute(0, 2, 3, 1)),
            fmap,
            "element",
            e,
        ),
        "aten::cat.out": (
            Fn(lambda m, a, b: torch.cat([a, b], 1)),
            (r(1, 8, side, side), r(1, 8, side, side)),
            "element",
            e,
        ),
        "aten::slice_copy.Tensor_out": (
            Fn(lambda m, a: a[:, :, :, 1:]),
            fmap,
            "element",
            16 * side * (side - 1),
        ),
        "aten::_softmax.out": (Fn(lambda m, a: a.softmax(-1)), (r(rows, 64),), "element", n),
        "aten::native_layer_norm.out": (
            Fn(lambda m, a: F.layer_norm(a, (64,), m.w, m.b), {"w": r(64), "b": r(64)}),
            (r(rows, 64),),
            "element",
            n,
        ),
        "aten::mean.out": (
            Fn(lambda m, a: a.mean(-1, keepdim=True)),
            (r(rows, 64),),
            "input element",
            n,
        ),
        "aten::max_pool2d_with_indices.out": (
            Fn(lambda m, a: F.max_pool2d(a, 3, 1, 1)),
            fmap,
            "element",
            e,
        ),
        "aten::avg_pool2d.out": (Fn(lambda m, a: F.avg_pool2d(a, 3, 1, 1)), fmap, "element", e),
        "aten::convolution.out": (
            Fn(lambda m, a: F.conv2d(a, m.w, padding=1), {"w": w_conv}),
            fmap,
            "mac",
            e * 16 * 9,
        ),
        "aten::addmm.out": (
            Fn(lambda m, a: F.linear(a, m.w, m.b), {"w": r(ch, 64), "b": r(ch)}),
            (r(rows // 4 or 1, 64),),
            "mac",
            (rows // 4 or 1) * 64 * ch,
        ),
        "aten::bmm.out": (
            Fn(lambda m, a, b: torch.bmm(a, b)),
            (r(4, rows // 16 or 1, 64), r(4, 64, 32)),
            "mac",
            4 * (rows // 16 or 1) * 64 * 32,
        ),
        "quantized_decomposed::quantize_per_tensor.out": (
            Fn(lambda m, a: _q(a)),
            (r(1, n),),
            "element",
            n,
        ),
        "quantized_decomposed::dequantize_per_tensor.out": (
            Fn(lambda m, a: _dq(a)),
            (torch.randint(-128, 128, (1, n), dtype=torch.int8),),
            "element",
            n,
        ),
    }
    return out


def short_reductions(n: int):
    """For the matrix-like ops: the same op with a short reduction, (module, inputs, units,
    output elements), so that the cost splits into per-MAC and per-output-element parts."""
    r = torch.randn
    side = int(round((n / 16) ** 0.5))
    e = 16 * side * side
    rows = max(1, n // 64)
    return {
        "aten::convolution.out": (
            Fn(lambda m, a: F.conv2d(a, m.w), {"w": r(16, 16, 1, 1)}),
            (r(1, 16, side, side),),
            e * 16,
            e,
        ),
        "aten::addmm.out": (
            Fn(lambda m, a: F.linear(a, m.w, m.b), {"w": r(32, 8), "b": r(32)}),
            (r(rows, 8),),
            rows * 8 * 32,
            rows * 32,
        ),
        "aten::bmm.out": (
            Fn(lambda m, a, b: torch.bmm(a, b)),
            (r(4, rows // 4 or 1, 8), r(4, 8, 32)),
            4 * (rows // 4 or 1) * 8 * 32,
            4 * (rows // 4 or 1) * 32,
        ),
    }


def _outputs(module, inputs) -> int:
    with torch.no_grad():
        return module(*inputs).numel()


def program(module, inputs) -> bytes:
    from executorch.exir import to_edge_transform_and_lower

    ep = torch.export.export(module.eval(), inputs)
    return to_edge_transform_and_lower(ep).to_executorch().buffer


def instructions(pte: bytes, runs: int = 2) -> float:
    """Fewest instructions of ``runs`` executes of ``pte`` on the emulated M55."""
    from ethosu_ng.tools import firmware

    image = firmware.build_image(pte)
    run = firmware.run_image(
        image, firmware.random_inputs(pte, runs), count_instructions=True, timeout_s=600
    )
    if run.error:
        raise firmware.FirmwareError(run.error)
    return min(run.instructions(k) for k in range(runs))


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--only", help="comma-separated op names (as in the table) to measure")
    ap.add_argument("--elements", type=int, default=16384)
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = ap.parse_args()

    import ethosu_ng.ops  # noqa: F401 - defines the quantized_decomposed ops

    torch.manual_seed(0)
    table = json.loads(args.out.read_text()) if args.out.exists() else {}
    ops = table.setdefault("ops", {})
    only = set(args.only.split(",")) if args.only else None

    # The fixed cost of an execute() with one kernel call: add at two sizes, the intercept.
    small, large = 1024, args.elements
    t = [
        instructions(program(Fn(lambda m, a, b: a + b), (torch.randn(1, k), torch.randn(1, k))))
        for k in (small, large)
    ]
    slope = (t[1] - t[0]) / (large - small)
    table["per_call_instructions"] = round(t[0] - slope * small)
    print(f"fixed cost of a one-kernel execute(): {table['per_call_instructions']} instructions")
    print("\n| op | unit | instructions per unit | units measured |")
    print("|---|---|---|---|")
    for name, (module, inputs, unit, units) in cases(args.elements).items():
        if only and name not in only:
            continue
        t0 = time.time()
        try:
            pte = program(module, inputs)
            from ethosu_ng.adapters import exir

            called = set(exir.pte_operators(pte))
            if name not in called:
                raise RuntimeError(f"program calls {sorted(called)}, not {name}")
            total = instructions(pte) - table["per_call_instructions"] * len(called)
            per = total / units
            row = {"unit": unit, "instructions_per_unit": round(per, 2)}
            short = short_reductions(args.elements).get(name)
            if short is not None:
                # total = a * MACs + b * outputs, at two reduction lengths
                s_mod, s_in, s_macs, s_out = short
                s_total = instructions(program(s_mod, s_in)) - table["per_call_instructions"]
                outs = _outputs(module, inputs)
                a = (total * s_out - s_total * outs) / (units * s_out - s_macs * outs)
                b = (total - a * units) / outs
                row = {"unit": unit, "instructions_per_unit": round(a, 2)}
                row["instructions_per_output"] = round(b, 2)
                per = a
            ops[name] = row
            extra = (
                f" + {row['instructions_per_output']:.2f} per output element"
                if "instructions_per_output" in row
                else ""
            )
            print(f"| {name} | {unit} | {per:.2f}{extra} | {units:,} |", flush=True)
        except Exception as e:  # noqa: BLE001 - one op's failure is a row, not the end
            print(f"| {name} | {unit} | failed: {str(e).splitlines()[0][:120]} | |", flush=True)
        print(f"<!-- {name}: {time.time() - t0:.0f} s -->", file=sys.stderr)
        table["command"] = "OMP_NUM_THREADS=1 python bench/cpu_op_costs.py"
        args.out.write_text(json.dumps(table, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
