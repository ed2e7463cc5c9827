"""Sphinx extension for the book's website: chart JavaScript served by the site, labelled set-up cells.

Loaded from ``_config.yml`` (``sphinx.local_extensions``). What it does (and it works around one
Sphinx bug, see ``_drop_repeated_inline_scripts``):

1. Serves vega-embed (with vega and vega-lite) from the site, so charts need no CDN. The bundle is
   made at build time by vl-convert (``vl_convert.javascript_bundle``), matched to altair's
   Vega-Lite version, cached under ``_build/.site_assets``, and added (deferred) to the pages that
   have a chart, i.e. an output of the renderer of ``transformer_lib.book.charts`` (``<div class="tt-altair">``).
2. Serves the figures' font (DejaVu Sans, from matplotlib's own copy; a subset as a web font), so
   live charts are set in the letters of the matplotlib figures (``transformer_lib.book.style``).
3. Labels the Colab set-up cell (the code cell that ``%pip install``-s transformer_lib from the
   repository; every chapter opens with the same one) and folds it, with the section's own set-up
   cell after it (tagged ``setup``), behind one bar that names the profile the page ran with ("Set-up:
   fast profile (no GPU), cpu"): inside, a note says what the install cell is, so readers
   of the website know why a section has an install. Chapters need no tag or metadata for this.
4. Makes hidden cells' bars say what they hide (``TOGGLE_LABELS``: "Show the check", "Show the
   solution", "Show the code"), from the cell's tags; a cell's own ``mystnb.code_prompt_show`` wins.
5. Numbers every figure that has a caption (myst-nb's ``mystnb.figure`` cell metadata; altair charts
   included), also one without a ``name``: it gets an id, which Sphinx's ``numfig`` needs.
6. Writes ``favicon.ico`` at the site's root from the book's SVG icon (``html.favicon``), for the pages
   that name no icon.
7. Two template filters for ``_templates/layout.html``, which leaves out two scripts the theme puts in
   every page: ``fontawesome.js`` (the icons are drawn by the theme's CSS from Font Awesome's web
   font) and the search scripts with the search index (only ``search.html`` uses them here). Each
   page loads 1.7 MB less; in the browser test the page loads took about a tenth less CPU (111
   against 124.5 CPU-s over 61 pages, 2026-11-27).
8. The page that translates (issue 49): the ``translate-widget`` directive puts the widget
   (``web/widget.js``) on a page, with the shipped model's example sentences; the build writes the
   widget's files into ``_static/widget`` (``tools/site_widget.py``: ONNX Runtime Web from the npm
   registry at the lock's version and checksum, the model exported as ONNX), and a page with the
   widget loads only ``widget.js`` and ``widget.css`` until the reader first asks for a translation.
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path
from typing import Any

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.transforms.post_transforms import SphinxPostTransform
from sphinx.util.docutils import SphinxDirective
from sphinx.util import logging

logger = logging.getLogger(__name__)

BUNDLE_NAME = "vega-embed.js"
CHART_MARKER = 'class="tt-altair"'
SETUP_CLASS = "tt-colab-setup"
EXECUTED_FOLDER = "_executed"  # in the site: the chapters' executed notebooks
EXECUTED_SUFFIX = "-with-outputs.ipynb"  # a name that says which download it is


def _vega_lite_version() -> str:
    import altair as alt

    return alt.VEGALITE_VERSION


def write_vega_bundle(folder: Path) -> Path:
    """Write vega-embed + vega + vega-lite as one script into ``folder`` (kept while versions match)."""
    import vl_convert as vlc

    vl_version = _vega_lite_version()
    header = f"/* vega-embed, vega and vega-lite {vl_version}: vl_convert {vlc.__version__}.javascript_bundle() */\n"
    bundle = folder / BUNDLE_NAME
    if bundle.exists():
        with bundle.open(encoding="utf-8") as f:
            if f.readline() == header:
                return bundle
    folder.mkdir(parents=True, exist_ok=True)
    major_minor = "_".join(vl_version.split(".")[:2])
    code = vlc.javascript_bundle(vl_version=f"v{major_minor}")
    # The bundle is an ES module body (top-level `const`s); wrapped in a function so its names
    # cannot clash with other scripts'. It exports through window.vegaEmbed/vega/vegaLite.
    partial = bundle.with_suffix(f".{os.getpid()}.partial")
    partial.write_text(f"{header}(function () {{\n{code}\n}})();\n", encoding="utf-8")
    partial.replace(bundle)  # atomic: a reader never sees half a file
    return bundle


# The figures' font: what the charts' text needs (Latin with accents, Greek, punctuation, arrows,
# mathematical operators, subscripts), not all of DejaVu Sans' 6,000 glyphs.
FONT_RANGES = [(0x20, 0x24F), (0x370, 0x3FF), (0x2000, 0x206F), (0x2070, 0x209F), (0x20A0, 0x20CF),
               (0x2100, 0x214F), (0x2190, 0x21FF), (0x2200, 0x22FF), (0x2500, 0x257F), (0x25A0, 0x25FF)]
FONTS = {"DejaVuSans.ttf": "dejavu-sans.woff", "DejaVuSans-Bold.ttf": "dejavu-sans-bold.woff"}


def write_fonts(folder: Path) -> list[Path]:
    """Write the subset web fonts into ``folder/fonts`` (kept while their source is unchanged)."""
    import matplotlib
    from fontTools import subset

    source_folder = Path(matplotlib.get_data_path()) / "fonts" / "ttf"
    written = []
    for source_name, target_name in FONTS.items():
        source = source_folder / source_name
        target = folder / "fonts" / target_name
        written.append(target)
        if target.exists() and target.stat().st_mtime >= source.stat().st_mtime:
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        options = subset.Options()
        options.flavor = "woff"
        options.layout_features = ["*"]
        options.name_IDs = ["*"]
        options.hinting = False  # screens of today render without it; a third of the size
        options.drop_tables += ["FFTM"]  # FontForge's timestamps
        font = subset.load_font(str(source), options)
        subsetter = subset.Subsetter(options)
        subsetter.populate(unicodes=[c for start, end in FONT_RANGES for c in range(start, end + 1)])
        subsetter.subset(font)
        partial = target.with_suffix(f".{os.getpid()}.partial")
        subset.save_font(font, str(partial), options)
        partial.replace(target)
    return written


# The theme's <script> tags that _templates/layout.html drops (see the module's docstring, 7).
FONTAWESOME_JS = re.compile(r'\s*<script[^>]*src="[^"]*/scripts/fontawesome\.js[^"]*"[^>]*></script>')
SEARCH_SCRIPTS = re.compile(r'\s*<script[^>]*src="[^"]*(?:/searchtools\.js|/language_data\.js|searchindex\.js)"[^>]*></script>')


def _dropping(pattern: re.Pattern[str], what: str) -> Any:
    """A template filter: the rendered block without the tags ``pattern`` finds; an error where it
    finds none, so that a theme that renames the script is noticed at the build."""
    from markupsafe import Markup

    def drop(html: str) -> Markup:
        kept, found = pattern.subn("", str(html))
        if not found:
            raise ValueError(f"_templates/layout.html: the theme's block holds no {what} to leave out; "
                             "has the theme changed? (_ext/book_site.py)")
        return Markup(kept)

    return drop


def _on_builder_inited(app: Sphinx) -> None:
    if app.builder.format != "html":
        return
    filters = app.builder.templates.environment.filters
    filters["without_fontawesome_js"] = _dropping(FONTAWESOME_JS, "fontawesome.js")
    filters["without_search_scripts"] = _dropping(SEARCH_SCRIPTS, "search script")
    folder = Path(app.outdir).parent / ".site_assets"
    write_vega_bundle(folder)
    write_fonts(folder)
    _site_widget().write_widget(folder / WIDGET_FOLDER)
    app.config.html_static_path.append(str(folder))


def _drop_repeated_inline_scripts(context: dict) -> None:
    """Keep one copy of each inline ``<script>``.

    Sphinx 7.4 lists an inline script twice when an extension adds it after the builder started
    (once as filename ``None``, once as ``""``); sphinx-thebe's ``const THEBE_JS_URL = ...`` then
    fails in the browser with "Identifier 'THEBE_JS_URL' has already been declared".
    """
    seen: set[tuple] = set()
    unique = []
    for script in context["script_files"]:
        if not script.filename:
            key = (script.priority, tuple(sorted(script.attributes.items())))
            if key in seen:
                continue
            seen.add(key)
        unique.append(script)
    context["script_files"][:] = unique


def _on_html_page_context(app: Sphinx, pagename: str, templatename: str, context: dict, doctree: Any) -> None:
    _drop_repeated_inline_scripts(context)
    if doctree is None:
        return
    has_chart = any(
        node.get("format") == "html" and CHART_MARKER in node.astext() for node in doctree.findall(nodes.raw)
    )
    if has_chart:
        # Deferred: runs after parsing, before DOMContentLoaded, which is when the charts draw.
        app.add_js_file(BUNDLE_NAME, loading_method="defer")
    if any(WIDGET_MARKER in node.astext() for node in doctree.findall(nodes.raw)):
        # The widget's own two files; it fetches the runtime and the model on first use.
        app.add_js_file(f"{WIDGET_FOLDER}/widget.js", loading_method="defer")
        app.add_css_file(f"{WIDGET_FOLDER}/widget.css")


# --- the page that translates (issue 49) ----------------------------------------------------------------

WIDGET_FOLDER = "widget"  # in _static
WIDGET_MARKER = "data-tt-translate"
SITE_WIDGET = Path(__file__).resolve().parent.parent / "tools" / "site_widget.py"


def _site_widget() -> Any:
    """``tools/site_widget.py``, which writes the widget's files (a script, not a package)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("site_widget", SITE_WIDGET)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def widget_html(examples: list[str], decoding: dict[str, Any]) -> str:
    """The widget's placeholder: ``web/widget.js`` builds the widget in it, offering the ``examples``
    and the model's chosen ``decoding`` (``beam_size``, ``length_penalty``) beside greedy decoding;
    without JavaScript it says so."""
    import html
    import json

    def attribute(value: Any) -> str:
        return html.escape(json.dumps(value, ensure_ascii=False), quote=True)

    return (f'<div class="tt-translate-widget" {WIDGET_MARKER} data-examples="{attribute(examples)}" '
            f'data-decoding="{attribute(decoding)}">'
            "<noscript><p>The translation widget needs JavaScript.</p></noscript></div>")


