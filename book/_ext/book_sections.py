"""Sphinx extension for the chapters' landing pages and the introduction: what each section or
chapter covers, with its reading and running time measured in the build itself, and figures drawn
by the library at build time.

Loaded from ``_config.yml`` (``sphinx.local_extensions``: ``book_sections: book/_ext``).

``chapter-sections`` (a chapter's landing page)
    One line per section, ``<notebook name>: what it covers``, in reading order. Renders a list:
    the section (linked, by its title), what it covers, the minutes to read it and the seconds its
    notebook took to run in this build. The lines must list exactly the sections the table of
    contents puts under the page, in its order (a mismatch is a warning: ``-W`` fails the build).
    Below the table, what the chapter's full profile trains and an estimate of how long that takes
    (:func:`transformer_lib.book.experiment.full_profile_cost`).

``book-chapters`` (the introduction)
    One line per chapter, ``<folder>: what you build``. Renders a list: the chapter (linked), what
    you build, its number of sections, and the sums of their reading and running times.

``drawn-figure`` (anywhere)
    ``module:function`` as argument, ``:kwargs:`` as JSON, ``:alt:``, ``:name:``, the caption as
    content. Calls the function (it returns matplotlib ``Axes`` or a ``Figure``), writes the figure
    as SVG into the build folder and shows it as a numbered figure with its caption. A page that
    is Markdown (no kernel, no Colab button) can so show a figure that the library draws, and
    stays in step with it.

How the times are measured:

- reading: the words of the page's prose (text outside code cells, their outputs and code
  blocks) at ``WORDS_PER_MINUTE``, rounded to whole minutes (at least 1);
- running: myst-nb's record of the notebook's execution in this build (``runtime``), so on the
  machine that built the site, in the profile it built with.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
from pathlib import Path
from typing import Any

from docutils import nodes
from docutils.parsers.rst import directives
from sphinx.application import Sphinx
from sphinx.environment import BuildEnvironment
from sphinx.transforms.post_transforms import SphinxPostTransform
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective

logger = logging.getLogger(__name__)

WORDS_PER_MINUTE = 200
"""Reading speed for prose: MyST's own ``words_per_minute`` default."""

FIGURE_FOLDER = ".book_figures"  # in the source folder's _build/, referenced as an absolute source path


class book_table(nodes.General, nodes.Element):  # noqa: N801 (docutils node names are lower case)
    """Placeholder for a ``chapter-sections`` or ``book-chapters`` list, filled once every page ran."""


def _items(directive: SphinxDirective) -> list[tuple[str, str]]:
    items = []
    for line in directive.content:
        if not line.strip():
            continue
        name, sep, text = line.partition(":")
        if not sep or not name.strip() or not text.strip():
            raise directive.error(f"{directive.name}: expected 'name: description', got {line!r}")
        items.append((name.strip(), text.strip()))
    if not items:
        raise directive.error(f"{directive.name}: list at least one entry")
    return items


class ChapterSections(SphinxDirective):
    has_content = True

    def run(self) -> list[nodes.Node]:
        folder = self.env.docname.rsplit("/", 1)[0]
        node = book_table(kind="sections", items=[(f"{folder}/{name}", text) for name, text in _items(self)],
                          chapter=folder.rsplit("/", 1)[-1])
        self.env.book_tables = getattr(self.env, "book_tables", set()) | {self.env.docname}
        return [node]


class BookChapters(SphinxDirective):
    has_content = True

    def run(self) -> list[nodes.Node]:
        folder = self.env.docname.rsplit("/", 1)[0] if "/" in self.env.docname else ""
        prefix = f"{folder}/" if folder else ""
        node = book_table(kind="chapters", items=[(f"{prefix}{name}/index", text) for name, text in _items(self)])
        self.env.book_tables = getattr(self.env, "book_tables", set()) | {self.env.docname}
        return [node]


