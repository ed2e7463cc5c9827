"""Tests of the book itself: structure, hygiene, the Colab cell, and names the sections use.

A chapter is a folder ``book/NN_name/``: a Markdown landing page (``index.md``) and section notebooks
(``MM_name.ipynb``). Executing the sections is done by the website build and by the Colab-like run
(``tests/test_colab.py``); these tests check what execution cannot.
"""

from __future__ import annotations

import ast
import importlib
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from library_names import resolve

ROOT = Path(__file__).resolve().parent.parent
BOOK = ROOT / "book"
CHAPTERS = sorted(p for p in BOOK.glob("[0-9][0-9]_*") if p.is_dir())
NOTEBOOKS = sorted(BOOK.glob("[0-9][0-9]_*/[0-9][0-9]_*.ipynb"))  # every section of every chapter
LANDING_PAGES = [chapter / "index.md" for chapter in CHAPTERS]
CONFIG = yaml.safe_load((ROOT / "_config.yml").read_text())
TOC = yaml.safe_load((ROOT / "_toc.yml").read_text())
REPO_URL = CONFIG["repository"]["url"]

sys.path.insert(0, str(ROOT / "tools"))
from release import install_ref, setup_cell  # noqa: E402  (tools/release.py: `make release`)

# What every set-up cell installs: the release tag of this version if it exists on this branch, else
# the default branch (_config.yml: repository.branch).
INSTALL_REF = install_ref(ROOT)
SETUP_CELL = setup_cell(REPO_URL, INSTALL_REF)


