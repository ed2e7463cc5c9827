"""What every section's set-up cell does, in one call: ``section.start()``.

A chapter is a landing page and a few section notebooks; each section runs on its own (on Colab, in
the website's build, in the tests). Its set-up cell imports what it uses (``from transformer_lib.book
import section``), then calls ``section.start()``:
the book's charts and visual style, a fixed seed, and one line saying which experiment profile runs
(``transformer_lib.book.experiment``). What a chapter's sections share beyond that (example data, a
model one section trains and others use) lives in its module in :mod:`transformer_lib.book.chapters`.
"""

from __future__ import annotations

import textwrap

__all__ = ["start", "wrap"]

WIDTH = 74
"""Characters a line of a section's printed output may hold: the page's code column, on a phone too."""


def start(*, seed: int = 0) -> None:
    """Charts and style on, ``torch.manual_seed(seed)``, and print the profile in one line."""
    import torch

    from .charts import enable_charts
    from .experiment import profile_line

    enable_charts()
    torch.manual_seed(seed)
    print(profile_line())


def wrap(message: object, width: int = WIDTH) -> str:
    """A long message (an error, say) wrapped to the page, indented by two spaces."""
    return textwrap.fill(str(message), width=width, initial_indent="  ", subsequent_indent="  ")