class TranslateWidget(SphinxDirective):
    """``{translate-widget}``: the widget, its examples the German sentences of the shipped model's record."""

    has_content = False

    def run(self) -> list[nodes.Node]:
        from transformer_lib import pretrained

        info = pretrained.info()
        examples = [example["source"] for example in info.run["examples"]]
        return [nodes.raw("", widget_html(examples, dict(info.decoding)), format="html")]


def _setup_note() -> nodes.admonition:
    note = nodes.admonition(classes=["note", "tt-colab-setup-note"])
    note += nodes.title("", "Set-up cell for Colab")
    note += nodes.paragraph(
        "",
        "",
        nodes.Text("On Colab, or anywhere "),
        nodes.literal("", "transformer_lib"),
        nodes.Text(
            " is not installed (or another package of that name is), this cell installs it from the "
            "book's repository, at its latest release (its default branch until one is tagged). "
            "On this website, and in a clone set up with "
        ),
        nodes.literal("", "make setup"),
        nodes.Text(", the library is already there and the cell does nothing."),
    )
    return note


# The set-up cell's install line: this project's distribution (with extras) from its repository.
SETUP_INSTALL = re.compile(r"%pip install .*\btested-transformer(\[[\w,]+\])? @ git\+")


def is_setup_cell(cell: nodes.Element) -> bool:
    """A notebook code cell that installs transformer_lib from the repository (tests/test_book.py
    checks that every chapter opens with the same one)."""
    if "cell" not in cell.get("classes", []):
        return False
    for part in cell.findall(nodes.container):
        if "cell_input" in part.get("classes", []):
            code = part.astext()
            return SETUP_INSTALL.search(code) is not None
    return False


