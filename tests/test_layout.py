"""The package's layout: three layers, each importing only the ones below it, read from the source.

- the core: every module directly in ``transformer_lib/`` (the model and its training pieces);
- the applications: ``transformer_lib/cli/`` (the command lines and everything about runs);
- the book's support: ``transformer_lib/book/`` (figures, charts, ``show_source``, committed results).

The imports are read from the source (every ``import``, at the top of a module or inside a
function), so a lazy import inside a function cannot hide a dependency; a second check imports
every module in a fresh interpreter and looks at what got loaded. Inside the core the imports go
one way, in the order of the package's map (``transformer_lib/__init__.py``, the book's order): a
module imports only modules listed before it, so the import graph reads like the table of
contents and has no cycles. And every module and function stays small enough to read.
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "transformer_lib"
CORE = sorted(p for p in PACKAGE.glob("*.py") if p.stem != "__init__")
APPS = sorted((PACKAGE / "cli").glob("*.py"))
EVERY_MODULE = sorted(PACKAGE.rglob("*.py"))  # the three layers, the book's subpackages included
BOOK_LIBRARIES = ("altair", "pandas", "matplotlib", "vl_convert", "IPython", "ipywidgets", "jupyter_book", "sphinx")
MAX_MODULE_LINES = 600  # a core module
MAX_FUNCTION_LINES = 60  # code lines of one function (docstring, comments and blank lines not counted)


def _dotted(path: Path, root: Path = ROOT) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path, root: Path = ROOT) -> set[str]:
    """Every module ``path`` imports, anywhere in it, as absolute dotted names (``from . import x``
    counts as importing ``package.x``)."""
    package = _dotted(path, root) if path.stem == "__init__" else _dotted(path, root).rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0:
                base = node.module or ""
            else:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1])
                base = f"{base}.{node.module}" if node.module else base
            found.add(base)
            found |= {f"{base}.{alias.name}" for alias in node.names}  # `from . import x`: maybe a module
    return found


def _within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def test_there_are_three_layers() -> None:
    assert {p.stem for p in CORE} >= {"attention", "model", "trainer", "decoding", "translator"}
    assert {p.stem for p in APPS} >= {"train", "translate", "options", "runs"}
    assert (PACKAGE / "book" / "__init__.py").is_file()
    assert not (PACKAGE / "train.py").exists() and not (PACKAGE / "training.py").exists(), "one name per subject"


def test_the_layout_check_reads_imports_inside_functions(tmp_path: Path) -> None:
    """The check below must be able to fail: a lazy import inside a function is an import."""
    probe = tmp_path / "transformer_lib" / "probe.py"
    probe.parent.mkdir()
    probe.write_text("def draw():\n    from .book.figures import plot\n    import altair\n")
    found = imports(probe, tmp_path)
    assert "transformer_lib.book.figures" in found and "altair" in found


@pytest.mark.parametrize("path", CORE + APPS, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_imports_go_down_the_layers_only(path: Path) -> None:
    """The core imports neither the applications nor the book; the applications not the book; neither
    imports the book's libraries, at import time or inside a function."""
    found = imports(path)
    forbidden = ["transformer_lib.book"] + (["transformer_lib.cli"] if path in CORE else [])
    wrong = sorted(name for name in found for prefix in forbidden if _within(name, prefix))
    book_libraries = sorted(name for name in found for lib in BOOK_LIBRARIES if _within(name, lib))
    # The one optional use: the train command line draws loss.png when matplotlib is there.
    if path.name == "results.py" and path in APPS:
        book_libraries = [name for name in book_libraries if not _within(name, "matplotlib")]
    assert not wrong, f"{path.relative_to(ROOT)} imports {wrong}: move the code down a layer, or up into the caller"
    assert not book_libraries, f"{path.relative_to(ROOT)} imports the book's libraries {book_libraries}"


def _core_order() -> list[str]:
    import transformer_lib

    return re.findall(r"^    (\w+) ", transformer_lib.__doc__, re.M)


def test_the_core_imports_read_like_the_table_of_contents() -> None:
    """Each core module imports only core modules listed before it on the package's map: the import
    graph has floors in reading order, every arrow points down, and there is no cycle."""
    order = _core_order()
    assert set(order) == {p.stem for p in CORE}, "the package's map lists every core module once"
    position = {name: i for i, name in enumerate(order)}
    later = {}
    for path in CORE:
        used = {name.split(".")[1] for name in imports(path) if _within(name, "transformer_lib") and name.count(".") >= 1}
        wrong = sorted(m for m in used if m in position and position[m] >= position[path.stem] and m != path.stem)
        if wrong:
            later[path.stem] = wrong
    assert not later, f"core modules importing modules listed after them (or themselves): {later}"


def _function_lines(function: ast.FunctionDef | ast.AsyncFunctionDef, source: list[str]) -> int:
    """Code lines of a function: its body without the docstring, blank lines and comment lines."""
    body = function.body
    if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant) \
            and isinstance(body[0].value.value, str):
        body = body[1:]
    if not body:
        return 0
    lines = source[body[0].lineno - 1 : function.end_lineno]
    return sum(1 for line in lines if line.strip() and not line.strip().startswith("#"))


