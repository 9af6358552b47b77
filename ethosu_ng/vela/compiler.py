# SPDX-License-Identifier: BSD-3-Clause
"""Vela stage: TOSA flatbuffer -> Ethos-U command stream, weights and IO placement.

Vela runs in a child process (``vela_process``) with a time limit: a Vela crash (SIGSEGV has been
seen on mobilevit_s / swin for U55) or hang becomes a ``VelaError`` naming the partition, the
target and Vela's last words, instead of killing the user's export.
"""

from __future__ import annotations

import csv
import os
import signal
import tempfile
from dataclasses import dataclass, field
from typing import Dict, List, Tuple

import numpy as np

from ethosu_ng.compile_spec import EthosUNGCompileSpec
from ethosu_ng.vela.layers import DEBUG_DB_FLAG, VelaLayer, read_debug_db
from ethosu_ng.vela.process import run_vela

_VELA_MAIN = "import sys; from ethosu.vela.vela import main; sys.exit(main(sys.argv[1:]))"


class VelaError(RuntimeError):
    """Vela failed, crashed or timed out on one partition."""

    def __init__(self, partition: str, target: str, what: str, last_words: str):
        self.partition, self.target, self.what, self.last_words = (
            partition,
            target,
            what,
            last_words,
        )
        super().__init__(
            f"Vela {what} compiling partition {partition!r} for {target}: {last_words}"
        )


@dataclass(frozen=True)
class VelaTensor:
    shape: Tuple[int, ...]  # Vela's 6-D shape
    elem_size: int
    region: int
    offset: int

    @property
    def numel(self) -> int:
        n = 1
        for s in self.shape:
            n *= int(s)
        return n


@dataclass
class VelaResult:
    command_stream: bytes
    weights: bytes
    scratch_size: int
    fast_scratch_size: int
    inputs: List[VelaTensor]
    outputs: List[VelaTensor]
    summary: Dict[str, str] = field(default_factory=dict)  # Vela's per-network performance CSV row
    layers: List[VelaLayer] = field(default_factory=list)  # per scheduled layer (vela_layers)


def _last_words(text: str, lines: int = 6) -> str:
    tail = [ln for ln in text.strip().splitlines() if ln.strip()][-lines:]
    return " | ".join(tail) if tail else "(no output)"


def compile_tosa(tosa: bytes, spec: EthosUNGCompileSpec, partition: str = "delegate") -> VelaResult:
    with tempfile.TemporaryDirectory(prefix="ethosu_ng_vela_") as tmp:
        tosa_path = os.path.join(tmp, "net.tosa")
        with open(tosa_path, "wb") as f:
            f.write(tosa)
        out_dir = os.path.join(tmp, "out")
        # The debug database carries the per-layer performance and each layer's TOSA operator.
        argv = [*spec.vela_flags(), DEBUG_DB_FLAG, f"--output-dir={out_dir}", tosa_path]
        run = run_vela(_VELA_MAIN, argv, tmp, spec.vela_timeout_s)
        if run.returncode is None:
            raise VelaError(
                partition,
                spec.target,
                f"timed out after {spec.vela_timeout_s:g} s",
                _last_words(run.output),
            )
        if run.returncode < 0:
            sig = signal.Signals(-run.returncode).name
            raise VelaError(partition, spec.target, f"crashed ({sig})", _last_words(run.output))
        if run.returncode != 0:
            raise VelaError(
                partition, spec.target, f"failed (exit {run.returncode})", _last_words(run.output)
            )
        npz = os.path.join(out_dir, "net_vela.npz")
        if not os.path.exists(npz):
            raise VelaError(partition, spec.target, "produced no output", _last_words(run.output))
        result = _read_npz(npz)
        for name in os.listdir(out_dir):
            if name.startswith("net_summary") and name.endswith(".csv"):
                with open(os.path.join(out_dir, name), newline="") as f:
                    rows = list(csv.DictReader(f))
                if rows:
                    result.summary = dict(rows[0])
        db = os.path.join(out_dir, "net_debug.xml")
        if os.path.exists(db):
            result.layers = read_debug_db(db)
        return result


def _read_npz(path: str) -> VelaResult:
    with np.load(path, allow_pickle=False) as d:

        def tensors(prefix: str) -> List[VelaTensor]:
            shapes = d[f"{prefix}_shape"]
            return [
                VelaTensor(
                    tuple(int(x) for x in shapes[k]),
                    int(d[f"{prefix}_elem_size"][k]),
                    int(d[f"{prefix}_region"][k]),
                    int(d[f"{prefix}_offset"][k]),
                )
                for k in range(len(shapes))
            ]

        fast = int(d["scratch_fast_size"]) if "scratch_fast_size" in d.files else 0
        return VelaResult(
            command_stream=d["cmd_data"].tobytes(),
            weights=d["weight_data"].tobytes(),
            scratch_size=int(d["scratch_shape"][0]),
            fast_scratch_size=fast,
            inputs=tensors("input"),
            outputs=tensors("output"),
        )