def _profile_printed(cell: nodes.Element) -> str | None:
    """What the section's set-up cell printed before its first ";" (``section.start()``'s profile
    line: "fast profile (no GPU), cpu"), or None when it printed nothing (a build that did not execute)."""
    for part in cell.findall(nodes.container):
        if "cell_output" in part.get("classes", []):
            for block in part.findall(nodes.literal_block):
                first = block.astext().strip().splitlines()
                if first:
                    return first[0].split(";")[0].strip()
    return None


def _section_setup_cell(cell: nodes.Element) -> nodes.Element | None:
    """The cell after the Colab set-up cell when it is the section's own set-up (tagged ``setup``:
    imports, then ``section.start()``), else None."""
    parent = cell.parent
    if parent is None:
        return None
    index = parent.index(cell)
    following = parent.children[index + 1] if index + 1 < len(parent.children) else None
    if isinstance(following, nodes.container) and (
            "cell" in following.get("classes", []) or following.get("nb_element") == "cell_code"):
        tags = (following.get("cell_metadata") or {}).get("tags", [])
        if "setup" in tags or "tag_setup" in following.get("classes", []):
            return following
    return None


def _collapse_setup(cell: nodes.Element) -> None:
    """One line on the page for all the set-up: a bar ("Set-up: fast profile (no GPU), cpu")
    that holds the note saying what the Colab cell is, its install lines and output, and the
    section's own set-up cell that follows it (imports, the profile line it prints). A section then
    starts with its first sentence, not with a screen of machinery (issue 44, item 4); the bar names
    the profile the page ran with, the one fact of the set-up a reader of the results needs."""
    from myst_nb.sphinx_ import HideCodeCellNode

    own = _section_setup_cell(cell)
    profile = _profile_printed(own) if own is not None else None
    # short enough for one line on a phone (390 px): "Set-up: fast profile (no GPU), cpu"
    bar = HideCodeCellNode(prompt_show=f"Set-up: {profile}" if profile else "Show the set-up",
                           prompt_hide="Hide the set-up")
    bar["classes"].extend(["above-input", "tt-hides-setup"])
    bar += _setup_note()
    for part in list(cell.children):
        cell.remove(part)
        bar += part
    if own is not None:
        own.parent.remove(own)
        # its own bar ("Show the set-up") would be a second, inner one: its code shows with the install lines
        for inner in list(own.children):
            if isinstance(inner, HideCodeCellNode) and all(
                    "cell_input" in child.get("classes", []) or child.get("nb_element") == "cell_code_source"
                    for child in inner.children):
                own.replace(inner, inner.children)
        bar += own
    cell += bar


