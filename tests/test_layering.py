# SPDX-License-Identifier: BSD-3-Clause
"""Import layering: executorch internals only through ethosu_ng/adapters; the core never imports
the tools. Read from the source (ast), so a lazy import inside a function counts too."""

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "ethosu_ng"
ADAPTERS = PACKAGE / "adapters"
TOOLS = PACKAGE / "tools"
# Backends whose every symbol is internal to us: reached only through the Arm adapter.
_ARM_BACKEND = ("executorch.backends.arm", "executorch.backends.cortex_m")


def _imports(path: Path):
    """(line, module, [imported names]) of every import in a file."""
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for a in node.names:
                yield node.lineno, a.name, []
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.lineno, node.module, [a.name for a in node.names]


def _private_executorch(module: str, names) -> str:
    if not module.startswith("executorch"):
        return ""
    if module.startswith(_ARM_BACKEND):
        return f"{module} (the Arm backend)"
    if any(part.startswith("_") for part in module.split(".")):
        return f"{module} (a private module)"
    private = [n for n in names if n.startswith("_")]
    return f"{private} from {module} (private names)" if private else ""


# The command line's verbs as Python functions: the same layer as tools/.
API = PACKAGE / "api.py"


def _package_files(exclude: Path):
    return [p for p in PACKAGE.rglob("*.py") if exclude not in p.parents]


def test_executorch_internals_only_through_the_adapters():
    found = []
    for path in _package_files(ADAPTERS):
        for line, module, names in _imports(path):
            why = _private_executorch(module, names)
            if why:
                found.append(f"{path.relative_to(PACKAGE.parent)}:{line}: {why}")
    assert found == [], "\n".join(found)


def test_core_never_imports_tools():
    found = []
    for path in _package_files(TOOLS):
        if path == API:
            continue
        for line, module, names in _imports(path):
            if module.startswith("ethosu_ng.tools") or (
                module == "ethosu_ng" and any(n == "tools" for n in names)
            ):
                found.append(f"{path.relative_to(PACKAGE.parent)}:{line}: {module}")
    assert found == [], "\n".join(found)


@pytest.mark.parametrize(
    "source, flagged",
    [
        ("from executorch.backends.arm.quantizer import X", True),
        ("import executorch.backends.cortex_m.quantizer", True),
        ("from executorch.exir._serialize._program import deserialize_pte_binary", True),
        ("from executorch.exir.backend.utils import _maybe_duplicate_constant_nodes", True),
        ("from executorch.exir import to_edge_transform_and_lower", False),
    ],
)
def test_the_check_flags_what_it_should(tmp_path, source, flagged):
    f = tmp_path / "m.py"
    f.write_text(f"def f():\n    {source}\n")
    assert any(_private_executorch(m, n) for _, m, n in _imports(f)) == flagged
