# SPDX-License-Identifier: BSD-3-Clause
"""The memory plan is what the host run uses; the SRAM budget fails the export; --emit-c compiles.

The host run loads the method the way firmware does (``Program::load`` + ``load_method`` over
fixed pools, in the extension module): pools of exactly the planned sizes run and give the same
outputs as the ordinary host run; one byte less in the temp allocator, the method allocator or an
arena fails at the step that needs it.
"""

import json
import os
import shutil
import subprocess

import numpy as np
import pytest
import torch
from conftest import calibration_batches
from models import SmallCNN

from ethosu_ng import DelegateBlob, EthosUNGCompileSpec
from ethosu_ng.adapters import exir
from ethosu_ng.compile_spec import BACKEND_ID
from ethosu_ng.export import lower, quantize, serialize
from ethosu_ng.memory_plan import (
    PoolRunError,
    SramBudgetError,
    check_sram_budget,
    memory_plan,
    register_fast_scratch,
    run_with_pools,
    sram_bytes,
    temp_need,
)
from ethosu_ng.runtime import run_pte
from ethosu_ng.tools.cli import main
from ethosu_ng.tools.emit_c import c_name, emit_c

U55 = "ethos-u55-128"
HERE = os.path.dirname(__file__)
FACTORY = os.path.join(HERE, "data", "tiny_factory.py")


@pytest.fixture(scope="module")
def program():
    """SmallCNN with a CPU break (two delegates of different scratch), TOSA embedded."""
    spec = EthosUNGCompileSpec(U55, embed_tosa=True)
    example = SmallCNN.example()
    q = quantize(SmallCNN().eval(), example, spec, calibration=calibration_batches(example))
    edge, _ = lower(q, example, spec, cpu_ops=["aten.add.Tensor"])
    pte, _ = serialize(edge, spec)
    return pte, memory_plan(pte), example


def _blobs(pte):
    return [
        DelegateBlob.from_bytes(d) for b, d in exir.pte_delegate_payloads(pte) if b == BACKEND_ID
    ]


def test_plan_states_every_pool(program):
    pte, plan, _ = program
    blobs = _blobs(pte)
    assert len(blobs) == 2
    assert plan["pte_bytes"] == len(pte)
    assert plan["temp_allocator"] >= max(b.scratch_size for b in blobs) > 0
    assert plan["fast_scratch"] == 0  # U55 Shared_Sram has no fast scratch
    assert len(plan["planned_arenas"]) == 1 and plan["planned_arenas"][0] > 0
    assert plan["method_allocator"] > 0 and "host" in plan["method_allocator_note"]
    assert plan["io_buffers"]["inputs"] == [1 * 3 * 16 * 16 * 4]  # float input, planned
    assert plan["io_buffers"]["inputs_planned"]


def test_exact_pools_run_and_one_byte_less_fails(program):
    pte, plan, example = program
    (x,) = example
    want = run_pte(pte, [x])[0]
    arenas, m, t = plan["planned_arenas"], plan["method_allocator"], plan["temp_allocator"]
    outs, usage = run_with_pools(pte, arenas, m, t, [x.numpy()], [(want.numel() * 4, np.float32)])
    assert np.array_equal(outs[0], want.numpy().ravel())
    assert usage.temp_allocator_peak == t and usage.method_allocator_used == m

    with pytest.raises(PoolRunError, match="temp allocator exhausted") as e:
        run_with_pools(pte, arenas, m, t - 1, [x.numpy()])
    assert e.value.step == "execute"
    with pytest.raises(PoolRunError, match="method allocator exhausted") as e:
        run_with_pools(pte, arenas, m - 1, t, [x.numpy()])
    assert e.value.step == "load method"
    with pytest.raises(PoolRunError) as e:
        run_with_pools(pte, [arenas[0] - 1], m, t, [x.numpy()])
    assert e.value.step == "load method"


