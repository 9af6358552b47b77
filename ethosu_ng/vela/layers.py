# SPDX-License-Identifier: BSD-3-Clause
"""Vela's per-layer performance, read from its debug database (``--enable-debug-db``).

Vela 5.1.0 (regor) writes ``<net>_debug.xml``: CSV tables inside CDATA sections. Three of them
say where the cycles go, by the TOSA operator each scheduled layer came from:

- ``perf``: one row per scheduled NPU operation: ``source_id``, Vela's ``operator``, its output
  ``name``, ``op_cycles`` (what the layer costs, memory-bound or not; sums to the summary's
  ``cycles_total``), ``npu_cycles`` (sums to ``cycles_npu``), ``mac_count`` (sums to ``nn_macs``);
- ``perf_debug``: per layer and memory, the bytes read and written (``SramFeatureMap_read``, ...);
- ``source``: the input graph's operators; ``ext_key`` is the operator's index in the TOSA
  block (checked against the TOSA graph in tests/test_module_profile.py).

The flag does not change what Vela compiles (same command stream and weights).
"""

from __future__ import annotations

import csv
import io
import re
import xml.etree.ElementTree as ET
from dataclasses import asdict, dataclass
from typing import Dict, List, Optional

DEBUG_DB_FLAG = "--enable-debug-db"
_MEMORIES = {
    "Sram": "sram",
    "Dram": "dram",
    "OffChipFlash": "flash",
    "OnChipFlash": "flash",
}
_TRAFFIC = re.compile(r"^(Sram|Dram|OffChipFlash|OnChipFlash)[A-Za-z]*_(read|write)$")


@dataclass(frozen=True)
class VelaLayer:
    vela_op: str  # Vela's operator for this scheduled layer (e.g. Conv2D, Transpose)
    name: str  # Vela's name for the layer (its output tensor)
    tosa_index: Optional[int]  # index of the source operator in the TOSA block
    cycles: int  # op_cycles
    npu_cycles: int
    macs: int
    sram_bytes: int = 0
    dram_bytes: int = 0
    flash_bytes: int = 0

    def to_dict(self) -> Dict:
        return asdict(self)


def _tables(text: str) -> Dict[str, List[Dict[str, str]]]:
    root = ET.fromstring(text)
    out = {}
    for t in root.iter("table"):
        body = (t.text or "").strip("\n")
        out[t.get("name")] = list(csv.DictReader(io.StringIO(body)))
    return out


def _int(v: Optional[str]) -> int:
    try:
        return int(float(v)) if v not in (None, "") else 0
    except ValueError:
        return 0


def parse_debug_db(text: str) -> List[VelaLayer]:
    """The scheduled layers of Vela's debug database, in schedule order."""
    tables = _tables(text)
    if "perf" not in tables:
        raise ValueError("Vela debug database has no 'perf' table")
    ext = {r["id"]: _int(r.get("ext_key")) for r in tables.get("source", [])}
    traffic: Dict[str, Dict[str, int]] = {}
    for r in tables.get("perf_debug", []):
        acc = {"sram": 0, "dram": 0, "flash": 0}
        for k, v in r.items():
            m = _TRAFFIC.match(k or "")
            if m:
                acc[_MEMORIES[m.group(1)]] += _int(v)
        traffic[r["id"]] = acc
    layers = []
    for r in tables["perf"]:
        t = traffic.get(r["id"], {})
        layers.append(
            VelaLayer(
                vela_op=r.get("operator", ""),
                name=r.get("name", ""),
                tosa_index=ext.get(r.get("source_id")),
                cycles=_int(r.get("op_cycles")),
                npu_cycles=_int(r.get("npu_cycles")),
                macs=_int(r.get("mac_count")),
                sram_bytes=t.get("sram", 0),
                dram_bytes=t.get("dram", 0),
                flash_bytes=t.get("flash", 0),
            )
        )
    return layers


def read_debug_db(path: str) -> List[VelaLayer]:
    with open(path, encoding="utf-8") as f:
        return parse_debug_db(f.read())
