# SPDX-License-Identifier: BSD-3-Clause
"""Find, import and check the extension module ``ethosu_ng._host_runtime`` (the C++ host runtime).

Which module file is loaded:

- ``ETHOSU_NG_HOST_MODULE``: this file (e.g. a sanitizer build, tests/test_runtime_lifetime.py);
- an installed package: the module pip compiled at install; nothing is built at run time;
- a source checkout (an editable install, or the tree on ``sys.path``): the installed module
  while it is newer than every C++ source, else the one ``source_build`` rebuilds from the tree.

Importing the module registers ``EthosUNGBackend`` into the ExecuTorch runtime of the executorch
wheel: the module links the wheel's ``libexecutorch.so``, the library the ExecuTorch pybindings
load, so the registration lands in the registry ``executorch.runtime`` uses.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import os
import sys
import threading
from pathlib import Path
from types import ModuleType
from typing import Optional

from ethosu_ng.compile_spec import BACKEND_ID
from ethosu_ng.runtime import source_build, tosa_callback

logger = logging.getLogger(__name__)

MODULE_NAME = "ethosu_ng._host_runtime"
# runtime/python/host_runtime.cpp kInterfaceVersion: what this package expects of the module.
HOST_MODULE_VERSION = 1

_lock = threading.Lock()
_module: Optional[ModuleType] = None


class HostRuntimeError(RuntimeError):
    """The host runtime's extension module is missing, does not match or did not register."""


def _installed_path() -> Optional[Path]:
    spec = importlib.util.find_spec(MODULE_NAME)
    return Path(spec.origin) if spec is not None and spec.origin else None


def host_module_path() -> Path:
    """The extension module file ``load_host_runtime`` loads (see the module docstring)."""
    env = os.environ.get("ETHOSU_NG_HOST_MODULE")
    if env:
        return Path(env)
    installed = _installed_path()
    tree = source_build.source_tree()
    if tree is not None:
        newest = source_build.newest_source(tree)
        if installed is not None and installed.stat().st_mtime >= newest.stat().st_mtime:
            return installed
        logger.info(
            "rebuilding the extension module from the source tree (%s is newer than %s)",
            newest,
            installed or "any installed one",
        )
        return source_build.build_host_module()
    if installed is None:
        raise HostRuntimeError(
            f"ethosu_ng is installed without its extension module {MODULE_NAME}: reinstall it "
            "with pip (pip install ethosu_ng / pip install -e . in a checkout), which compiles it"
        )
    return installed


def _import_file(path: Path) -> ModuleType:
    """Import the module file at ``path`` as ``MODULE_NAME``."""
    if not path.exists():
        raise HostRuntimeError(f"{path} does not exist")
    installed = _installed_path()
    if installed is not None and path.resolve() == installed.resolve():
        return importlib.import_module(MODULE_NAME)
    spec = importlib.util.spec_from_file_location(MODULE_NAME, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def check(module: ModuleType, path: Path) -> None:
    """``module`` (loaded from ``path``) speaks the interface this package expects."""
    version = getattr(module, "INTERFACE_VERSION", None)
    if version != HOST_MODULE_VERSION:
        raise HostRuntimeError(
            f"{path} has interface version {version}, this package expects "
            f"{HOST_MODULE_VERSION}: rebuild it (pip install)"
        )


def load_host_runtime() -> ModuleType:
    """Import the extension module (``host_module_path``), check it and register the TOSA
    callback; returns the module.

    Idempotent: later calls return the module already loaded (a process cannot reload it).
    """
    global _module
    with _lock:
        if _module is not None:
            return _module
        # The CPU side of a quantized .pte calls quantized_decomposed kernels: this import
        # registers them (nothing else on the host-run path imports it). The pybindings load
        # libexecutorch.so first; the extension module then binds to that same runtime (and its
        # backend registry) by soname.
        import executorch.kernels.quantized  # noqa: F401
        from executorch.runtime import Runtime

        Runtime.get()
        path = host_module_path()
        module = _import_file(path)
        check(module, path)
        # One copy per process: a later ``import ethosu_ng._host_runtime`` gets this one.
        sys.modules[MODULE_NAME] = module
        module.set_tosa_callback(tosa_callback.run_tosa_graph)
        names = Runtime.get().backend_registry.registered_backend_names
        if BACKEND_ID not in names:
            raise HostRuntimeError(f"loaded {path} but {BACKEND_ID} is not registered: {names}")
        logger.info("ethosu_ng host runtime: %s", path)
        _module = module
        return module


def delegate_invocations() -> int:
    """How many delegate calls the host driver has run in this process."""
    return int(load_host_runtime().invoke_count())