def test_u65_fast_scratch_from_a_registered_area_or_from_the_temp_allocator():
    """U65 Dedicated_Sram: Vela's fast scratch either comes from a fast area the firmware
    registers (temp allocator = scratch) or from the temp allocator (scratch, aligned, + fast)."""
    spec = EthosUNGCompileSpec("ethos-u65-256", embed_tosa=True)
    example = SmallCNN.example()
    q = quantize(SmallCNN().eval(), example, spec, calibration=calibration_batches(example, n=1))
    edge, _ = lower(q, example, spec)
    pte, _ = serialize(edge, spec)
    plan = memory_plan(pte)
    fast, t, t_nofast = (
        plan["fast_scratch"],
        plan["temp_allocator"],
        plan["temp_allocator_without_fast_area"],
    )
    assert fast > 0 and t_nofast == temp_need(t, fast, True) > t
    assert plan["temp_allocator_host_peak"] == t_nofast
    (x,) = example
    arenas, m = plan["planned_arenas"], plan["method_allocator"]
    want = run_with_pools(pte, arenas, m, t_nofast, [x.numpy()])[0]
    with pytest.raises(PoolRunError, match="temp allocator exhausted"):
        run_with_pools(pte, arenas, m, t_nofast - 1, [x.numpy()])
    register_fast_scratch(bytearray(fast))
    try:
        got, usage = run_with_pools(pte, arenas, m, t, [x.numpy()])
        assert usage.temp_allocator_peak == t
        assert np.array_equal(got[0], want[0])
        with pytest.raises(PoolRunError, match="temp allocator exhausted"):
            run_with_pools(pte, arenas, m, t - 1, [x.numpy()])
    finally:
        register_fast_scratch(None)


def test_temp_need_orders_scratch_then_fast():
    assert temp_need(1000, 0, True) == 1000
    assert temp_need(1000, 64, False) == 1000
    assert temp_need(1000, 64, True) == 1008 + 64  # fast scratch starts 16-byte aligned
    assert temp_need(0, 64, True) == 64


def test_sram_budget_counts_the_pools_of_the_memory_mode(program):
    _, plan, _ = program
    need = sum(plan["planned_arenas"]) + plan["temp_allocator"] + plan["fast_scratch"]
    assert sum(sram_bytes(plan, "Shared_Sram").values()) == need
    assert sram_bytes(plan, "Dedicated_Sram_384KB") == {"fast_scratch": 0}
    check_sram_budget(plan, EthosUNGCompileSpec(U55, sram_budget=need))
    with pytest.raises(SramBudgetError) as e:
        check_sram_budget(plan, EthosUNGCompileSpec(U55, sram_budget=need - 1))
    msg = str(e.value)
    assert f"needs {need:,} B" in msg and f"sram_budget is {need - 1:,} B" in msg
    assert "over by 1 B" in msg and "\n" not in msg


@pytest.mark.parametrize("bad", [0, -5, 1.5, True, "1MiB"])
def test_sram_budget_must_be_positive_bytes(bad):
    with pytest.raises(ValueError, match="sram_budget"):
        EthosUNGCompileSpec(U55, sram_budget=bad)


def test_a_delegate_larger_than_the_budget_fails_the_lowering():
    spec = EthosUNGCompileSpec(U55, sram_budget=1024)
    example = SmallCNN.example()
    q = quantize(SmallCNN().eval(), example, spec, calibration=calibration_batches(example, n=1))
    with pytest.raises(SramBudgetError, match=r"delegate \S+ alone needs .* sram_budget is 1,024"):
        lower(q, example, spec)


def test_cli_sram_budget_fails_with_the_numbers_and_writes_nothing(tmp_path, capsys):
    pte = tmp_path / "t.pte"
    argv = ["compile", f"{FACTORY}:make", "-o", str(pte), "--calibration", "1"]
    assert main([*argv, "--sram-budget", "13KiB"]) == 1
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "SRAM budget exceeded" in err and "sram_budget is 13,312 B" in err
    assert not pte.exists()
    with pytest.raises(SystemExit) as e:  # argparse's usage error
        main([*argv, "--sram-budget", "lots"])
    assert e.value.code == 2 and "'lots' is not a positive byte count" in capsys.readouterr().err


