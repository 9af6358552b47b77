# SPDX-License-Identifier: BSD-3-Clause
"""EthosUNGQuantizer: PT2E quantizer for Ethos-U (symmetric int8 by default, a16w8 on request).

A thin layer over upstream's EthosUQuantizer (its annotators are right); what we add is the
program-IO dtype choice, the activation precision per model, per module name or per module type
(int16 activations with int8 weights and 48-bit-accumulated int32 biases: upstream's a16w8
config), alias spellings of annotated ops rewritten so they are annotated
(``annotation_aliases``), and ``avg_pool2d`` with ``divisor_override`` rewritten as a depthwise
convolution, which rounds once (``passes/avg_pool_divisor_as_conv.py``). uint8 lives only at the
program's IO: inside every delegate tensors are int8 and the unsigned conversion is a RESCALE at
the entry/exit.
"""

from __future__ import annotations

import dataclasses
from typing import Mapping, Optional, Union

import torch
from torchao.quantization.pt2e.observer import MinMaxObserver

from ethosu_ng.adapters import arm as upstream
from ethosu_ng.annotation_aliases import canonicalize_aliases
from ethosu_ng.annotation_composites import decompose_unannotated_composites
from ethosu_ng.compile_spec import EthosUNGCompileSpec
from ethosu_ng.passes.avg_pool_divisor_as_conv import AvgPoolDivisorAsConvPass
from ethosu_ng.passes.fold_input_independent import fold_input_independent
from ethosu_ng.passes.integer_program_io import IO_META_KEY
from ethosu_ng.passes.loop_carried_grid import share_loop_carried_qparams

_INPUT_DTYPES = (None, torch.int8, torch.uint8, torch.int16)
_OUTPUT_DTYPES = (None, torch.int8, torch.uint8, torch.int16)
ACTIVATION_DTYPES = (torch.int8, torch.int16)

ModuleKey = Union[str, type]


# Smallest int16 activation scale. Upstream's a16w8 default, 2**-12, floors the scale of every
# activation whose range is under +-8; on timm efficientvit_m0 (random weights) that leaves
# some activation no signal (eager SQNR 0.84 dB at 2**-14, 0.00 with upstream's config, 38.24 dB
# at 2**-24). A floor of 2**-14 would bring deit_tiny within 0.5 dB of upstream on each of three
# held-out batches; losing a model outright weighs more, so there is no floor to speak of
# (docs/accuracy.md, bench/precision.py --int16-scale-floor).
INT16_SCALE_FLOOR = 2.0**-24
# How an int16 activation's range is observed (``_int16_activation``; bench/precision.py
# --int16-observer measures the alternative).
INT16_OBSERVER = MinMaxObserver


def activation_config(dtype: torch.dtype, per_channel: bool = True):
    """Upstream's quantization config for activations of ``dtype`` (int8 weights either way)."""
    if dtype == torch.int16:
        config = upstream.get_symmetric_a16w8_quantization_config(
            is_per_channel=per_channel, epsilon=INT16_SCALE_FLOOR
        )
        return dataclasses.replace(
            config,
            input_activation=_int16_activation(config.input_activation),
            output_activation=_int16_activation(config.output_activation),
        )
    if dtype == torch.int8:
        return upstream.get_symmetric_quantization_config(is_per_channel=per_channel)
    raise ValueError(f"activation dtype must be torch.int8 or torch.int16, got {dtype}")


def _int16_activation(spec):
    """Upstream's int16 activation spec, observed by min/max and with codes from -32768.

    Min/max, not upstream's histogram: int16's steps are fine enough that clipping the tails buys
    nothing and costs a saturated held-out value (deit_tiny, three held-out batches: each one higher
    with min/max, 31.59 against 31.22 dB together; efficientvit_m0 the same; calibration in half the
    time). Codes from -32768: every int16 RESCALE (TOSA, and the NPU's output stage) saturates to
    the dtype's range, so upstream's -32767 floor is a value the quantized model clamps and the
    hardware does not (a negative overflow of a convolution is -32768 there, and a reduction over
    such values adds the step up)."""
    if spec is None:
        return spec
    observer = INT16_OBSERVER.with_args(eps=INT16_SCALE_FLOOR)
    spec = dataclasses.replace(spec, observer_or_fake_quant_ctr=observer)
    if spec.quant_min != torch.iinfo(torch.int16).min + 1:
        return spec
    return dataclasses.replace(spec, quant_min=torch.iinfo(torch.int16).min)


