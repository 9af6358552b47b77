# SPDX-License-Identifier: BSD-3-Clause
"""Partitioning: the boundary contract, the declared IO of a partition, target limits, carving
partitions as ``to_backend`` will, and finding the ops a Vela failure is due to."""
