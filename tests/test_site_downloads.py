"""The website offers each chapter's notebook as the build executed it, outputs and figures included.

Reads the built site (``make book``; ``BOOK_SITE`` may point at another build's ``_build/html``): each
chapter page's download menu links to an executed copy of its notebook (``_ext/book_site.py``), and
that file has its outputs. Marked ``browser`` like the other tests of the built site: ``make browser``
runs it after the build.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from urllib.parse import unquote

import pytest

nbformat = pytest.importorskip("nbformat")

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parent.parent
SITE = Path(os.environ.get("BOOK_SITE") or ROOT / "_build" / "html")
CHAPTERS = sorted(p.stem for p in (ROOT / "book").glob("[0-9][0-9]_*.ipynb"))
BUILT = [c for c in CHAPTERS if (SITE / "book" / f"{c}.html").is_file()]


def test_the_site_is_built() -> None:
    assert BUILT, f"no chapter pages in {SITE}: run `make book` first"


@pytest.mark.parametrize("chapter", BUILT)
def test_the_chapter_page_offers_its_executed_notebook(chapter: str) -> None:
    page = SITE / "book" / f"{chapter}.html"
    links = re.findall(r'href="([^"]*-with-outputs\.ipynb)"', page.read_text(encoding="utf-8"))
    assert len(set(links)) == 1, f"{page.name}: one download link to the notebook with outputs, found {links}"
    notebook = nbformat.read((page.parent / unquote(links[0])).resolve(), as_version=4)

    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    with_outputs = [cell for cell in code if cell.outputs]
    outputs = [output for cell in code for output in cell.outputs]
    assert all(cell.execution_count for cell in code), f"{chapter}: every code cell ran"
    assert len(with_outputs) >= len(code) // 2, f"{chapter}: {len(with_outputs)} of {len(code)} code cells have outputs"
    assert not [o for o in outputs if o.output_type == "error"], f"{chapter}: the executed notebook has an error"
    figures = [o for o in outputs if {"image/png", "image/svg+xml"} & set(o.get("data", {}))]
    assert figures, f"{chapter}: the executed notebook carries its figures"