class EthosUNGQuantizer(upstream.EthosUQuantizer):
    """Args:
    compile_spec: the target's ``EthosUNGCompileSpec``.
    input_dtype: ``None`` keeps program inputs float (quantize on CPU); ``torch.int8`` /
        ``torch.uint8`` make the program's inputs integer tensors.
    output_dtype: ``None`` keeps outputs float (dequantize on CPU); ``torch.int8`` (or
        ``torch.uint8``) makes them integer.
    per_channel: per-channel weight quantization (default True).
    activation_dtype: ``torch.int8`` (default) or ``torch.int16`` activations everywhere not
        named in ``module_dtypes``; weights are int8 either way.
    module_dtypes: activation dtype per module, keyed by qualified name (``"blocks.3.attn"``,
        as ``named_modules()`` spells it) or by module type (``torch.nn.LayerNorm``); a name
        wins over a type. A name that matches no module of the model is an error at
        ``prepare_pt2e``.
    """

    def __init__(
        self,
        compile_spec: EthosUNGCompileSpec,
        input_dtype: Optional[torch.dtype] = None,
        output_dtype: Optional[torch.dtype] = None,
        per_channel: bool = True,
        activation_dtype: torch.dtype = torch.int8,
        module_dtypes: Optional[Mapping[ModuleKey, torch.dtype]] = None,
    ):
        if not isinstance(compile_spec, EthosUNGCompileSpec):
            raise TypeError(
                f"compile_spec must be an EthosUNGCompileSpec, got {type(compile_spec).__name__}"
            )
        if input_dtype not in _INPUT_DTYPES:
            raise ValueError(
                f"input_dtype must be None, torch.int8, torch.uint8 or torch.int16, got "
                f"{input_dtype}"
            )
        if output_dtype not in _OUTPUT_DTYPES:
            raise ValueError(
                f"output_dtype must be None, torch.int8, torch.uint8 or torch.int16, got "
                f"{output_dtype}"
            )
        if activation_dtype not in ACTIVATION_DTYPES:
            raise ValueError(
                f"activation_dtype must be torch.int8 or torch.int16, got {activation_dtype}"
            )
        module_dtypes = dict(module_dtypes or {})
        for key, dtype in module_dtypes.items():
            if not isinstance(key, (str, type)):
                raise TypeError(
                    f"module_dtypes keys are module names (str) or module types, got {key!r}"
                )
            if dtype not in ACTIVATION_DTYPES:
                raise ValueError(
                    f"module_dtypes[{_key_name(key)!r}]: activation dtype must be torch.int8 or "
                    f"torch.int16, got {dtype}"
                )
        super().__init__(upstream.upstream_compile_spec(compile_spec))
        self.ng_compile_spec = compile_spec
        self.input_dtype = input_dtype
        self.output_dtype = output_dtype
        self.activation_dtype = activation_dtype
        self.module_dtypes = module_dtypes
        self.set_global(activation_config(activation_dtype, per_channel))
        for key, dtype in module_dtypes.items():
            config = activation_config(dtype, per_channel)
            if isinstance(key, str):
                self.set_module_name(key, config)
            else:
                self.set_module_type(key, config)
        # An IO dtype other than the interior's gets its own config at the program's edge:
        # x -> Q(u8) -> DQ(u8) -> Q(i8) ... (upstream's uint8 IO config), likewise int8 IO of an
        # int16 interior and int16 IO of an int8 one; the dtype change is a RESCALE inside the
        # delegate. Applied per side.
        inputs_finder, outputs_finder = upstream.io_node_finders()
        for dtype, finder in ((input_dtype, inputs_finder), (output_dtype, outputs_finder)):
            if dtype is not None and dtype != activation_dtype:
                io_config = upstream.io_quantization_config(
                    dtype, activation_config(dtype if dtype != torch.uint8 else torch.int8)
                )
                self.set_node_finder(io_config, finder)

    def transform_for_annotation(self, model: torch.fx.GraphModule) -> torch.fx.GraphModule:
        # Values computed without the inputs (positional encodings, masks) would be quantized
        # and computed on every inference, and some do not lower.
        fold_input_independent(model)
        # Before upstream's avg_pool2d decomposition, whose pool + multiply rounds twice.
        model = AvgPoolDivisorAsConvPass()(model)
        model = super().transform_for_annotation(model)
        # Ops upstream annotates under another spelling (clamp_min, expand_as, ...) would stay
        # float between quantized neighbours and split the partition.
        canonicalize_aliases(model)
        # Composites upstream does not annotate would stay float and run on the CPU. Their parts
        # (a scalar operand, a division) go through upstream's transforms once more.
        if decompose_unannotated_composites(model):
            model = super().transform_for_annotation(model)
            canonicalize_aliases(model)
        return model

    def annotate(self, model: torch.fx.GraphModule) -> torch.fx.GraphModule:
        _check_module_names(model, [k for k in self.module_dtypes if isinstance(k, str)])
        model = super().annotate(model)
        _grouped_conv_transpose_per_tensor(model)
        share_loop_carried_qparams(model)
        if self.input_dtype is not None or self.output_dtype is not None:
            request = {
                "input": None
                if self.input_dtype is None
                else str(self.input_dtype).replace("torch.", ""),
                "output": None
                if self.output_dtype is None
                else str(self.output_dtype).replace("torch.", ""),
            }
            # torch.export keeps meta["custom"]; EthosUNGPartitioner reads it. On the ops too:
            # a placeholder export renames (a forward argument named `input`, as
            # nn.Sequential's) loses it.
            for n in model.graph.nodes:
                if n.op in ("placeholder", "call_function"):
                    n.meta.setdefault("custom", {})[IO_META_KEY] = request
        return model


