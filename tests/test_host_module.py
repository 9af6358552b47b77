# SPDX-License-Identifier: BSD-3-Clause
"""The extension module ``ethosu_ng._host_runtime`` at its edges: whatever Python hands it (wrong
types, read-only buffers, random bytes as a command stream, a weight stream or a program), the
answer is a Python exception naming the argument or the model's reason, never a crash; and the
loader says what is missing when the module is.

The end-to-end check of the packaging (a wheel installed without the source tree runs a .pte) is
tests/test_install.py (slow)."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ethosu_ng import runtime as rt
from ethosu_ng.memory_plan import PoolRunError, run_with_pools
from ethosu_ng.runtime import host_module, source_build

FAST = settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))


@pytest.fixture(scope="module")
def host():
    return rt.load_host_runtime()


@pytest.mark.parametrize(
    "args, culprit",
    [
        ((b"COP1", b"", b"read-only"), "scratch: expected a writable contiguous buffer"),
        ((3, b"", bytearray(4)), "payload: expected a readable contiguous buffer.*got int"),
        ((b"COP1", "text", bytearray(4)), "weights: expected a readable.*got str"),
        ((b"COP1", b"", bytearray(4), b"ro"), "fast_scratch: expected a writable"),
        ((b"COP1", b"", np.zeros((4, 4), np.uint8)[:, 1]), "scratch: expected a writable"),
    ],
)
def test_npu_model_run_names_the_argument_it_cannot_take(host, args, culprit):
    with pytest.raises(TypeError, match=culprit):
        rt.npu_model_run(*args)


@FAST
@given(payload=st.binary(max_size=96), weights=st.binary(max_size=32), scratch=st.integers(0, 64))
def test_random_command_streams_are_errors_not_crashes(host, payload, weights, scratch):
    """Any bytes as a driver payload: the model runs them or says why not (NpuModelError with
    its message), within the regions given."""
    try:
        rt.npu_model_run(b"COP1" + payload, weights, bytearray(scratch))
    except rt.NpuModelError as e:
        assert e.code != 0 and str(e).startswith(f"NPU model error {e.code}: ") and len(str(e)) > 24


def test_a_malformed_payload_names_the_word(host):
    with pytest.raises(rt.NpuModelError, match="driver payload word 1: unknown driver action"):
        rt.npu_model_run(b"COP1junk", b"", bytearray(16))


@FAST
@given(stream=st.binary(max_size=64))
def test_random_weight_streams_are_errors_not_crashes(host, stream):
    try:
        out = rt.mlw_decode(stream)
    except ValueError as e:
        assert str(e), "an empty message names nothing"
    else:
        assert out.dtype == np.int16


def test_mlw_decode_says_where_a_stream_ends(host):
    with pytest.raises(ValueError, match="weight stream truncated in slice 0"):
        rt.mlw_decode(b"\x01\x02garbage")
    with pytest.raises(TypeError, match="stream: expected a readable contiguous buffer"):
        rt.mlw_decode(None)


@FAST
@given(data=st.binary(max_size=200))
def test_random_programs_fail_to_load_with_the_step(host, data):
    with pytest.raises(PoolRunError, match="^load program: Program::load failed"):
        run_with_pools(data, [], 1 << 16, 1 << 16, outputs=[], npu="model")


def test_run_with_pools_names_a_read_only_output(host):
    with pytest.raises(TypeError, match="output 0: expected a writable contiguous buffer"):
        host.run_with_pools(b"", "forward", [], 0, 0, [], [b"read-only"])
    with pytest.raises(TypeError, match="input 1: expected a readable.*got int"):
        host.run_with_pools(b"", "forward", [], 0, 0, [b"", 5], [])


def test_bad_mode_and_callback_are_refused(host):
    with pytest.raises(ValueError, match="mode: 7 is neither NPU_TOSA"):
        host.set_npu_mode(7)
    with pytest.raises(ValueError, match="npu must be one of"):
        rt.set_npu("gpu")
    with pytest.raises(TypeError, match="callback: expected a callable or None, got int"):
        host.set_tosa_callback(3)


def test_a_module_of_another_interface_is_refused(tmp_path):
    fake = tmp_path / "fake_host_runtime.py"
    fake.write_text("INTERFACE_VERSION = 0\n")
    with pytest.raises(rt.HostRuntimeError, match="interface version 0, this package expects 1"):
        host_module.check(host_module._import_file(fake), fake)


def test_an_installed_package_without_its_module_says_so(monkeypatch):
    monkeypatch.delenv("ETHOSU_NG_HOST_MODULE", raising=False)
    monkeypatch.setattr(source_build, "source_tree", lambda: None)
    monkeypatch.setattr(host_module, "_installed_path", lambda: None)
    with pytest.raises(rt.HostRuntimeError, match="installed without its extension module"):
        host_module.host_module_path()


def test_an_installed_package_never_builds(monkeypatch, tmp_path):
    """Without a source tree the installed module is loaded as it is, whatever its age."""
    installed = tmp_path / "_host_runtime.so"
    installed.write_bytes(b"")
    monkeypatch.delenv("ETHOSU_NG_HOST_MODULE", raising=False)
    monkeypatch.setattr(source_build, "source_tree", lambda: None)
    monkeypatch.setattr(host_module, "_installed_path", lambda: installed)

    def no_build(*a, **k):
        raise AssertionError("built at run time")

    monkeypatch.setattr(source_build, "build_host_module", no_build)
    assert host_module.host_module_path() == installed
