# SPDX-License-Identifier: BSD-3-Clause
"""TOSA-to-TOSA optimisation between upstream's lowering and Vela (``pipeline.optimize``).

``graph.py``: the mutable IR read from and written to the flatbuffer; ``rewrites/``: one rewrite
per module; ``pipeline.py``: their order and the fixed-point driver; ``verify.py``: the original
and the optimised graph compared bit for bit on the TOSA reference model; ``rescale_report.py``:
why each RESCALE Vela runs as a layer of its own was not folded (the rescale rewrites,
``RESCALE_REWRITES`` in ``pipeline.py``, take away the ones Vela would fold after them).

What Vela 5.1 does with data movement decides what a rewrite may do (measured per layer with
``--enable-debug-db``, docs/benchmarks.md):

- it folds a TRANSPOSE into the write of the operator before it where it can (0 cycles), so
  moving a transpose next to another operator or onto a graph output can cost more than the two
  it replaced: a rewrite never adds a transpose but the block swaps that replace one
  (``DecomposeTranspose``) and the smaller one per slice that replaces a transpose only slices
  read (``SliceBeforeTranspose``);
- it copies a tensor that several RESHAPEs read (a MemoryCopy layer each): reshapes are merged
  only where the inner one disappears;
- it runs a high-rank TRANSPOSE in several passes: the same permutation on the fewest dimensions
  (``CollapseTransposeRank``) is where most of the measured gain on attention comes from;
- it runs a depthwise convolution with a channel multiplier as one pass per multiple, which on
  Ethos-U85 it interleaves with Transpose layers: a copy of the input with its channels repeated
  makes it one multiplier-1 pass (``RepeatChannelsForDepthwise``, where Vela estimates it
  cheaper: ``rewrites/_probe.py`` asks Vela, as ``StageBroadcastConstant`` does).
"""
