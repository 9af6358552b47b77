"""EthosUNGQuantizer: PT2E quantizer for Ethos-U (symmetric int8 by default).

A thin layer over upstream's EthosUQuantizer (its annotators are right); what we add is the
program-IO dtype choice, alias spellings of annotated ops rewritten so they are annotated
(``annotation_aliases``), and ``avg_pool2d`` with ``divisor_override`` rewritten as a depthwise
convolution, which rounds once (``passes/avg_pool_divisor_as_conv.py``). uint8 lives only at the
program's IO: inside every delegate tensors are int8 and the unsigned conversion is a RESCALE at
the entry/exit.
"""

from __future__ import annotations

from typing import Optional

import torch

from ethosu_ng.adapters import arm as upstream
from ethosu_ng.annotation_aliases import canonicalize_aliases
from ethosu_ng.compile_spec import EthosUNGCompileSpec
from ethosu_ng.passes.avg_pool_divisor_as_conv import AvgPoolDivisorAsConvPass
from ethosu_ng.passes.integer_program_io import IO_META_KEY

_INPUT_DTYPES = (None, torch.int8, torch.uint8)
_OUTPUT_DTYPES = (None, torch.int8, torch.uint8)


class EthosUNGQuantizer(upstream.EthosUQuantizer):
    """Args:
    compile_spec: the target's ``EthosUNGCompileSpec``.
    input_dtype: ``None`` keeps program inputs float (quantize on CPU); ``torch.int8`` /
        ``torch.uint8`` make the program's inputs integer tensors.
    output_dtype: ``None`` keeps outputs float (dequantize on CPU); ``torch.int8`` (or
        ``torch.uint8``) makes them integer.
    per_channel: per-channel weight quantization (default True).
    """

    def __init__(
        self,
        compile_spec: EthosUNGCompileSpec,
        input_dtype: Optional[torch.dtype] = None,
        output_dtype: Optional[torch.dtype] = None,
        per_channel: bool = True,
    ):
        if not isinstance(compile_spec, EthosUNGCompileSpec):
            raise TypeError(
                f"compile_spec must be an EthosUNGCompileSpec, got {type(compile_spec).__name__}"
            )
        if input_dtype not in _INPUT_DTYPES:
            raise ValueError(
                f"input_dtype must be None, torch.int8 or torch.uint8, got {input_dtype}"
            )
        if output_dtype not in _OUTPUT_DTYPES:
            raise ValueError(
                f"output_dtype must be None, torch.int8 or torch.uint8, got {output_dtype}"
            )
        super().__init__(upstream.upstream_compile_spec(compile_spec))
        self.ng_compile_spec = compile_spec
        self.input_dtype = input_dtype
        self.output_dtype = output_dtype
        self.set_global(upstream.get_symmetric_quantization_config(is_per_channel=per_channel))
        # Upstream's uint8 IO config gives x -> Q(u8) -> DQ(u8) -> Q(i8) ..., i.e. an unsigned
        # RESCALE at the edge and int8 everywhere inside; applied per side.
        inputs_finder, outputs_finder = upstream.io_node_finders()
        if input_dtype == torch.uint8:
            self.set_node_finder(upstream.get_uint8_io_quantization_config(), inputs_finder)
        if output_dtype == torch.uint8:
            self.set_node_finder(upstream.get_uint8_io_quantization_config(), outputs_finder)

    def transform_for_annotation(self, model: torch.fx.GraphModule) -> torch.fx.GraphModule:
        # Before upstream's avg_pool2d decomposition, whose pool + multiply rounds twice.
        model = AvgPoolDivisorAsConvPass()(model)
        model = super().transform_for_annotation(model)
        # Ops upstream annotates under another spelling (clamp_min, expand_as, ...) would stay
        # float between quantized neighbours and split the partition.
        canonicalize_aliases(model)
        return model

    def annotate(self, model: torch.fx.GraphModule) -> torch.fx.GraphModule:
        model = super().annotate(model)
        if self.input_dtype is not None or self.output_dtype is not None:
            request = {
                "input": None
                if self.input_dtype is None
                else str(self.input_dtype).replace("torch.", ""),
                "output": None
                if self.output_dtype is None
                else str(self.output_dtype).replace("torch.", ""),
            }
            # torch.export keeps meta["custom"] on placeholders; EthosUNGPartitioner reads it.
            for n in model.graph.nodes:
                if n.op == "placeholder":
                    n.meta.setdefault("custom", {})[IO_META_KEY] = request
        return model
