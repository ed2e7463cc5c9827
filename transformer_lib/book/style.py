"""The book's one visual system: one palette and one font for altair charts and matplotlib figures.

:func:`apply` sets it for both libraries (and pandas' display options); each chapter's set-up calls
it through :func:`transformer_lib.book.charts.enable_charts`. Importing this module changes nothing.

- **Font**: DejaVu Sans, the font matplotlib ships (so every figure has it, on any machine). The
  website serves it too (``_ext/book_site.py`` writes a subset as a web font), so live charts use the
  same letters as the PNG and SVG figures.
- **Colours**: one categorical palette, :data:`CATEGORY` (Tableau 10, as Vega draws it); one
  sequential scheme (blues) and one diverging scheme (red-blue), under their names in each library.
  Figure code takes colours from here rather than typing its own.
- **Sizes**: text of 10 pt in matplotlib (at its 100 dpi, ~14 px on the page) and 12 px labels,
  13 px titles in charts; titles start at the left, as the prose does.

Dark mode needs nothing here: live charts switch themselves (``chart_embed.js``), and the website
inverts matplotlib figures (``_static/site.css``).
"""

from __future__ import annotations

from typing import Any, Final

__all__ = [
    "CATEGORY", "DIVERGING", "DIVERGING_CMAP", "FONT", "FONT_CSS", "HIGHLIGHT", "INK", "MUTED",
    "SECONDARY_INK", "SEQUENTIAL", "SEQUENTIAL_CMAP", "THEME", "altair_theme", "apply", "color", "matplotlib_rc",
    "show_svg",
]

FONT = "DejaVu Sans"
"""The one font of every figure and chart (matplotlib's own font; the website serves it)."""

FONT_CSS = '"DejaVu Sans", Verdana, Geneva, sans-serif'
""":data:`FONT` as a CSS font list, for live charts (a reader's browser without the web font falls
back to the closest)."""

CATEGORY = [
    "#4c78a8", "#f58518", "#e45756", "#72b7b2", "#54a24b",
    "#eeca3b", "#b279a2", "#ff9da6", "#9d755d", "#bab0ac",
]
"""The categorical palette (Tableau 10 as Vega draws it): series, runs, heads, in this order."""

SEQUENTIAL: Final = "blues"  # Final: its type is the literal, one of the names altair's Scale accepts
SEQUENTIAL_CMAP = "Blues"
"""One sequential scheme (attention weights, counts), as altair and as matplotlib name it."""

DIVERGING: Final = "redblue"
DIVERGING_CMAP = "RdBu"
"""One diverging scheme (signed values around 0), low red to high blue in both libraries."""

INK = "#1a202c"
"""Text and lines of diagrams."""

MUTED = "#718096"
"""Secondary lines: frames, guides, axis lines (not text: too light for small text on white)."""

SECONDARY_INK = "#4a5568"
"""Secondary text (subtitles, annotations): 7.5:1 on white, above WCAG AA's 4.5:1."""

HIGHLIGHT = CATEGORY[1]
"""What a figure points at (the part of the architecture a chapter builds)."""

THEME = "tested_transformer"
"""Name of the altair theme :func:`apply` registers and enables."""

LABEL_PX, TITLE_PX = 12, 13


def color(i: int) -> str:
    """The ``i``-th colour of :data:`CATEGORY` (cycling)."""
    return CATEGORY[i % len(CATEGORY)]


