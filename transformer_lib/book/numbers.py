"""Numbers in a chapter's prose come from the code that measures them, never typed.

A section measures a value in a cell and glues it (myst-nb's ``glue``) under a name; its prose cites
the name with the ``{glue}`` role, so the built page shows what this build measured::

    glue("test_bleu", trained.headline()["test_bleu"], ".1f")   # in a code cell
    The model scores {glue}`test_bleu` BLEU.                     # in the Markdown after it

``tests/test_book_numbers.py`` fails on a measured-looking number typed into prose (BLEU, times,
percentages, ratios, parameter counts, sizes) that is neither glued nor a quotation listed in
``book/quoted_numbers.yml`` with its source. The record is made without myst-nb, so a section run
where myst-nb is not installed (Colab, the Colab-like test whose outputs the site build reuses)
records its numbers too.
"""

from __future__ import annotations

from typing import Any

__all__ = ["GLUE_MIME_PREFIX", "Text", "glue"]


class Text(str):
    """A string whose ``repr`` is itself, so that a glued value shows without quotes."""

    def __repr__(self) -> str:
        return str(self)


# myst-nb's glue records (papermill's scrapbook format): the site reads glued values from these outputs.
GLUE_MIME_PREFIX = "application/papermill.record/"


def glue(name: str, value: Any, spec: str = "") -> Text:
    """Format ``value`` with ``spec`` (``".1f"``, ``",d"``, ...) and glue it under ``name``, hidden
    where it is made; returns the text so the cell can use it too.

    The record is what ``myst_nb.glue(name, text, display=False)`` writes (a display output of
    :data:`GLUE_MIME_PREFIX` types, which Jupyter front ends do not show), made here so that a
    runtime without myst-nb (Colab, the Colab-like test whose outputs the site reuses) records it
    too. Outside IPython there is nothing to record into.
    """
    text = Text(format(value, spec))
    try:
        from IPython import get_ipython
        from IPython.core.formatters import format_display_data
        from IPython.display import display
    except ImportError:
        return text
    if get_ipython() is not None:
        bundle, metadata = format_display_data(text)
        metadata["scrapbook"] = {"name": name, "mime_prefix": GLUE_MIME_PREFIX}
        display({GLUE_MIME_PREFIX + key: value for key, value in bundle.items()}, raw=True, metadata=metadata)
    return text
