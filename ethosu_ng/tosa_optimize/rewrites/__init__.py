"""TOSA-to-TOSA rewrites, one per module; ``tosa_optimize.pipeline`` declares their order."""
