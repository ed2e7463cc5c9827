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
#
# Inputs are tensors or arrays (CPU, any float dtype; no gradient needed) plus labels. altair charts
# carry tooltips and a legend that highlights one series on click; matplotlib functions draw into
# the ``ax`` given (or a new figure) and return it.

from collections.abc import Mapping, Sequence  # noqa: E402  (section-local imports)

import numpy as np  # noqa: E402


def _as_array(values: Any) -> np.ndarray:
    """A float numpy array from a tensor (detached, on the CPU), an array or nested sequences."""
    if hasattr(values, "detach"):
        values = values.detach().float().cpu().numpy()
    return np.asarray(values, dtype=float)


def architecture_diagram(highlight: Sequence[str] = (), ax: Any = None) -> Any:
    """The encoder-decoder Transformer as boxes (after Figure 1 of Vaswani et al. 2017).

    Each box belongs to a part; the parts named in ``highlight`` are coloured, the rest grey, so a
    chapter can show where its piece sits. Parts: ``"embedding"``, ``"positional"``,
    ``"attention"``, ``"cross_attention"``, ``"feed_forward"``, ``"add_norm"``, ``"output"``.

    Args:
        highlight: the parts to colour.
        ax: a matplotlib ``Axes`` to draw into (a new 6.4 x 7.4 inch figure if ``None``).

    Returns:
        The matplotlib ``Axes``.
    """
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

    parts = {"embedding", "positional", "attention", "cross_attention", "feed_forward", "add_norm", "output"}
    unknown = set(highlight) - parts
    if unknown:
        raise ValueError(f"unknown part(s) {sorted(unknown)}; choose from {sorted(parts)}")
    if ax is None:
        _, ax = plt.subplots(figsize=(6.4, 7.4))
    colours = {
        "embedding": "#f4c28a", "positional": "#f4c28a", "attention": "#f6a6a6", "cross_attention": "#f6a6a6",
        "feed_forward": "#a8d5f2", "add_norm": "#f2ef9c", "output": "#c9b3e6",
    }
    width, height = 2.75, 0.52

    def box(x: float, y: float, text: str, part: str) -> None:
        on = part in highlight
        ax.add_patch(FancyBboxPatch(
            (x - width / 2, y - height / 2), width, height, boxstyle="round,pad=0.02,rounding_size=0.12",
            facecolor=colours[part] if on else "#eeeeee", edgecolor="#333333" if on else "#aaaaaa",
            linewidth=1.6 if on else 0.8,
        ))
        ax.text(x, y, text, ha="center", va="center", fontsize=9.5,
                color="#111111" if on else "#888888", fontweight="bold" if on else "normal")

    def arrow(x0: float, y0: float, x1: float, y1: float) -> None:
        ax.add_patch(FancyArrowPatch((x0, y0), (x1, y1), arrowstyle="-|>", mutation_scale=10,
                                     color="#666666", linewidth=0.9, shrinkA=0, shrinkB=0))

    enc_x, dec_x = 1.5, 5.3
    # Encoder column, bottom to top.
    enc = [(0.6, "Token embedding × √D", "embedding"), (1.45, "+ positional encoding", "positional"),
           (2.6, "Self-attention", "attention"), (3.3, "Add & Norm", "add_norm"),
           (4.1, "Feed-forward", "feed_forward"), (4.8, "Add & Norm", "add_norm")]
    dec = [(0.6, "Token embedding × √D", "embedding"), (1.45, "+ positional encoding", "positional"),
           (2.6, "Masked self-attention", "attention"), (3.3, "Add & Norm", "add_norm"),
           (4.1, "Cross-attention", "cross_attention"), (4.8, "Add & Norm", "add_norm"),
           (5.6, "Feed-forward", "feed_forward"), (6.3, "Add & Norm", "add_norm"),
           (7.25, "Linear (tied) → logits", "output")]
    for x, column in ((enc_x, enc), (dec_x, dec)):
        for (y0, _, _), (y1, _, _) in zip(column, column[1:]):
            arrow(x, y0 + height / 2, x, y1 - height / 2)
        for (y_sub, _, _), (y_add, _, next_part) in zip(column, column[1:]):
            if next_part == "add_norm":  # the residual connection: around the sublayer, into Add & Norm
                on = "add_norm" in highlight
                style = dict(color="#444444" if on else "#aaaaaa", linewidth=1.3 if on else 0.8)
                y_in, x_skip = y_sub - height / 2 - 0.14, x - width / 2 - 0.1
                ax.plot([x, x_skip, x_skip], [y_in, y_in, y_add], solid_capstyle="butt", **style)
                ax.add_patch(FancyArrowPatch((x_skip, y_add), (x - width / 2, y_add), arrowstyle="-|>",
                                             mutation_scale=8, shrinkA=0, shrinkB=0, **style))
        for y, text, part in column:
            box(x, y, text, part)
    # The N x frames around the repeated layers.
    for x, bottom, top, side in ((enc_x, 2.15, 5.25, -1), (dec_x, 2.15, 6.75, 1)):
        ax.add_patch(FancyBboxPatch((x - width / 2 - 0.18, bottom), width + 0.36, top - bottom,
                                    boxstyle="round,pad=0.02,rounding_size=0.2", fill=False,
                                    edgecolor="#999999", linestyle="--", linewidth=0.9))
        ax.text(x + side * (width / 2 + 0.3), (bottom + top) / 2, "N×", ha="right" if side < 0 else "left",
                va="center", fontsize=10, color="#555555")
    # Encoder memory feeds the decoder's cross-attention.
    ax.add_patch(FancyArrowPatch((enc_x + width / 2, 4.8), (dec_x - width / 2, 4.1), arrowstyle="-|>",
                                 mutation_scale=10, color="#666666", linewidth=0.9,
                                 connectionstyle="arc3,rad=-0.15"))
    ax.text((enc_x + dec_x) / 2, 4.85, "memory", ha="center", va="bottom", fontsize=8.5, color="#555555")
    ax.text(enc_x, 0.02, "source tokens", ha="center", va="center", fontsize=9, color="#333333")
    ax.text(dec_x, 0.02, "target tokens (shifted right)", ha="center", va="center", fontsize=9, color="#333333")
    ax.text(enc_x, 5.65, "Encoder", ha="center", fontsize=11, fontweight="bold", color="#333333")
    ax.text(dec_x, 7.75, "Decoder", ha="center", fontsize=11, fontweight="bold", color="#333333")
    ax.set_xlim(-0.3, 7.3)
    ax.set_ylim(-0.25, 8.05)
    ax.set_aspect("equal")
    ax.axis("off")
    return ax


