"""Figures for the book: altair charts where interaction helps, matplotlib for static plots.

Library code returns charts (``alt.Chart``) or axes (``matplotlib.axes.Axes``); it never calls
``plt.show()``. Conventions: queries on rows, keys on columns, axes labelled with tokens.
It imports nothing from the model: functions take tensors/arrays and labels.

Importing this module also configures how altair charts are displayed (section 1), so that the
built website needs no CDN and charts stay interactive.
"""

from __future__ import annotations

import inspect
from typing import Any

# --- 0. Showing library source in a chapter -----------------------------------------------------


def show_source(obj: Any) -> Any:
    """Display the source of a ``transformer_lib`` function or class, syntax-highlighted.

    Chapters use this instead of copying code, so the page always shows the code that runs.
    Returns an ``IPython.display.Code`` object (the notebook displays it as a cell's value).
    """
    from IPython.display import Code

    module = inspect.getmodule(obj)
    if module is None or not module.__name__.startswith("transformer_lib"):
        raise ValueError(f"show_source is for transformer_lib code, got {obj!r}")
    return Code(inspect.getsource(obj), language="python")


# --- 1. Displaying charts (offline-capable renderer) -------------------------------------------

# --- 2. Attention and mask figures (chapters 1, 2, 6) -------------------------------------------

# --- 3. Embedding and block figures (chapters 3, 4) ---------------------------------------------

# --- 4. Training figures (chapter 5) -------------------------------------------------------------
