"""Chapter 3's figures: the positional-encoding table as a heatmap and as curves, and histograms of
the values that token embeddings and positions add together.

Inputs are tensors or arrays (CPU, any float dtype; no gradient needed) plus labels. altair charts
carry tooltips and a legend that highlights one series on click; matplotlib functions draw into the
``ax`` given (or a new figure) and return it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import altair as alt
import numpy as np
import pandas as pd

from . import style
from .figures import _as_array, _lines

__all__ = ["positional_curves", "positional_heatmap", "value_histograms"]


def positional_heatmap(
    values: Any,
    *,
    x_title: str = "dimension i",
    y_title: str = "position p",
    value_title: str = "value",
    title: str | None = None,
    diverging: bool = True,
    width: int = 480,
    height: int | None = None,
) -> Any:
    """A matrix as an altair heatmap, row 0 at the top, with the value under the mouse.

    Used for the positional-encoding table (positions on rows, dimensions on columns) and for the
    similarity of positional encodings (position on rows and columns).

    Args:
        values: ``(rows, columns)`` array or tensor.
        x_title, y_title, value_title: axis and colour-legend titles (also used in the tooltip).
        title: chart title.
        diverging: a red-blue scale symmetric around 0 (for signed values such as sines); else
            a sequential scale over the values' range.
        width, height: size in pixels (``height`` defaults to square cells).

    Returns:
        An ``alt.Chart``.
    """

    matrix = _as_array(values)
    if matrix.ndim != 2:
        raise ValueError(f"values must be a 2-D matrix, got shape {matrix.shape}")
    rows, cols = matrix.shape
    r, c = np.meshgrid(np.arange(rows), np.arange(cols), indexing="ij")
    data = pd.DataFrame({"row": r.ravel(), "col": c.ravel(), "value": matrix.ravel()})
    limit = float(np.abs(matrix).max()) or 1.0
    scale = (alt.Scale(scheme=style.DIVERGING, domain=[-limit, limit], reverse=True) if diverging
             else alt.Scale(scheme=style.SEQUENTIAL, zero=False))
    height = height if height is not None else max(120, round(width * rows / cols))
    return alt.Chart(data, title=title or "", description=title or f"{y_title} by {x_title}").mark_rect().encode(
        x=alt.X("col:O", title=x_title, axis=alt.Axis(labelAngle=0, labelOverlap=True)),
        y=alt.Y("row:O", title=y_title, axis=alt.Axis(labelOverlap=True)),
        color=alt.Color("value:Q", title=value_title, scale=scale),
        tooltip=[alt.Tooltip("row:O", title=y_title), alt.Tooltip("col:O", title=x_title),
                 alt.Tooltip("value:Q", title=value_title, format=".4f")],
    ).properties(width=width, height=height)


def positional_curves(
    table: Any,
    dims: Sequence[int],
    *,
    title: str | None = None,
    width: int = 480,
    height: int = 240,
) -> Any:
    """Chosen columns of a positional-encoding table as curves over the positions.

    Each column is labelled with its dimension, whether it is a sine (even) or cosine (odd), and
    its wavelength :math:`2\\pi \\cdot 10000^{2i/D}` in positions.

    Args:
        table: ``(positions, D)`` table, e.g. from :func:`transformer_lib.embeddings.sinusoidal_table`.
        dims: which dimensions (columns) to draw.

    Returns:
        An ``alt.Chart``: click a legend entry to pick one dimension out; hover for values.
    """
    values = _as_array(table)
    if values.ndim != 2:
        raise ValueError(f"table must be (positions, D), got shape {values.shape}")
    n_positions, d_model = values.shape
    bad = [d for d in dims if not 0 <= d < d_model]
    if bad:
        raise ValueError(f"dimensions {bad} are outside the table's 0..{d_model - 1}")
    series = {}
    for d in dims:
        wavelength = 2 * np.pi * 10000 ** ((d - d % 2) / d_model)
        series[f"dim {d} ({'sin' if d % 2 == 0 else 'cos'}, wavelength {wavelength:,.1f})"] = values[:, d]
    return _lines({"": series}, np.arange(n_positions), x_title="position p", y_title="PE(p, dim)",
                  series_title="dimension", title=title, log_y=False, points=False, width=width, height=height)


def value_histograms(
    samples: Mapping[str, Any],
    *,
    bins: int = 60,
    x_title: str = "value",
    title: str | None = None,
    ax: Any = None,
) -> Any:
    """Overlaid histograms (as densities) of several sets of numbers, e.g. embedding coordinates.

    The legend gives each set's standard deviation, so the figure can be read without hovering.

    Returns:
        The matplotlib ``Axes``.
    """
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(5.6, 3.2))
    arrays = {name: _as_array(values).ravel() for name, values in samples.items()}
    low = min(a.min() for a in arrays.values())
    high = max(a.max() for a in arrays.values())
    edges = np.linspace(low, high, bins + 1)
    for name, a in arrays.items():
        ax.hist(a, bins=edges, density=True, histtype="step", linewidth=1.8, label=f"{name} (std {a.std():.3g})")
    ax.set_xlabel(x_title)
    ax.set_ylabel("density")
    if title:
        ax.set_title(title)
    # Outside the axes, so that it never hides a distribution.
    ax.legend(frameon=False, fontsize=9, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return ax