def altair_theme() -> dict[str, Any]:
    """The altair theme: a ``config`` only (sizes stay each chart's own)."""
    axis = {
        "labelFont": FONT_CSS, "titleFont": FONT_CSS, "labelFontSize": LABEL_PX, "titleFontSize": LABEL_PX,
        "titleFontWeight": "normal", "labelColor": INK, "titleColor": INK,
        "domainColor": MUTED, "tickColor": MUTED, "gridColor": "#e2e8f0",
    }
    return {
        "config": {
            "font": FONT_CSS,
            "title": {"font": FONT_CSS, "fontSize": TITLE_PX, "fontWeight": "bold", "anchor": "start", "color": INK,
                      "subtitleFont": FONT_CSS, "subtitleFontSize": LABEL_PX, "subtitleColor": SECONDARY_INK},
            "axis": axis,
            "legend": {"labelFont": FONT_CSS, "titleFont": FONT_CSS, "labelFontSize": LABEL_PX,
                       "titleFontSize": LABEL_PX, "titleFontWeight": "normal", "labelColor": INK, "titleColor": INK},
            "header": {"labelFont": FONT_CSS, "titleFont": FONT_CSS, "labelFontSize": LABEL_PX,
                       "titleFontSize": TITLE_PX, "labelColor": INK, "titleColor": INK},
            "text": {"font": FONT_CSS, "fontSize": LABEL_PX, "color": INK},
            "range": {
                "category": list(CATEGORY),
                "ordinal": {"scheme": SEQUENTIAL},
                "ramp": {"scheme": SEQUENTIAL},
                "heatmap": {"scheme": SEQUENTIAL},
                "diverging": {"scheme": DIVERGING},
            },
            "view": {"stroke": None},
            "line": {"strokeWidth": 2},
        }
    }


def matplotlib_rc() -> dict[str, Any]:
    """The matplotlib settings (``rcParams``) of the same look."""
    from cycler import cycler

    return {
        "font.family": "sans-serif",
        "font.sans-serif": [FONT],
        "font.size": 10,
        "axes.titlesize": 11,
        "axes.titleweight": "bold",
        "axes.titlelocation": "left",
        "axes.labelsize": 10,
        "axes.prop_cycle": cycler(color=CATEGORY),
        "axes.edgecolor": MUTED,
        "axes.labelcolor": INK,
        "axes.spines.top": False,
        "axes.spines.right": False,
        "text.color": INK,
        "xtick.color": INK,
        "ytick.color": INK,
        "xtick.labelsize": 9,
        "ytick.labelsize": 9,
        "legend.frameon": False,
        "legend.fontsize": 9,
        "lines.linewidth": 2,
        "image.cmap": SEQUENTIAL_CMAP,
        "figure.dpi": 100,
        "figure.facecolor": "white",
        "savefig.facecolor": "white",
    }


def apply() -> None:
    """Make the book's look the default: altair theme, matplotlib settings, pandas display options.

    Calling it again is harmless. Pandas never truncates a cell or elides rows and columns with
    "…" (a table the book shows is one a reader reads whole; long ones go behind a toggle).
    """
    import altair as alt
    import matplotlib as mpl
    import pandas as pd

    alt.theme.register(THEME, enable=True)(altair_theme)  # type: ignore[arg-type]  # a dict is a theme
    mpl.rcParams.update(matplotlib_rc())  # type: ignore[arg-type]  # keys are rcParams' names
    pd.set_option("display.max_colwidth", None)
    pd.set_option("display.max_columns", None)
    pd.set_option("display.max_rows", 500)
    pd.set_option("display.width", 10_000)


def show_svg(figure: Any) -> Any:
    """Display a matplotlib figure as scalable SVG, and close it.

    For diagrams (the architecture figure): on a phone an SVG shrinks to the column and stays sharp
    when zoomed, where a PNG would be cut or blurred. The output carries ``image/svg+xml`` only, so
    every front end (the website, Jupyter, Colab, GitHub) shows the same drawing.

    Args:
        figure: a ``Figure``, or an ``Axes`` (its figure is shown).

    Returns:
        An ``IPython.display.SVG`` (the notebook displays it as the cell's value).

    Raises:
        TypeError: ``figure`` is neither a ``Figure`` nor an ``Axes``.
    """
    import io

    import matplotlib.pyplot as plt
    from IPython.display import SVG
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    if isinstance(figure, Axes):
        figure = figure.figure
    if not isinstance(figure, Figure):
        raise TypeError(f"show_svg takes a matplotlib Figure or Axes, got {type(figure).__name__}")
    buffer = io.StringIO()
    # Text as paths: the drawing looks the same where DejaVu Sans is not installed.
    figure.savefig(buffer, format="svg", bbox_inches="tight", metadata={"Date": None})
    plt.close(figure)
    return SVG(buffer.getvalue())
