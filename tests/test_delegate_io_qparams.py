# SPDX-License-Identifier: BSD-3-Clause
"""The qparams a delegate's IO spec declares for a boundary tensor
(``partitioning/delegate_io.integer_tensor_qparams``): the quantize that produced it, looked for
back through data movement only; else the one dequantize that reads it (through data movement);
else none. Over drawn chains of views, permutes, slices and concatenations, on graphs built node
by node. And a float boundary tensor is refused naming the tensor and its type."""

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch.fx import Graph

import ethosu_ng.ops  # noqa: F401 - defines the quantized_decomposed ops
from ethosu_ng.partitioning.boundary import BoundaryContractError
from ethosu_ng.partitioning.delegate_io import declared_io, integer_tensor_qparams

aten = torch.ops.aten
QUANTIZE = torch.ops.quantized_decomposed.quantize_per_tensor.default
DEQUANTIZE = torch.ops.quantized_decomposed.dequantize_per_tensor.default
MOVES = {
    "view": lambda g, n: g.call_function(aten.view_copy.default, (n, [1, -1])),
    "permute": lambda g, n: g.call_function(aten.permute_copy.default, (n, [1, 0])),
    "slice": lambda g, n: g.call_function(aten.slice_copy.Tensor, (n, 1, 0, 2)),
    "cat": lambda g, n: g.call_function(aten.cat.default, ([n, n], 1)),
}
CHAINS = st.lists(st.sampled_from(sorted(MOVES)), max_size=5)
QPARAMS = st.tuples(
    st.floats(1e-4, 10.0, allow_nan=False, allow_subnormal=False), st.integers(-128, 127)
)


def _settings(n):
    return settings(
        max_examples=n, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck)
    )


def _moved(g, n, chain):
    for kind in chain:
        n = MOVES[kind](g, n)
    return n


def _quantize(g, x, qp):
    return g.call_function(QUANTIZE, (x, qp[0], qp[1], -128, 127, torch.int8))


def _dequantize(g, n, qp):
    return g.call_function(DEQUANTIZE, (n, qp[0], qp[1], -128, 127, torch.int8))


@_settings(60)
@given(chain=CHAINS, qp=QPARAMS, other=QPARAMS)
def test_a_tensor_moved_from_a_quantize_has_its_qparams(chain, qp, other):
    """Read by an integer op (nothing downstream to ask) or by a dequantize with other qparams:
    the producing quantize's win."""
    g = Graph()
    n = _moved(g, _quantize(g, g.placeholder("x"), qp), chain)
    g.call_function(aten.neg.default, (n,))
    assert integer_tensor_qparams(n) == (qp[0], qp[1])
    _dequantize(g, n, other)
    assert integer_tensor_qparams(n) == (qp[0], qp[1])


@_settings(60)
@given(before=CHAINS, after=CHAINS, qp=QPARAMS, reader=QPARAMS)
def test_an_integer_op_is_not_looked_through(before, after, qp, reader):
    """Between the quantize and the tensor an op that computes (``neg``): the quantize's
    qparams do not describe its result. With no dequantize reading it there are none; with
    one, they are the dequantize's."""
    g = Graph()
    computed = g.call_function(
        aten.neg.default, (_moved(g, _quantize(g, g.placeholder("x"), qp), before),)
    )
    n = _moved(g, computed, after)
    assert integer_tensor_qparams(n) is None
    _dequantize(g, _moved(g, n, after), reader)
    assert integer_tensor_qparams(n) == (reader[0], reader[1])


@_settings(60)
@given(chain=CHAINS, qp=QPARAMS, second=QPARAMS)
def test_a_program_input_has_the_qparams_of_the_dequantize_that_reads_it(chain, qp, second):
    """An integer program input (no quantize before it): the dequantize reading it, through
    data movement; two readers that disagree leave it undeclared."""
    g = Graph()
    x = g.placeholder("x")
    _dequantize(g, _moved(g, x, chain), qp)
    assert integer_tensor_qparams(x) == (qp[0], qp[1])
    _dequantize(g, _moved(g, x, chain[::-1]), second)
    expected = (qp[0], qp[1]) if second == qp else None
    assert integer_tensor_qparams(x) == expected


class _FloatIn(torch.nn.Module):
    def forward(self, x):
        return (x * 2).to(torch.int8)


class _FloatOut(torch.nn.Module):
    def forward(self, x):
        return x.float() * 2


@pytest.mark.parametrize(
    "module, x, where",
    [
        (_FloatIn(), torch.randn(2, 3), "input 0 (x) is torch.float32"),
        (_FloatOut(), torch.ones(2, 3, dtype=torch.int8), "output 0 (mul) is torch.float32"),
    ],
)
def test_a_float_boundary_tensor_is_refused_naming_it_and_its_type(module, x, where):
    program = torch.export.export(module, (x,))
    with pytest.raises(BoundaryContractError) as e:
        declared_io(program)
    msg = str(e.value)
    assert msg.startswith(f"{where}; a delegate boundary tensor must be one of"), msg
    for dtype in ("torch.int8", "torch.int16"):
        assert dtype in msg, msg


class _TwoInOut(torch.nn.Module):
    def forward(self, a, b):
        return a + b, a - b


def test_the_declared_io_names_its_inputs_and_outputs_in_order():
    x = torch.ones(2, 3, dtype=torch.int8)
    program = torch.export.export(_TwoInOut(), (x, x))
    io = declared_io(program)
    assert io.input_names == ["a", "b"]
    assert io.output_names == ["add", "sub"]
    assert len(io.inputs) == 2 and len(io.outputs) == 2
