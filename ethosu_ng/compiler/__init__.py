# SPDX-License-Identifier: BSD-3-Clause
"""Compiling partitions: TOSA lowering (through the Arm adapter), the declared == TOSA == Vela IO
check, Vela in worker processes, and the delegate blob."""
