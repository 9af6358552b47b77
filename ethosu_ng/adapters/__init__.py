# SPDX-License-Identifier: BSD-3-Clause
"""Adapters: every executorch-internal symbol ethosu_ng uses is reached through these modules.

- ``arm``: executorch's Arm backend (TOSA lowering, operator support, quantizer configs).
- ``exir``: exir internals (carving a partition as ``to_backend`` does, the ``.pte`` reader,
  the partition reporter's reasons, ops executorch keeps from decomposition).
- ``lazy_recompile``: the process-wide ``GraphModule.recompile`` deferral used while lowering.

``tests/test_layering.py`` fails if a module outside this package imports executorch's Arm
backend or any private (underscore) executorch module.
"""