def _on_doctree_resolved(app: Sphinx, doctree: nodes.document, docname: str) -> None:
    for cell in list(doctree.findall(nodes.container)):
        if is_setup_cell(cell):
            cell["classes"].append(SETUP_CLASS)
            _collapse_setup(cell)


# --- toggles that say what they hide ----------------------------------------------------------------

# (tag, what it hides): the first tag of a cell found here names what its bar shows and hides.
TOGGLE_LABELS = [
    ("solution", "the solution"),
    ("check", "the check"),
    ("setup", "the set-up"),
    ("plot", "the plotting code"),
]
# Without such a tag, by what the bar hides (myst-nb's hide-input, hide-output, hide-cell).
DEFAULT_LABELS = {"source": "the code", "output": "the output", "content": "the code and its output"}


def toggle_label(tags: list[str], hides: str) -> str:
    """What a hidden cell's bar calls what it hides: ``hides`` is ``"source"`` (hide-input),
    ``"output"`` (hide-output) or ``"content"`` (hide-cell)."""
    for tag, label in TOGGLE_LABELS:
        if tag in tags:
            # a cell with both hide-input and hide-output has two bars: "the check", "the check's output"
            return f"{label}'s output" if hides == "output" else label
    return DEFAULT_LABELS[hides]


class LabelToggles(SphinxPostTransform):
    """After myst-nb has wrapped hidden cells in their bars (its ``HideInputCells``, priority 199),
    give each bar a label that says what it hides, unless the cell sets its own."""

    default_priority = 205
    formats = ("html",)

    def run(self, **kwargs: Any) -> None:
        from myst_nb.sphinx_ import HideCodeCellNode

        # (Walked from the cells down: myst-nb sets a hide-cell bar's children without its parent.)
        for cell in list(self.document.findall(nodes.container)):
            if cell.get("nb_element") != "cell_code":
                continue
            metadata = cell.get("cell_metadata") or {}
            own = metadata.get("mystnb", {}) if isinstance(metadata.get("mystnb"), dict) else {}
            if "code_prompt_show" in own or "code_prompt_hide" in own:
                continue
            for bar in cell.children:
                if isinstance(bar, HideCodeCellNode):
                    self._label(bar, list(metadata.get("tags", [])))

    @staticmethod
    def _label(bar: nodes.Element, tags: list[str]) -> None:
        parts = {child.get("nb_element") for child in bar.children}
        hides = "content" if {"cell_code_source", "cell_code_output"} <= parts else (
            "source" if "cell_code_source" in parts else "output")
        label = toggle_label(tags, hides)
        bar["prompt_show"], bar["prompt_hide"] = f"Show {label}", f"Hide {label}"
        bar["classes"].append(f"tt-hides-{label.split()[-1]}")


