# SPDX-License-Identifier: BSD-3-Clause
# SPDX-License-Identifier: Apache-2.0
"""Build a bare-metal Cortex-M55 image for a .pte and run it under QEMU (``mps3-an547``).

The image (``firmware/``, its README says how to do the same on a board) holds the ExecuTorch
runtime built from an ExecuTorch source tree, the CPU kernels the program calls (selected with
ExecuTorch's codegen), our delegate library compiled with the runtime's definitions, the Ethos-U
NPU model behind ``ethosu_invoke_v3`` in place of the NPU, and a runner that embeds the .pte and
the memory plan's pools (``ethosu-ng compile --emit-c``).

- ``build_image(pte, executorch_src)``: builds (cached by content) and returns an ``Image``;
- ``run_image(image, inputs)``: runs it under ``qemu-system-arm`` with a time limit and returns
  each run's outputs and each pool's high-water mark measured on the target;
- ``verify_on_m55(pte, ...)``: both, against the host run of the same bytes, bit for bit, and
  the pools of exactly the measured sizes against one byte less (``ethosu-ng verify --on m55``).

Every failure is a ``FirmwareError`` whose message is one line naming the step and the culprit.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np

REPO = Path(__file__).resolve().parents[2]
FIRMWARE_DIR = REPO / "firmware"
TOOLCHAIN_FILE = REPO / "cmake" / "arm-none-eabi.cmake"
# The ExecuTorch sources this repository's tests and CI use (../shared/vendor/README.md).
VENDOR_EXECUTORCH = REPO.parent / "shared" / "vendor" / "executorch-src-cff6f4dd.tar.gz"
QEMU_MACHINE = "mps3-an547"
DEFAULT_TIMEOUT_S = 120.0
# The runner's exit codes (firmware/runner/runner.cpp, startup.c, pal.cpp).
EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_FAULT, EXIT_ABORT = 0, 1, 2, 3, 4
_PREFIX = "ethosu_ng_fw: "
# ExecuTorch ScalarType code -> numpy dtype, for program inputs and outputs.
_DTYPES = {0: np.uint8, 1: np.int8, 2: np.int16, 3: np.int32, 4: np.int64, 6: np.float32}
_DEBIAN = (
    "apt-get install gcc-arm-none-eabi libnewlib-arm-none-eabi libstdc++-arm-none-eabi-newlib "
    "qemu-system-arm libflatbuffers-dev flatbuffers-compiler"
)


class FirmwareError(RuntimeError):
    """A firmware image could not be built or did not run as it must."""


@dataclass(frozen=True)
class Image:
    name: str
    elf: Path
    plan: Dict
    operators: Tuple[str, ...]  # the CPU operators the program calls (kernels linked)
    omitted: Tuple[str, ...] = ()  # operators left out on purpose (a test of the error path)
    build_seconds: float = 0.0
    cached: bool = False

    def sizes(self) -> Dict[str, int]:
        """Bytes of code, read-only data (the .pte apart), the .pte, the pools and other RAM."""
        return section_sizes(self.elf)


@dataclass
class Run:
    """One QEMU run: ``outputs[run][k]`` the bytes of output k; ``pools[name] = (used, given)``
    (the planned arenas' "used" is their size: ExecuTorch places tensors at planned offsets)."""

    outputs: List[List[bytes]] = field(default_factory=list)
    pools: Dict[str, Tuple[int, int]] = field(default_factory=dict)
    npu_invocations: int = 0
    npu_model_arena: Tuple[int, int] = (0, 0)  # the NPU model's working memory: used, size
    error: Optional[str] = None  # the runner's ERROR / FAULT / ABORT line, None when OK
    exit_code: int = 0
    log: str = ""
    ticks: List[int] = field(default_factory=list)  # SysTick ticks of each run's execute()
    calibration: Tuple[int, int] = (0, 0)  # a loop of N instructions took T ticks: (N, T)
    counted: bool = False  # run with count_instructions: ticks follow instructions

    def instructions(self, run: int) -> float:
        """Instructions run ``run``'s execute() took, on an image run with
        ``count_instructions=True`` (QEMU's clock then advances per instruction)."""
        n, t = self.calibration
        if not self.counted or not t or run >= len(self.ticks):
            raise FirmwareError(f"run {run}: no tick count (ran without count_instructions?)")
        return self.ticks[run] * n / t


# ------------------------------------------------------------------ tools
def _which(tool: str) -> str:
    path = shutil.which(tool)
    if not path:
        raise FirmwareError(f"{tool} not found: {_DEBIAN}")
    return path


def _cmake() -> str:
    from ethosu_ng.runtime.source_build import SourceBuildError, find_cmake

    try:
        return find_cmake()
    except SourceBuildError as e:
        raise FirmwareError(str(e)) from None


def check_tools() -> None:
    """Every tool the build and the run need, or a FirmwareError saying how to install it."""
    for tool in ("arm-none-eabi-g++", "arm-none-eabi-size", "qemu-system-arm", "flatc"):
        _which(tool)
    if not Path("/usr/include/flatbuffers/flatbuffers.h").exists():
        raise FirmwareError(f"no flatbuffers headers (/usr/include/flatbuffers): {_DEBIAN}")
    if not FIRMWARE_DIR.is_dir():
        raise FirmwareError(f"{FIRMWARE_DIR}: the firmware sources are not there")


_cache_root: Optional[Path] = None


def set_cache_root(path: Optional[os.PathLike]) -> None:
    """Build trees and unpacked sources go under ``path`` (None: the default, under
    ``$XDG_CACHE_HOME`` or ``~/.cache``)."""
    global _cache_root
    _cache_root = Path(path) if path is not None else None


def cache_root() -> Path:
    if _cache_root is not None:
        return _cache_root
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "ethosu_ng" / "firmware"


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def executorch_tree(source: Optional[os.PathLike] = None) -> Path:
    """An ExecuTorch source tree: ``source`` (a checkout, or a .tar.gz holding ``executorch/``,
    unpacked once into the cache), by default the repository's vendor copy."""
    src = Path(source) if source else VENDOR_EXECUTORCH
    if not src.exists():
        raise FirmwareError(
            f"{src}: no ExecuTorch sources there; give --executorch-src DIR (a checkout of "
            "github.com/pytorch/executorch, or a .tar.gz of one)"
        )
    if src.is_file():
        digest = _sha256_file(src)[:16]
        dest = cache_root() / f"executorch-src-{digest}"
        if not (dest / "executorch" / "runtime").is_dir():
            cache_root().mkdir(parents=True, exist_ok=True)
            tmp = Path(tempfile.mkdtemp(dir=cache_root()))
            with tarfile.open(src) as tar:
                tar.extractall(tmp, filter="data")
            if not (tmp / "executorch").is_dir():
                shutil.rmtree(tmp, ignore_errors=True)
                raise FirmwareError(f"{src}: holds no executorch/ directory")
            if dest.exists():
                shutil.rmtree(dest, ignore_errors=True)
            tmp.rename(dest)
        src = dest / "executorch"
    for need in (
        "runtime/executor/program.cpp",
        "schema/program.fbs",
        "codegen",
        "kernels/portable/functions.yaml",
        "kernels/quantized/quantized.yaml",
    ):
        if not (src / need).exists():
            raise FirmwareError(f"{src}: not an ExecuTorch source tree (no {need})")
    return src.resolve()


def _tree_fingerprint(root: Path, dirs: Sequence[str]) -> str:
    """Names, sizes and modification times of every file under ``root/dirs``: a cheap key that
    changes when a source does."""
    h = hashlib.sha256(str(root).encode())
    for d in dirs:
        base = root / d
        paths = [base] if base.is_file() else sorted(p for p in base.rglob("*") if p.is_file())
        for p in paths:
            st = p.stat()
            h.update(f"{p.relative_to(root)}:{st.st_size}:{st.st_mtime_ns}\n".encode())
    return h.hexdigest()[:16]


@contextmanager
def _lock(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


# ------------------------------------------------------------------ kernels
def _prim_ops(et: Path) -> frozenset:
    text = (et / "kernels" / "prim_ops" / "register_prim_ops.cpp").read_text()
    return frozenset(re.findall(r'"((?:aten|executorch_prim)::[\w.]+)"', text))


# A kernel definition: "Tensor& fn(", a definition taking the kernel context (any return type,
# e.g. a tuple of out tensors), or the DEFINE_* macro form of the unary ufuncs.
_KERNEL_DEFINITION = re.compile(
    r"&\s*(\w+)\s*\(|\b(\w+)\s*\(\s*(?:[\w:]+::)?(?:Kernel)?RuntimeContext\s*&"
    r"|\bDEFINE_\w+\(\s*(\w+)\s*,"
)


def _kernel_files(et: Path, functions: Sequence[str]) -> List[Path]:
    """The portable/quantized kernel sources defining these ``native::`` functions."""
    files = sorted((et / "kernels" / "portable" / "cpu").glob("op_*.cpp")) + sorted(
        (et / "kernels" / "quantized" / "cpu").glob("*.cpp")
    )
    # The unary ufunc kernels are defined by a macro whose bodies live in pattern/*.cpp.
    patterns = sorted((et / "kernels" / "portable" / "cpu" / "pattern").glob("*.cpp"))
    defining: Dict[str, List[Path]] = {}
    for f in files:
        text = f.read_text()
        extra = patterns if "pattern/pattern.h" in text else []
        for m in _KERNEL_DEFINITION.finditer(text):
            name = next(g for g in m.groups() if g)
            hits = defining.setdefault(name, [])
            hits += [h for h in [f, *extra] if h not in hits]
    out: List[Path] = []
    for fn in functions:
        if fn not in defining:
            raise FirmwareError(f"kernel function {fn}: no source under {et}/kernels defines it")
        out += [h for h in defining[fn] if h not in out]
    return out


def generate_kernels(et: Path, operators: Sequence[str], out_dir: Path) -> List[Path]:
    """Run ExecuTorch's codegen for ``operators`` (``ns::op.overload``) into ``out_dir``;
    return the kernel sources to compile. An operator without a kernel is an error naming it."""
    import torchgen

    out_dir.mkdir(parents=True, exist_ok=True)
    prim = _prim_ops(et)
    ops = [op for op in operators if op not in prim]
    packaged = Path(torchgen.__file__).parent / "packaged" / "ATen" / "native"
    py = sys.executable
    oplist = out_dir / "selected_operators.yaml"
    steps = [
        [py, "-m", "executorch.codegen.tools.gen_oplist", f"--output_path={oplist}"]
        + ([f"--root_ops={','.join(ops)}"] if ops else []),
        [
            py,
            "-m",
            "executorch.codegen.gen",
            f"--source-path={et / 'codegen'}",
            f"--install-dir={out_dir}",
            f"--tags-path={packaged / 'tags.yaml'}",
            f"--aten-yaml-path={packaged / 'native_functions.yaml'}",
            f"--op-selection-yaml-path={oplist}",
            f"--functions-yaml-path={et / 'kernels' / 'portable' / 'functions.yaml'}",
            f"--custom-ops-yaml-path={et / 'kernels' / 'quantized' / 'quantized.yaml'}",
        ],
    ]
    for cmd in steps:
        p = subprocess.run(cmd, capture_output=True, text=True, cwd=out_dir)
        if p.returncode != 0:
            last = (p.stderr.strip().splitlines() or ["(no output)"])[-1]
            raise FirmwareError(f"ExecuTorch codegen ({cmd[2]}) failed: {last}")
    reg = (out_dir / "RegisterCodegenUnboxedKernelsEverything.cpp").read_text()
    registered = set(re.findall(r'Kernel\(\s*"([^"]+)"', reg))
    missing = [op for op in ops if op not in registered]
    if missing:
        raise FirmwareError(
            f"no kernel for {', '.join(missing)} in {et}/kernels/portable/functions.yaml or "
            "kernels/quantized/quantized.yaml: the image cannot run this program"
        )
    sources = _kernel_files(et, sorted(set(re.findall(r"native::(\w+)\(", reg))))
    if any(op in prim for op in operators):
        sources += [
            et / "kernels" / "prim_ops" / f
            for f in ("register_prim_ops.cpp", "et_copy_index.cpp", "et_view.cpp")
        ]
    return sources


# ------------------------------------------------------------------ build
def build_dir(et: Path) -> Path:
    """One build tree per ExecuTorch tree and checkout of ours; ninja rebuilds what changed in it
    (our sources included) and nothing else. The checkout is part of the key because a build
    tree is configured for one source directory: a second clone sharing it would build the
    first clone's sources."""
    checkout = hashlib.sha256(str(FIRMWARE_DIR.resolve()).encode()).hexdigest()[:8]
    return cache_root() / (
        f"build-{_tree_fingerprint(et, ['runtime', 'kernels', 'schema'])}-{checkout}"
    )


def _image_name(pte: bytes, plan: Dict, omit: Sequence[str]) -> str:
    h = hashlib.sha256(pte)
    pools = (plan["planned_arenas"], plan["temp_allocator"], plan["method_allocator"])
    h.update(repr(pools).encode())
    for op in sorted(omit):
        h.update(b"\0omit:" + op.encode())
    return "m_" + h.hexdigest()[:16]


def build_image(
    pte: bytes,
    executorch_src: Optional[os.PathLike] = None,
    plan: Optional[Dict] = None,
    omit_kernels: Sequence[str] = (),
    log=None,
) -> Image:
    """Build (or find in the cache) the image for ``pte``. ``plan``: its memory plan (default:
    ``memory_plan.memory_plan(pte)``; the pools are its sizes, the method allocator the host
    measurement, an upper bound on the target's). ``omit_kernels``: operators whose kernels are
    left out (to test that the image refuses such a program cleanly)."""
    from ethosu_ng.adapters import exir
    from ethosu_ng.memory_plan import memory_plan
    from ethosu_ng.tools.emit_c import emit_c

    check_tools()
    pte = bytes(pte)
    et = executorch_tree(executorch_src)
    operators = tuple(exir.pte_operators(pte))
    unknown = [op for op in omit_kernels if op not in operators]
    if unknown:
        raise FirmwareError(f"omit_kernels: the program calls no {', '.join(unknown)}")
    if plan is None:
        plan = memory_plan(pte)
    if plan.get("method_allocator") is None:
        raise FirmwareError(
            f"memory plan has no method allocator size ({plan.get('method_allocator_note')})"
        )
    name = _image_name(pte, plan, omit_kernels)
    build = build_dir(et)
    t0 = time.monotonic()
    with _lock(build / ".lock"):
        elf = build / f"image_{name}.elf"
        img_dir = build / "images" / name
        if not (img_dir / "image.cmake").exists():
            shutil.rmtree(img_dir, ignore_errors=True)
            emit_c(str(img_dir), name, pte, plan)
            kernels = generate_kernels(
                et, [op for op in operators if op not in omit_kernels], img_dir / "kernels"
            )
            srcs = " ".join(f'"{s}"' for s in kernels)
            (img_dir / "image.cmake.tmp").write_text(
                f'ethosu_ng_image(NAME {name} MODEL_DIR "{img_dir}" '
                f'KERNEL_DIR "{img_dir / "kernels"}" KERNEL_SOURCES {srcs})\n'
            )
            (img_dir / "image.cmake.tmp").rename(img_dir / "image.cmake")
        images = build / "images.cmake"
        listing = "".join(
            f'include("{p}")\n' for p in sorted((build / "images").glob("*/image.cmake"))
        )
        if not images.exists() or images.read_text() != listing:
            images.write_text(listing)
        before = elf.stat().st_mtime_ns if elf.exists() else None
        cmake = _cmake()
        if not (build / "build.ninja").exists() and not (build / "Makefile").exists():
            gen = ["-G", "Ninja"] if shutil.which("ninja") else []
            _run_step(
                "configure",
                [
                    cmake,
                    "-S",
                    str(FIRMWARE_DIR),
                    "-B",
                    str(build),
                    *gen,
                    f"-DCMAKE_TOOLCHAIN_FILE={TOOLCHAIN_FILE}",
                    "-DETHOSU_NG_TARGET_CPU=cortex-m55",
                    "-DCMAKE_BUILD_TYPE=MinSizeRel",
                    f"-DETHOSU_NG_EXECUTORCH_SOURCE_DIR={et}",
                    f"-DETHOSU_NG_FW_IMAGES={images}",
                    f"-DETHOSU_NG_FLATC={_which('flatc')}",
                ],
                log,
            )
        _run_step(
            "build",
            [
                cmake,
                "--build",
                str(build),
                "--target",
                f"image_{name}",
                "-j",
                str(os.cpu_count() or 1),
            ],
            log,
        )
        cached = before is not None and elf.stat().st_mtime_ns == before
    return Image(
        name=name,
        elf=elf,
        plan=plan,
        operators=operators,
        omitted=tuple(omit_kernels),
        build_seconds=time.monotonic() - t0,
        cached=cached,
    )


def _run_step(step: str, cmd: List[str], log) -> None:
    p = subprocess.run(cmd, capture_output=True, text=True)
    if log is not None:
        log.write(p.stdout + p.stderr)
    if p.returncode != 0:
        lines = (p.stdout + p.stderr).splitlines()
        first = next((ln for ln in lines if "error" in ln.lower()), lines[-1] if lines else "")
        raise FirmwareError(f"firmware {step} failed: {first.strip()}")


def section_sizes(elf: Path) -> Dict[str, int]:
    out = subprocess.run(
        [_which("arm-none-eabi-size"), "-A", str(elf)], capture_output=True, text=True, check=True
    ).stdout
    sec = {m.group(1): int(m.group(2)) for m in re.finditer(r"^(\.\S+)\s+(\d+)\s+\d+", out, re.M)}
    return {
        "code": sec.get(".text", 0) + sec.get(".vectors", 0),
        "rodata": sum(sec.get(s, 0) for s in (".rodata", ".ARM.extab", ".ARM.exidx", ".data")),
        "pte": sec.get(".pte", 0),
        "pools": sec.get(".pools", 0),
        "other_ram": sec.get(".bss", 0),
        "npu_model_arena": sec.get(".npu_model_arena", 0),
    }


_PARTS = (  # (part, what in the linker map's object path names it)
    ("NPU model (stand-in)", r"npu_model"),
    ("delegate", r"libethosu_ng_delegate"),
    ("ExecuTorch runtime", r"libet_runtime|libet_portable_util"),
    ("kernels", r"_kernels\.dir"),
    ("C/C++ libraries", r"arm-none-eabi|/lib(c|g|gcc|stdc\+\+|rdimon|m)(_nano)?\.a"),
)


def code_breakdown(image: Image) -> Dict[str, Tuple[int, int]]:
    """(code, read-only data) bytes per part of the image, from its linker map."""
    m = image.elf.with_suffix(".map").read_text()
    m = m[m.index("Linker script and memory map") :]
    out: Dict[str, List[int]] = {}
    for mm in re.finditer(
        r"^ (\.(?:text|rodata)\S*)\s*\n?\s+0x[0-9a-f]+\s+0x([0-9a-f]+)\s+(\S+)", m, re.M
    ):
        sec, size, obj = mm.groups()
        part = next((p for p, pat in _PARTS if re.search(pat, obj)), "board, runner, .pte")
        row = out.setdefault(part, [0, 0])
        row[0 if sec.startswith(".text") else 1] += int(size, 16)
    return {k: (v[0], v[1]) for k, v in out.items()}


# ------------------------------------------------------------------ run
def program_io(pte: bytes, method: str = "forward") -> Tuple[List[Tuple], List[Tuple]]:
    """(numpy dtype, shape) of each program input and output."""
    from executorch.runtime import Runtime

    meta = Runtime.get().load_program(bytes(pte)).metadata(method)

    def one(t):
        code = int(t.dtype())
        if code not in _DTYPES:
            raise FirmwareError(f"program IO of ExecuTorch dtype {code}: not supported here")
        return _DTYPES[code], tuple(t.sizes())

    ins = [one(meta.input_tensor_meta(i)) for i in range(meta.num_inputs())]
    outs = [one(meta.output_tensor_meta(i)) for i in range(meta.num_outputs())]
    return ins, outs


def random_inputs(pte: bytes, n: int, seed: int = 0) -> List[List[np.ndarray]]:
    """``n`` input sets: integers over their whole range, floats standard normal."""
    rng = np.random.default_rng(seed)
    ins, _ = program_io(pte)
    sets = []
    for _ in range(n):
        one = []
        for dt, shape in ins:
            if np.issubdtype(dt, np.integer):
                info = np.iinfo(dt)
                one.append(rng.integers(info.min, info.max, size=shape, endpoint=True, dtype=dt))
            else:
                one.append(rng.standard_normal(shape).astype(dt))
        sets.append(one)
    return sets


def _qemu_arg(text: str) -> str:
    return text.replace(",", ",,")  # QEMU's option syntax escapes a comma by doubling it


def run_image(
    image: Image,
    inputs: Optional[Sequence[Sequence[np.ndarray]]] = None,
    pools: Optional[Dict[str, int]] = None,
    pte_offset: Optional[int] = None,
    flip: Optional[int] = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    count_instructions: bool = False,
) -> Run:
    """Run ``image`` under QEMU: one execute per input set (written before every execute;
    ``None``: one run on zero inputs). ``pools``: bytes to give an allocator (``method``,
    ``temp``, ``arena0``...; at most the pool's size). ``pte_offset`` / ``flip``: load the
    program from a RAM copy that many bytes past a 16-byte boundary / with that byte inverted.
    A run that does not end within ``timeout_s`` is a FirmwareError. ``count_instructions``:
    QEMU's clock advances by one step per instruction (``-icount shift=0``), so each run's
    ticks count the instructions of its execute() (``Run.instructions``)."""
    args = ["image"]
    with tempfile.TemporaryDirectory(prefix="ethosu_ng_fw_") as tmp:
        if inputs is not None:
            path = Path(tmp) / "inputs.bin"
            with open(path, "wb") as f:
                for one in inputs:
                    for a in one:
                        f.write(np.ascontiguousarray(a).tobytes())
            args.append(f"in={path}")
        for k, v in (pools or {}).items():
            args.append(f"{k}={int(v)}")
        if pte_offset is not None:
            args.append(f"pte_offset={int(pte_offset)}")
        if flip is not None:
            args.append(f"flip={int(flip)}")
        cmd = [
            _which("qemu-system-arm"),
            "-M",
            QEMU_MACHINE,
            "-nographic",
            "-monitor",
            "none",
            "-serial",
            "none",
            "-semihosting-config",
            "enable=on,target=native," + ",".join(f"arg={_qemu_arg(a)}" for a in args),
            "-kernel",
            str(image.elf),
        ]
        if count_instructions:
            cmd[1:1] = ["-icount", "shift=0"]
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, cwd=tmp)
        except subprocess.TimeoutExpired:
            raise FirmwareError(
                f"image {image.name} did not finish within {timeout_s:g} s under QEMU"
            ) from None
    run = parse_run(p.stdout + p.stderr, p.returncode)
    run.counted = count_instructions
    return run


def parse_run(log: str, exit_code: int) -> Run:
    run = Run(log=log, exit_code=exit_code)
    npu_error = ""  # the NPU model's reason, printed before the runner's ERROR line
    for line in log.splitlines():
        if not line.startswith(_PREFIX):
            continue
        body = line[len(_PREFIX) :]
        m = re.fullmatch(r"run (\d+) output (\d+) ([0-9a-f]*)", body)
        if m:
            r = int(m.group(1))
            while len(run.outputs) <= r:
                run.outputs.append([])
            run.outputs[r].append(bytes.fromhex(m.group(3)))
            continue
        m = re.fullmatch(r"run (\d+) ticks (\d+)", body)
        if m:
            run.ticks.append(int(m.group(2)))
            continue
        m = re.fullmatch(r"calibration instructions (\d+) ticks (\d+)", body)
        if m:
            run.calibration = (int(m.group(1)), int(m.group(2)))
            continue
        m = re.fullmatch(r"pool (\w+) used (\d+) given (\d+) size (\d+)", body)
        if m:
            run.pools[m.group(1)] = (int(m.group(2)), int(m.group(3)))
            continue
        m = re.fullmatch(r"npu_model_arena used (\d+) size (\d+)", body)
        if m:
            run.npu_model_arena = (int(m.group(1)), int(m.group(2)))
            continue
        m = re.fullmatch(r"runs \d+ npu_invocations (\d+)", body)
        if m:
            run.npu_invocations = int(m.group(1))
            continue
        if body.startswith("NPU model error"):
            npu_error = body
        if body.startswith(("ERROR", "FAULT", "ABORT")):
            run.error = body + (f" ({npu_error})" if npu_error else "")
    ok = exit_code == EXIT_OK and log.rstrip().endswith(_PREFIX + "OK")
    if not ok and run.error is None:
        tail = log.strip().splitlines()[-1:] or ["(no output)"]
        run.error = f"exit code {exit_code}: {tail[0]}"
    return run


# ------------------------------------------------------------------ verify
@dataclass
class M55Result:
    image: Image
    runs: int
    mismatches: List[str]
    target_pools: Dict[str, int]  # high-water marks measured on the M55
    shrink_checks: Dict[str, str]  # pool -> the error with one byte less ("" = it ran: wrong)
    plan: Dict

    @property
    def passed(self) -> bool:
        return not self.mismatches and all(self.shrink_checks.values())

    def __str__(self) -> str:
        s = self.image.sizes()
        lines = [
            f"Cortex-M55 (QEMU {QEMU_MACHINE}), NPU model behind ethosu_invoke_v3: "
            f"{self.runs} input set(s), "
            + ("bit-exact to the host run" if not self.mismatches else "DIFFERS from the host run"),
            f"  image {self.image.elf} ({'cached' if self.image.cached else 'built'} in "
            f"{self.image.build_seconds:.1f} s): code {s['code']:,} B, rodata {s['rodata']:,} B, "
            f".pte {s['pte']:,} B, pools {s['pools']:,} B",
            "  pools measured on the target: "
            + ", ".join(f"{k} {v:,} B" for k, v in self.target_pools.items())
            + "".join(
                f" (arena{k} touched up to {n:,} B)"
                for k, n in enumerate(self.plan.get("planned_arenas_need", []))
            ),
            "  one byte less: "
            + "; ".join(
                f"{k}: {v or 'RAN (plan not tight)'}" for k, v in self.shrink_checks.items()
            ),
        ]
        lines += [f"  mismatch: {m}" for m in self.mismatches]
        return "\n".join(lines)


def host_outputs(pte: bytes, plan: Dict, inputs: Sequence[np.ndarray]) -> List[bytes]:
    """The host run of the same bytes: the same delegate over fixed pools, the NPU model."""
    from ethosu_ng.memory_plan import run_with_pools

    outs, _ = run_with_pools(
        pte,
        plan["planned_arenas"],
        plan["method_allocator"],
        # The host registers no fast-scratch area: region 2 comes from the temp allocator.
        plan["temp_allocator_without_fast_area"],
        inputs=[np.ascontiguousarray(a).view(np.uint8).reshape(-1) for a in inputs],
        npu="model",
    )
    return [o.tobytes() for o in outs]


def verify_on_m55(
    pte: bytes,
    executorch_src: Optional[os.PathLike] = None,
    n: int = 4,
    inputs: Optional[Sequence[Sequence[np.ndarray]]] = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> M55Result:
    """Build and run the image for ``pte`` on ``n`` random input sets (or ``inputs``), compare
    every output with the host run bit for bit, measure the pools on the target, and rerun with
    each pool exactly at its measured size and one byte smaller (which must fail)."""
    from ethosu_ng.memory_plan import measured_on_target, planned_arena_needs

    pte = bytes(pte)
    image = build_image(pte, executorch_src)
    sets = list(inputs) if inputs is not None else random_inputs(pte, n)
    run = run_image(image, sets, timeout_s=timeout_s)
    if run.error:
        raise FirmwareError(f"image {image.name}: {run.error}")
    mismatches = []
    for r, one in enumerate(sets):
        want = host_outputs(pte, image.plan, one)
        got = run.outputs[r] if r < len(run.outputs) else []
        if got != want:
            k = next((k for k in range(len(want)) if k >= len(got) or got[k] != want[k]), 0)
            mismatches.append(f"input set {r}, output {k}: image and host outputs differ")
    used = {k: u for k, (u, _) in run.pools.items()}
    # A planned arena's need is where its furthest tensor ends (the program says; the run at
    # exactly that size and one byte less below check it on the target).
    needs = planned_arena_needs(pte)
    plan = measured_on_target(image.plan, {**used, "arena_needs": needs})
    exact = {"method": plan["method_allocator"], "temp": plan["temp_allocator"]}
    if plan["fast_scratch"]:
        exact["fast"] = plan["fast_scratch"]
    exact.update({f"arena{k}": n for k, n in enumerate(needs)})
    first = sets[:1]
    at_size = run_image(image, first, pools=exact, timeout_s=timeout_s)
    if at_size.error or at_size.outputs[:1] != run.outputs[:1]:
        mismatches.append(
            f"pools of exactly the measured sizes: {at_size.error or 'outputs differ'}"
        )
    shrink: Dict[str, str] = {}
    for pool, size in exact.items():
        if size == 0:
            continue
        r = run_image(image, first, pools={**exact, pool: size - 1}, timeout_s=timeout_s)
        shrink[pool] = r.error or ""
    return M55Result(image, len(sets), mismatches, used, shrink, plan)
