"""Numbers in a chapter's prose come from the code that measures them, never typed.

A section measures a value in a cell and glues it (myst-nb's ``glue``) under a name; its prose cites
the name with the ``{glue}`` role, so the built page shows what this build measured::

    glue("test_bleu", trained.headline()["test_bleu"], ".1f")   # in a code cell
    The model scores {glue}`test_bleu` BLEU.                     # in the Markdown after it

``tests/test_book_numbers.py`` fails on a measured-looking number typed into prose (BLEU, times,
percentages, ratios, parameter counts, sizes) that is neither glued nor a quotation listed in
``book/quoted_numbers.yml`` with its source. Where myst-nb is not installed (Colab), ``glue`` only
returns the text: the page's role then shows its name.
"""

from __future__ import annotations

from typing import Any

__all__ = ["Text", "glue"]


class Text(str):
    """A string whose ``repr`` is itself, so that a glued value shows without quotes."""

    def __repr__(self) -> str:
        return str(self)


def glue(name: str, value: Any, spec: str = "") -> Text:
    """Format ``value`` with ``spec`` (``".1f"``, ``",d"``, ...) and glue it under ``name``, hidden
    where it is made; returns the text so the cell can use it too."""
    text = Text(format(value, spec))
    try:
        from myst_nb import glue as myst_glue
    except ImportError:  # Colab: no book build, nothing to glue into
        return text
    myst_glue(name, text, display=False)
    return text