def _load(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def _code_cells(nb: dict) -> list[dict]:
    return [c for c in nb["cells"] if c["cell_type"] == "code"]


def _source(cell: dict) -> str:
    src = cell["source"]
    return "".join(src) if isinstance(src, list) else src


# Pages after the chapters: the library's map and API reference (issue 46).
APPENDIX_PAGES = ["book/api"]


def _toc_chapters(toc: dict) -> list[tuple[str, list[str]]]:
    """``(chapter page, [section pages])`` in the order of ``_toc.yml``, the appendix pages left out."""
    return [(entry["file"], [section["file"] for section in entry.get("sections", [])])
            for entry in toc.get("chapters", []) if entry["file"] not in APPENDIX_PAGES]


def test_the_appendix_pages_come_after_the_chapters() -> None:
    files = [entry["file"] for entry in TOC["chapters"]]
    assert files[-len(APPENDIX_PAGES):] == APPENDIX_PAGES
    assert all((ROOT / f"{page}.md").is_file() for page in APPENDIX_PAGES)


def _ids(path: Path) -> str:
    return path.relative_to(BOOK).as_posix()


def test_there_are_chapters_to_test() -> None:
    # Guards against a glob that silently matches nothing (every test below would pass vacuously).
    assert CHAPTERS and NOTEBOOKS, f"no chapters or sections found in {BOOK}"
    assert not list(BOOK.glob("[0-9][0-9]_*.ipynb")), "chapters are folders now: no notebook directly in book/"


def test_toc_lists_every_chapter_and_its_sections_in_reading_order() -> None:
    assert TOC["root"] == "book/intro" and (BOOK / "intro.md").exists()
    expected = [(f"book/{chapter.name}/index",
                 [f"book/{chapter.name}/{p.stem}" for p in sorted(chapter.glob("[0-9][0-9]_*.ipynb"))])
                for chapter in CHAPTERS]
    assert _toc_chapters(TOC) == expected, "_toc.yml: every chapter's index, then its section notebooks in numeric order"
    for chapter, sections in expected:
        assert (ROOT / f"{chapter}.md").exists()
        assert sections, f"{chapter} has no sections"


def test_chapter_and_section_numbers_are_consecutive() -> None:
    assert [int(c.name[:2]) for c in CHAPTERS] == list(range(1, len(CHAPTERS) + 1))
    for chapter in CHAPTERS:
        numbers = [int(p.name[:2]) for p in sorted(chapter.glob("[0-9][0-9]_*.ipynb"))]
        assert numbers == list(range(1, len(numbers) + 1)), chapter.name


@pytest.mark.parametrize("path", NOTEBOOKS, ids=_ids)
def test_section_title_carries_its_chapter_and_section_number(path: Path) -> None:
    title = _source(_load(path)["cells"][0]).splitlines()[0]
    number = f"{int(path.parent.name[:2])}.{int(path.name[:2])}"
    assert title.startswith(f"# {number} "), f"{_ids(path)}: the title must start with '# {number} ', got {title!r}"


@pytest.mark.parametrize("page", LANDING_PAGES, ids=lambda p: p.parent.name)
def test_landing_page_says_goal_prerequisites_what_you_build_and_lists_its_sections(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    number = int(page.parent.name[:2])
    assert text.startswith(f"# {number}. "), f"{page.parent.name}: the landing page opens with '# {number}. Title'"
    for part in ("**Goal.**", "**Prerequisites.**", "**What you will build.**"):
        assert part in text, f"{page.parent.name}/index.md lacks {part}"
    listing = re.search(r"```\{chapter-sections\}\n(.*?)```", text, re.DOTALL)
    assert listing, f"{page.parent.name}/index.md has no chapter-sections list"
    listed = [line.split(":", 1)[0].strip() for line in listing.group(1).splitlines() if line.strip()]
    assert listed == [p.stem for p in sorted(page.parent.glob("[0-9][0-9]_*.ipynb"))], (
        f"{page.parent.name}/index.md lists {listed}: list every section, in order")


def test_the_introduction_lists_every_chapter() -> None:
    text = (BOOK / "intro.md").read_text(encoding="utf-8")
    listing = re.search(r"```\{book-chapters\}\n(.*?)```", text, re.DOTALL)
    assert listing, "intro.md has no book-chapters list"
    listed = [line.split(":", 1)[0].strip() for line in listing.group(1).splitlines() if line.strip()]
    assert listed == [c.name for c in CHAPTERS]
    assert "drawn-figure" in text and "translation_teaser" in text, "the introduction shows a trained model's translation"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=_ids)
def test_notebook_is_committed_without_outputs(path: Path) -> None:
    for i, cell in enumerate(_code_cells(_load(path))):
        assert not cell.get("outputs"), f"{_ids(path)}: code cell {i} has stored outputs"
        assert cell.get("execution_count") is None, f"{_ids(path)}: code cell {i} has an execution count"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=_ids)
def test_notebook_is_valid_nbformat_with_unique_cell_ids(path: Path) -> None:
    """A cell added by hand without an ``id`` passes today with a warning and fails in future nbformat."""
    import nbformat

    nb = _load(path)
    nbformat.validate(nbformat.from_dict(nb), version=4, relax_add_props=False)
    ids = [cell.get("id") for cell in nb["cells"]]
    assert all(ids), f"{_ids(path)}: cells {[i for i, x in enumerate(ids) if not x]} have no id"
    assert len(set(ids)) == len(ids), f"{_ids(path)}: cell ids repeat"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=_ids)
def test_first_code_cell_is_the_shared_colab_setup_from_the_config_url(path: Path) -> None:
    first = _source(_code_cells(_load(path))[0])
    assert first.strip() == SETUP_CELL.strip(), (
        f"{_ids(path)}: the first code cell must be the shared setup cell installing from {REPO_URL} "
        "(the URL lives in _config.yml: repository.url)"
    )


def test_the_set_up_cells_ref_resolves_in_this_clone() -> None:
    """The ref the Colab cells install (a tag, or the default branch before the first release) names a
    commit of this repository, so a reader on Colab installs something that exists."""
    refs = {re.search(r"@ git\+\S+@([\w.\-/]+)\"", _source(_code_cells(_load(path))[0])).group(1) for path in NOTEBOOKS}
    assert refs == {INSTALL_REF}, f"every set-up cell installs {INSTALL_REF}, found {sorted(refs)}"
    found = [subprocess.run(["git", "rev-parse", "--verify", "--quiet", f"{name}^{{commit}}"], cwd=ROOT,
                            capture_output=True).returncode == 0 for name in (INSTALL_REF, f"origin/{INSTALL_REF}")]
    assert any(found), f"the set-up cells install {INSTALL_REF}, which is no branch or tag of this clone"


