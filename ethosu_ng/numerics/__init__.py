# SPDX-License-Identifier: BSD-3-Clause
"""Numerics without an NPU: each delegate's TOSA graph on the TOSA reference model
(``tosa_reference``), or on its numpy equivalent for the ops of convolutional partitions
(``tosa_fast``), and the quantized graph evaluated exactly in float64 (``op_numerics``)."""
