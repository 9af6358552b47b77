# SPDX-License-Identifier: BSD-3-Clause
"""Vela's system configs and memory modes, as its ``Arm/vela.ini`` defines them."""

from __future__ import annotations

import configparser
import os
from functools import lru_cache
from typing import List, Optional


def vela_ini() -> str:
    from ethosu.vela import architecture_features

    root = os.path.dirname(os.path.dirname(architecture_features.__file__))
    return os.path.join(root, "config_files", "Arm", "vela.ini")


@lru_cache(maxsize=1)
def _parsed() -> configparser.ConfigParser:
    cp = configparser.ConfigParser()
    cp.read(vela_ini())
    return cp


def sections(kind: str) -> List[str]:
    """Names of Vela's ``System_Config`` or ``Memory_Mode`` sections in Arm/vela.ini."""
    return [s.split(".", 1)[1] for s in _parsed().sections() if s.startswith(kind + ".")]


def core_clock_hz(system_config: str) -> Optional[float]:
    """The NPU core clock of a system config; None for a name Arm/vela.ini does not define."""
    section = f"System_Config.{system_config}"
    if not _parsed().has_section(section):
        return None
    try:
        return float(_parsed().get(section, "core_clock"))
    except (configparser.Error, ValueError):
        return None


def _memory_mode_area(memory_mode: str, key: str) -> Optional[str]:
    """A memory mode's ``key`` (e.g. ``const_mem_area``), following ``inherit``."""
    cp = _parsed()
    section = f"Memory_Mode.{memory_mode}"
    for _ in range(8):  # vela.ini's inheritance chains are one or two deep
        if not cp.has_section(section):
            return None
        if cp.has_option(section, key):
            return cp.get(section, key)
        if not cp.has_option(section, "inherit"):
            return None
        section = cp.get(section, "inherit")
    return None


def constants_apart_from_feature_maps(memory_mode: str) -> bool:
    """Vela keeps constants in another memory than the feature maps (``Shared_Sram``: constants
    in flash on AXI1, the arena in SRAM on AXI0); False for an unknown memory mode."""
    const = _memory_mode_area(memory_mode, "const_mem_area")
    arena = _memory_mode_area(memory_mode, "arena_mem_area")
    return const is not None and arena is not None and const != arena
