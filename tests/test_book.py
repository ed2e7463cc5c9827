"""Tests of the book itself: structure, hygiene, the Colab cell, and names the chapters use.

Executing the chapters is done by nbmake (``make test`` runs ``pytest --nbmake book``) and by the
website build; these tests check what execution cannot.
"""

from __future__ import annotations

import ast
import importlib
import json
import re
from pathlib import Path

import pytest
import yaml

from library_names import resolve

ROOT = Path(__file__).resolve().parent.parent
BOOK = ROOT / "book"
NOTEBOOKS = sorted(BOOK.glob("[0-9][0-9]_*.ipynb"))
CONFIG = yaml.safe_load((ROOT / "_config.yml").read_text())
TOC = yaml.safe_load((ROOT / "_toc.yml").read_text())
REPO_URL = CONFIG["repository"]["url"]

SETUP_CELL = f"""\
# On Colab (or wherever transformer_lib is not installed) this installs the library from the
# book's repository. Where it is installed already (a clone, the website build) it does nothing.
try:
    import transformer_lib
except ImportError:
    %pip install --quiet "transformer_lib[book] @ git+{REPO_URL}"
"""


def _load(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def _code_cells(nb: dict) -> list[dict]:
    return [c for c in nb["cells"] if c["cell_type"] == "code"]


def _source(cell: dict) -> str:
    src = cell["source"]
    return "".join(src) if isinstance(src, list) else src


def _toc_files(toc: dict) -> list[str]:
    files = [toc["root"]]
    for entry in toc.get("chapters", []):
        files.append(entry["file"])
    for part in toc.get("parts", []):
        files += [entry["file"] for entry in part.get("chapters", [])]
    return files


def test_there_are_chapters_to_test() -> None:
    # Guards against a glob that silently matches nothing (every test below would pass vacuously).
    assert NOTEBOOKS, f"no chapter notebooks found in {BOOK}"


def test_toc_lists_exactly_the_chapters_in_reading_order() -> None:
    files = _toc_files(TOC)
    assert files[0] == "book/intro"
    chapters = files[1:]
    assert chapters == [f"book/{p.stem}" for p in NOTEBOOKS], "every chapter notebook in _toc.yml, in numeric order"
    for f in files:
        assert (ROOT / f"{f}.md").exists() or (ROOT / f"{f}.ipynb").exists(), f"{f} is in _toc.yml but missing"


def test_chapter_numbers_are_consecutive() -> None:
    numbers = [int(p.name[:2]) for p in NOTEBOOKS]
    assert numbers == list(range(1, len(numbers) + 1))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_is_committed_without_outputs(path: Path) -> None:
    for i, cell in enumerate(_code_cells(_load(path))):
        assert not cell.get("outputs"), f"{path.name}: code cell {i} has stored outputs"
        assert cell.get("execution_count") is None, f"{path.name}: code cell {i} has an execution count"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_is_valid_nbformat_with_unique_cell_ids(path: Path) -> None:
    """A cell added by hand without an ``id`` passes today with a warning and fails in future nbformat."""
    import nbformat

    nb = _load(path)
    nbformat.validate(nbformat.from_dict(nb), version=4, relax_add_props=False)
    ids = [cell.get("id") for cell in nb["cells"]]
    assert all(ids), f"{path.name}: cells {[i for i, x in enumerate(ids) if not x]} have no id"
    assert len(set(ids)) == len(ids), f"{path.name}: cell ids repeat"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_first_code_cell_is_the_shared_colab_setup_from_the_config_url(path: Path) -> None:
    first = _source(_code_cells(_load(path))[0])
    assert first.strip() == SETUP_CELL.strip(), (
        f"{path.name}: the first code cell must be the shared setup cell installing from {REPO_URL} "
        "(the URL lives in _config.yml: repository.url)"
    )


def test_readme_installs_from_the_same_url() -> None:
    assert f"git+{REPO_URL}" in (ROOT / "README.md").read_text()


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_has_a_title_and_a_python_kernel(path: Path) -> None:
    nb = _load(path)
    assert nb["metadata"].get("kernelspec", {}).get("language") == "python"
    first = nb["cells"][0]
    assert first["cell_type"] == "markdown" and _source(first).lstrip().startswith("# "), "a chapter opens with its title"


_MAGIC = re.compile(r"^([ \t]*)[%!].*$", re.MULTILINE)


def _parse(cell: dict) -> ast.Module:
    # Keep the magic's indentation: the setup cell's %pip sits inside an `except` block.
    return ast.parse(_MAGIC.sub(r"\1pass", _source(cell)))


def _library_names_used(nb: dict) -> set[str]:
    """Dotted names a notebook takes from transformer_lib, by import or by attribute access."""
    used: set[str] = set()
    aliases: dict[str, str] = {}  # local name -> dotted name it stands for
    for cell in _code_cells(nb):
        tree = _parse(cell)
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("transformer_lib"):
                for alias in node.names:
                    assert alias.name != "*", "no `import *` from transformer_lib: names must be traceable"
                    used.add(f"{node.module}.{alias.name}")
                    aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.startswith("transformer_lib"):
                        used.add(alias.name)
                        if alias.asname:
                            aliases[alias.asname] = alias.name
                        else:
                            aliases["transformer_lib"] = "transformer_lib"
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases:
                used.add(f"{aliases[node.value.id]}.{node.attr}")
    return used


def _resolves(dotted: str) -> bool:
    try:
        resolve(dotted)
    except LookupError:
        return False
    return True


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_every_library_name_a_chapter_uses_exists(path: Path) -> None:
    used = _library_names_used(_load(path))
    assert used - {"transformer_lib"}, f"{path.name} imports nothing from transformer_lib: chapters teach the library"
    missing = sorted(name for name in used if not _resolves(name))
    assert not missing, f"{path.name} uses names transformer_lib does not define: {missing}"


def _public_library_names() -> set[str]:
    names: set[str] = set()
    for py in (ROOT / "transformer_lib").rglob("*.py"):  # the book-support package too
        module = importlib.import_module(".".join(py.relative_to(ROOT).with_suffix("").parts))
        names |= {n for n in getattr(module, "__all__", []) if not n.startswith("_")}
    return names


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_chapters_do_not_redefine_library_code(path: Path) -> None:
    library = _public_library_names()
    for cell in _code_cells(_load(path)):
        for node in _parse(cell).body:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                assert node.name not in library, (
                    f"{path.name} defines {node.name}, which transformer_lib already provides: import it"
                )


# An exercise opens with a bold "**Exercise N.**" (or "**Exercise N (open-ended).**") in a markdown
# cell; its solution is the code cells that follow, up to the next markdown cell. Found this way, a
# chapter's collapsed set-up cell (`hide-input`, before any exercise) is never taken for a solution.
_EXERCISE = re.compile(r"\*\*Exercise (\d+)\b")
# Jupyter Book 1 tags: `hide-cell` puts code and output behind one toggle; `hide-input` alone leaves
# the output, which states the answer, printed under the question; a `remove-*` tag takes the
# solution away from the reader instead of putting it behind a toggle.
_REMOVE = {"remove-cell", "remove-input", "remove-output"}


def _exercises(nb: dict) -> list[tuple[str, list[dict]]]:
    """``(number, solution cells)`` for each exercise of a notebook, in order."""
    cells = nb["cells"]
    exercises = []
    for i, cell in enumerate(cells):
        numbers = _EXERCISE.findall(_source(cell)) if cell["cell_type"] == "markdown" else []
        assert len(numbers) <= 1, (
            f"exercises {numbers} share one markdown cell: give each its own, followed by its solution"
        )
        if numbers:
            solution = []
            for following in cells[i + 1 :]:
                if following["cell_type"] != "code":
                    break
                solution.append(following)
            exercises.append((numbers[0], solution))
    return exercises


def _hides_code_and_output(cell: dict) -> bool:
    tags = set(cell.get("metadata", {}).get("tags", []))
    return not tags & _REMOVE and ("hide-cell" in tags or {"hide-input", "hide-output"} <= tags)


def test_the_spoiler_rule_needs_code_and_output_hidden() -> None:
    """The rule itself, on made-up cells: only code *and* output behind a toggle counts as hidden."""
    def cell(*tags: str) -> dict:
        return {"cell_type": "code", "metadata": {"tags": list(tags)}, "source": "print(42)"}

    assert _hides_code_and_output(cell("hide-cell"))
    assert _hides_code_and_output(cell("hide-input", "hide-output"))
    assert not _hides_code_and_output(cell("hide-input"))  # the answer printed under the question
    assert not _hides_code_and_output(cell("hide-output"))
    assert not _hides_code_and_output(cell())
    assert not _hides_code_and_output(cell("remove-cell"))  # gone, not behind a toggle
    setup = cell("hide-input")  # a chapter's collapsed set-up cell comes before any exercise
    nb = {"cells": [setup, {"cell_type": "markdown", "source": "**Exercise 1.** Why?"},
                    cell("hide-cell"), cell("hide-input"), {"cell_type": "markdown", "source": "## Summary"}]}
    [(number, solution)] = _exercises(nb)
    assert number == "1" and len(solution) == 2 and all(c is not setup for c in solution)
    assert [_hides_code_and_output(c) for c in solution] == [True, False]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_chapter_has_at_least_three_exercises_each_with_a_solution(path: Path) -> None:
    exercises = _exercises(_load(path))
    assert len(exercises) >= 3, f"{path.name}: {len(exercises)} exercises, need at least 3"
    unsolved = [number for number, solution in exercises if not solution]
    assert not unsolved, f"{path.name}: exercises {unsolved} have no solution cell right after them"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_exercise_solutions_hide_their_code_and_their_output(path: Path) -> None:
    """No spoilers: an answer's output ("c = 2 ln 198 = 10.577") must not be printed under its question."""
    visible = [
        f"exercise {number} (cell {cell.get('id')}: tags {cell.get('metadata', {}).get('tags', [])})"
        for number, solution in _exercises(_load(path))
        for cell in solution
        if not _hides_code_and_output(cell)
    ]
    assert not visible, (
        f"{path.name}: solutions whose code or output is visible; tag them hide-cell: {visible}"
    )


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_chapter_checks_print_that_they_passed(path: Path) -> None:
    sources = [_source(c) for c in _code_cells(_load(path))]
    asserting = [s for s in sources if re.search(r"^\s*assert\b", s, re.MULTILINE)]
    assert len(asserting) >= 3, f"{path.name}: a chapter makes its claims checkable (found {len(asserting)} asserting cells)"
    assert all("✓" in s for s in asserting), f"{path.name}: every checking cell prints a ✓ line when it passes"


def _bound_names(target: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(target) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_chapters_do_not_rebind_names_imported_from_the_library(path: Path) -> None:
    """A cell that assigns to an imported name (``bleu_table = pd.DataFrame(...)``) breaks every later
    cell that calls the library's function, perhaps only on the day the branch that calls it runs."""
    imported: dict[str, str] = {}
    for cell in _code_cells(_load(path)):
        tree = _parse(cell)
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("transformer_lib"):
                imported.update({a.asname or a.name: f"{node.module}.{a.name}" for a in node.names})
        for node in ast.walk(tree):
            targets: list[ast.AST] = []
            if isinstance(node, ast.Assign):
                targets = list(node.targets)
            elif isinstance(node, (ast.AugAssign, ast.AnnAssign, ast.For, ast.comprehension, ast.NamedExpr)):
                targets = [node.target]
            elif isinstance(node, (ast.With, ast.AsyncWith)):
                targets = [item.optional_vars for item in node.items if item.optional_vars is not None]
            rebound = sorted(set().union(*map(_bound_names, targets)) & imported.keys()) if targets else []
            assert not rebound, (
                f"{path.name} assigns to {rebound}, imported from {[imported[n] for n in rebound]}: use another name"
            )


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_chapter_opens_with_the_architecture_map(path: Path) -> None:
    """The introduction promises it: each chapter opens with the map, its own part highlighted."""
    opening = [_source(c) for c in _code_cells(_load(path))[:4]]
    assert any(re.search(r"architecture_diagram\(highlight=\[.+\]", s) for s in opening), (
        f"{path.name}: none of the first four code cells draws architecture_diagram(highlight=[...])"
    )
