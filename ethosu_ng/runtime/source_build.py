# SPDX-License-Identifier: BSD-3-Clause
"""Build the C++ host runtime with CMake from a source checkout: for development only.

An installed package never comes here: pip compiles the extension module at install
(pyproject.toml, scikit-build-core). In a checkout, ``host_module`` rebuilds the module here when a
C++ source is newer than the installed one, so an edit to ``runtime/`` takes effect without a
reinstall; the benchmarks (bench/io_copy.py, bench/blob_checksum.py) build their C++ programs here.

Environment:
    ETHOSU_NG_BUILD_DIR   build directory (default: <repo>/build/host, else a user cache dir).
"""

from __future__ import annotations

import fcntl
import logging
import os
import shutil
import subprocess
import sys
import sysconfig
from contextlib import contextmanager
from pathlib import Path
from typing import List, Optional, Sequence

logger = logging.getLogger(__name__)

_REPO = Path(__file__).resolve().parents[2]
MIN_CMAKE = (3, 28)
MODULE_TARGET = "_host_runtime"


class SourceBuildError(RuntimeError):
    """The host runtime could not be built from the source tree (no tree, cmake or compiler)."""


def source_tree() -> Optional[Path]:
    """The checkout this package runs from, or None for an installed package."""
    if (_REPO / "CMakeLists.txt").is_file() and (_REPO / "runtime" / "python").is_dir():
        return _REPO
    return None


def sources(tree: Path) -> List[Path]:
    """What the extension module is built from (tests and bench sources are not)."""
    files = [tree / "CMakeLists.txt"]
    for sub in ("runtime/ethosu_ng", "runtime/python"):
        files += [p for p in (tree / sub).rglob("*") if p.is_file()]
    return files


def newest_source(tree: Path) -> Path:
    return max(sources(tree), key=lambda p: p.stat().st_mtime)


def default_build_dir() -> Path:
    env = os.environ.get("ETHOSU_NG_BUILD_DIR")
    if env:
        return Path(env)
    if os.access(_REPO, os.W_OK):
        return _REPO / "build" / "host"
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    return cache / "ethosu_ng" / "host"


def _cmake_version(exe: str) -> tuple:
    try:
        out = subprocess.run(
            [exe, "--version"],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            timeout=30,
        ).stdout
        return tuple(int(x) for x in out.split()[2].split(".")[:2])
    except Exception:  # noqa: BLE001 - not a usable cmake
        return ()


def find_cmake() -> str:
    """cmake >= 3.28: the one installed with this interpreter (pip's cmake) first, then PATH."""
    cands = [str(Path(sys.executable).parent / "cmake"), *filter(None, [shutil.which("cmake")])]
    seen = []
    for cand in cands:
        if os.path.exists(cand) and cand not in seen:
            seen.append(cand)
            if _cmake_version(cand) >= MIN_CMAKE:
                return cand
    raise SourceBuildError(
        f"no cmake >= {'.'.join(map(str, MIN_CMAKE))} found (tried {seen}); "
        "pip install 'cmake>=3.28'"
    )


@contextmanager
def _build_lock(build_dir: Path):
    build_dir.mkdir(parents=True, exist_ok=True)
    with open(build_dir / ".ethosu_ng_build.lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)  # parallel test workers build once
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def build_targets(
    build_dir: Optional[Path] = None,
    *,
    targets: Sequence[str] = (MODULE_TARGET,),
    extra_cmake_args: Sequence[str] = (),
) -> Path:
    """Configure (once per argument set) and build ``targets`` in ``build_dir``; incremental, so
    cheap when nothing changed. Returns the build directory."""
    tree = source_tree()
    if tree is None:
        raise SourceBuildError(
            f"no source tree at {_REPO}: an installed ethosu_ng carries its compiled extension "
            "module and builds nothing"
        )
    build_dir = Path(build_dir or default_build_dir())
    cmake = find_cmake()
    with _build_lock(build_dir):
        gen = ["-G", "Ninja"] if shutil.which("ninja") else []
        cmd = [
            cmake,
            "-S",
            str(tree),
            "-B",
            str(build_dir),
            *gen,
            "-DCMAKE_BUILD_TYPE=Release",
            f"-DETHOSU_NG_PYTHON={sys.executable}",
            "-DETHOSU_NG_PYTHON_MODULE=ON",
            *extra_cmake_args,
        ]
        # Configure once per argument set; a failed or different earlier configure is redone.
        stamp = build_dir / ".ethosu_ng_configured"
        configured = any((build_dir / f).exists() for f in ("build.ninja", "Makefile"))
        if not configured or not stamp.exists() or stamp.read_text() != "\n".join(cmd):
            stamp.unlink(missing_ok=True)
            _run(cmd, "configure")
            stamp.write_text("\n".join(cmd))
        parallel = str(os.cpu_count() or 2)
        _run(
            [cmake, "--build", str(build_dir), "--parallel", parallel, "--target", *targets],
            "build",
        )
    return build_dir


def build_host_module(build_dir: Optional[Path] = None) -> Path:
    """Build the extension module from the source tree; returns its path."""
    build_dir = build_targets(build_dir)
    module = build_dir / (MODULE_TARGET + sysconfig.get_config_var("EXT_SUFFIX"))
    if not module.exists():
        raise SourceBuildError(f"build finished but {module} is missing")
    return module


def _run(cmd: List[str], what: str) -> None:
    logger.info("ethosu_ng host runtime %s: %s", what, " ".join(cmd))
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if proc.returncode != 0:
        raise SourceBuildError(
            f"host runtime {what} failed ({proc.returncode}):\n"
            f"$ {' '.join(cmd)}\n{proc.stdout[-8000:]}"
        )
