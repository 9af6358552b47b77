# SPDX-License-Identifier: BSD-3-Clause
# SPDX-License-Identifier: Apache-2.0
"""Programs run in a bare-metal Cortex-M55 image under QEMU (``mps3-an547``), the Ethos-U NPU
model behind ``ethosu_invoke_v3``, through the same C++ delegate and ExecuTorch runtime as a
device (``firmware/``, ``ethosu_ng/tools/firmware.py``).

Each program's outputs in the image are the host run's, bit for bit; its pools run at exactly
the sizes measured on the target and fail cleanly with one byte less; a misaligned .pte, a
corrupted blob and an operator without a kernel in the image end with the documented error,
never a fault or a hang. The ExecuTorch sources are the repository's vendor copy."""

from __future__ import annotations

import re

import pytest
import torch
from _tools import require_tool
from models import KeywordSpotter, SmallCNN

from ethosu_ng.tools import firmware

require_tool(
    "firmware tools",
    find=firmware.check_tools,
    install="apt-get install gcc-arm-none-eabi libnewlib-arm-none-eabi "
    "libstdc++-arm-none-eabi-newlib qemu-system-arm libflatbuffers-dev flatbuffers-compiler",
)
require_tool("ExecuTorch sources", find=firmware.executorch_tree)


_MODELS = {"kws": KeywordSpotter, "cnn": SmallCNN}
_PROGRAMS: dict = {}


def _program(model: str, target: str, cpu_ops=()) -> bytes:
    """The .pte of a model, uint8 in / int8 out (compiled once per session)."""
    from ethosu_ng import api

    key = (model, target, tuple(cpu_ops))
    if key not in _PROGRAMS:
        torch.manual_seed(0)
        cls = _MODELS[model]
        res = api.compile(
            cls().eval(),
            cls.example(),
            target,
            input_dtype="uint8",
            output_dtype="int8",
            cpu_ops=list(cpu_ops),
        )
        _PROGRAMS[key] = res.pte
    return _PROGRAMS[key]


def _check_bit_exact(pte: bytes, n: int = 3) -> firmware.M55Result:
    res = firmware.verify_on_m55(pte, n=n)
    assert not res.mismatches, res
    assert res.runs == n
    return res


@pytest.mark.parametrize(
    "model, target",
    [
        ("cnn", "ethos-u55-128"),
        ("kws", "ethos-u65-256"),
        ("cnn", "ethos-u65-256"),
        ("cnn", "ethos-u85-256"),
    ],
)
def test_program_in_the_image_is_bit_exact_to_the_host(model, target):
    pte = _program(model, target)
    res = _check_bit_exact(pte)
    run = firmware.run_image(res.image, firmware.random_inputs(pte, 2, seed=7))
    # One delegate, one NPU invocation per execute: the NPU model ran the command stream.
    assert run.error is None and run.npu_invocations == 2, run.log
    # Pools: exactly the sizes measured on the target run, one byte less fails where it must.
    assert res.shrink_checks["method"].startswith("ERROR load_method: Error::MemoryAllocation")
    assert res.shrink_checks["temp"].startswith("ERROR execute: Error::MemoryAllocationFailed")
    assert res.shrink_checks["arena0"].startswith("ERROR load_method")
    assert all(res.shrink_checks.values()), res  # the U65 fast scratch too
    # The 32-bit target needs less method-allocator memory than the 64-bit host measured.
    assert res.plan["method_allocator"] < res.plan["method_allocator_host"]
    assert res.plan["measured_on"] == "cortex-m55"


def test_deploying_md_from_compile_to_a_running_image(tmp_path, capsys):
    """docs/deploying.md, "Running on a Cortex-M55": the keyword-spotting model for U55 from
    `ethosu-ng compile` to `ethosu-ng verify --on m55`."""
    import json
    import os

    from ethosu_ng.tools import cli

    pte = str(tmp_path / "kws.pte")
    kws = os.path.join(os.path.dirname(__file__), "data", "kws.py")
    args = ["--target", "ethos-u55-128", "--input-dtype", "uint8", "--output-dtype", "int8"]
    assert cli.main(["compile", f"{kws}:make", *args, "-o", pte, "--emit-c", str(tmp_path)]) == 0
    assert (tmp_path / "kws.h").exists() and (tmp_path / "kws.c").exists()
    capsys.readouterr()
    assert cli.main(["verify", pte, "--on", "m55", "-n", "3"]) == 0
    out = capsys.readouterr().out
    assert "3 input set(s), bit-exact to the host run" in out, out
    assert "one byte less: method: ERROR load_method" in out, out
    with open(str(tmp_path / "kws.report.json")) as f:
        plan = json.load(f)["memory_plan"]
    assert plan["measured_on"] == "cortex-m55"
    assert plan["method_allocator"] < plan["method_allocator_host"]


