"""``book/_ext/book_sections.py``: the landing pages' lists of sections with their reading and running
times, the introduction's list of chapters, and figures the library draws at build time."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from docutils import nodes
from docutils.utils import new_document
from docutils.frontend import get_default_settings

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "book" / "_ext"))

import book_sections  # noqa: E402


def _paragraph(text: str) -> nodes.paragraph:
    return nodes.paragraph(text, text)


def test_prose_words_leave_out_code_cells_and_code_blocks() -> None:
    document = new_document("test", get_default_settings())
    document += _paragraph("five words of plain prose")
    document += nodes.literal_block("", "these ten words are code and are not read as prose here")
    cell = nodes.container(classes=["cell"])
    cell += _paragraph("an output of seven words, never counted")
    document += cell
    document += nodes.bullet_list("", nodes.list_item("", _paragraph("and three more")))
    assert book_sections.prose_words(document) == 8


@pytest.mark.parametrize(("words", "minutes"), [(0, 1), (99, 1), (200, 1), (450, 2), (1000, 5)])
def test_reading_minutes_at_the_stated_speed(words: int, minutes: int) -> None:
    assert book_sections.WORDS_PER_MINUTE == 200
    assert book_sections.reading_minutes(words) == minutes


def test_a_drawn_figure_is_svg_and_the_same_from_build_to_build() -> None:
    from transformer_lib.book.figures import architecture_diagram

    first = book_sections._draw_svg(architecture_diagram, {"highlight": ["attention"]})
    again = book_sections._draw_svg(architecture_diagram, {"highlight": ["attention"]})
    other = book_sections._draw_svg(architecture_diagram, {"highlight": ["masks"]})
    assert first == again != other
    assert b"<svg" in first[:400] and b"viewBox" in first[:1000]


def _site(tmp_path: Path, listed: str) -> tuple[subprocess.CompletedProcess, Path]:
    """A tiny Sphinx project: an introduction, a chapter page listing ``listed``, two sections."""
    src = tmp_path / "src"
    (src / "ch").mkdir(parents=True)
    (src / "conf.py").write_text(textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(ROOT / "book" / "_ext")!r})
        extensions = ["myst_parser", "book_sections"]
        myst_enable_extensions = ["colon_fence"]
        master_doc = "intro"
    """))
    (src / "intro.md").write_text(textwrap.dedent("""
        # Intro

        ```{toctree}
        ch/index
        ```

        ```{book-chapters}
        ch: what the chapter builds
        ```
    """))
    (src / "ch" / "index.md").write_text(textwrap.dedent(f"""
        # 1. Chapter

        ```{{toctree}}
        01_a
        02_b
        ```

        ```{{chapter-sections}}
        {listed}
        ```

        ```{{drawn-figure}} transformer_lib.book.figures:architecture_diagram
        :kwargs: {{"highlight": ["blocks"]}}
        :alt: the map
        :name: fig-map

        The map, drawn at build time.
        ```
    """))
    (src / "ch" / "01_a.md").write_text("# 1.1 First\n\n" + "word " * 450 + "\n")
    (src / "ch" / "02_b.md").write_text("# 1.2 Second\n\nA short one.\n")
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-m", "sphinx", "-b", "html", "-W", "-q", str(src), str(out)],
                          capture_output=True, text=True, cwd=tmp_path)
    return done, out


def test_the_lists_link_every_section_with_its_times(tmp_path: Path) -> None:
    done, out = _site(tmp_path, "01_a: the first section\n        02_b: the second one")
    assert done.returncode == 0, done.stderr[-3000:]
    chapter = (out / "ch" / "index.html").read_text(encoding="utf-8")
    assert 'href="01_a.html"' in chapter and "1.1 First" in chapter and "the first section" in chapter
    assert "read 2 min" in chapter and "read 1 min" in chapter and "run not run" in chapter
    assert "The map, drawn at build time." in chapter and ".svg" in chapter
    intro = (out / "intro.html").read_text(encoding="utf-8")
    assert "what the chapter builds" in intro and "2 sections" in intro and "read 3 min" in intro


def test_a_list_that_differs_from_the_table_of_contents_fails_the_build(tmp_path: Path) -> None:
    done, _ = _site(tmp_path, "02_b: the second one")
    assert done.returncode != 0
    assert "table of contents puts" in done.stderr
