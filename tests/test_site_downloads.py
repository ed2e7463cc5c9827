"""The website offers each notebook as the build executed it, outputs and figures included.

Reads the built site (``make book``; ``BOOK_SITE`` or ``SITE_DIR`` may point at another build's
``_build/html``): each notebook page's download menu (a chapter's sections: ``book/<chapter>/*.ipynb``)
links to an executed copy of its notebook (``_ext/book_site.py``), and that file has its outputs; each
chapter's executed notebooks carry its figures. Marked ``browser`` like the other tests of the built site: ``make browser``
runs it after the build.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pytest

nbformat = pytest.importorskip("nbformat")

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parent.parent
SITE = Path(os.environ.get("BOOK_SITE") or os.environ.get("SITE_DIR") or ROOT / "_build" / "html")
NOTEBOOKS = sorted(p.relative_to(ROOT / "book").with_suffix("").as_posix() for p in (ROOT / "book").rglob("*.ipynb")
                   if ".ipynb_checkpoints" not in p.parts)
BUILT = [n for n in NOTEBOOKS if (SITE / "book" / f"{n}.html").is_file()]


def test_the_site_is_built() -> None:
    assert BUILT, f"no notebook pages in {SITE}: run `make book` first"


def executed(name: str) -> Any:
    """The executed notebook the page ``book/<name>.html`` offers (its one download link to it)."""
    page = SITE / "book" / f"{name}.html"
    links = re.findall(r'href="([^"]*-with-outputs\.ipynb)"', page.read_text(encoding="utf-8"))
    assert len(set(links)) == 1, f"{page.name}: one download link to the notebook with outputs, found {links}"
    return nbformat.read((page.parent / unquote(links[0])).resolve(), as_version=4)


@pytest.mark.parametrize("name", BUILT)
def test_the_notebook_page_offers_its_executed_notebook(name: str) -> None:
    notebook = executed(name)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    outputs = [output for cell in code for output in cell.outputs]
    assert all(cell.execution_count for cell in code), f"{name}: every code cell ran"
    assert outputs, f"{name}: the executed notebook has outputs"
    assert not [o for o in outputs if o.output_type == "error"], f"{name}: the executed notebook has an error"


@pytest.mark.parametrize("chapter", sorted({n.split("/")[0] for n in BUILT}))
def test_each_chapters_executed_notebooks_carry_its_figures(chapter: str) -> None:
    names = [n for n in BUILT if n.split("/")[0] == chapter]
    figures = [o for n in names for cell in executed(n).cells if cell.cell_type == "code" for o in cell.outputs
               if {"image/png", "image/svg+xml"} & set(o.get("data", {}))]
    assert figures, f"{chapter}: no executed notebook of the chapter carries a figure ({names})"
