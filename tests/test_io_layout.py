# SPDX-License-Identifier: BSD-3-Clause
# SPDX-License-Identifier: Apache-2.0
"""Program IO in the layout the application has (``--input-layout`` / ``--output-layout``).

An NHWC input or output spares the NPU its transpose; the program's answers are those of the
NCHW program bit for bit; the report names a transpose that costs; a wrong layout request is a
one-line error naming the tensor; camera bytes (uint8, HWC) run as they are."""

from __future__ import annotations

import itertools
import sys
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import ethosu_ng
from ethosu_ng import io_layout
from ethosu_ng.blob import DelegateBlob
from ethosu_ng.tools.report import format_text

DATA = Path(__file__).resolve().parent / "data"
sys.path.insert(0, str(DATA))
import first_hour_models as models  # noqa: E402

TARGET = "ethos-u55-128"  # the NPU model runs its command streams on the host


def _compile(factory, **kw):
    torch.manual_seed(0)
    model, x = factory()
    return ethosu_ng.compile(model, x, TARGET, calibration=2, **kw)


def _blob(result, k=0) -> DelegateBlob:
    from ethosu_ng.adapters import exir

    return DelegateBlob.from_bytes(exir.pte_delegate_payloads(result.pte)[k][1])


@pytest.fixture(scope="module")
def feature_maps():
    """The same feature-map model with NCHW and with NHWC IO (integer IO: the delegate's IO is
    the program's)."""
    io = dict(input_dtype="int8", output_dtype="int8")
    return (
        _compile(models.feature_map, **io),
        _compile(models.feature_map, input_layout="nhwc", output_layout="nhwc", **io),
    )


def test_nhwc_io_removes_the_npu_transposes(feature_maps):
    nchw, nhwc = feature_maps
    (d_nchw,), (d_nhwc,) = nchw.report["delegates"], nhwc.report["delegates"]
    cost = io_layout.io_transposes(d_nchw)
    assert cost["input"] > 0 and cost["output"] > 0  # the premise: NCHW IO costs transposes
    assert io_layout.io_transposes(d_nhwc) == {"input": 0, "output": 0}
    assert io_layout.edge_transposes(d_nhwc["layers"]) == {"input": 0, "output": 0}
    assert not any(
        layer.get("data_movement_kind") == "Transpose" and layer["npu_cycles"]
        for layer in d_nhwc["layers"]
    )
    assert d_nhwc["vela"]["npu_cycles"] < d_nchw["vela"]["npu_cycles"]
    # The contract: the blob, the report and the program say NHWC.
    blob = _blob(nhwc)
    assert blob.inputs[0].dim_order == (0, 2, 3, 1) and blob.outputs[0].dim_order == (0, 2, 3, 1)
    io = nhwc.report["program_io"]
    assert io["inputs"][0]["layout"] == "nhwc" and io["outputs"][0]["layout"] == "nhwc"
    assert nchw.report["program_io"]["inputs"][0]["layout"] == "nchw"


def test_nhwc_program_answers_as_the_nchw_one_bit_for_bit(feature_maps):
    from ethosu_ng.runtime import run_pte

    nchw, nhwc = feature_maps
    q_in = nchw.report["program_io"]["inputs"][0]
    g = torch.Generator().manual_seed(5)
    for _ in range(3):
        x = torch.randint(-128, 128, (1, 3, 32, 32), generator=g, dtype=torch.int8)
        (a,) = run_pte(nchw.pte, [x])
        (b,) = run_pte(nhwc.pte, [x.contiguous(memory_format=torch.channels_last)])
        assert b.is_contiguous(memory_format=torch.channels_last)  # NHWC bytes out
        assert a.dtype == b.dtype == torch.int8 and torch.equal(a, b)
    assert q_in["scale"] == nhwc.report["program_io"]["inputs"][0]["scale"]


def test_report_names_a_costly_io_transpose_and_the_option(feature_maps):
    nchw, nhwc = feature_maps
    text = format_text(nchw.report)
    assert "transposing its NCHW input costs" in text and "--input-layout nhwc" in text
    assert "transposing its NCHW output costs" in text and "--output-layout nhwc" in text
    assert "transposing" not in format_text(nhwc.report)


def test_header_and_html_say_the_layout(feature_maps, tmp_path):
    from ethosu_ng.tools import html_report

    _, nhwc = feature_maps
    assert "int8[1, 3, 32, 32] nhwc" in html_report.render(nhwc.report)
    h, _ = nhwc.save(str(tmp_path / "fm.pte"), emit_c=str(tmp_path / "c"))[2:]
    text = Path(h).read_text()
    assert "#define FM_INPUT_0_LAYOUT_NHWC 1" in text
    assert "#define FM_OUTPUT_0_LAYOUT_NHWC 1" in text
    assert "#define FM_INPUT_0_DIM_ORDER_1 2u" in text