class DrawnFigure(SphinxDirective):
    required_arguments = 1
    has_content = True
    option_spec = {"kwargs": directives.unchanged, "alt": directives.unchanged_required,
                   "name": directives.unchanged}

    def run(self) -> list[nodes.Node]:
        target = self.arguments[0]
        module_name, _, function_name = target.partition(":")
        try:
            kwargs = json.loads(self.options.get("kwargs", "{}"))
            function = getattr(importlib.import_module(module_name), function_name)
        except (ValueError, ImportError, AttributeError) as error:
            raise self.error(f"drawn-figure {target!r}: {error}") from error
        svg = _draw_svg(function, kwargs)
        name = f"{function_name}-{hashlib.sha256(svg).hexdigest()[:12]}.svg"
        folder = Path(self.env.srcdir) / "_build" / FIGURE_FOLDER  # images must be under the source folder
        folder.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(svg)
        uri = "/" + (folder / name).relative_to(Path(self.env.srcdir)).as_posix()
        image = nodes.image(uri=uri, alt=self.options.get("alt", ""))
        figure = nodes.figure("", image, classes=["book-drawn-figure"])
        if self.content:
            holder = nodes.Element()
            self.state.nested_parse(self.content, self.content_offset, holder)
            first = holder[0] if len(holder) else None
            if isinstance(first, nodes.paragraph):
                figure += nodes.caption(first.rawsource, "", *first.children)
                figure += holder.children[1:]
        self.add_name(figure)
        return [figure]


def _draw_svg(function: Any, kwargs: dict[str, Any]) -> bytes:
    """The figure ``function(**kwargs)`` draws, as SVG bytes that do not change from build to build."""
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from transformer_lib.book import style

    with matplotlib.rc_context():
        style.apply()  # the book's one visual system, as in the notebooks
        matplotlib.rcParams.update({"svg.hashsalt": "book", "svg.fonttype": "path"})
        drawn = function(**kwargs)
        figure = drawn if isinstance(drawn, matplotlib.figure.Figure) else getattr(drawn, "figure", None)
        if figure is None:
            raise TypeError(f"{function.__name__} returned {type(drawn).__name__}, not Axes or a Figure")
        buffer = io.BytesIO()
        figure.savefig(buffer, format="svg", bbox_inches="tight", metadata={"Date": None})
        plt.close(figure)
    return buffer.getvalue()


# --- measuring ----------------------------------------------------------------------------------


def _inside_code(node: nodes.Node) -> bool:
    for parent in _ancestors(node):
        if isinstance(parent, (nodes.literal_block, nodes.raw, nodes.comment)):
            return True
        if isinstance(parent, nodes.container) and "cell" in parent.get("classes", []):
            return True
    return False


def _ancestors(node: nodes.Node):
    parent = node.parent
    while parent is not None:
        yield parent
        parent = parent.parent


def prose_words(doctree: nodes.document) -> int:
    """Words of a page's prose: text outside code cells, their outputs and code blocks."""
    return sum(len(text.astext().split()) for text in doctree.findall(nodes.Text) if not _inside_code(text))


def _on_doctree_read(app: Sphinx, doctree: nodes.document) -> None:
    env = app.env
    if not hasattr(env, "book_words"):
        env.book_words = {}
    env.book_words[env.docname] = prose_words(doctree)


def _on_purge(app: Sphinx, env: BuildEnvironment, docname: str) -> None:
    getattr(env, "book_words", {}).pop(docname, None)
    if hasattr(env, "book_tables"):
        env.book_tables.discard(docname)


def _on_merge(app: Sphinx, env: BuildEnvironment, docnames: set[str], other: BuildEnvironment) -> None:
    if not hasattr(env, "book_words"):
        env.book_words = {}
    env.book_words.update({d: w for d, w in getattr(other, "book_words", {}).items() if d in docnames})
    env.book_tables = getattr(env, "book_tables", set()) | (getattr(other, "book_tables", set()) & docnames)


def _on_outdated(app: Sphinx, env: BuildEnvironment, added: set[str], changed: set[str], removed: set[str]) -> list[str]:
    """A page with a table is rebuilt whenever any page changed: its times and words come from them."""
    if added or changed or removed:
        return sorted(getattr(env, "book_tables", set()) - removed)
    return []