def positional_heatmap(
    values: Any,
    *,
    x_title: str = "dimension i",
    y_title: str = "position p",
    value_title: str = "value",
    title: str | None = None,
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
        width, height: size in pixels (``height`` defaults to square cells).

    Returns:
        An ``alt.Chart``.
    """
    import altair as alt
    import pandas as pd

    matrix = _as_array(values)
    if matrix.ndim != 2:
        raise ValueError(f"values must be a 2-D matrix, got shape {matrix.shape}")
    rows, cols = matrix.shape
    r, c = np.meshgrid(np.arange(rows), np.arange(cols), indexing="ij")
    data = pd.DataFrame({"row": r.ravel(), "col": c.ravel(), "value": matrix.ravel()})
    limit = float(np.abs(matrix).max()) or 1.0
    height = height if height is not None else max(120, round(width * rows / cols))
    return alt.Chart(data, title=title or "", description=title or f"{y_title} by {x_title}").mark_rect().encode(
        x=alt.X("col:O", title=x_title, axis=alt.Axis(labelAngle=0, labelOverlap=True)),
        y=alt.Y("row:O", title=y_title, axis=alt.Axis(labelOverlap=True)),
        color=alt.Color("value:Q", title=value_title,
                        scale=alt.Scale(scheme="redblue", domain=[-limit, limit], reverse=True)),
        tooltip=[alt.Tooltip("row:O", title=y_title), alt.Tooltip("col:O", title=x_title),
                 alt.Tooltip("value:Q", title=value_title, format=".4f")],
    ).properties(width=width, height=height)


def positional_curves(
    table: Any,
    dims: Sequence[int],
    *,
    title: str | None = None,
    width: int = 560,
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


def _lines(
    panels: Mapping[str, Mapping[str, Any]], x_values: Any, *, x_title: str, y_title: str, series_title: str,
    title: str | None, log_y: bool, points: bool, width: int, height: int,
) -> Any:
    """Line chart(s): ``panels`` maps a panel title ("" for a single chart) to name -> values."""
    import altair as alt
    import pandas as pd

    frames, names = [], []
    for panel, series in panels.items():
        for name, values in series.items():
            y = _as_array(values).ravel()
            x = np.arange(1, len(y) + 1) if x_values is None else _as_array(x_values).ravel()
            if len(x) != len(y):
                raise ValueError(f"series {name!r} has {len(y)} values but there are {len(x)} x values")
            frames.append(pd.DataFrame({"x": x, "y": y, "series": name, "panel": panel}))
            names += [] if name in names else [name]
    if not frames:
        raise ValueError("series is empty: pass at least one name -> values")
    data = pd.concat(frames, ignore_index=True)
    pick = alt.selection_point(fields=["series"], bind="legend")
    tooltip = [alt.Tooltip("series:N", title=series_title), alt.Tooltip("x:Q", title=x_title),
               alt.Tooltip("y:Q", title=y_title, format=".4g")]
    faceted = len(panels) > 1
    chart = alt.Chart(data).mark_line(point=points, strokeWidth=2).encode(
        x=alt.X("x:Q", title=x_title, axis=alt.Axis(tickMinStep=1) if points else alt.Axis()),
        y=alt.Y("y:Q", title=y_title, scale=alt.Scale(type="log") if log_y else alt.Scale(zero=False)),
        color=alt.Color("series:N", title=series_title, sort=names),
        opacity=alt.condition(pick, alt.value(1.0), alt.value(0.15)),
        tooltip=([alt.Tooltip("panel:N", title="panel")] if faceted else []) + tooltip,
    ).add_params(pick).properties(width=width, height=height)
    description = title or f"{y_title} against {x_title}"
    if not faceted:
        return chart.properties(title=title or "", description=description)
    return chart.facet(
        column=alt.Column("panel:N", title=None, sort=list(panels), header=alt.Header(labelFontSize=13)),
        title=title or "", description=description,
    ).resolve_scale(y="independent")


def per_layer_chart(
    series: Mapping[str, Any],
    *,
    y_title: str,
    x_title: str = "layer (1 = bottom)",
    series_title: str = "variant",
    first_layer: int = 1,
    title: str | None = None,
    log_y: bool = False,
    width: int = 300,
    height: int = 220,
) -> Any:
    """One line per variant of a per-layer measurement (gradient norm, surviving signal, ...).

    Args:
        series: name -> values, one value per layer, bottom layer first; all the same length. For
            side-by-side panels (e.g. encoder and decoder) pass panel title -> (name -> values); the
            panels share the legend and have their own y scales.
        y_title, x_title, series_title, title: labels.
        first_layer: the layer number of the first value (``0`` when it is the stack's input).
        log_y: logarithmic y axis.
        width, height: size of one panel in pixels.

    Returns:
        An ``alt.Chart`` (``alt.FacetChart`` for panels): hover a point for its value; click a legend
        entry to highlight that variant.
    """
    panels = series if series and all(isinstance(v, Mapping) for v in series.values()) else {"": series}
    lengths = {len(_as_array(v).ravel()) for panel in panels.values() for v in panel.values()}
    if len(lengths) > 1:
        raise ValueError(f"every variant needs one value per layer; got lengths {sorted(lengths)}")
    layers = np.arange(first_layer, first_layer + (lengths.pop() if lengths else 0))
    return _lines(panels, layers, x_title=x_title, y_title=y_title, series_title=series_title, title=title,
                  log_y=log_y, points=True, width=width, height=height)


def loss_curves_chart(
    curves: Mapping[str, Any],
    *,
    steps: Any = None,
    y_title: str = "training loss",
    x_title: str = "step",
    series_title: str = "run",
    title: str | None = None,
    log_y: bool = False,
    width: int = 520,
    height: int = 260,
) -> Any:
    """Training curves, one line per run, with a clickable legend.

    Args:
        curves: run name -> values (one per logged step).
        steps: the step of each value (default 1, 2, ...).
        y_title, x_title, series_title, title: labels.
        log_y: logarithmic y axis.

    Returns:
        An ``alt.Chart``.
    """
    return _lines({"": curves}, steps, x_title=x_title, y_title=y_title, series_title=series_title, title=title,
                  log_y=log_y, points=False, width=width, height=height)


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


def position_change_bars(
    changes: Mapping[str, Any],
    *,
    labels: Sequence[str] | None = None,
    y_title: str = "change in output (max |difference|)",
    x_title: str = "position",
    title: str | None = None,
    ax: Any = None,
) -> Any:
    """Grouped bars: how much each position's output changed, one group of bars per module.

    Args:
        changes: module name -> ``(L,)`` change per position.
        labels: tick label per position (e.g. the tokens); default ``0 .. L-1``.

    Returns:
        The matplotlib ``Axes``.
    """
    import matplotlib.pyplot as plt

    arrays = {name: _as_array(v).ravel() for name, v in changes.items()}
    lengths = {len(a) for a in arrays.values()}
    if len(lengths) != 1:
        raise ValueError(f"every series needs one value per position; got lengths {sorted(lengths)}")
    (length,) = lengths
    labels = [str(i) for i in range(length)] if labels is None else list(labels)
    if len(labels) != length:
        raise ValueError(f"{len(labels)} labels for {length} positions")
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 2.8))
    width = 0.8 / len(arrays)
    x = np.arange(length)
    for k, (name, a) in enumerate(arrays.items()):
        ax.bar(x + (k - (len(arrays) - 1) / 2) * width, a, width=width, label=name)
    ax.set_xticks(x, labels)
    ax.set_xlabel(x_title)
    ax.set_ylabel(y_title)
    if title:
        ax.set_title(title)
    ax.legend(frameon=False, fontsize=9)
    return ax



# --- 4. Training figures (chapter 5) -------------------------------------------------------------
