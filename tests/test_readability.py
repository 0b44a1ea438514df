"""Every function and class of omnitune/ reads at a glance: by the AST, a function is at most
MAX_FUNCTION lines and a class at most MAX_CLASS, from its `def` or `class` line to its last
(decorators not counted); a nested one counts on its own as well as within its parent."""

import ast
from pathlib import Path

PACKAGE = Path(__file__).parent.parent / "omnitune"
MAX_FUNCTION = 60
MAX_CLASS = 200

def lengths(root: Path = PACKAGE) -> dict[str, tuple[int, int]]:
    """"PATH:QUALNAME" of every function and class under `root` -> (its lines, its limit)."""
    out: dict[str, tuple[int, int]] = {}

    def visit(node: ast.AST, path: str, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{path}:{prefix}{child.name}"
                limit = MAX_CLASS if isinstance(child, ast.ClassDef) else MAX_FUNCTION
                lines = child.end_lineno - child.lineno + 1
                out[name] = max(out.get(name, (0, limit)), (lines, limit))      # a name defined twice: its longer
                visit(child, path, f"{prefix}{child.name}.")
            else:
                visit(child, path, prefix)

    for file in sorted(root.rglob("*.py")):
        visit(ast.parse(file.read_text()), file.relative_to(root).as_posix(), "")
    return out


LENGTHS = lengths()


def test_no_function_or_class_is_too_long():
    too_long = {name: f"{n} lines (at most {limit})" for name, (n, limit) in LENGTHS.items()
                if n > limit}
    assert not too_long, f"split these into well-named parts: {too_long}"


def test_the_count_sees_a_long_function_and_a_long_class(tmp_path):
    """The measure itself: a function of MAX_FUNCTION + 1 lines and a class of MAX_CLASS + 1 are
    too long, one line fewer is not; a method counts on its own, decorators do not."""
    body = "    x = 1\n"
    (tmp_path / "m.py").write_text(
        "@decorator\ndef long():\n" + body * MAX_FUNCTION + "def short():\n" + body * (MAX_FUNCTION - 1)
        + "class Long:\n" + "    def method(self):\n" + "        x = 1\n" * (MAX_CLASS - 1)
        + "class Short:\n" + body * (MAX_CLASS - 1))
    got = {name: n > limit for name, (n, limit) in lengths(tmp_path).items()}
    assert got == {"m.py:long": True, "m.py:short": False, "m.py:Long": True, "m.py:Long.method": True,
                   "m.py:Short": False}
