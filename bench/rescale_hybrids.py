# SPDX-License-Identifier: BSD-3-Clause
"""Hybrid (convolution + attention) timm models outside the zoo at a reduced input size, random
weights, for ``bench/rescale_cycles.py`` (``bench/rescale_hybrids.py:levit_128s`` ...): their
standalone RESCALE patterns are those of the full-size model; the smaller input keeps a side-by-side
lowering with upstream's within minutes on a shared machine."""

import timm
import torch

SIZE = 128  # divisible by the largest stride (32) and by LeViT's and EfficientViT's patch (16)


def _timm(name, **kwargs):
    model = timm.create_model(name, pretrained=False, **kwargs)
    return model.eval(), (torch.randn(1, 3, SIZE, SIZE),)


def levit_128s():
    return _timm("levit_128s", img_size=SIZE)


def efficientvit_m0():
    return _timm("efficientvit_m0", img_size=SIZE)


def mobilevit_xxs():
    return _timm("mobilevit_xxs")


def edgenext_xx_small():
    return _timm("edgenext_xx_small")


def fastvit_t8():
    return _timm("fastvit_t8")


def poolformerv2_s12():
    return _timm("poolformerv2_s12")
