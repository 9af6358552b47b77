# SPDX-License-Identifier: BSD-3-Clause
"""Every source file names its license in an SPDX line near its top, and that license is the one
LICENSE holds (the files of tools/vendor/ carry their own)."""

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TAG = "SPDX-License-Identifier: BSD-3-Clause"
SOURCE_SUFFIXES = {".py", ".sh", ".cmake", ".cpp", ".h", ".hpp", ".c"}
# Not ours to label, or not source: third-party files, build and environment trees, fuzz inputs.
SKIP_DIRS = {".git", ".venv", "build", "vendor", "corpus", "corpus_npu_model", "results", "out"}


def _sources():
    for dirpath, dirnames, filenames in os.walk(ROOT):
        dirnames[:] = [d for d in dirnames if d not in SKIP_DIRS and not d.startswith(".")]
        for name in filenames:
            path = Path(dirpath) / name
            if path.suffix in SOURCE_SUFFIXES or name == "CMakeLists.txt":
                yield path.relative_to(ROOT)


def test_every_source_file_has_the_spdx_line():
    missing = [
        str(rel)
        for rel in _sources()
        if TAG not in "\n".join((ROOT / rel).read_text(errors="replace").splitlines()[:3])
    ]
    assert missing == [], f"no '{TAG}' in the first 3 lines of: {', '.join(sorted(missing))}"


def test_the_spdx_license_is_the_license_file():
    assert (ROOT / "LICENSE").read_text().startswith("BSD 3-Clause License")
    assert 'license = "BSD-3-Clause"' in (ROOT / "pyproject.toml").read_text()
