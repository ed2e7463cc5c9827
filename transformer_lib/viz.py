"""Figures for the book: altair charts where interaction helps, matplotlib for static plots.

Library code returns charts (``alt.Chart``) or axes (``matplotlib.axes.Axes``); it never calls
``plt.show()``. Conventions: queries on rows, keys on columns, axes labelled with tokens.
It imports nothing from the model: functions take tensors/arrays and labels.

Importing this module also configures how altair charts are displayed (section 1), so that the
built website needs no CDN and charts stay interactive.
"""

from __future__ import annotations

# --- 1. Displaying charts (offline-capable renderer) -------------------------------------------

# --- 2. Attention and mask figures (chapters 1, 2, 6) -------------------------------------------

# --- 3. Embedding and block figures (chapters 3, 4) ---------------------------------------------

# --- 4. Training figures (chapter 5) -------------------------------------------------------------
