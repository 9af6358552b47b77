# SPDX-License-Identifier: BSD-3-Clause
"""Run ethosu_ng .pte programs on the host, through the C++ delegate runtime.

``load_host_runtime()`` builds ``libethosu_ng_host.so`` (CMake, from ``runtime/`` in this repo) if
needed and loads it with ``RTLD_GLOBAL`` so its static initializer registers ``EthosUNGBackend``
into the ExecuTorch runtime of the executorch wheel. The C++ backend validates each delegate's
inputs and layout-copies them into the NPU scratch buffer exactly as on the device; then the host
driver plays the NPU, in one of two ways (``npu=`` of ``run_pte``):

- ``"model"`` (the default): Vela's command stream, weights and scales run on the
  Ethos-U55/U65/U85 functional model (runtime/ethosu_ng/npu_model, docs/npu-model.md), which
  leaves the outputs in scratch as the NPU would. Works on a firmware .pte (no TOSA inside).
- ``"tosa"``: a registered Python callback runs the delegate's embedded TOSA flatbuffer (compile
  with ``EthosUNGCompileSpec(..., embed_tosa=True)``) on the TOSA reference model and writes the
  outputs into scratch. An Ethos-U85 program whose command stream uses something the model does
  not implement (a trial run says ``NotSupported``) defaults to it when it carries its TOSA graph.

Either way the backend copies the outputs out of scratch as on the device.

After that, ``load_pte(pte).method("forward").execute(inputs)`` runs the whole program: CPU ops
on ExecuTorch's kernels, delegates in our C++ code (``run_pte`` in one call). It wraps
``executorch.runtime``, whose ``Method`` does not keep its ``Program`` or the ``.pte`` bytes alive
while our delegate reads its blob from them in place; ``HostMethod`` does.

Dtypes: the IO table's uint8 (and uint16) tensors are handed to the reference model as numpy
uint8 (uint16) arrays. TOSA has no unsigned types; the graph's tensor is INT8 (INT16) read by an
unsigned RESCALE, and ``tosa_reference_model.run`` accepts any array whose byte size matches the
tensor and takes the bytes as they are, so the bit pattern reaches the graph unchanged (checked
in tests/test_runtime_host.py). Outputs come back as the graph's signed type and are
reinterpreted bit for bit as the IO entry's dtype.

Environment:
    ETHOSU_NG_HOST_LIB    use this prebuilt library instead of building one.
    ETHOSU_NG_BUILD_DIR   build directory (default: <repo>/build/host, else a user cache dir).
"""

from __future__ import annotations

import ctypes
import fcntl
import logging
import os
import shutil
import subprocess
import sys
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import List, Optional, Sequence

import numpy as np

from ethosu_ng.adapters import exir
from ethosu_ng.blob import CODE_DTYPES, MAX_RANK
from ethosu_ng.compile_spec import BACKEND_ID

logger = logging.getLogger(__name__)

HOST_ABI_VERSION = 3  # runtime/ethosu_ng/host_api.h ETHOSU_NG_HOST_ABI_VERSION
LIB_NAME = "libethosu_ng_host.so"

_REPO = Path(__file__).resolve().parent.parent
# Blob dtype code -> numpy dtype (torch and numpy share the names).
_NP_DTYPES = {code: np.dtype(str(dt).removeprefix("torch.")) for code, dt in CODE_DTYPES.items()}

_P = ctypes.POINTER
TOSA_CALLBACK = ctypes.CFUNCTYPE(
    ctypes.c_int,
    ctypes.c_void_p,
    ctypes.c_size_t,  # tosa, tosa_len
    ctypes.c_int,
    _P(ctypes.c_void_p),
    _P(ctypes.c_int),  # n_in, in_ptrs, in_dtypes
    _P(ctypes.c_int),
    _P(ctypes.c_int64),
    _P(ctypes.c_int64),  # in_ranks, in_shapes, in_bytes
    ctypes.c_int,
    _P(ctypes.c_void_p),
    _P(ctypes.c_int),  # n_out, out_ptrs, out_dtypes
    _P(ctypes.c_int),
    _P(ctypes.c_int64),
    _P(ctypes.c_int64),  # out_ranks, out_shapes, out_bytes
    ctypes.c_void_p,
    ctypes.c_size_t,  # err, err_cap
)

