# SPDX-License-Identifier: BSD-3-Clause
"""Where a model comes from: ``timm:NAME``, ``torchvision:NAME`` or ``path/to/file.py:factory``.

Models are always built with random weights (``pretrained=False`` / ``weights=None``): nothing
is downloaded. A factory is a function returning ``(model, example_inputs)``; its file's directory
is on the import path.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from dataclasses import dataclass
from typing import Tuple

import torch


class ModelSourceError(ValueError):
    """The model spec cannot be resolved (unknown name, missing file, failing factory)."""


@dataclass
class LoadedModel:
    spec: str
    model: torch.nn.Module
    example_inputs: Tuple[torch.Tensor, ...]


def check_model_spec(spec: str) -> None:
    """What can be checked without building the model: the spec's form, its source, that the
    named model or file exists. Raises ModelSourceError (cheap: a command line calls it before
    any work starts)."""
    kind, name = _split(spec)
    if kind == "timm":
        if name not in _import("timm", name).list_models():
            raise ModelSourceError(f"timm:{name}: no such timm model")
    elif kind == "torchvision":
        if name.lower() not in _import("torchvision", name).models.list_models():
            raise ModelSourceError(f"torchvision:{name}: no such torchvision model")
    elif not os.path.isfile(kind):
        raise ModelSourceError(f"{kind}: no such file")


def load_model(spec: str, seed: int = 0) -> LoadedModel:
    check_model_spec(spec)
    kind, name = _split(spec)
    torch.manual_seed(seed)
    if kind == "timm":
        model, x = _timm(name)
    elif kind == "torchvision":
        model, x = _torchvision(name)
    else:
        model, x = _factory(kind, name)
    return LoadedModel(spec, model.eval(), x)


def _split(spec: str) -> Tuple[str, str]:
    if not isinstance(spec, str) or ":" not in spec:
        raise ModelSourceError(
            f"model {spec!r}: expected timm:NAME, torchvision:NAME or path/to/file.py:factory"
        )
    kind, _, name = spec.partition(":")
    if kind not in ("timm", "torchvision") and not (kind.endswith(".py") or os.path.sep in kind):
        raise ModelSourceError(
            f"model {spec!r}: unknown source {kind!r} (timm, torchvision or a .py file)"
        )
    return kind, name


def _import(package: str, name: str):
    try:
        return importlib.import_module(package)
    except ImportError as e:
        raise ModelSourceError(
            f"{package}:{name}: {package} is not installed (pip install 'ethosu_ng[zoo]')"
        ) from e


def _timm(name: str):
    model = _import("timm", name).create_model(name, pretrained=False)
    size = tuple(model.pretrained_cfg.get("input_size", (3, 224, 224)))
    return model, (torch.randn(1, *size),)


def _torchvision(name: str):
    try:
        model = _import("torchvision", name).models.get_model(name, weights=None)
    except (ValueError, KeyError) as e:
        raise ModelSourceError(f"torchvision:{name}: no such torchvision model") from e
    size = 299 if name.startswith("inception") else 224
    return model, (torch.randn(1, 3, size, size),)


def _factory(path: str, func: str):
    # The factory's own directory is importable, as when Python runs the file as a script: a
    # factory may import a sibling module.
    here = os.path.dirname(os.path.abspath(path))
    if here not in sys.path:
        sys.path.insert(0, here)
    mod_spec = importlib.util.spec_from_file_location("ethosu_ng_user_model", path)
    module = importlib.util.module_from_spec(mod_spec)
    try:
        mod_spec.loader.exec_module(module)
    except Exception as e:
        raise ModelSourceError(f"{path}: importing it raised {type(e).__name__}: {e}") from e
    if not hasattr(module, func):
        raise ModelSourceError(f"{path}: defines no {func!r}")
    try:
        result = getattr(module, func)()
    except Exception as e:
        raise ModelSourceError(f"{path}:{func}() raised {type(e).__name__}: {e}") from e
    if (
        not isinstance(result, tuple)
        or len(result) != 2
        or not isinstance(result[0], torch.nn.Module)
    ):
        raise ModelSourceError(f"{path}:{func}() must return (model, example_inputs)")
    model, x = result
    x = tuple(x) if isinstance(x, (list, tuple)) else (x,)
    if not all(isinstance(t, torch.Tensor) for t in x):
        raise ModelSourceError(f"{path}:{func}(): example_inputs must be tensors")
    return model, x
