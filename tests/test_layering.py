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


def _unit(module: str) -> str:
    """The package unit a module belongs to: its top-level module or subpackage under ethosu_ng
    (``api`` counts as ``tools``: the command line's verbs, one layer)."""
    parts = module.split(".")
    unit = parts[1] if len(parts) > 1 else "__init__"
    return "tools" if unit == "api" else unit


def _module_of(path: Path) -> str:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = [p for p in rel.parts if p != "__init__"]
    return ".".join(parts)


def _unit_imports(path: Path):
    """Modules of ethosu_ng a file imports, absolute and relative imports alike."""
    module = _module_of(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                names = [".".join(base + ([node.module] if node.module else []))]
            else:
                names = [node.module or ""]
        else:
            continue
        for name in names:
            if name.startswith("ethosu_ng."):
                yield node.lineno, name


def _unit_graph(paths):
    """unit -> {imported unit: first 'file:line' that imports it}"""
    graph = {}
    for path in paths:
        me = _unit(_module_of(path))
        for line, name in _unit_imports(path):
            other = _unit(name)
            if other != me and me != "__init__":
                where = f"{path.relative_to(PACKAGE.parent)}:{line}"
                graph.setdefault(me, {}).setdefault(other, where)
    return graph


def _cycle(graph):
    """One import cycle between units (as 'a -> b (file:line)' steps), or None."""
    state = {}

    def visit(unit, stack):
        state[unit] = "open"
        for other, where in sorted(graph.get(unit, {}).items()):
            if state.get(other) == "open":
                cut = [u for u, _ in stack].index(other) if other != unit else len(stack)
                return stack[cut:] + [(unit, f"{unit} -> {other} ({where})")]
            if other not in state:
                found = visit(other, stack + [(unit, f"{unit} -> {other} ({where})")])
                if found:
                    return found
        state[unit] = "done"
        return None

    for unit in sorted(graph):
        if unit not in state:
            found = visit(unit, [])
            if found:
                return [step for _, step in found]
    return None


def test_the_package_layers_point_one_way():
    """No import cycle between the package's units (top-level modules and subpackages): each
    layer imports only layers below it, lazy imports inside functions included."""
    cycle = _cycle(_unit_graph(PACKAGE.rglob("*.py")))
    assert cycle is None, "import cycle between package units: " + "; ".join(cycle)


def test_the_cycle_check_finds_a_planted_cycle(tmp_path):
    pkg = tmp_path / "ethosu_ng"
    (pkg / "low").mkdir(parents=True)
    (pkg / "low" / "a.py").write_text("def f():\n    from ethosu_ng.high import b\n")
    (pkg / "high.py").write_text("from .low import a\n")
    global PACKAGE
    saved, PACKAGE = PACKAGE, pkg
    try:
        cycle = _cycle(_unit_graph(pkg.rglob("*.py")))
    finally:
        PACKAGE = saved
    assert cycle is not None and any("low -> high" in step for step in cycle)


def test_tests_do_not_import_bench():
    """bench/ measures the package; tests check it. A test reaching into a bench script tests
    the bench, and breaks when a measurement changes."""
    found = []
    for path in Path(__file__).resolve().parent.rglob("*.py"):
        text = path.read_text()
        for node in ast.walk(ast.parse(text, str(path))):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            if any(n == "bench" or n.startswith("bench.") for n in names):
                found.append(f"{path.name}:{node.lineno}")
        if path != Path(__file__).resolve() and ('"bench")' in text or "'bench')" in text):
            found.append(f"{path.name}: puts bench/ on sys.path")
    assert found == [], "tests importing bench/: " + ", ".join(found)
