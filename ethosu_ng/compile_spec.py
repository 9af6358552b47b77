# SPDX-License-Identifier: BSD-3-Clause
"""EthosUNGCompileSpec: what the user asks the NPU compiler for.

One object carries the target, Vela's system config / memory mode, extra Vela flags and our own
options (embedding the TOSA graph for host execution, the Vela time limit). It round-trips through
ExecuTorch's ``CompileSpec`` list, which is all ``preprocess`` receives.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import List, Optional, Sequence

from executorch.exir.backend.compile_spec_schema import CompileSpec

# The id the delegate is registered under: in the .pte, in the C++ runtime (backend.cpp) and in
# ExecuTorch's backend registry.
BACKEND_ID = "EthosUNGBackend"

TARGETS: tuple[str, ...] = (
    "ethos-u55-32",
    "ethos-u55-64",
    "ethos-u55-128",
    "ethos-u55-256",
    "ethos-u65-256",
    "ethos-u65-512",
    "ethos-u85-128",
    "ethos-u85-256",
    "ethos-u85-512",
    "ethos-u85-1024",
    "ethos-u85-2048",
)

# Vela's defaults per family (the same system configs upstream's EthosUCompileSpec picks).
_DEFAULT_SYSTEM_CONFIG = {
    "ethos-u55": ("Ethos_U55_High_End_Embedded", "Shared_Sram"),
    "ethos-u65": ("Ethos_U65_High_End", "Dedicated_Sram_384KB"),
    "ethos-u85": ("Ethos_U85_SYS_DRAM_Mid", "Sram_Only"),
}

_SPEC_KEY = "ethosu_ng_spec"


@dataclass(frozen=True)
class EthosUNGCompileSpec:
    """Compile settings for one Ethos-U target.

    Args:
        target: one of ``TARGETS`` (e.g. ``"ethos-u55-128"``).
        system_config / memory_mode: sections of Vela's ``Arm/vela.ini``; default per family.
        extra_vela_flags: passed to Vela verbatim (e.g. ``["--optimise", "Size"]``).
        embed_tosa: store the TOSA flatbuffer in each delegate blob so the host runtime can
            execute it without an NPU (costs flash; off by default for firmware).
        vela_timeout_s: a Vela compile that runs longer than this is killed and reported.
        vela_workers: how many Vela child processes may run at once while the next partition
            is lowered to TOSA (1 = one after the other).
        cpu_fallback: when Vela crashes, hangs or refuses a partition, find the ops responsible
            and keep them on the CPU instead of failing the export (listed in the report).
        sram_budget: bytes of SRAM the firmware has for this program's pools (planned arenas,
            NPU scratch, fast scratch; which of them are SRAM depends on ``memory_mode``, see
            ``memory_plan.sram_bytes``). A delegate whose scratch alone exceeds it fails
            ``preprocess``; ``export.serialize`` / ``ethosu-ng compile --sram-budget`` check the
            whole memory plan. ``None``: no check.
        tosa_optimize: run our TOSA-to-TOSA rewrites (``ethosu_ng/tosa_optimize``) between
            upstream's lowering and Vela; each is bit-exact on the TOSA reference model.
        tosa_optimize_verify: check every optimised partition against the original on the TOSA
            reference model at compile time (random inputs; slow on big partitions).
        verify_npu: run every partition's command stream on the NPU model and its TOSA graph on
            the reference model at compile time and require them to agree bit for bit
            (``compiler/verify_npu.py``; a stream using something the model does not implement,
            parts of Ethos-U85, is skipped with the reason). A
            partition that deviates is compiled again with other Vela options, else its ops
            responsible move to the CPU (``cpu_fallback``) with the reason in the report.
        verify_lowering: evaluate each partition's quantized graph exactly (float64 between
            quantize steps) at compile time and require its TOSA graph, on the reference model,
            to be within 1 LSB of it (``compiler/verify_lowering.py``); a partition beyond is
            handled as a ``verify_npu`` deviation.
        strict: a deviation the verification finds is an export error, not a CPU fallback.
    """

    target: str
    system_config: Optional[str] = None
    memory_mode: Optional[str] = None
    extra_vela_flags: Sequence[str] = field(default_factory=tuple)
    embed_tosa: bool = False
    vela_timeout_s: float = 900.0
    vela_workers: int = 2
    cpu_fallback: bool = True
    sram_budget: Optional[int] = None
    tosa_optimize: bool = True
    tosa_optimize_verify: bool = False
    verify_npu: bool = True
    verify_lowering: bool = True
    strict: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.target, str) or self.target.lower() not in TARGETS:
            raise ValueError(
                f"unknown Ethos-U target {self.target!r}; valid targets: {', '.join(TARGETS)}"
            )
        object.__setattr__(self, "target", self.target.lower())
        if isinstance(self.extra_vela_flags, str):
            raise TypeError("extra_vela_flags must be a list of strings, not one string")
        flags = tuple(self.extra_vela_flags)
        for f in flags:
            if not isinstance(f, str):
                raise TypeError(f"extra_vela_flags entries must be str, got {type(f).__name__}")
        object.__setattr__(self, "extra_vela_flags", flags)
        default_sc, default_mm = _DEFAULT_SYSTEM_CONFIG[self.family]
        if self.system_config is None:
            object.__setattr__(self, "system_config", default_sc)
        if self.memory_mode is None:
            object.__setattr__(self, "memory_mode", default_mm)
        for name in ("system_config", "memory_mode"):
            if not isinstance(getattr(self, name), str):
                raise TypeError(f"{name} must be a str")
        if not isinstance(self.embed_tosa, bool):
            raise TypeError("embed_tosa must be a bool")
        if (
            isinstance(self.vela_timeout_s, bool)
            or not isinstance(self.vela_timeout_s, (int, float))
            or not self.vela_timeout_s > 0
        ):
            raise ValueError("vela_timeout_s must be a positive number of seconds")
        if (
            isinstance(self.vela_workers, bool)
            or not isinstance(self.vela_workers, int)
            or self.vela_workers < 1
        ):
            raise ValueError(f"vela_workers must be an int >= 1, got {self.vela_workers!r}")
        for name in (
            "cpu_fallback",
            "tosa_optimize",
            "tosa_optimize_verify",
            "verify_npu",
            "verify_lowering",
            "strict",
        ):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"{name} must be a bool")
        if self.sram_budget is not None and (
            isinstance(self.sram_budget, bool)
            or not isinstance(self.sram_budget, int)
            or self.sram_budget <= 0
        ):
            raise ValueError(
                f"sram_budget must be a positive int (bytes), got {self.sram_budget!r}"
            )

    @property
    def family(self) -> str:
        """``ethos-u55`` / ``ethos-u65`` / ``ethos-u85``."""
        return self.target.rsplit("-", 1)[0]

    @property
    def macs(self) -> int:
        return int(self.target.rsplit("-", 1)[1])

    @property
    def is_u55_subset(self) -> bool:
        # U65 runs the U55 operator subset.
        return self.family in ("ethos-u55", "ethos-u65")

    def vela_flags(self) -> List[str]:
        return [
            f"--accelerator-config={self.target}",
            "--config=Arm/vela.ini",
            f"--system-config={self.system_config}",
            f"--memory-mode={self.memory_mode}",
            "--output-format=raw",
            *self.extra_vela_flags,
        ]

    def to_compile_specs(self) -> List[CompileSpec]:
        d = asdict(self)
        d["extra_vela_flags"] = list(self.extra_vela_flags)
        return [CompileSpec(_SPEC_KEY, json.dumps(d, sort_keys=True).encode())]

    @classmethod
    def from_compile_specs(cls, specs: Sequence[CompileSpec]) -> EthosUNGCompileSpec:
        for s in specs:
            if s.key == _SPEC_KEY:
                return cls(**json.loads(bytes(s.value).decode()))
        raise ValueError(
            f"compile specs carry no {_SPEC_KEY!r} entry; were they made by EthosUNGPartitioner?"
        )
