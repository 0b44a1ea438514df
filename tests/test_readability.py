"""Every function and class of omnitune/ reads at a glance: by the AST, a function is at most
MAX_FUNCTION lines and a class at most MAX_CLASS, from its `def` or `class` line to its last
(decorators not counted); a nested one counts on its own as well as within its parent."""

import ast
import io
import re
import tokenize
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


# The benchmark workloads whose runs chose the constants and rules: the runs' facts are decision
# records (docs/decisions.md), and the code's comments and docstrings say what and why, pointing there.
BENCHMARK_WORKLOADS = ("teacher-mlp", "shapes-resnet", "gru-count", "charlm-stdlib", "denoise-waves",
                       "lenet-digits", "cnn1d-mnist1d")
OWN_DEFINITIONS = "workloads"      # omnitune/workloads/ defines them, and its prose names them


def prose(source: str) -> list[tuple[int, str]]:
    """(line, text) of every comment and docstring of `source`: its COMMENT tokens, and every string
    that stands alone as a statement (a module's, class's or function's docstring, an attribute's)."""
    out = [(tok.start[0], tok.string) for tok in tokenize.generate_tokens(io.StringIO(source).readline)
           if tok.type == tokenize.COMMENT]
    out += [(node.lineno, node.value.value) for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)]
    return out


def workloads_named(root: Path = PACKAGE) -> list[str]:
    """"PATH:LINE: NAME" for each benchmark workload named in a comment or docstring under `root`
    (outside its workloads/). A name written as a string literal, "lenet-digits", is code: an
    example's argument or a registry key."""
    pattern = re.compile("|".join(re.escape(name) for name in BENCHMARK_WORKLOADS))
    out = []
    for file in sorted(root.rglob("*.py")):
        path = file.relative_to(root).as_posix()
        if path.split("/")[0] == OWN_DEFINITIONS:
            continue
        for line, text in sorted(prose(file.read_text())):
            for m in pattern.finditer(text):
                if text[m.start() - 1:m.start()] == '"' and text[m.end():m.end() + 1] == '"':
                    continue
                out.append(f"{path}:{line + text.count(chr(10), 0, m.start())}: {m.group()}")
    return out


def test_no_comment_or_docstring_narrates_a_benchmark_run():
    named = workloads_named()
    assert not named, ("say what the code does and why, and point to the run behind it as "
                       f"(docs/decisions.md, RECORD), whose record names the workload: {named}")


def test_the_scan_sees_comments_and_docstrings_but_not_code(tmp_path):
    (tmp_path / "workloads").mkdir()
    (tmp_path / "workloads" / "w.py").write_text('"""teacher-mlp: its own definition."""\n')
    (tmp_path / "m.py").write_text(
        '"""Module: gru-count."""\n'
        'X = 1  # on shapes-resnet\n'
        'def f():\n'
        '    """Example: run("lenet-digits")."""\n'
        '    return "charlm-stdlib"\n'
        'Y = 2\n'
        '"""An attribute\'s docstring: denoise-waves."""\n')
    assert workloads_named(tmp_path) == ["m.py:1: gru-count", "m.py:2: shapes-resnet",
                                         "m.py:7: denoise-waves"]


DESIGN_FREE = ("workloads", "cli")     # a workload's own constants, the commands' display settings


def numeric_constants(root: Path = PACKAGE) -> list[tuple[str, str]]:
    """(PATH:LINE, NAME) of every module-level UPPER_CASE name bound to a number or a tuple of
    numbers in `root` (outside DESIGN_FREE)."""
    def numeric(v) -> bool:
        return ((isinstance(v, ast.Constant) and isinstance(v.value, (int, float)) and not isinstance(v.value, bool))
                or (isinstance(v, ast.UnaryOp) and numeric(v.operand))
                or (isinstance(v, ast.BinOp) and numeric(v.left) and numeric(v.right))
                or (isinstance(v, ast.Tuple) and bool(v.elts) and all(map(numeric, v.elts))))
    out = []
    for file in sorted(root.rglob("*.py")):
        path = file.relative_to(root).as_posix()
        if path.split("/")[0] in DESIGN_FREE:
            continue
        for node in ast.parse(file.read_text()).body:
            targets = (node.targets if isinstance(node, ast.Assign)
                       else [node.target] if isinstance(node, ast.AnnAssign) else [])
            if targets and node.value is not None and numeric(node.value):
                out += [(f"{path}:{node.lineno}", t.id) for t in targets if isinstance(t, ast.Name) and t.id.isupper()]
    return out


def test_every_numeric_constant_has_a_line_in_the_decision_records():
    records = (PACKAGE.parent / "docs" / "decisions.md").read_text()
    missing = [f"{where} {name}" for where, name in numeric_constants() if not re.search(rf"\b{name}\b", records)]
    assert not missing, f"docs/decisions.md names no record or design line for: {missing}"
