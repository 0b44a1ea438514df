"""The package's dependencies point one way, read from its source:

    cli -> planning (planning/, emulator, probe, profiler, replan, report, timing) -> runtime -> core
                                                                           -> core

A module in a folder has its folder's layer (planning/, runtime/); a module at the top, the layer
its name is listed under here. The core (protocols, the models, the file schemas) is pure: no
torch, no processes; so is planning/, which is handed its prober. The runtime runs jobs and never
imports planning: re-planning reaches it as a function. There is no import circle, and no omnitune
import inside a function except in the CLI, whose commands import what they use when they run, so
that `omnitune --help` does not wait for torch.
"""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).parent.parent / "omnitune"

FOLDERS = {"planning": "planning", "runtime": "runtime"}     # a folder's modules and their layer
PURE_FOLDERS = {"planning"}                                  # folders that import no torch
CORE = {"errors", "env", "files", "cluster", "protocols", "runspec", "plan", "profile", "perfmodel", "statmodel",
        "balance"}
PLANNING = {"emulator", "probe", "profiler", "replan", "report", "simulator", "fleet", "timing"}
PURE_PLANNING = {"replan", "simulator", "fleet"}     # planning at the top that imports only the core: no torch


def layer(module: str) -> str:
    top = module.split(".")[0]
    if top in FOLDERS:
        return FOLDERS[top]
    if module == "cli":
        return "cli"
    if module in PLANNING:
        return "planning"
    if module in CORE:
        return "core"
    if module == "workload":
        return "runtime"
    raise AssertionError(f"omnitune/{module}: no layer; put it in a folder or add it to tests/test_dependencies.py")


def pure(module: str) -> bool:
    return module in CORE or module in PURE_PLANNING or module.split(".")[0] in PURE_FOLDERS


ALLOWED = {"core": {"core"}, "runtime": {"runtime", "core"}, "planning": {"planning", "runtime", "core"},
           "cli": {"cli", "planning", "runtime", "core"}}


def modules() -> dict[str, ast.Module]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        name = ".".join(path.relative_to(PACKAGE).with_suffix("").parts)
        out[name.removesuffix(".__init__") if name.endswith("__init__") else name] = ast.parse(path.read_text())
    out.pop("__init__", None)
    return out


def imports(tree: ast.Module, known: set[str]) -> list[tuple[str, bool]]:
    """(omnitune module imported, whether at the top level) for every import in the tree."""
    top = {id(node) for node in tree.body}
    out = []
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            # "from omnitune.runtime import job" imports omnitune.runtime.job
            names = [f"{node.module}.{a.name}" for a in node.names] + [node.module]
        for name in names:
            if name.startswith("omnitune."):
                target = name.removeprefix("omnitune.")
                if target in known:
                    out.append((target, id(node) in top))
    return out


GRAPH = {name: imports(tree, set(modules())) for name, tree in modules().items()}


@pytest.mark.parametrize("module", sorted(GRAPH))
def test_each_module_imports_only_its_layer_and_below(module):
    bad = sorted({t for t, _ in GRAPH[module] if layer(t) not in ALLOWED[layer(module)]})
    assert not bad, f"{module} ({layer(module)}) imports {bad}"


@pytest.mark.parametrize("module", sorted(GRAPH))
def test_no_import_hides_inside_a_function(module):
    inside = sorted({t for t, at_top in GRAPH[module] if not at_top})
    assert module == "cli" or not inside, f"{module} imports {inside} inside a function"


def test_no_import_circle():
    """Between modules: a folder's __init__, which gathers its modules' names, is left out."""
    edges = {m: {t for t, _ in GRAPH[m] if t in GRAPH and t != m and t not in FOLDERS} for m in GRAPH}
    state: dict[str, str] = {}

    def visit(m, path):
        state[m] = "open"
        for t in edges[m]:
            assert state.get(t) != "open", "import circle: " + " -> ".join(path + [t])
            if t not in state:
                visit(t, path + [t])
        state[m] = "done"

    for m in sorted(edges):
        if m not in state:
            visit(m, [m])


def test_pure_modules_import_no_torch():
    mine = sorted(m for m in GRAPH if pure(m))
    for m in mine:
        assert all(pure(t) for t, _ in GRAPH[m]), f"{m} must import only pure modules"
    code = f"import sys; import {', '.join('omnitune.' + m for m in mine)}; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_protocol_names_are_compared_only_in_the_protocol_module():
    """No `x.protocol == "sync"` or `protocol in ("groups", "softsync")` outside protocols.py:
    no comparison with a protocol's name, and no collection of them."""
    from omnitune.protocols import NAMES

    for name, tree in modules().items():
        if name == "protocols":
            continue
        for node in ast.walk(tree):
            parts = [node.left, *node.comparators] if isinstance(node, ast.Compare) else \
                node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else []
            if parts:
                named = {p.value for p in parts if isinstance(p, ast.Constant) and p.value in NAMES}
                assert not named, f"omnitune/{name}: names protocols {named}: {ast.unparse(node)}"