def test_readme_installs_from_the_same_url() -> None:
    assert f"git+{REPO_URL}" in (ROOT / "README.md").read_text()


@pytest.mark.parametrize("path", NOTEBOOKS, ids=_ids)
def test_notebook_has_a_title_and_a_python_kernel(path: Path) -> None:
    nb = _load(path)
    assert nb["metadata"].get("kernelspec", {}).get("language") == "python"
    first = nb["cells"][0]
    assert first["cell_type"] == "markdown" and _source(first).lstrip().startswith("# "), "a section opens with its title"


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


@pytest.mark.parametrize("path", NOTEBOOKS, ids=_ids)
def test_every_library_name_a_chapter_uses_exists(path: Path) -> None:
    used = _library_names_used(_load(path))
    assert used - {"transformer_lib"}, f"{_ids(path)} imports nothing from transformer_lib: chapters teach the library"
    missing = sorted(name for name in used if not _resolves(name))
    assert not missing, f"{_ids(path)} uses names transformer_lib does not define: {missing}"


def _public_library_names() -> set[str]:
    names: set[str] = set()
    for py in (ROOT / "transformer_lib").rglob("*.py"):  # the book-support package too
        module = importlib.import_module(".".join(py.relative_to(ROOT).with_suffix("").parts))
        names |= {n for n in getattr(module, "__all__", []) if not n.startswith("_")}
    return names


@pytest.mark.parametrize("path", NOTEBOOKS, ids=_ids)
def test_chapters_do_not_redefine_library_code(path: Path) -> None:
    library = _public_library_names()
    for cell in _code_cells(_load(path)):
        for node in _parse(cell).body:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                assert node.name not in library, (
                    f"{_ids(path)} defines {node.name}, which transformer_lib already provides: import it"
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


@pytest.mark.parametrize("path", NOTEBOOKS, ids=_ids)
def test_section_has_a_summary_and_exercises_each_with_a_solution(path: Path) -> None:
    nb = _load(path)
    headings = [line for cell in nb["cells"] if cell["cell_type"] == "markdown"
                for line in _source(cell).splitlines() if line.startswith("## ")]
    assert "## Summary" in headings and "## Exercises" in headings, f"{_ids(path)}: a section ends with its summary and exercises"
    assert headings.index("## Summary") < headings.index("## Exercises") == len(headings) - 1
    exercises = _exercises(nb)
    assert exercises, f"{_ids(path)}: no exercise"
    assert [int(n) for n, _ in exercises] == list(range(1, len(exercises) + 1)), f"{_ids(path)}: exercises numbered 1, 2, ..."
    unsolved = [number for number, solution in exercises if not solution]
    assert not unsolved, f"{_ids(path)}: exercises {unsolved} have no solution cell right after them"


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda p: p.name)
def test_chapter_has_at_least_three_exercises_one_open_ended(chapter: Path) -> None:
    notebooks = [_load(p) for p in sorted(chapter.glob("[0-9][0-9]_*.ipynb"))]
    count = sum(len(_exercises(nb)) for nb in notebooks)
    assert count >= 3, f"{chapter.name}: {count} exercises, need at least 3"
    open_ended = [cell for nb in notebooks for cell in nb["cells"]
                  if cell["cell_type"] == "markdown" and re.search(r"\*\*Exercise \d+ \(open-ended\)", _source(cell))]
    assert open_ended, f"{chapter.name}: at least one exercise is open-ended"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=_ids)
