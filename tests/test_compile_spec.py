# SPDX-License-Identifier: BSD-3-Clause
import pytest

from ethosu_ng import TARGETS, EthosUNGCompileSpec


@pytest.mark.parametrize("target", TARGETS)
def test_every_target_round_trips_through_compile_specs(target):
    spec = EthosUNGCompileSpec(target, extra_vela_flags=["--optimise=Size"], embed_tosa=True)
    back = EthosUNGCompileSpec.from_compile_specs(spec.to_compile_specs())
    assert back == spec
    assert f"--accelerator-config={target}" in spec.vela_flags()
    assert "--optimise=Size" in spec.vela_flags()


def test_targets_are_the_documented_set():
    assert set(TARGETS) == {
        "ethos-u55-32",
        "ethos-u55-64",
        "ethos-u55-128",
        "ethos-u55-256",
        "ethos-u65-256",
        "ethos-u65-512",
        "ethos-u85-128",
        "ethos-u85-256",
        "ethos-u85-512",
        "ethos-u85-1024",
        "ethos-u85-2048",
    }


def test_unknown_target_lists_valid_ones():
    with pytest.raises(ValueError) as e:
        EthosUNGCompileSpec("ethos-u55-100")
    msg = str(e.value)
    assert "ethos-u55-100" in msg and "ethos-u85-256" in msg and "ethos-u65-512" in msg


def test_defaults_follow_the_family():
    assert EthosUNGCompileSpec("ethos-u55-128").system_config == "Ethos_U55_High_End_Embedded"
    assert EthosUNGCompileSpec("ethos-u85-256").memory_mode == "Sram_Only"
    spec = EthosUNGCompileSpec("ethos-u65-256", system_config="X", memory_mode="Y")
    assert "--system-config=X" in spec.vela_flags() and "--memory-mode=Y" in spec.vela_flags()


@pytest.mark.parametrize(
    "kwargs, exc",
    [
        (dict(target=128), ValueError),
        (dict(target="ethos-u55-128", extra_vela_flags="--verbose"), TypeError),
        (dict(target="ethos-u55-128", extra_vela_flags=[1]), TypeError),
        (dict(target="ethos-u55-128", embed_tosa="yes"), TypeError),
        (dict(target="ethos-u55-128", vela_timeout_s=0), ValueError),
        (dict(target="ethos-u55-128", system_config=3), TypeError),
    ],
)
def test_wrong_types_are_rejected(kwargs, exc):
    with pytest.raises(exc):
        EthosUNGCompileSpec(**kwargs)


def test_foreign_compile_specs_are_rejected():
    from executorch.exir.backend.compile_spec_schema import CompileSpec

    with pytest.raises(ValueError, match="EthosUNGPartitioner"):
        EthosUNGCompileSpec.from_compile_specs([CompileSpec("target", b"ethos-u55-128")])


def test_backend_id_is_the_backend_class_name():
    """to_backend finds the backend by class name; the .pte and the C++ runtime by BACKEND_ID."""
    from ethosu_ng.backend import EthosUNGBackend
    from ethosu_ng.compile_spec import BACKEND_ID

    assert EthosUNGBackend.__name__ == BACKEND_ID