_lock = threading.Lock()
_lib: Optional[ctypes.CDLL] = None
_callback = None  # the CFUNCTYPE object; must outlive every call from C++
_last_error: Optional[BaseException] = None


class HostRuntimeError(RuntimeError):
    """The host library could not be built or loaded."""


# ------------------------------------------------------------------ building
def _sources() -> List[Path]:
    """What the host library is built from (tests and bench sources are not)."""
    files = [_REPO / "CMakeLists.txt"]
    root = _REPO / "runtime" / "ethosu_ng"
    if root.is_dir():
        files += [p for p in root.rglob("*") if p.is_file()]
    return files


def default_build_dir() -> Path:
    env = os.environ.get("ETHOSU_NG_BUILD_DIR")
    if env:
        return Path(env)
    repo_build = _REPO / "build"
    if os.access(_REPO, os.W_OK):
        return repo_build / "host"
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    return cache / "ethosu_ng" / "host"


MIN_CMAKE = (3, 28)


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


def _cmake() -> str:
    """cmake >= 3.28: the one installed with this interpreter (pip's cmake) first, then PATH."""
    cands = [str(Path(sys.executable).parent / "cmake"), *filter(None, [shutil.which("cmake")])]
    seen = []
    for cand in cands:
        if os.path.exists(cand) and cand not in seen:
            seen.append(cand)
            if _cmake_version(cand) >= MIN_CMAKE:
                return cand
    raise HostRuntimeError(
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


def build_host_library(
    build_dir: Optional[Path] = None,
    *,
    targets: Sequence[str] = ("ethosu_ng_host",),
    extra_cmake_args: Sequence[str] = (),
) -> Path:
    """Configure (once) and build ``targets``; incremental, so cheap when nothing changed.

    Returns the path of libethosu_ng_host.so in ``build_dir``.
    """
    if not (_REPO / "CMakeLists.txt").exists():
        raise HostRuntimeError(
            f"no CMakeLists.txt at {_REPO}: ethosu_ng is installed without its runtime sources; "
            "set ETHOSU_NG_HOST_LIB to a prebuilt libethosu_ng_host.so"
        )
    build_dir = Path(build_dir or default_build_dir())
    cmake = _cmake()
    with _build_lock(build_dir):
        gen = ["-G", "Ninja"] if shutil.which("ninja") else []
        cmd = [
            cmake,
            "-S",
            str(_REPO),
            "-B",
            str(build_dir),
            *gen,
            "-DCMAKE_BUILD_TYPE=Release",
            f"-DETHOSU_NG_PYTHON={sys.executable}",
            *extra_cmake_args,
        ]
        # Configure once per argument set; a failed or different earlier configure is redone.
        stamp = build_dir / ".ethosu_ng_configured"
        configured = any((build_dir / f).exists() for f in ("build.ninja", "Makefile"))
        if not configured or not stamp.exists() or stamp.read_text() != "\n".join(cmd):
            stamp.unlink(missing_ok=True)
            _run(cmd, "configure")
            stamp.write_text("\n".join(cmd))
        _run(
            [
                cmake,
                "--build",
                str(build_dir),
                "--parallel",
                str(os.cpu_count() or 2),
                "--target",
                *targets,
            ],
            "build",
        )
    lib = build_dir / LIB_NAME
    if "ethosu_ng_host" in targets and not lib.exists():
        raise HostRuntimeError(f"build finished but {lib} is missing")
    return lib


def _run(cmd: List[str], what: str) -> None:
    logger.info("ethosu_ng host runtime %s: %s", what, " ".join(cmd))
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if proc.returncode != 0:
        raise HostRuntimeError(
            f"host runtime {what} failed ({proc.returncode}):\n"
            f"$ {' '.join(cmd)}\n{proc.stdout[-8000:]}"
        )


def _stale(lib: Path) -> bool:
    if not lib.exists():
        return True
    mtime = lib.stat().st_mtime
    return any(p.stat().st_mtime > mtime for p in _sources())


# ------------------------------------------------------------------ callback
def _tosa_callback(
    tosa,
    tosa_len,
    n_in,
    in_ptrs,
    in_dtypes,
    in_ranks,
    in_shapes,
    in_bytes,
    n_out,
    out_ptrs,
    out_dtypes,
    out_ranks,
    out_shapes,
    out_bytes,
    err,
    err_cap,
):
    """Called from C++ inside Method.execute: run the TOSA graph on the reference model."""
    global _last_error
    try:
        import tosa_reference_model as refmodel

        flatbuffer = ctypes.string_at(tosa, tosa_len)
        inputs = [
            _array_at(in_ptrs[k], in_dtypes[k], in_ranks[k], in_shapes, k, in_bytes[k])
            for k in range(n_in)
        ]
        outs, status = refmodel.run(flatbuffer, inputs, initialize_variable_tensor_from_numpy=True)
        if status != refmodel.GraphStatus.TOSA_VALID:
            raise RuntimeError(f"TOSA reference model status {status}")
        if len(outs) != n_out:
            raise RuntimeError(
                f"TOSA graph produced {len(outs)} outputs, the blob declares {n_out}"
            )
        for k, arr in enumerate(outs):
            data = _as_output(np.asarray(arr), out_dtypes[k], out_bytes[k], k)
            ctypes.memmove(out_ptrs[k], data.ctypes.data, data.nbytes)
        return 0
    except BaseException as e:  # noqa: BLE001 - nothing may propagate into C++
        _last_error = e
        msg = f"{type(e).__name__}: {e}".encode()[: max(int(err_cap) - 1, 0)]
        if err and err_cap:
            ctypes.memmove(err, msg + b"\0", len(msg) + 1)
        return 1


def _array_at(ptr, code: int, rank: int, shapes, k: int, nbytes: int) -> np.ndarray:
    dtype = _NP_DTYPES[code]
    shape = tuple(int(shapes[k * MAX_RANK + i]) for i in range(rank))
    if nbytes == 0:
        return np.zeros(shape, dtype)
    raw = (ctypes.c_uint8 * nbytes).from_address(ptr)
    # Copy: scratch is reused by the next delegate call.
    return np.frombuffer(raw, dtype=dtype).reshape(shape).copy()


def _as_output(arr: np.ndarray, code: int, nbytes: int, k: int) -> np.ndarray:
    dtype = np.dtype(_NP_DTYPES[code])
    arr = np.ascontiguousarray(arr)
    numel = nbytes // dtype.itemsize
    if arr.size != numel:
        raise RuntimeError(
            f"output {k}: reference model gave {arr.size} elements, blob expects {numel}"
        )
    if arr.dtype.itemsize == dtype.itemsize:
        return arr.view(dtype)  # int8 graph tensor for a uint8 entry: same bits
    return arr.astype(dtype)  # e.g. a wider container for the same values


def last_callback_error() -> Optional[BaseException]:
    """The exception the last failing TOSA callback caught (the C++ side only sees the message)."""
    return _last_error


# ------------------------------------------------------------------ loading
def load_host_runtime(
    rebuild: Optional[bool] = None, build_dir: Optional[Path] = None
) -> ctypes.CDLL:
    """Build (if sources changed) and load libethosu_ng_host.so; register the TOSA callback.

    Idempotent: later calls return the already-loaded library (a process cannot reload it).
    ``rebuild=None`` rebuilds when a source is newer than the library, True always runs the
    (incremental) build, False never builds.
    """
    global _lib, _callback
    with _lock:
        if _lib is not None:
            return _lib
        # The CPU side of a quantized .pte calls quantized_decomposed kernels: this import
        # registers them (nothing else on the host-run path imports it). The pybindings load
        # libexecutorch.so first; our library then binds to that same runtime (and its
        # backend registry) by soname.
        import executorch.kernels.quantized  # noqa: F401
        from executorch.runtime import Runtime

        Runtime.get()
        path_env = os.environ.get("ETHOSU_NG_HOST_LIB")
        if path_env:
            lib_path = Path(path_env)
        else:
            build = Path(build_dir or default_build_dir())
            lib_path = build / LIB_NAME
            if rebuild or (rebuild is None and _stale(lib_path)):
                lib_path = build_host_library(build)
        if not lib_path.exists():
            raise HostRuntimeError(f"{lib_path} does not exist")
        lib = ctypes.CDLL(str(lib_path), mode=ctypes.RTLD_GLOBAL)
        lib.ethosu_ng_host_abi_version.restype = ctypes.c_int
        abi = lib.ethosu_ng_host_abi_version()
        if abi != HOST_ABI_VERSION:
            raise HostRuntimeError(
                f"{lib_path} has host ABI {abi}, this module speaks {HOST_ABI_VERSION}"
            )
        lib.ethosu_ng_set_tosa_callback.argtypes = [TOSA_CALLBACK]
        lib.ethosu_ng_set_tosa_callback.restype = None
        lib.ethosu_ng_host_invoke_count.restype = ctypes.c_uint64
        lib.ethosu_ng_set_npu_mode.argtypes = [ctypes.c_int]
        lib.ethosu_ng_set_npu_mode.restype = None
        lib.ethosu_ng_get_npu_mode.restype = ctypes.c_int
        lib.ethosu_ng_npu_model_run.restype = ctypes.c_int
        lib.ethosu_ng_npu_model_run.argtypes = [
            ctypes.c_void_p,
            ctypes.c_size_t,
            ctypes.c_void_p,
            ctypes.c_size_t,
            ctypes.c_void_p,
            ctypes.c_size_t,
            ctypes.c_void_p,
            ctypes.c_size_t,
            ctypes.c_char_p,
            ctypes.c_size_t,
        ]
        lib.ethosu_ng_npu_model_stats.argtypes = [_P(ctypes.c_uint64)]
        lib.ethosu_ng_npu_model_stats.restype = None
        lib.ethosu_ng_mlw_decode.restype = ctypes.c_int64
        lib.ethosu_ng_mlw_decode.argtypes = [
            ctypes.c_void_p,
            ctypes.c_size_t,
            ctypes.c_void_p,
            ctypes.c_size_t,
            ctypes.c_char_p,
            ctypes.c_size_t,
        ]
        _callback = TOSA_CALLBACK(_tosa_callback)
        lib.ethosu_ng_set_tosa_callback(_callback)
        names = Runtime.get().backend_registry.registered_backend_names
        if BACKEND_ID not in names:
            raise HostRuntimeError(
                f"loaded {lib_path} but EthosUNGBackend is not registered: {names}"
            )
        _lib = lib
        return lib


def delegate_invocations() -> int:
    """How many delegate calls the host driver has run in this process."""
    return int(load_host_runtime().ethosu_ng_host_invoke_count())


def to_dim_order(t, order: Sequence[int]):
    """The same logical tensor stored densely in ``order`` (``(0, 2, 3, 1)`` = channels-last)."""
    order = tuple(order)
    if _dense_in(t, order):
        return t
    inverse = [order.index(i) for i in range(len(order))]
    return t.permute(order).contiguous().permute(inverse)


def _dense_in(t, order) -> bool:
    """Is ``t`` already dense in ``order``? (Size-1 dims may have any stride.)"""
    expected, stride = [0] * t.dim(), 1
    for d in reversed(order):
        expected[d] = stride
        stride *= t.shape[d]
    return all(t.shape[d] == 1 or t.stride(d) == expected[d] for d in range(t.dim()))


def _dense_order(t) -> Optional[tuple]:
    """The dim order ``t`` is dense in (a known layout first where size-1 dims leave several),
    or None for a tensor dense in none (a slice, an expanded view)."""
    from ethosu_ng.io_layout import LAYOUTS

    candidates = [o for o in LAYOUTS.values() if len(o) == t.dim()]
    candidates.append(tuple(sorted(range(t.dim()), key=lambda d: -t.stride(d))))
    return next((o for o in candidates if _dense_in(t, o)), None)


def check_input_layouts(inputs: Sequence, orders: Sequence[Optional[tuple]]) -> list:
    """``inputs`` as the program takes them: each tensor must be dense in the dim order the
    program planned for it (``orders``), as on the device, where ExecuTorch copies an input's
    bytes as they are. A tensor dense in another order is a ``LayoutError`` naming it; one dense
    in no order (a slice, an expanded view) has no layout of its own and is copied into the
    program's. ``to_dim_order`` lays a tensor out as a program takes it."""
    from ethosu_ng.io_layout import LayoutError, layout_of

    def name(order) -> str:
        return f"{layout_of(order) or 'dim order'} {list(order)}"

    out = list(inputs)
    if len(orders) != len(out):
        return out  # the count is ExecuTorch's to check
    for k, (t, want) in enumerate(zip(out, orders)):
        if want is None or not hasattr(t, "stride") or t.dim() != len(want):
            continue
        if _dense_in(t, want):
            continue
        got = _dense_order(t)
        if got is None:
            out[k] = to_dim_order(t, want)
            continue
        raise LayoutError(
            f"input {k}: a tensor laid out {name(got)}, the program takes {name(want)}; lay it "
            f"out with ethosu_ng.runtime.to_dim_order(t, {list(want)})"
            + (
                " (t.contiguous(memory_format=torch.channels_last))"
                if layout_of(want) == "nhwc"
                else ""
            )
        )
    return out


class HostMethod:
    """One method of a ``HostProgram``; holds the program (and so its bytes) alive.

    ``executorch.runtime``'s ``Method`` keeps no reference to its ``Program``, and the
    ExecuTorch program reads its ``.pte`` buffer in place for as long as a method runs (our
    delegate's blob, IO table and TOSA section are read from it, not copied). A ``Method``
    whose ``Program`` was collected reads freed memory.
    """

    def __init__(self, owner: HostProgram, name: str, method):
        self.program = owner
        self.name = name
        self._method = method
        self._input_orders = exir.pte_input_dim_orders(owner.data, name)

    @property
    def metadata(self):
        return self._method.metadata

    def execute(self, inputs: Sequence, npu: Optional[str] = None) -> list:
        """Run with ``inputs`` (torch tensors laid out as the program planned:
        ``check_input_layouts``); returns the outputs as a list. ``npu``: what runs the delegates
        (``run_pte``); ``None`` is the program's default (``HostProgram.default_npu``)."""
        inputs = check_input_layouts(inputs, self._input_orders)
        set_npu(npu or self.program.default_npu)
        return list(self._method.execute(inputs))

    def lay_out(self, inputs: Sequence) -> list:
        """``inputs`` (logical tensors of any layout) laid out in the dim orders this method
        takes (``to_dim_order``): for callers that hold the data, not its bytes."""
        orders = list(self._input_orders) + [None] * len(inputs)
        return [
            to_dim_order(t, o)
            if o is not None and hasattr(t, "stride") and t.dim() == len(o)
            else t
            for t, o in zip(inputs, orders)
        ]


class HostProgram:
    """A ``.pte`` loaded for the host runtime: its bytes, the ExecuTorch ``Program`` and the
    methods loaded from it, alive together for as long as any of them is referenced.

    ``Runtime.get().load_program(pte).load_method("forward")`` alone leaves the method
    pointing into a program (and bytes) nothing keeps alive; see ``load_pte``.
    """

    def __init__(self, data: bytes):
        from executorch.runtime import Runtime

        self.data = data
        self._program = Runtime.get().load_program(data)
        self._methods: dict = {}
        self.default_npu = default_npu_for(data)

    @property
    def method_names(self) -> set:
        return set(self._program.method_names)

    def method(self, name: str = "forward") -> HostMethod:
        if name not in self._program.method_names:
            raise ValueError(f"program has no method {name!r}: {sorted(self.method_names)}")
        if name not in self._methods:
            loaded = self._program.load_method(name)
            if loaded is None:
                raise ValueError(f"program has no method {name!r}: {sorted(self.method_names)}")
            self._methods[name] = HostMethod(self, name, loaded)
        return self._methods[name]

    def run(self, inputs: Sequence, method: str = "forward", npu: Optional[str] = None) -> list:
        return self.method(method).execute(inputs, npu)


def load_pte(pte) -> HostProgram:
    """Load a .pte (bytes, bytearray, memoryview or path) for the host runtime.

    Use this rather than ``executorch.runtime`` directly: the returned object and every
    ``HostMethod`` taken from it keep the program's bytes and the ExecuTorch program alive, so
    ``load_pte(pte).method("forward").execute(x)`` is safe as a one-liner and a method may
    outlive every other reference (docs/reliability.md, lifetime row).
    """
    if isinstance(pte, (str, os.PathLike)):
        data = Path(pte).read_bytes()
    elif isinstance(pte, (bytes, bytearray, memoryview)):
        data = bytes(pte)  # a private, immutable copy: the caller may reuse its buffer
    else:
        raise TypeError(f"pte must be bytes or a path to a .pte file, got {type(pte).__name__}")
    load_host_runtime()
    return HostProgram(data)


NPU_MODES = {"tosa": 0, "model": 1}  # host_api.h ETHOSU_NG_NPU_TOSA / ETHOSU_NG_NPU_MODEL
# Vela's command stream on the NPU model: a firmware .pte (no TOSA inside) runs as it is.
DEFAULT_NPU = "model"
# Product field of the driver payload's optimizer config the NPU model executes (0 U55, 1 U65,
# 2 U85). Its U85 coverage is partial (docs/npu-model.md): ``model_unsupported`` says what a
# program's U85 streams use that it does not implement.
MODEL_PRODUCTS = (0, 1, 2)
PRODUCT_NAMES = {0: "Ethos-U55", 1: "Ethos-U65", 2: "Ethos-U85"}
NPU_MODEL_NOT_SUPPORTED = 0x10  # executorch Error::NotSupported: a gap of the model
_unsupported_cache: dict = {}


def payload_product(payload: bytes) -> Optional[int]:
    """The product field (bits 28..31) of a Vela driver payload's optimizer config: 0 Ethos-U55,
    1 Ethos-U65, 2 Ethos-U85; None if the payload has no config action where expected."""
    import struct

    # COP1 fourcc, then the config action (tag 1) with the optimizer config word after it.
    if len(payload) < 12 or payload[:4] != b"COP1" or payload[4] != 1:
        return None
    return struct.unpack_from("<I", payload, 8)[0] >> 28


def model_unsupported(pte: bytes) -> Optional[str]:
    """None when the NPU model implements everything the program's Ethos-U85 command streams use;
    else the model's ``NotSupported`` message for the first delegate it does not. Found by a trial
    run of each U85 delegate on zeroed scratch (which commands run does not depend on the data),
    cached per stream. U55/U65 streams are not tried: the model covers what Vela emits for them."""
    import hashlib

    from ethosu_ng.blob import DelegateBlob

    for backend, data in exir.pte_delegate_payloads(pte):
        if backend != BACKEND_ID:
            continue
        blob = DelegateBlob.from_bytes(data)
        if payload_product(blob.command_stream) != 2:
            continue
        key = hashlib.sha256(blob.command_stream + blob.weights).hexdigest()
        if key not in _unsupported_cache:
            reason = None
            try:
                npu_model_run(
                    blob.command_stream,
                    blob.weights,
                    bytearray(blob.scratch_size),
                    bytearray(blob.fast_scratch_size) if blob.fast_scratch_size else None,
                )
            except NpuModelError as e:
                if e.code == NPU_MODEL_NOT_SUPPORTED:
                    reason = str(e)
            _unsupported_cache[key] = reason
        if _unsupported_cache[key] is not None:
            return _unsupported_cache[key]
    return None


def npu_model_name(pte: bytes) -> str:
    """Which NPU the model runs for this program's delegates, e.g. ``"Ethos-U85"``."""
    from ethosu_ng.blob import DelegateBlob

    names = []
    for backend, data in exir.pte_delegate_payloads(pte):
        if backend == BACKEND_ID:
            product = payload_product(DelegateBlob.from_bytes(data).command_stream)
            name = PRODUCT_NAMES.get(product, f"product {product}")
            if name not in names:
                names.append(name)
    return "/".join(names) or "Ethos-U"


def default_npu_for(pte: bytes) -> str:
    """``DEFAULT_NPU`` (the model, for every product it executes), except ``"tosa"`` for a
    program the NPU model cannot run as a whole: a delegate of a product it does not execute, or
    an Ethos-U85 stream using something it does not implement (``model_unsupported``) when every
    delegate carries its TOSA graph."""
    from ethosu_ng.blob import DelegateBlob

    blobs = [
        DelegateBlob.from_bytes(data)
        for backend, data in exir.pte_delegate_payloads(pte)
        if backend == BACKEND_ID
    ]
    for blob in blobs:
        product = payload_product(blob.command_stream)
        if product is not None and product not in MODEL_PRODUCTS:
            return "tosa"
    if all(b.tosa is not None for b in blobs) and model_unsupported(pte) is not None:
        return "tosa"
    return DEFAULT_NPU


class NpuModelError(RuntimeError):
    """The NPU model rejected a payload; the message names the command, register and values."""

    def __init__(self, code: int, message: str):
        self.code = code
        super().__init__(f"NPU model error {code}: {message}")


def set_npu(npu: str) -> None:
    """Select what the host driver runs for each delegate: ``"tosa"`` or ``"model"``.

    Process-wide; ``HostMethod.execute`` and ``run_pte`` set it on every call (their ``npu``
    argument or the program's default), so this is for callers of the C API only.
    """
    if npu not in NPU_MODES:
        raise ValueError(f"npu must be one of {sorted(NPU_MODES)}, not {npu!r}")
    load_host_runtime().ethosu_ng_set_npu_mode(NPU_MODES[npu])


def npu_model_run(
    payload: bytes,
    weights: bytes,
    scratch: bytearray,
    fast_scratch: Optional[bytearray] = None,
) -> None:
    """Run one Vela driver payload on the NPU model, in place on ``scratch`` (and fast scratch).

    Raises ``NpuModelError`` with the model's message for malformed or unsupported streams.
    """
    lib = load_host_runtime()
    payload, weights = bytes(payload), bytes(weights)
    sbuf = (ctypes.c_uint8 * max(len(scratch), 1)).from_buffer(scratch) if scratch else None
    fbuf = (ctypes.c_uint8 * len(fast_scratch)).from_buffer(fast_scratch) if fast_scratch else None
    err = ctypes.create_string_buffer(1024)
    rc = lib.ethosu_ng_npu_model_run(
        payload,
        len(payload),
        weights,
        len(weights),
        ctypes.addressof(sbuf) if sbuf is not None else None,
        len(scratch),
        ctypes.addressof(fbuf) if fbuf is not None else None,
        len(fast_scratch) if fast_scratch else 0,
        err,
        len(err),
    )
    if rc != 0:
        raise NpuModelError(rc, err.value.decode(errors="replace"))


def npu_model_stats() -> dict:
    """Counters of the last NPU-model run: commands, ops, dmas, macs, aliased_ofm_ops."""
    out = (ctypes.c_uint64 * 5)()
    load_host_runtime().ethosu_ng_npu_model_stats(out)
    names = ("commands", "ops", "dmas", "macs", "aliased_ofm_ops")
    return dict(zip(names, (int(v) for v in out)))


def mlw_decode(stream: bytes) -> np.ndarray:
    """Decode one compressed weight stream with the C++ decoder (int16 weights)."""
    lib = load_host_runtime()
    stream = bytes(stream)
    err = ctypes.create_string_buffer(512)
    n = lib.ethosu_ng_mlw_decode(stream, len(stream), None, 0, err, len(err))
    if n < 0:
        raise ValueError(err.value.decode(errors="replace"))
    out = np.zeros(max(int(n), 1), dtype=np.int16)
    lib.ethosu_ng_mlw_decode(stream, len(stream), out.ctypes.data, int(n), err, len(err))
    return out[: int(n)]


def run_pte(pte, inputs: Sequence, method: str = "forward", npu: Optional[str] = None) -> list:
    """Load a .pte (bytes or path) and run ``method`` with the C++ delegate runtime.

    ``npu`` selects what runs each delegate: ``"model"`` (Vela's command stream on the
    Ethos-U55/U65/U85 functional model) or ``"tosa"`` (the embedded TOSA graph on the reference
    model; needs ``embed_tosa=True``). ``None``: ``DEFAULT_NPU`` (the model), or ``"tosa"`` for
    an Ethos-U85 program whose stream uses something the model does not implement
    (``default_npu_for``).

    Inputs are torch tensors laid out in the dim order the program planned for each (its IO
    contract: ``--input-layout``): ``executorch.runtime`` copies an input's storage as is into
    the planned input buffer (it ignores torch strides), as ``Method::set_input`` does on the
    device, so a channels-last tensor fed to a program exported with contiguous inputs (or the
    reverse) would be silently misread. ``run_pte`` raises ``io_layout.LayoutError`` naming such
    an input instead (``check_input_layouts``); ``HostMethod.lay_out`` converts logical data.

    Returns the method's outputs (torch tensors, in the program's output dim order). A delegate
    or kernel error surfaces as the RuntimeError ``executorch.runtime`` raises; the C++ side
    logs the reason (input/output index, expected and got) on stderr.
    """
    return load_pte(pte).method(method).execute(inputs, npu)