def test_exercise_solutions_hide_their_code_and_their_output(path: Path) -> None:
    """No spoilers: an answer's output ("c = 2 ln 198 = 10.577") must not be printed under its question."""
    visible = [
        f"exercise {number} (cell {cell.get('id')}: tags {cell.get('metadata', {}).get('tags', [])})"
        for number, solution in _exercises(_load(path))
        for cell in solution
        if not _hides_code_and_output(cell)
    ]
    assert not visible, (
        f"{_ids(path)}: solutions whose code or output is visible; tag them hide-cell: {visible}"
    )


def _checks(cell: dict) -> bool:
    """A code cell that asserts something (``assert``, or a claim in words through ``claim(...)``); the
    shared Colab cell's ``assert`` guards the install (its own test pins that cell) and checks no claim
    of the chapter."""
    source = _source(cell)
    return source.strip() != SETUP_CELL.strip() and bool(re.search(r"^\s*(?:assert\b|claim\()", source, re.MULTILINE))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=_ids)
def test_checks_print_that_they_passed_and_their_toggle_says_so(path: Path) -> None:
    for cell in _code_cells(_load(path)):
        source, tags = _source(cell), set(cell.get("metadata", {}).get("tags", []))
        if not _checks(cell):
            continue
        assert "✓" in source or "claim(" in source, (  # claim() prints its sentence with a ✓
            f"{_ids(path)} cell {cell.get('id')}: a checking cell prints a ✓ line when it passes")
        if tags & {"hide-input", "hide-cell"}:
            assert tags & {"check", "solution"}, (
                f"{_ids(path)} cell {cell.get('id')}: a collapsed check is tagged 'check' (its toggle says 'Show the check')")


# A write-it-yourself exercise: a starter cell the reader fills in (my_x, or a class MyX), then the grader
# alone in a cell, `grade_x(my_x)`.
_GRADES_THE_READER = re.compile(r"grade_\w+\((?:my_|My)\w+\)")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=_ids)
def test_write_it_yourself_exercises_say_where_to_write(path: Path) -> None:
    """On the website no cell runs: the text before the starter cell says where to write the answer (Colab or
    Jupyter, the next cell), and what a failing check reports (issue 44)."""
    cells = _load(path)["cells"]
    for i, cell in enumerate(cells):
        if cell["cell_type"] != "code" or not _GRADES_THE_READER.fullmatch(_source(cell).strip()):
            continue
        text = next(_source(c) for c in reversed(cells[:i]) if c["cell_type"] == "markdown")
        missing = [word for word in ("Colab", "Jupyter", "next cell", "smallest input") if word not in text]
        assert not missing, f"{_ids(path)}: the exercise graded in cell {cell.get('id')} does not say {missing}"


_GRADES_A_PITFALL = re.compile(r"^report = (grade_\w+)\((\w+)\)$", re.MULTILINE)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=_ids)
def test_write_it_yourself_exercises_show_a_full_report_on_a_wrong_answer(path: Path) -> None:
    """The page shows what a failing grader reports, not only the reader's "✗ not_implemented" (issue 44):
    after the reader's `grade_x(my_x)`, a cell runs the same grader on a bug from the pitfalls module,
    asserts which checks fail, and shows the report behind a toggle."""
    cells = _load(path)["cells"]
    for i, cell in enumerate(cells):
        reader = _GRADES_THE_READER.fullmatch(_source(cell).strip()) if cell["cell_type"] == "code" else None
        if not reader:
            continue
        grader = _source(cell).strip().split("(")[0]
        shown = [c for c in _code_cells({"cells": cells[i + 1 :]})
                 if any(m.group(1) == grader for m in _GRADES_A_PITFALL.finditer(_source(c)))]
        assert shown, f"{_ids(path)}: no cell after {cell.get('id')} shows {grader}'s report on a wrong answer"
        source, tags = _source(shown[0]), set(shown[0].get("metadata", {}).get("tags", []))
        wrong = _GRADES_A_PITFALL.search(source).group(2)
        assert re.search(rf"^from transformer_lib\.book\.pitfalls import .*\b{wrong}\b", source, re.MULTILINE), (
            f"{_ids(path)} cell {shown[0].get('id')}: the wrong answer comes from transformer_lib.book.pitfalls")
        assert "assert report.failed_checks == [" in source and source.rstrip().endswith("\nreport"), (
            f"{_ids(path)} cell {shown[0].get('id')}: asserts which checks fail and shows the report")
        assert "hide-output" in tags, f"{_ids(path)} cell {shown[0].get('id')}: the report is behind a toggle"