def _grouped_conv_transpose_per_tensor(model: torch.fx.GraphModule) -> None:
    """Per-tensor weight (and bias) qparams for a grouped ``conv_transpose2d``.

    Its weight is (in_channels, out_channels / groups, kH, kW): output channel ``o`` is column
    ``o % (out / groups)`` of the rows of group ``o // (out / groups)``, so no single weight axis
    holds the output channels, and a per-channel scale on either axis mismatches the bias (one
    value per output channel) it derives. Upstream's per-tensor case is what it lowers."""
    for node in model.graph.nodes:
        if node.target != torch.ops.aten.conv_transpose2d.input:
            continue
        groups = node.args[6] if len(node.args) > 6 else 1
        annotation = node.meta.get("quantization_annotation")
        if groups == 1 or annotation is None:
            continue
        qspecs = annotation.input_qspec_map
        weight = node.args[1]
        spec = qspecs.get(weight)
        if spec is None or spec.qscheme != torch.per_channel_symmetric:
            continue
        # Weights are int8 whatever the activations' width.
        qspecs[weight] = activation_config(torch.int8, per_channel=False).weight
        bias = node.args[2] if len(node.args) > 2 else None
        if bias is not None and bias in qspecs:
            qspecs[bias] = dataclasses.replace(
                qspecs[bias], qscheme=torch.per_tensor_symmetric, ch_axis=None
            )


def _key_name(key: ModuleKey) -> str:
    return key if isinstance(key, str) else f"{key.__module__}.{key.__qualname__}"


def _check_module_names(model: torch.fx.GraphModule, names) -> None:
    """Every module name given must own at least one node of the exported graph."""
    if not names:
        return
    owned = set()
    for n in model.graph.nodes:
        for path, _ in (n.meta.get("nn_module_stack") or {}).values():
            owned.add(path)
    missing = [k for k in names if not any(p == k or p.startswith(k + ".") for p in owned)]
    if missing:
        known = sorted({p.split(".")[0] for p in owned if p})
        raise ValueError(
            f"module_dtypes names {missing} match no module of the model (top-level modules: "
            f"{known[:12]}{' ...' if len(known) > 12 else ''})"
        )
