"""EthosUNGQuantizer: PT2E quantizer for Ethos-U (symmetric int8 by default).

A thin layer over upstream's EthosUQuantizer (its annotators are right); what we add is the
program-IO dtype choice.
"""

from __future__ import annotations

from typing import Optional

import torch

from . import upstream
from .compile_spec import EthosUNGCompileSpec


class EthosUNGQuantizer(upstream.EthosUQuantizer):
    """Args:
        compile_spec: the target's ``EthosUNGCompileSpec``.
        input_dtype / output_dtype: ``None`` keeps the program's IO float (quantize/dequantize on
            the CPU at the edges).
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
                f"compile_spec must be an EthosUNGCompileSpec, got {type(compile_spec).__name__}")
        super().__init__(upstream.upstream_compile_spec(compile_spec))
        self.ng_compile_spec = compile_spec
        self.input_dtype = input_dtype
        self.output_dtype = output_dtype
        self.set_global(upstream.get_symmetric_quantization_config(is_per_channel=per_channel))
