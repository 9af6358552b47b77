"""TOSA-to-TOSA optimisation between upstream's lowering and Vela (``pipeline.optimize``).

``graph.py``: the mutable IR read from and written to the flatbuffer; ``rewrites/``: one rewrite
per module; ``pipeline.py``: their order and the fixed-point driver; ``verify.py``: the original
and the optimised graph compared bit for bit on the TOSA reference model.
"""
