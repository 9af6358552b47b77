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