# --- numbered figures ----------------------------------------------------------------------------------


def _number_captioned_figures(app: Sphinx, doctree: nodes.document) -> None:
    """Give an id to every figure with a caption that has none: Sphinx numbers (``numfig``) only
    figures with an id, and myst-nb gives one only when the cell's figure metadata has a ``name``.
    Its images without a text alternative get the caption's text."""
    for figure in doctree.findall(nodes.figure):
        captions = [child for child in figure.children if isinstance(child, nodes.caption)]
        if not captions:
            continue
        if not figure["ids"]:
            doctree.set_id(figure)
        # A notebook's image output has no text alternative (Sphinx would write its file name): the
        # caption says what it shows.
        for image in figure.findall(nodes.image):
            if not image.get("alt"):
                image["alt"] = captions[0].astext()


def executed_name(docname: str) -> str:
    """Where the executed notebook of ``docname`` lies in the site (a path relative to its root)."""
    return f"{EXECUTED_FOLDER}/{docname}{EXECUTED_SUFFIX}"


def _add_executed_download(app: Sphinx, pagename: str, templatename: str, context: dict, doctree: Any) -> None:
    """The download menu of a notebook page: the executed notebook, after the source ``.ipynb``."""
    if context.get("page_source_suffix") != ".ipynb":
        return
    for group in context.get("header_buttons", []):
        if group.get("label") == "download-buttons":
            group["buttons"].insert(1, {
                "type": "link",
                "url": context["pathto"](executed_name(pagename), 1),
                "text": ".ipynb (with outputs)",
                "icon": "fas fa-book-open",
                "tooltip": "Download the notebook as this page ran it, with its outputs and figures",
                "label": "download-executed-notebook-button",
            })


def _copy_executed_notebooks(app: Sphinx, exception: Exception | None) -> None:
    if exception is not None or app.builder.format != "html":
        return
    executed = Path(app.outdir).parent / "jupyter_execute"
    cache = Path(app.config.nb_execution_cache_path or Path(app.outdir).parent / ".jupyter_cache")
    for docname in sorted(app.env.found_docs):
        notebook = executed / f"{docname}.ipynb"
        if str(app.env.doc2path(docname)).endswith(".ipynb") and notebook.is_file():
            target = Path(app.outdir) / executed_name(docname)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(with_outputs(notebook, cache), encoding="utf-8")


