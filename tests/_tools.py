# SPDX-License-Identifier: BSD-3-Clause
"""What a test needs from the machine: an executable, a Python package or another precondition.

``require_tool`` returns it when present. When it is missing the test is skipped, unless
``ETHOSU_NG_REQUIRE_TOOLS`` is set (``.ci/run`` sets it to 1): then the test fails, so CI never
passes by skipping. Works at module level too (``timm = require_tool("timm", module=True)``).
"""

from __future__ import annotations

import importlib
import os
import shutil
from typing import Any, Callable, Optional

import pytest

ENV = "ETHOSU_NG_REQUIRE_TOOLS"


def tools_required() -> bool:
    return os.environ.get(ENV, "") not in ("", "0")


def missing(reason: str):
    """Skip (or, when ETHOSU_NG_REQUIRE_TOOLS is set, fail) with ``reason``."""
    if tools_required():
        pytest.fail(f"{reason} ({ENV} is set)", pytrace=False)
    pytest.skip(reason, allow_module_level=True)


def require_tool(
    name: str,
    *alternatives: str,
    module: bool = False,
    find: Optional[Callable[[], Any]] = None,
    install: str = "",
) -> Any:
    """The first of ``name, *alternatives`` that is present, else skip / fail.

    - default: an executable on PATH; returns its path;
    - ``module=True``: a Python package; returns the imported module;
    - ``find``: any other check; returns what ``find()`` returns, and an exception it raises
      says what is missing.
    ``install`` says how to get it, in the skip/fail message.
    """
    hint = f" ({install})" if install else ""
    if find is not None:
        try:
            return find()
        except Exception as e:
            missing(f"{name}: {e}{hint}")
    for candidate in (name, *alternatives):
        if module:
            try:
                return importlib.import_module(candidate)
            except ImportError:
                continue
        path = shutil.which(candidate)
        if path:
            return path
    what = "Python package" if module else "executable"
    names = " / ".join((name, *alternatives))
    missing(f"{what} {names} not installed{hint}")
