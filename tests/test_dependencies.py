"""The package's dependencies point one way, read from its source. Each module's layer is its
folder:

    cli -> api -> probing -> planning -> efficiency -> core
                  profiling -> runtime -> efficiency -> core
    (and each layer -> any layer below it on its line; probing -> runtime too)

api.py, the Python API, sits at the top of the package beside the folders. workloads/ is in no
layer: the bundled workload files are the user's side, loaded by path (runtime/workload.py), and
import torch and whatever their data needs; they are left out here.

core/, efficiency/ and planning/ are pure: no torch, no processes (planning is handed its prober
and its timer). The runtime runs jobs and never imports planning: re-planning reaches it as a
function. There is no import circle, and no omnitune import inside a function except in the CLI,
whose commands import what they use when they run, so that `omnitune --help` does not wait for
torch. No module imports its own package's face (its __init__) or omnitune's: it imports its
siblings by their own names, so that no import runs through an __init__ back to itself.
"""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).parent.parent / "omnitune"

LAYERS = ("core", "efficiency", "planning", "runtime", "probing", "profiling", "api", "cli")
ALLOWED = {"core": {"core"}, "efficiency": {"efficiency", "core"},
           "planning": {"planning", "efficiency", "core"}, "runtime": {"runtime", "efficiency", "core"},
           "probing": {"probing", "planning", "runtime", "efficiency", "core"},
           "profiling": {"profiling", "runtime", "efficiency", "core"},
           "api": set(LAYERS) - {"cli"}, "cli": set(LAYERS)}
PURE = {"core", "efficiency", "planning"}


def layer(module: str) -> str:
    if module == "api":             # the package's face (omnitune.plan and the rest): api.py at the top
        return "api"
    folder = module.split(".")[0]
    if folder not in LAYERS or "." not in module and not (PACKAGE / folder / "__init__.py").exists():
        raise AssertionError(f"omnitune/{module}: in no layer's folder ({', '.join(LAYERS)})")
    return folder


def pure(module: str) -> bool:
    return layer(module) in PURE


def modules() -> dict[str, ast.Module]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        if path.relative_to(PACKAGE).parts[0] == "workloads":      # user-side files, in no layer
            continue
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
    assert layer(module) == "cli" or not inside, f"{module} imports {inside} inside a function"


def test_no_import_circle():
    """Between modules: a folder's __init__, which gathers its modules' names, is left out."""
    edges = {m: {t for t, _ in GRAPH[m] if t in GRAPH and t != m and t not in LAYERS} for m in GRAPH}
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


# Being reworked with the rest of runtime/: these still import their siblings through
# omnitune.runtime's face. Each comes off as it imports them directly; the list only shrinks.
FACE_PENDING: set[str] = set()
FILES = sorted(p.relative_to(PACKAGE).as_posix() for p in PACKAGE.rglob("*.py"))


def faces_imported(path: Path) -> list[str]:
    """The imports of the module at `path` that go through a face it must not use: its own
    package's __init__ (`from omnitune.planning import budget` or `from . import budget` in
    omnitune/planning/x.py), or omnitune's (`import omnitune`, `from omnitune import api`). An
    __init__, a face that re-exports its modules, may; so may a __main__, which nothing imports."""
    if path.name == "__init__.py":
        return []
    own = path.parent.relative_to(PACKAGE.parent).parts          # omnitune/planning/x.py: omnitune.planning
    barred = {".".join(own), "omnitune"} - ({"omnitune"} if path.name == "__main__.py" else set())
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = list(own[:len(own) - node.level + 1]) if node.level else []     # `from .. import x`
            names = [".".join(base + ([node.module] if node.module else []))]
        else:
            continue
        if barred & set(names):
            out.append(ast.unparse(node))
    return out


@pytest.mark.parametrize("path", FILES)
def test_no_module_imports_its_own_packages_face(path):
    """`from omnitune.planning import budget` in omnitune/planning/x.py runs planning's __init__,
    which imports x: a circle that holds only while the __init__ names nothing that x needs. A
    module imports its siblings by their own names (`import omnitune.planning.budget as budget_mod`)."""
    bad = faces_imported(PACKAGE / path)
    if path in FACE_PENDING:
        assert bad, f"omnitune/{path} imports no package's face now: take it off FACE_PENDING"
    else:
        assert not bad, f"omnitune/{path} imports through a package's face: {bad}"


def test_face_pending_names_modules_that_exist():
    assert FACE_PENDING <= set(FILES), sorted(FACE_PENDING - set(FILES))


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
    from omnitune.core.protocols import NAMES

    for name, tree in modules().items():
        if name == "core.protocols":
            continue
        for node in ast.walk(tree):
            parts = [node.left, *node.comparators] if isinstance(node, ast.Compare) else \
                node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else []
            if parts:
                named = {p.value for p in parts if isinstance(p, ast.Constant) and p.value in NAMES}
                assert not named, f"omnitune/{name}: names protocols {named}: {ast.unparse(node)}"
