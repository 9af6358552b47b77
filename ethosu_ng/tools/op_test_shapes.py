# SPDX-License-Identifier: BSD-3-Clause
"""Example inputs at shapes upstream's op tests did not write: the shape-perturbation mode of
``ethosu_ng.tools.upstream_op_tests`` (``--perturb-shapes N --seed S``).

A perturbation changes some sizes of a case's tensor inputs and keeps the module: which dims
change is drawn from a template (batch and spatial dims of an NCHW-like tensor, every dim but
the last, every dim, the last only), and the new size of a dim is keyed either by the dim's
position from the end and its size (numpy broadcasting's alignment: ``x + y`` changes both
alike) or by its size alone (``a @ b``'s shared size changes on both sides). A new tensor's
values are drawn from the original's (same dtype, same range: an index stays an index, a
logarithm's input stays positive), in the original's memory format. The float eager module
decides what is valid: a draw it raises on, or whose outputs turn non-finite where the
original's were finite, is replaced by the next draw; after ``TRIES`` draws the case has no
valid perturbation. Everything is drawn from ``random.Random(f"{seed}:{key}:{try}")``, so a
perturbed case is the same in every process.
"""

from __future__ import annotations

import random
from typing import Any, Dict, List, Optional, Sequence, Tuple

# New sizes: small odd ones, sizes that divide no usual kernel or stride, and a few larger ones.
SMALL_SIZES = (1, 2, 3, 5, 7)
ODD_SIZES = (9, 11, 13, 15, 17, 19, 23, 29)
LARGE_SIZES = (31, 33, 40, 47, 63, 64)
MAX_ELEMENTS = 100_000  # per input tensor, so that a case stays fast
TRIES = 12
# Which dims of a tensor of rank r may change, by template.
TEMPLATES = ("spatial", "leading", "all", "last")
KEYINGS = ("aligned", "size")


def _dims(template: str, rank: int) -> List[int]:
    if rank == 0:
        return []
    if template == "spatial":  # N, H, W (...) of NC...: the channel dim keeps its size
        return [0, *range(2, rank)] if rank >= 3 else [0]
    if template == "leading":  # every dim but the features of a linear/norm
        return list(range(rank - 1)) or [0]
    if template == "last":
        return [rank - 1]
    return list(range(rank))


def _new_size(rng: random.Random, old: int) -> int:
    while True:
        u = rng.random()
        pool = SMALL_SIZES if u < 0.45 else ODD_SIZES if u < 0.8 else LARGE_SIZES
        size = rng.choice(pool)
        if size != old:
            return size


def _numel(shape: Sequence[int]) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def draw_shapes(
    shapes: Sequence[Sequence[int]], rng: random.Random, template: str, keying: str
) -> Optional[List[List[int]]]:
    """New shapes for tensors of ``shapes`` (None when the template leaves nothing to change)."""
    positions: Dict[Any, List[Tuple[int, int]]] = {}
    # A size-1 dim is a broadcast dim, except a leading batch of a rank>=3 tensor; where every
    # dim has size 1 (a [1, 1] input), those are the sizes to change.
    for ones in (False, True):
        for i, shape in enumerate(shapes):
            rank = len(shape)
            if _numel(shape) <= 1 and rank <= 1 and not ones:
                continue  # a scalar-like operand broadcasts; keep it
            for d in _dims(template, rank):
                size = shape[d]
                if size == 1 and not (d == 0 and rank >= 3) and not ones:
                    continue
                key = (d - rank, size) if keying == "aligned" else size
                positions.setdefault(key, []).append((i, d))
        if positions:
            break
    if not positions:
        return None
    keys = sorted(positions, key=repr)
    chosen = [k for k in keys if rng.random() < 0.6] or [rng.choice(keys)]
    for _ in range(20):
        new = [list(s) for s in shapes]
        for k in chosen:
            old = shapes[positions[k][0][0]][positions[k][0][1]]
            size = _new_size(rng, old)
            for i, d in positions[k]:
                new[i][d] = size
        if all(_numel(s) <= MAX_ELEMENTS for s in new):
            return new
    return None


def _like(t, shape: Sequence[int], gen):
    """A tensor of ``shape`` whose values are drawn from ``t``'s, in ``t``'s memory format."""
    import torch

    flat = t.detach().reshape(-1)
    if flat.numel() == 0:
        out = torch.zeros(shape, dtype=t.dtype)
    else:
        idx = torch.randint(flat.numel(), tuple(shape), generator=gen)
        out = flat[idx].clone()
    if (
        t.dim() == 4
        and not t.is_contiguous()
        and t.is_contiguous(memory_format=torch.channels_last)
    ):
        out = out.contiguous(memory_format=torch.channels_last)
    return out


def _finite(outputs) -> bool:
    import torch

    return all(not o.is_floating_point() or bool(torch.isfinite(o).all()) for o in outputs)


def _outputs(x) -> List[Any]:
    import torch
    from torch.utils._pytree import tree_leaves

    return [t for t in tree_leaves(x) if isinstance(t, torch.Tensor)]


def _run(module, inputs):
    import torch

    with torch.no_grad():
        # Clones: a module that writes into its inputs must not change the case's inputs.
        return _outputs(module(*[t.clone() for t in inputs]))


def perturb(module, inputs: Sequence[Any], seed: int, key: str, tries: int = TRIES):
    """(new inputs, info) for ``module``'s tensor ``inputs``, or (None, info) when no draw of
    ``tries`` is valid. ``info``: the shapes before and after, the draw that was kept (template,
    keying, try) and why earlier draws were refused."""
    import torch

    shapes = [list(t.shape) for t in inputs]
    info: Dict[str, Any] = {"original_shapes": shapes, "refused": []}
    try:
        want_finite = _finite(_run(module, inputs))
    except Exception as e:  # the case's own inputs fail eager: nothing to perturb against
        info["refused"].append(f"original: {type(e).__name__}: {e}"[:160])
        return None, info
    for t in range(tries):
        rng = random.Random(f"{seed}:{key}:{t}")
        template = TEMPLATES[t % len(TEMPLATES)]
        keying = KEYINGS[(t // len(TEMPLATES)) % len(KEYINGS)]
        new_shapes = draw_shapes(shapes, rng, template, keying)
        if new_shapes is None or new_shapes == shapes:
            continue
        gen = torch.Generator().manual_seed(rng.getrandbits(62))
        new = tuple(
            t_in if s == list(t_in.shape) else _like(t_in, s, gen)
            for t_in, s in zip(inputs, new_shapes)
        )
        try:
            out = _run(module, new)
        except Exception as e:
            info["refused"].append(f"{new_shapes}: {type(e).__name__}: {e}"[:160].split("\n")[0])
            continue
        if want_finite and not _finite(out):
            info["refused"].append(f"{new_shapes}: non-finite output")
            continue
        if not out or any(o.numel() == 0 for o in out):
            info["refused"].append(f"{new_shapes}: empty output")
            continue
        info.update(shapes=new_shapes, template=template, keying=keying, perturb_try=t)
        return new, info
    return None, info