def _sizes(paths: list[Path]) -> tuple[dict[str, int], dict[str, int]]:
    modules, functions = {}, {}
    for path in paths:
        text = path.read_text(encoding="utf-8")
        modules[str(path.relative_to(PACKAGE))] = len(text.splitlines())
        lines = text.splitlines()
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                functions[f"{path.relative_to(PACKAGE)}:{node.name}:{node.lineno}"] = _function_lines(node, lines)
    return modules, functions


def test_no_core_module_is_too_long() -> None:
    modules, _ = _sizes(CORE + APPS)
    long_modules = {name: n for name, n in modules.items() if "/" not in name and n > MAX_MODULE_LINES}
    assert not long_modules, f"core modules over {MAX_MODULE_LINES} lines (split them by subject): {long_modules}"
    assert max(modules.values()) > 300, "the sizes were measured"


def test_no_function_is_too_long_in_any_layer() -> None:
    """The function limit holds in every layer: the core, the command lines, and the book's support
    (figures, charts, chapters' helpers and the exercises' graders)."""
    _, functions = _sizes(EVERY_MODULE)
    long_functions = {name: n for name, n in functions.items() if n > MAX_FUNCTION_LINES}
    assert not long_functions, f"functions over {MAX_FUNCTION_LINES} code lines (split them): {long_functions}"
    measured = {name.rpartition("/")[0] for name in functions}
    assert {"", "cli", "book", "book/graders", "book/chapters"} <= measured, f"every layer was measured: {measured}"
    assert max(functions.values()) > 20, "the sizes were measured"


def test_the_size_check_counts_code_not_docstrings() -> None:
    source = 'def f():\n    """Doc.\n\n    More doc.\n    """\n    # a comment\n\n    x = 1\n    return x\n'
    (function,) = ast.parse(source).body
    assert _function_lines(function, source.splitlines()) == 2


# Imports each module in turn, in a fresh interpreter, and names which forbidden modules it loaded.
_PROBE = """
import importlib, json, sys
forbidden = tuple(json.loads(sys.argv[1]))
def loaded():
    return {m for m in sys.modules if any(m == f or m.startswith(f + ".") for f in forbidden)}
found, before = {}, loaded()
for name in ["transformer_lib", *json.loads(sys.argv[2])]:
    importlib.import_module(name)
    new = sorted(loaded() - before)
    if new:
        found[name] = new
    before |= set(new)
elsewhere = sorted(m.__name__ for m in list(sys.modules.values())
                   if m.__name__.startswith("transformer_lib") and getattr(m, "__file__", None)
                   and not m.__file__.startswith(sys.argv[3]))
print(json.dumps({"found": found, "elsewhere": elsewhere}))
"""


def _probe(forbidden: list[str], modules: list[str]) -> dict:
    result = subprocess.run(
        [sys.executable, "-c", _PROBE, json.dumps(forbidden), json.dumps(modules), str(ROOT)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_importing_the_core_and_the_applications_loads_nothing_of_the_book() -> None:
    report = _probe(["transformer_lib.book", *BOOK_LIBRARIES], [_dotted(p) for p in CORE + APPS])
    # An editable install of another checkout can supply a module this one has deleted.
    assert not report["elsewhere"], f"modules loaded from outside {ROOT}: {report['elsewhere']}"
    assert not report["found"], "importing the core or the applications loaded what only the book needs: " + "; ".join(
        f"{name} -> {', '.join(mods[:6])}" for name, mods in report["found"].items())


def test_the_book_package_imports_none_of_its_modules() -> None:
    """``import transformer_lib.book.experiment`` (what the chapters' set-up cell needs) must not load altair."""
    report = _probe(["altair", "pandas", "matplotlib"],
                    ["transformer_lib.book", "transformer_lib.book.experiment", "transformer_lib.book.source"])
    assert report == {"found": {}, "elsewhere": []}


def test_every_module_is_on_the_map_with_its_tests() -> None:
    """A newcomer finds a concept's module, chapter and tests by one name: the package docstring
    lists every core module, and the site's library page (book/api.md) names each module's test files,
    which exist."""
    modules = {p.stem for p in CORE}
    assert modules <= set(_core_order()), f"missing from transformer_lib/__init__.py's map: {sorted(modules - set(_core_order()))}"
    import transformer_lib.cli

    listed_apps = set(re.findall(r"^    (\w+) ", transformer_lib.cli.__doc__, re.M))
    assert {p.stem for p in APPS if p.stem != "__init__"} <= listed_apps, "transformer_lib/cli/__init__.py's map"
    page = (ROOT / "book" / "api.md").read_text()
    rows = dict(re.findall(r"^\| `([\w.]+)` \|.*\| ([^|]*test_[^|]*) \|$", page, re.M))
    assert modules <= set(rows), f"missing from book/api.md's table: {sorted(modules - set(rows))}"
    for module, tests in rows.items():
        for test in re.findall(r"`(test_\w+\.py)`", tests):
            assert (ROOT / "tests" / test).is_file(), f"book/api.md: {module}'s tests {test} do not exist"
    documented = set(re.findall(r"^\s*\.\. automodule:: transformer_lib\.(\w+)$", page, re.M))
    assert modules <= documented, f"not in book/api.md's reference: {sorted(modules - documented)}"