def test_one_layout_per_tensor(tmp_path):
    result = _compile(models.two_inputs, input_layout="nhwc,-")
    ins = result.report["program_io"]["inputs"]
    assert [i["dim_order"] for i in ins] == [[0, 2, 3, 1], [0, 1]]


@pytest.mark.parametrize(
    "factory, kw, needle",
    [
        (models.two_inputs, dict(input_layout="nhwc,nhwc"), "input 1: layout nhwc is for rank-4"),
        (models.two_inputs, dict(input_layout="nhwc,-,-"), "3 input layouts for 2 inputs"),
        (models.sorts, dict(output_layout="nhwc"), "no rank-4 output"),
        (models.feature_map, dict(input_layout="chwn"), "input layout 'chwn'"),
    ],
)
def test_a_layout_the_tensor_cannot_take_is_named(factory, kw, needle):
    with pytest.raises(io_layout.LayoutError, match=needle):
        _compile(factory, **kw)


def test_export_checks_the_layout_it_was_asked_for(feature_maps):
    """A program whose IO is not in the layout asked for (the check on the lowered program)."""
    nchw, _ = feature_maps
    with pytest.raises(io_layout.LayoutError, match=r"output 0 \(.*\): asked for nhwc"):
        io_layout.check_program_layouts(nchw.edge, [None], ["nhwc"])
    with pytest.raises(io_layout.LayoutError, match=r"input 0 \(.*\): asked for nhwc"):
        io_layout.check_program_layouts(nchw.edge, ["nhwc"], [None])


def test_sensor_bytes_end_to_end(tmp_path):
    """A uint8 HWC image file, as a camera writes it, fed as it is to a program compiled with
    uint8 NHWC input: the same answer as the eager quantized model on that image."""
    from ethosu_ng.runtime import run_pte

    g = torch.Generator().manual_seed(3)
    calib = [(torch.rand(1, 3, 32, 32, generator=g),) for _ in range(4)]
    torch.manual_seed(0)
    model, x = models.feature_map()
    result = ethosu_ng.compile(
        model,
        x,
        TARGET,
        calibration=calib,
        input_dtype="uint8",
        output_dtype="int8",
        input_layout="nhwc",
    )
    (p_in,) = ethosu_ng.io_quantization(result.edge).inputs
    assert (
        p_in.dtype == torch.uint8 and result.report["program_io"]["inputs"][0]["layout"] == "nhwc"
    )
    image = tmp_path / "frame.rgb"  # H x W x 3 bytes, interleaved
    hwc = (torch.rand(32, 32, 3, generator=g) * 255).round().to(torch.uint8)
    image.write_bytes(hwc.numpy().tobytes())

    raw = torch.frombuffer(bytearray(image.read_bytes()), dtype=torch.uint8)
    fed = raw.view(1, 32, 32, 3).permute(0, 3, 1, 2)  # a view: the bytes stay HWC
    assert fed.is_contiguous(memory_format=torch.channels_last)
    (got,) = run_pte(result.pte, [fed])
    want = result.quantized(p_in.dequantize(fed))  # the eager quantized model on the image
    (p_out,) = ethosu_ng.io_quantization(result.edge).outputs
    lsb = (p_out.dequantize(got) - want).abs().max() / p_out.scale
    assert float(lsb) <= 1.0, float(lsb)  # the verified-compile bound (1 LSB)


def test_nhwc_output_of_an_nchw_program(feature_maps):
    """Only the output asked NHWC: it leaves without an NPU transpose at the end, and its
    values are the NCHW program's."""
    from ethosu_ng.runtime import run_pte

    nchw, _ = feature_maps
    out_only = _compile(
        models.feature_map, input_dtype="int8", output_dtype="int8", output_layout="nhwc"
    )
    (d,) = out_only.report["delegates"]
    # Counted whatever the IO layout: no Transpose after the last computing layer.
    assert io_layout.edge_transposes(d["layers"])["output"] == 0
    assert io_layout.io_transposes(d)["input"] > 0  # the input stays NCHW, as asked
    assert _blob(out_only).outputs[0].dim_order == (0, 2, 3, 1)
    x = torch.randint(-128, 128, (1, 3, 32, 32), generator=torch.Generator().manual_seed(9))
    x = x.to(torch.int8)
    (a,) = run_pte(nchw.pte, [x])
    (b,) = run_pte(out_only.pte, [x])
    assert b.is_contiguous(memory_format=torch.channels_last) and torch.equal(a, b)