# Calls whose value is a table, a chart or a listing: a notebook shows such a value only as its cell's
# last expression (or through display()); anywhere else it is made and silently dropped.
SHOWN_AS_THE_CELL_VALUE = re.compile(r"^(show_table|shape_table|show_source|\w+_table|\w+_chart)$")


def _called(call: ast.Call) -> str | None:
    function = call.func
    return function.id if isinstance(function, ast.Name) else getattr(function, "attr", None)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=_ids)
def test_no_table_chart_or_listing_is_made_and_dropped(path: Path) -> None:
    """Section 4.5 once computed its comparison with the paper's Table 3 in a call that was not the
    cell's last statement, so the table the prose reads from never appeared."""
    dropped = []
    for cell in _code_cells(_load(path)):
        statements = _parse(cell).body
        for statement in statements[:-1]:
            if (isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call)
                    and SHOWN_AS_THE_CELL_VALUE.match(_called(statement.value) or "")):
                dropped.append(f"cell {cell.get('id')}, line {statement.lineno}: {_called(statement.value)}(...)")
    assert not dropped, (f"{_ids(path)}: made but never shown (not the cell's last value; use display()): "
                         + "; ".join(dropped))


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda p: p.name)
def test_chapter_makes_its_claims_checkable(chapter: Path) -> None:
    asserting = [cell for p in sorted(chapter.glob("[0-9][0-9]_*.ipynb")) for cell in _code_cells(_load(p))
                 if _checks(cell)]
    assert len(asserting) >= 3, f"{chapter.name}: {len(asserting)} asserting cells"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=_ids)
def test_section_set_up_is_one_collapsed_cell_that_calls_start(path: Path) -> None:
    """Second code cell: the section's imports and ``section.start()`` (charts, style, seed, the profile in one
    line), collapsed behind a toggle that says "Show the set-up"; a chapter's shared data comes from
    its module in transformer_lib.book.chapters, not from code copied into each section."""
    setup = _code_cells(_load(path))[1]
    tags = set(setup.get("metadata", {}).get("tags", []))
    assert {"hide-input", "setup"} <= tags, f"{_ids(path)}: the set-up cell is tagged hide-input and setup"
    assert re.search(r"^section\.start\(", _source(setup), re.MULTILINE), (
        f"{_ids(path)}: the set-up cell calls section.start()")


def _bound_names(target: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(target) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=_ids)
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
                f"{_ids(path)} assigns to {rebound}, imported from {[imported[n] for n in rebound]}: use another name"
            )


@pytest.mark.parametrize("page", LANDING_PAGES, ids=lambda p: p.parent.name)
def test_chapter_opens_with_the_architecture_map(page: Path) -> None:
    """The introduction promises it: each chapter's page shows the map, its own part highlighted,
    drawn by ``architecture_diagram`` when the site is built (never a picture that could go stale)."""
    text = page.read_text(encoding="utf-8")
    figure = re.search(r"```\{drawn-figure\} transformer_lib\.book\.figures:architecture_diagram\n:kwargs: (\{.*\})", text)
    assert figure, f"{page.parent.name}/index.md does not draw architecture_diagram"
    from transformer_lib.book.figures import ARCHITECTURE_CHAPTERS

    highlight = json.loads(figure.group(1))["highlight"]
    assert highlight and set(highlight) <= set(ARCHITECTURE_CHAPTERS)
