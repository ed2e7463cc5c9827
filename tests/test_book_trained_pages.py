"""Every chapter's built pages show the shipped trained model at work (issue 24).

Reads what ``make book`` executed (``_build/jupyter_execute``, the notebooks with their outputs, and
each page's glued values) and the rendered pages (``_build/html``): for every chapter, at least one
section runs the trained model (``transformer_lib.book.trained``, ``transformer_lib.pretrained`` or
chapter 6's ``translation_model()``, which returns it), those cells produced output in this build,
and the numbers its prose cites were glued by this build and rendered (no role left unresolved).
It runs with the browser tests, after the site is built (``make test`` orders them so).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[1]
BUILD = Path(os.environ.get("BUILD_DIR") or ROOT / "_build")
CHAPTERS = sorted(p.name for p in (ROOT / "book").glob("0[0-9]_*") if p.is_dir())
USES_THE_MODEL = re.compile(r"\btrained\.\w+\(|\bpretrained\.\w+\(|\btranslation_model\(")
ROLE = re.compile(r"\{glue(?::\w+)?\}`([^`]+)`")


@pytest.fixture(scope="module")
def executed() -> Path:
    folder = BUILD / "jupyter_execute" / "book"
    if not folder.is_dir():
        message = f"no executed book in {folder}: run `make book` first"
        if os.environ.get("REQUIRE_BROWSER") == "1":
            pytest.fail(message)
        pytest.skip(message)
    return folder


def _source(cell: dict) -> str:
    return cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_the_chapter_shows_the_trained_model_in_this_build(chapter: str, executed: Path) -> None:
    shown = []
    for path in sorted((executed / chapter).glob("[0-9][0-9]_*.ipynb")):
        cells = json.loads(path.read_text())["cells"]
        model_cells = [c for c in cells if c["cell_type"] == "code" and USES_THE_MODEL.search(_source(c))]
        if not model_cells:
            continue
        assert all(o.get("output_type") != "error" for c in model_cells for o in c.get("outputs", [])), path.name
        produced = sum(len(c.get("outputs", [])) for c in model_cells)
        glue_file = path.with_suffix(".glue.json")
        glued = json.loads(glue_file.read_text()) if glue_file.is_file() else {}
        cited = {m.group(1).split(":")[0] for c in cells if c["cell_type"] == "markdown" for m in ROLE.finditer(_source(c))}
        assert cited <= set(glued), f"{chapter}/{path.name}: prose cites values this build did not glue: {sorted(cited - set(glued))}"
        html = BUILD / "html" / "book" / chapter / path.with_suffix(".html").name
        assert html.is_file(), html
        assert not ROLE.search(html.read_text()), f"{html}: a glue role was left unresolved"
        if produced or glued:
            shown.append((path.name, produced, len(glued)))
    assert shown, f"{chapter}: no section ran the trained model in this build"