def test_runtime_refuses_data_in_the_other_layout(feature_maps):
    """The host runtime checks what it is fed: planar bytes for the NHWC program (or
    interleaved ones for the NCHW program) are a one-line error naming the input, before
    anything runs, where ExecuTorch alone would copy the bytes and misread them."""
    from ethosu_ng.runtime import delegate_invocations, run_pte

    nchw, nhwc = feature_maps
    x = torch.randint(-128, 128, (1, 3, 32, 32), generator=torch.Generator().manual_seed(2))
    x = x.to(torch.int8)
    calls = delegate_invocations()
    with pytest.raises(io_layout.LayoutError) as e:
        run_pte(nhwc.pte, [x])
    assert str(e.value).startswith(
        "input 0: a tensor laid out nchw [0, 1, 2, 3], the program takes nhwc [0, 2, 3, 1]; "
    )
    assert "\n" not in str(e.value)
    with pytest.raises(
        io_layout.LayoutError, match=r"^input 0: .* nhwc .*, the program takes nchw"
    ):
        run_pte(nchw.pte, [x.contiguous(memory_format=torch.channels_last)])
    assert delegate_invocations() == calls  # refused before the delegate ran


ORDERS = list(itertools.permutations(range(4)))


@settings(max_examples=60, deadline=None)
@given(
    shape=st.tuples(*[st.integers(1, 4)] * 4),
    got=st.sampled_from(ORDERS),
    want=st.sampled_from(ORDERS),
    index=st.integers(0, 2),
)
def test_input_layout_check_over_shapes_and_orders(shape, got, want, index):
    """Over shapes (size-1 dims included) and every pair of rank-4 dim orders: a tensor dense in
    the program's order goes in as it is; one dense only in another order is a LayoutError
    naming its index and both layouts; a view dense in no order is copied into the program's."""
    from ethosu_ng.runtime import check_input_layouts, to_dim_order
    from ethosu_ng.runtime.dim_order import _dense_in, _dense_order

    t = to_dim_order(torch.arange(int(torch.tensor(shape).prod())).reshape(shape), got)
    inputs = [torch.zeros(2)] * index + [t]
    orders = [(0,)] * index + [want]
    if _dense_in(t, want):
        assert check_input_layouts(inputs, orders)[index] is t
    else:
        with pytest.raises(io_layout.LayoutError) as e:
            check_input_layouts(inputs, orders)
        msg = str(e.value)
        assert msg.startswith(f"input {index}: a tensor laid out ") and "\n" not in msg
        assert f"the program takes {io_layout.layout_of(want) or 'dim order'} {list(want)}" in msg
    wide = to_dim_order(torch.randn(shape[0], shape[1], shape[2], shape[3] + 1), got)
    view = wide[..., 1:]  # a slice: dense in no order unless W is outermost or alone
    if _dense_order(view) is None:
        (laid,) = check_input_layouts([view], [want])
        assert _dense_in(laid, want) and torch.equal(laid, view)


def test_a_slice_has_no_layout_and_is_copied():
    from ethosu_ng.runtime import check_input_layouts
    from ethosu_ng.runtime.dim_order import _dense_in, _dense_order

    view = torch.randn(1, 3, 4, 6)[..., 1:]
    assert _dense_order(view) is None
    (laid,) = check_input_layouts([view], [(0, 2, 3, 1)])
    assert _dense_in(laid, (0, 2, 3, 1)) and torch.equal(laid, view)


def _dense_strides(shape, order):
    strides, step = [0] * len(shape), 1
    for d in reversed(order):
        strides[d], step = step, step * shape[d]
    return strides


@settings(max_examples=60, deadline=None)
@given(
    shape=st.lists(st.integers(1, 3), min_size=4, max_size=4),
    a=st.permutations(range(4)),
    b=st.permutations(range(4)),
)
def test_same_bytes_is_the_same_address_for_every_element(shape, a, b):
    """Two dim orders lay a tensor out as the same bytes exactly when every dim that can take
    two values has the same stride in both."""
    sa, sb = _dense_strides(shape, a), _dense_strides(shape, b)
    want = all(sa[d] == sb[d] for d in range(4) if shape[d] > 1)
    assert io_layout.same_bytes(shape, a, b) == want


@pytest.mark.parametrize("asked", [None, "nchw", "nhwc"])
@pytest.mark.parametrize("came_in", [torch.contiguous_format, torch.channels_last])
def test_an_input_is_laid_out_as_asked_whatever_layout_it_came_in(asked, came_in):
    """An asked layout is the one the example input gets (it fixes the program's input layout);
    none asked keeps the example's own."""
    x = torch.arange(2 * 3 * 4 * 5, dtype=torch.float32).reshape(2, 3, 4, 5)
    x = x.contiguous(memory_format=came_in)
    (got,) = io_layout.apply_input_layouts([x], [asked])
    want = tuple(x.dim_order()) if asked is None else io_layout.LAYOUTS[asked]
    assert tuple(got.dim_order()) == want
    assert torch.equal(got, x)