def with_outputs(notebook: Path, cache: Path) -> str:
    """The notebook myst-nb wrote to ``jupyter_execute``, with its outputs. Where they came from the
    execution cache (``execute_notebooks: cache``), myst-nb writes the notebook as it read it, without
    them: they are merged back from the cache here."""
    import nbformat

    text = notebook.read_text(encoding="utf-8")
    read = nbformat.reads(text, as_version=4)
    if any(cell.get("outputs") for cell in read.cells) or not cache.is_dir():
        return text
    from jupyter_cache import get_cache

    try:
        _, merged = get_cache(cache).merge_match_into_notebook(read)
    except KeyError:  # not in the cache: the notebook has no outputs to offer
        return text
    return nbformat.writes(merged)


def favicon_ico(svg: str) -> bytes:
    """The icon as ``favicon.ico``: an ICO file holding one PNG drawn from ``svg`` (vl-convert), 64
    pixels or so wide. Browsers ask the site's root for it wherever a page names no icon (Jupyter
    Book's redirecting ``index.html`` names none)."""
    import struct

    import vl_convert

    png = vl_convert.svg_to_png(svg, scale=2.0)
    width, height = struct.unpack(">II", png[16:24])  # the PNG's IHDR
    # ICONDIR (reserved, type 1 = icon, one image), then its ICONDIRENTRY (0 stands for 256 pixels).
    header = struct.pack("<HHH", 0, 1, 1) + struct.pack(
        "<BBBBHHII", width % 256, height % 256, 0, 0, 1, 32, len(png), 6 + 16)
    return header + png


def _write_favicon_ico(app: Sphinx, exception: Exception | None) -> None:
    icon = app.config.html_favicon
    if exception is not None or app.builder.format != "html" or not icon or not str(icon).endswith(".svg"):
        return
    svg = (Path(app.confdir) / icon).read_text(encoding="utf-8")
    (Path(app.outdir) / "favicon.ico").write_bytes(favicon_ico(svg))


SECTIONS_EXTENSION = Path(__file__).resolve().parent.parent / "book" / "_ext" / "book_sections.py"


def _load_sections_extension(app: Sphinx) -> None:
    """Load the chapters' own extension (``book/_ext/book_sections.py``: reading and running times on
    the landing pages) when the book has it. Loaded from here rather than named in ``_config.yml``, so
    that the site builds the same before and after the chapters' branch brings it."""
    import sys

    if SECTIONS_EXTENSION.is_file():
        folder = str(SECTIONS_EXTENSION.parent)
        if folder not in sys.path:
            sys.path.insert(0, folder)
        app.setup_extension(SECTIONS_EXTENSION.stem)


def setup(app: Sphinx) -> dict[str, Any]:
    _load_sections_extension(app)
    app.connect("builder-inited", _on_builder_inited)
    app.connect("html-page-context", _on_html_page_context)
    # After sphinx-book-theme has made the header buttons (its handlers run at priority 501).
    app.connect("html-page-context", _add_executed_download, priority=502)
    app.connect("build-finished", _copy_executed_notebooks)
    app.connect("build-finished", _write_favicon_ico)
    app.connect("doctree-resolved", _on_doctree_resolved)
    app.connect("doctree-read", _number_captioned_figures)
    app.add_post_transform(LabelToggles)
    app.add_directive("translate-widget", TranslateWidget)
    # A new env_version makes Sphinx rebuild every page: editing this file then shows on all of them.
    env_version = int(hashlib.sha1(Path(__file__).read_bytes()).hexdigest()[:8], 16)
    return {"version": "1.0", "env_version": env_version, "parallel_read_safe": True, "parallel_write_safe": True}