def test_split_program_with_cpu_ops_between_two_delegates():
    pte = _program("cnn", "ethos-u55-128", cpu_ops=["aten.add.Tensor"])
    res = _check_bit_exact(pte)
    assert "aten::add.out" in res.image.operators
    run = firmware.run_image(res.image, firmware.random_inputs(pte, 1))
    assert run.error is None and run.npu_invocations == 2, run.log


def test_an_operator_without_a_kernel_in_the_image_is_a_clean_error():
    pte = _program("cnn", "ethos-u55-128", cpu_ops=["aten.add.Tensor"])
    image = firmware.build_image(pte, omit_kernels=["aten::add.out"])
    run = firmware.run_image(image, firmware.random_inputs(pte, 1))
    assert run.exit_code == firmware.EXIT_ERROR, run.log
    assert run.error.startswith("ERROR load_method: Error::OperatorMissing"), run.log
    assert "aten::add.out" in run.log


def test_an_operator_without_any_kernel_fails_the_build_naming_it(tmp_path):
    et = firmware.executorch_tree()
    with pytest.raises(firmware.FirmwareError, match=r"no kernel for aten::no_such_op\.out"):
        firmware.generate_kernels(et, ["aten::no_such_op.out"], tmp_path)


def test_every_portable_and_quantized_kernel_is_found_with_its_sources():
    """Every kernel ExecuTorch's portable and quantized libraries declare resolves to the
    sources defining it: ``Tensor& fn(``, a tuple-returning definition (native_layer_norm), or
    a DEFINE_UNARY_UFUNC_* macro (tanh, sqrt, ...) whose body lives in pattern/*.cpp."""
    et = firmware.executorch_tree()
    names = set()
    for yaml in ("kernels/portable/functions.yaml", "kernels/quantized/quantized.yaml"):
        names |= set(re.findall(r"kernel_name:\s*torch::executor::(\w+)", (et / yaml).read_text()))
    assert len(names) > 200
    firmware._kernel_files(et, sorted(names))  # raises naming the first it cannot find
    for fn, source in (("tanh_out", "op_tanh.cpp"), ("native_layer_norm_out", None)):
        files = [f.name for f in firmware._kernel_files(et, [fn])]
        assert source is None or source in files, files
        uses_pattern = "pattern/pattern.h" in (et / "kernels/portable/cpu" / files[0]).read_text()
        assert any(f.startswith("unary_ufunc") for f in files) == uses_pattern, files


@pytest.fixture(scope="module")
def cnn_image():
    pte = _program("cnn", "ethos-u55-128")
    return pte, firmware.build_image(pte)


@pytest.mark.parametrize("offset", [1, 4, 8])
def test_a_misaligned_pte_is_refused(cnn_image, offset):
    pte, image = cnn_image
    run = firmware.run_image(image, firmware.random_inputs(pte, 1), pte_offset=offset)
    assert run.exit_code == firmware.EXIT_ERROR, run.log
    assert "FAULT" not in run.log
    assert run.error.startswith("ERROR"), run.log
    assert "aligned" in run.log, run.log


def test_a_corrupted_blob_is_refused_at_init(cnn_image):
    from ethosu_ng.adapters import exir

    pte, image = cnn_image
    (blob,) = [d for b, d in exir.pte_delegate_payloads(pte) if b == "EthosUNGBackend"]
    start = pte.find(blob)
    assert start > 0
    run = firmware.run_image(
        image, firmware.random_inputs(pte, 1), pte_offset=0, flip=start + len(blob) // 2
    )
    assert run.exit_code == firmware.EXIT_ERROR, run.log
    assert run.error.startswith("ERROR load_method: Error::InvalidProgram"), run.log
    assert "checksum" in run.log, run.log