def _require(tool):
    path = shutil.which(tool)
    if path is None:
        if os.environ.get("ETHOSU_NG_REQUIRE_TOOLS"):
            pytest.fail(f"{tool} is required (ETHOSU_NG_REQUIRE_TOOLS is set)")
        pytest.skip(f"{tool} not installed")
    return path


def test_emit_c_compiles_for_cortex_m55_aligned(program, tmp_path):
    gcc = _require("arm-none-eabi-gcc")
    tools = os.path.dirname(gcc)
    pte, plan, _ = program
    name = c_name("small-cnn.pte")
    h, c = emit_c(str(tmp_path), name, pte, plan)
    with open(h) as f:
        header = f.read()
    for key, value in [
        ("PTE_SIZE", plan["pte_bytes"]),
        ("PLANNED_ARENA_0_SIZE", plan["planned_arenas"][0]),
        ("TEMP_ALLOCATOR_SIZE", plan["temp_allocator"]),
        ("FAST_SCRATCH_SIZE", plan["fast_scratch"]),
        ("METHOD_ALLOCATOR_SIZE", plan["method_allocator"]),
    ]:
        assert f"#define SMALL_CNN_{key} {value}u\n" in header
    # A one-byte object before the array: only the alignment attribute keeps it on 16 bytes.
    main_c = tmp_path / "main.c"
    main_c.write_text(
        f'#include "{name}.h"\nconst uint8_t pad_before = 1;\n'
        f"int main(void) {{ return {name}_pte[SMALL_CNN_PTE_SIZE - 1] + pad_before; }}\n"
    )
    flags = ["-mcpu=cortex-m55", "-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic"]
    obj = tmp_path / f"{name}.o"
    subprocess.run([gcc, *flags, "-fdata-sections", "-c", c, "-o", obj], check=True)
    elf = tmp_path / "a.elf"
    subprocess.run(
        [gcc, *flags, "--specs=nosys.specs", str(main_c), c, "-o", elf],
        check=True,
        capture_output=True,
    )
    nm = subprocess.run(
        [os.path.join(tools, "arm-none-eabi-nm"), "-S", elf], check=True, capture_output=True
    ).stdout.decode()
    syms = {ln.split()[-1]: ln.split() for ln in nm.splitlines() if len(ln.split()) == 4}
    addr, size = int(syms[f"{name}_pte"][0], 16), int(syms[f"{name}_pte"][1], 16)
    assert addr % 16 == 0 and size == len(pte)
    # The array's bytes are the .pte, bit for bit.
    raw = tmp_path / "pte.bin"
    subprocess.run(
        [
            os.path.join(tools, "arm-none-eabi-objcopy"),
            "-O",
            "binary",
            f"--only-section=.rodata.{name}_pte",
            obj,
            raw,
        ],
        check=True,
    )
    assert raw.read_bytes() == pte


def test_compile_report_carries_the_memory_plan(tmp_path, capsys):
    pte = tmp_path / "m.pte"
    out_dir = tmp_path / "c"
    argv = ["compile", f"{FACTORY}:make", "-o", str(pte), "--calibration", "1"]
    assert main([*argv, "--emit-c", str(out_dir)]) == 0
    out = capsys.readouterr().out
    rep = json.loads((tmp_path / "m.report.json").read_text())
    plan = rep["memory_plan"]
    assert plan["pte_bytes"] == pte.stat().st_size == rep["totals"]["pte_bytes"]
    assert plan["method_allocator"] > 0
    assert sorted(os.listdir(out_dir)) == ["m.c", "m.h"]
    assert f"temp allocator     {plan['temp_allocator']:,} B" in out
    assert torch.tensor(plan["planned_arenas"]).gt(0).all()