def _run_seconds(env: BuildEnvironment, docname: str) -> float | None:
    from myst_nb.sphinx_ import NbMetadataCollector

    try:
        data = NbMetadataCollector.get_exec_data(env, docname)
    except KeyError:
        return None
    runtime = (data or {}).get("runtime")
    return float(runtime) if runtime is not None else None


def reading_minutes(words: int) -> int:
    return max(1, round(words / WORDS_PER_MINUTE))


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "not run"
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.1f} min"


# --- the lists ----------------------------------------------------------------------------------------


def _entry(link: nodes.Node, text: str, facts: list[str]) -> nodes.list_item:
    """One section or chapter: its linked title, what it covers, then its facts in a line of their own."""
    item = nodes.list_item()
    head = nodes.paragraph()
    head += nodes.strong("", "", link)
    head += nodes.Text(f": {text}")
    item += head
    item += nodes.paragraph("", " · ".join(facts), classes=["book-entry-facts"])
    return item


class FillBookTables(SphinxPostTransform):
    """Replace each placeholder with its list, once every page has been read (and executed).

    A list, not a table: one entry per section, its title, what it covers and its times below it,
    reads the same on a phone as on a laptop.
    """

    default_priority = 10

    def run(self, **kwargs: Any) -> None:
        env, builder = self.env, self.app.builder
        words: dict[str, int] = getattr(env, "book_words", {})
        for node in list(self.document.findall(book_table)):
            here = env.docname
            listed = [docname for docname, _ in node["items"]]
            children = env.toctree_includes.get(here, [])
            if node["kind"] == "chapters":  # a chapter has sections; an appendix page (the library's) has none
                children = [c for c in children if env.toctree_includes.get(c)]
            if listed != children:
                logger.warning(f"{node['kind']}: the page lists {listed} but the table of contents puts "
                               f"{children} under it (same pages, same order)", location=node)

            def link(docname: str) -> nodes.Node:
                title = env.titles[docname].astext() if docname in env.titles else docname
                return nodes.reference("", title, internal=True, refuri=builder.get_relative_uri(here, docname))

            entries = nodes.bullet_list(classes=["book-entries", f"book-{node['kind']}"])
            if node["kind"] == "sections":
                for docname, text in node["items"]:
                    entries += _entry(link(docname), text, [
                        f"read {reading_minutes(words.get(docname, 0))} min",
                        f"run {_duration(_run_seconds(env, docname))}"])
                note = _times_note(node["chapter"])
            else:
                for docname, text in node["items"]:
                    sections = env.toctree_includes.get(docname, [])
                    minutes = sum(reading_minutes(words.get(s, 0)) for s in sections)
                    runs = [_run_seconds(env, s) for s in sections]
                    run = None if any(r is None for r in runs) else sum(runs)
                    entries += _entry(link(docname), text, [
                        f"{len(sections)} sections", f"read {minutes} min", f"run {_duration(run)}"])
                note = _times_rule()
            node.replace_self([entries, nodes.paragraph(text=note, classes=["book-times-note"])])


def _machine() -> str:
    return f"the {os.cpu_count()}-core machine that built this site"


def _times_rule() -> str:
    from transformer_lib.book.experiment import current_profile

    return (f"Read: the words of each page's prose at {WORDS_PER_MINUTE} a minute. Run: the seconds "
            f"its notebooks took to execute in the {current_profile()} profile on {_machine()}, when "
            f"the site was built.")


def _times_note(chapter: str) -> str:
    from transformer_lib.book.experiment import CHAPTERS, full_profile_cost

    note = _times_rule()
    if chapter in CHAPTERS:
        note += " " + full_profile_cost(chapter)
    return note


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_node(book_table)
    app.add_directive("chapter-sections", ChapterSections)
    app.add_directive("book-chapters", BookChapters)
    app.add_directive("drawn-figure", DrawnFigure)
    app.add_post_transform(FillBookTables)
    app.connect("doctree-read", _on_doctree_read)
    app.connect("env-purge-doc", _on_purge)
    app.connect("env-merge-info", _on_merge)
    app.connect("env-get-outdated", _on_outdated)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