def test_inputs_are_written_before_every_execute():
    """The split program's plan reuses the input's buffer for the CPU add's float operands: a
    second run on the same input gives the same outputs only if the runner writes the input
    again."""
    pte = _program("cnn", "ethos-u55-128", cpu_ops=["aten.add.Tensor"])
    image = firmware.build_image(pte)
    (x,) = firmware.random_inputs(pte, 1, seed=3)
    run = firmware.run_image(image, [x, x, x])
    assert run.error is None, run.log
    assert run.outputs[0] == run.outputs[1] == run.outputs[2]
    assert run.outputs[0] == firmware.host_outputs(pte, image.plan, x)


def test_instruction_counts_are_calibrated_and_repeatable(cnn_image):
    """Under ``-icount shift=0`` QEMU's clock takes one nanosecond per instruction and the
    AN547's SysTick runs at 32 MHz: the runner's known loop is 31.25 instructions per tick, and
    the same input costs the same instructions every run. Without the option the ticks follow the
    host's clock: no instruction count is claimed."""
    pte, image = cnn_image
    (x,) = firmware.random_inputs(pte, 1, seed=5)
    run = firmware.run_image(image, [x, x, x], count_instructions=True)
    assert run.error is None, run.log
    n, ticks = run.calibration
    assert n / ticks == pytest.approx(31.25, rel=1e-3), run.calibration
    counts = [run.instructions(k) for k in range(3)]
    assert max(counts) - min(counts) <= 2 * 31.25, counts  # tick resolution
    assert counts[0] > 10_000, counts  # the NPU model's work is in it: a real execute
    uncounted = firmware.run_image(image, [x])
    with pytest.raises(firmware.FirmwareError, match="no tick count"):
        uncounted.instructions(0)


def test_a_hang_is_cut_by_the_time_limit(cnn_image):
    pte, image = cnn_image
    with pytest.raises(firmware.FirmwareError, match="did not finish within 0.01 s"):
        firmware.run_image(image, firmware.random_inputs(pte, 1), timeout_s=0.01)


def test_an_npu_model_error_is_named_in_the_run_error():
    log = (
        "ethosu_ng_fw: NPU model error 16: command 88 (NPU_OP_CONV 0x002, param 0x0000): "
        "WEIGHT_FORMAT 0x0010: 2:4 sparse weights not modelled\n"
        "ethosu_ng_fw: ERROR execute: Error::Internal (error 1)\n"
    )
    run = firmware.parse_run(log, firmware.EXIT_ERROR)
    assert run.error.startswith("ERROR execute: Error::Internal (error 1) (NPU model error 16")
    assert "sparse weights not modelled" in run.error


def test_parse_run_reports_a_fault_line():
    log = "ethosu_ng_fw: FAULT exception 3 CFSR 0x00000400 HFSR 0x40000000 PC 0x70000000\n"
    run = firmware.parse_run(log, firmware.EXIT_FAULT)
    assert run.error.startswith("FAULT exception 3")
    assert firmware.parse_run("ethosu_ng_fw: OK\n", 0).error is None
    assert firmware.parse_run("truncated", 0).error == "exit code 0: truncated"


def test_device_sources_format_no_size_t_conversions():
    """newlib's printf (the firmware's C library) has no %zu/%zd/%zx: the conversion prints
    literally and every later argument shifts. The device path's strings must not use them."""
    import re
    from pathlib import Path

    root = Path(firmware.REPO) / "runtime" / "ethosu_ng"
    host_only = {"host_pools.cpp", "npu_driver_host.cpp", "host_api.h"}
    offenders = [
        f"{p.relative_to(root)}:{n}"
        for p in sorted(root.rglob("*.[ch]*"))
        if p.name not in host_only
        for n, line in enumerate(p.read_text().splitlines(), 1)
        if re.search(r"%[-+ #0-9.*]*[zjt][diuxX]", line)
    ]
    assert not offenders, offenders


@pytest.mark.slow
@pytest.mark.parametrize(
    "name", ["torchvision:mobilenet_v3_small", "timm:mobilenetv2_100", "timm:convnext_atto"]
)
def test_the_three_smallest_zoo_models_in_the_image(name):
    """The zoo's three smallest programs (docs/zoo.md, .pte bytes), U55, in the image."""
    from ethosu_ng import api

    require_tool("timm", module=True)
    res = api.compile(
        name, target="ethos-u55-128", input_dtype="uint8", output_dtype="int8", calibration=2
    )
    out = firmware.verify_on_m55(res.pte, n=1, timeout_s=3600)
    assert not out.mismatches, out
    assert all(out.shrink_checks.values()), out
