# SPDX-License-Identifier: BSD-3-Clause
"""TOSA-to-TOSA rewrites, one per module; ``tosa_optimize.pipeline`` declares their order."""
