"""The site's Sphinx extension (_ext/book_site.py): toggles that say what they hide, numbered figures,
the figures' web font. (The vega bundle and the Colab note are checked in tests/test_site.py.)"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest
from docutils import nodes
from docutils.frontend import get_default_settings
from docutils.parsers.rst import Parser
from docutils.utils import new_document

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def book_site() -> Any:
    spec = importlib.util.spec_from_file_location("book_site", ROOT / "_ext" / "book_site.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _document() -> nodes.document:
    return new_document("test", get_default_settings(Parser))


@pytest.mark.parametrize(
    ("tags", "hides", "label"),
    [
        (["hide-input", "check"], "source", "the check"),
        (["hide-cell", "solution"], "content", "the solution"),
        (["hide-input", "solution", "check"], "source", "the solution"),
        (["hide-input", "setup"], "source", "the set-up"),
        (["hide-input", "plot"], "source", "the plotting code"),
        (["hide-input"], "source", "the code"),
        (["hide-cell"], "content", "the code and its output"),
        (["hide-output"], "output", "the output"),
        (["hide-input", "hide-output", "solution"], "output", "the solution's output"),
    ],
)
def test_a_toggle_says_what_it_hides(book_site: Any, tags: list[str], hides: str, label: str) -> None:
    assert book_site.toggle_label(tags, hides) == label


def _cell(metadata: dict, hidden: list[str]) -> tuple[nodes.container, Any]:
    from myst_nb.sphinx_ import HideCodeCellNode

    cell = nodes.container(nb_element="cell_code", cell_metadata=metadata)
    bar = HideCodeCellNode(prompt_show="Show code cell {type}", prompt_hide="Hide code cell {type}")
    bar.extend(nodes.container(nb_element=part) for part in hidden)
    # as myst-nb does for hide-cell: the children list is set directly, the bar has no parent
    cell.children = [bar]
    return cell, bar


def test_the_bars_of_hidden_cells_are_relabelled_unless_the_cell_sets_its_own(book_site: Any) -> None:
    document = _document()
    check, check_bar = _cell({"tags": ["hide-input", "check"]}, ["cell_code_source"])
    solution, solution_bar = _cell({"tags": ["hide-cell", "solution"]}, ["cell_code_source", "cell_code_output"])
    own, own_bar = _cell({"tags": ["hide-input", "check"], "mystnb": {"code_prompt_show": "Show the probe"}},
                         ["cell_code_source"])
    document.extend([check, solution, own])
    book_site.LabelToggles(document).run()
    assert (check_bar["prompt_show"], check_bar["prompt_hide"]) == ("Show the check", "Hide the check")
    assert solution_bar["prompt_show"] == "Show the solution"
    assert own_bar["prompt_show"] == "Show code cell {type}"  # the cell's own label is myst-nb's to apply


def test_the_colab_set_up_cell_and_the_section_set_up_fold_into_one_bar_that_names_the_profile(book_site: Any) -> None:
    from myst_nb.sphinx_ import HideCodeCellNode

    document = _document()
    code = '%pip install --quiet "tested-transformer[book] @ git+https://example.org/repo@v1"'
    cell = nodes.container(classes=["cell"], nb_element="cell_code")
    cell += nodes.container("", nodes.literal_block(code, code), classes=["cell_input"])
    cell += nodes.container(classes=["cell_output"])
    own, own_bar = _cell({"tags": ["hide-input", "setup"]}, ["cell_code_source"])
    printed = "fast profile (no GPU), cpu; switch: %env TRANSFORMER_BOOK_PROFILE=full"
    own += nodes.container("", nodes.literal_block(printed, printed), classes=["cell_output"])
    prose = nodes.paragraph("", "The section's first sentence.")
    document.extend([cell, own, prose])
    book_site._on_doctree_resolved(None, document, "book/x")
    # on the page: one bar, then the section's first sentence
    assert list(document.children) == [cell, prose] and book_site.SETUP_CLASS in cell["classes"]
    (bar,) = cell.children
    assert isinstance(bar, HideCodeCellNode)
    assert (bar["prompt_show"], bar["prompt_hide"]) == ("Set-up: fast profile (no GPU), cpu", "Hide the set-up")
    note, source, output, moved = bar.children
    assert "tt-colab-setup-note" in note["classes"] and "cell_input" in source["classes"]
    assert "cell_output" in output["classes"] and moved is own
    # the section's set-up shows its code inside the bar, not behind a second one
    assert own_bar not in own.children and not list(own.findall(HideCodeCellNode))


def test_a_colab_set_up_cell_alone_folds_into_a_bar_without_a_profile(book_site: Any) -> None:
    document = _document()
    code = '%pip install --quiet "tested-transformer[book] @ git+https://example.org/repo@v1"'
    cell = nodes.container(classes=["cell"], nb_element="cell_code")
    cell += nodes.container("", nodes.literal_block(code, code), classes=["cell_input"])
    other, _ = _cell({"tags": ["hide-input", "check"]}, ["cell_code_source"])
    document.extend([cell, other])
    book_site._on_doctree_resolved(None, document, "book/x")
    assert list(document.children) == [cell, other]
    assert cell.children[0]["prompt_show"] == "Show the set-up"


def test_every_captioned_figure_gets_an_id_so_that_sphinx_numbers_it(book_site: Any) -> None:
    document = _document()
    named = nodes.figure("", nodes.image(uri="a.png"), nodes.caption("", "Named."), ids=["fig-named"])
    described = nodes.figure("", nodes.image(uri="c.png", alt="Own words."), nodes.caption("", "Caption."))
    unnamed = nodes.figure("", nodes.raw("", '<div class="tt-altair"></div>', format="html"), nodes.caption("", "A chart."))
    bare = nodes.figure("", nodes.image(uri="b.png"))  # no caption: not a numbered figure
    document.extend([named, unnamed, bare, described])
    book_site._number_captioned_figures(None, document)
    assert named["ids"] == ["fig-named"] and len(unnamed["ids"]) == 1 and not bare["ids"]
    # the caption is the image's text alternative, unless it has its own
    assert next(named.findall(nodes.image))["alt"] == "Named."
    assert next(described.findall(nodes.image))["alt"] == "Own words."
    assert "alt" not in next(bare.findall(nodes.image))


def test_the_figures_font_is_served_with_the_letters_charts_need(book_site: Any, tmp_path: Path) -> None:
    from fontTools.ttLib import TTFont

    written = book_site.write_fonts(tmp_path)
    assert [p.name for p in written] == ["dejavu-sans.woff", "dejavu-sans-bold.woff"]
    regular = TTFont(written[0])
    assert regular.flavor == "woff" and regular["name"].getDebugName(1) == "DejaVu Sans"
    letters = regular.getBestCmap()
    assert all(ord(c) in letters for c in "Aäßéαθ→≤×–·")
    # site.css names these files
    css = (ROOT / "_static" / "site.css").read_text(encoding="utf-8")
    assert all(f"fonts/{p.name}" in css for p in written)
    assert written[0].stat().st_size < 150_000, "a subset, not the whole font"


def test_the_chapters_extension_is_loaded_when_the_book_has_it(book_site: Any, tmp_path: Path, monkeypatch) -> None:
    class App:
        def __init__(self) -> None:
            self.loaded: list[str] = []

        def setup_extension(self, name: str) -> None:
            self.loaded.append(name)

    monkeypatch.setattr(book_site, "SECTIONS_EXTENSION", tmp_path / "book_sections.py")
    app = App()
    book_site._load_sections_extension(app)
    assert app.loaded == []  # not there (yet): the site builds without it
    (tmp_path / "book_sections.py").write_text("def setup(app):\n    return {}\n", encoding="utf-8")
    book_site._load_sections_extension(app)
    assert app.loaded == ["book_sections"]


def test_the_executed_download_takes_its_outputs_from_the_execution_cache(book_site: Any, tmp_path: Path) -> None:
    """With execute_notebooks: cache, myst-nb writes a cached notebook to jupyter_execute without its
    outputs; the download offered is the notebook with the cache's outputs and execution counts."""
    nbformat = pytest.importorskip("nbformat")
    jupyter_cache = pytest.importorskip("jupyter_cache")
    from jupyter_cache.base import CacheBundleIn

    source = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# A"), nbformat.v4.new_code_cell("1 + 1")])
    source.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    written = tmp_path / "page.ipynb"
    nbformat.write(source, written)
    cache = tmp_path / "cache"
    assert book_site.with_outputs(written, cache) == written.read_text(encoding="utf-8")  # no cache: as written
    ran = nbformat.reads(written.read_text(encoding="utf-8"), as_version=4)
    ran.cells[1].outputs = [nbformat.v4.new_output("execute_result", {"text/plain": "2"}, execution_count=1)]
    ran.cells[1].execution_count = 1
    jupyter_cache.get_cache(cache).cache_notebook_bundle(CacheBundleIn(ran, str(written)), check_validity=False)
    merged = nbformat.reads(book_site.with_outputs(written, cache), as_version=4)
    assert merged.cells[1].execution_count == 1 and merged.cells[1].outputs[0]["data"] == {"text/plain": "2"}
    source.cells[1].source = "2 + 2"  # other code: the cache has nothing for it
    nbformat.write(source, written)
    assert book_site.with_outputs(written, cache) == written.read_text(encoding="utf-8")


def test_favicon_ico_is_an_icon_file_holding_the_svg_drawn_as_png(book_site: Any) -> None:
    import io
    import struct

    from PIL import Image

    svg = (ROOT / "_static" / "favicon.svg").read_text(encoding="utf-8")
    data = book_site.favicon_ico(svg)
    reserved, kind, count = struct.unpack("<HHH", data[:6])
    width, height, _, _, planes, bits, size, offset = struct.unpack("<BBBBHHII", data[6:22])
    assert (reserved, kind, count, planes, bits, offset) == (0, 1, 1, 1, 32, 22)
    assert size == len(data) - offset and data[offset:offset + 8] == b"\x89PNG\r\n\x1a\n"
    icon = Image.open(io.BytesIO(data))  # Pillow reads it as an icon, as a browser would
    assert icon.format == "ICO" and icon.size == (width, height) and 32 <= width <= 128
    pixels = icon.convert("RGBA")
    assert pixels.getpixel((width - 2, 2))[3] == 0  # above the diagonal: transparent (the causal mask)
    assert pixels.getpixel((width // 8, height - width // 8))[3] == 255  # the bottom-left cell: drawn


def test_the_layout_filters_drop_the_themes_scripts_and_refuse_a_block_without_them(book_site: Any) -> None:
    # The tags as pydata-sphinx-theme writes them (its webpack macros and its layout's extrahead block).
    css = ('<link href="../_static/styles/theme.css?digest=1" rel="stylesheet" />\n'
           '  <script defer src="../_static/scripts/fontawesome.js?digest=1"></script>\n'
           '  <link rel="preload" as="script" href="../_static/scripts/bootstrap.js?digest=1" />')
    head = ('<meta name="viewport" content="width=device-width, initial-scale=1"/>\n'
            '    <script src="../_static/searchtools.js"></script>\n'
            '    <script src="../_static/language_data.js"></script>\n'
            '    <script src="../searchindex.js"></script>\n')
    kept_css = book_site._dropping(book_site.FONTAWESOME_JS, "fontawesome.js")(css)
    kept_head = book_site._dropping(book_site.SEARCH_SCRIPTS, "search script")(head)
    assert "fontawesome" not in kept_css and "theme.css" in kept_css and "bootstrap.js" in kept_css
    assert "<script" not in kept_head and 'name="viewport"' in kept_head
    with pytest.raises(ValueError, match="fontawesome.js"):
        book_site._dropping(book_site.FONTAWESOME_JS, "fontawesome.js")(kept_css)
