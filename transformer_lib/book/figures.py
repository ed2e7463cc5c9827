"""What every chapter's figures share: the architecture map, and the helpers of the figure modules.

Each chapter's own figures live in its own module, in book order (a later chapter may import an
earlier one's, as the library's modules do):

    attention_figures   chapter 1   attention heatmaps, the multi-head diagram
    masking_figures     chapter 2   mask grids, the weight real queries give to pads
    embedding_figures   chapter 3   positional tables and curves, value histograms
    block_figures       chapter 4   per-layer lines, changed positions, the LayerNorm probes
    training_figures    chapter 5   the pipeline, schedules, smoothing, batching, live loss
    decoding_figures    chapter 6   the decoding loop, the attention explorer
    beyond_figures      chapter 7   rotations, score biases, sparse patterns, the two LMs

Here: :func:`architecture_diagram` (each chapter opens with it), the loss curves that chapters 4,
5 and 7 and the train command draw, and the small helpers (tensors to arrays, token axes, line
charts, panels a page wide). Functions return charts (``alt.Chart``) or axes
(``matplotlib.axes.Axes``); they never call ``plt.show()``. Conventions: queries on rows, keys on
columns, axes labelled with tokens. Nothing here imports the model: functions take tensors/arrays
and labels. Charts display interactively once
:func:`transformer_lib.book.charts.enable_charts` has been called.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import altair as alt
import numpy as np
import pandas as pd

from . import style

if TYPE_CHECKING:
    from matplotlib.axes import Axes

__all__ = ["ARCHITECTURE_CHAPTERS", "PAGE_WIDTH_INCHES", "architecture_diagram", "loss_curves_chart",
           "plot_training_curves", "readable_tokens", "training_curves_chart"]

# --- Tensors, labels and axes -------------------------------------------------------------------


def _to_numpy(x: Any) -> Any:
    """A tensor (any device, with or without grad) or array-like as a NumPy array."""

    if hasattr(x, "detach"):
        x = x.detach().cpu()
        x = (x.float() if x.is_floating_point() else x).numpy()  # NumPy has no bfloat16
    return np.asarray(x)


def _as_array(values: Any) -> np.ndarray:
    """A float numpy array from a tensor (detached, on the CPU), an array or nested sequences."""
    if hasattr(values, "detach"):
        values = values.detach().float().cpu().numpy()
    return np.asarray(values, dtype=float)


def _check_labels(tokens: Sequence[str], size: int, what: str) -> list[str]:
    tokens = [str(token) for token in tokens]
    if len(tokens) != size:
        raise ValueError(f"got {len(tokens)} {what} tokens for {size} {what} positions; they must match")
    return tokens


def readable_tokens(tokens: Sequence[str]) -> list[str]:
    """Subword pieces as a reader reads them on an axis: the word-start marker ``▁`` dropped, and a
    piece that continues a word (letters or digits without the marker) shown as ``-piece``.

    Word tokens (no piece carries the marker) are returned as they are.

    Example:
        >>> readable_tokens(["▁People", "▁are", "▁ad", "ding", ".", "<eos>"])
        ['People', 'are', 'ad', '-ding', '.', '<eos>']
    """
    tokens = [str(t) for t in tokens]
    if not any(t.startswith("▁") for t in tokens):
        return tokens
    return [t[1:] if t.startswith("▁") else (f"-{t}" if t[:1].isalnum() else t) for t in tokens]


def _token_axis(tokens: list[str], title: str, **kwargs: Any) -> Any:
    """An axis over positions 0, 1, ... that shows the token at each position.

    Positions, not tokens, are the field: a sentence may hold the same word twice ("the"), and a
    nominal token field would merge their rows.
    """

    return alt.Axis(title=title, labelExpr=f"{json.dumps(tokens)}[datum.value]", **kwargs)


# --- Line charts and panels -----------------------------------------------------------------------


def _lines(
    panels: Mapping[str, Mapping[str, Any]], x_values: Any, *, x_title: str, y_title: str, series_title: str,
    title: str | None, log_y: bool, points: bool, width: int, height: int,
) -> Any:
    """Line chart(s): ``panels`` maps a panel title ("" for a single chart) to name -> values;
    ``x_values``: one x per value, shared by every series or a mapping name -> x (``None``: 1, 2, ...)."""

    frames, names = [], []
    for panel, series in panels.items():
        for name, values in series.items():
            y = _as_array(values).ravel()
            x = (np.arange(1, len(y) + 1) if x_values is None
                 else _as_array(x_values[name] if isinstance(x_values, Mapping) else x_values).ravel())
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
    if not log_y:
        y_scale = alt.Scale(zero=False)
    elif faceted:  # each panel fits its own values
        y_scale = alt.Scale(type="log")
    else:  # fitted to the values: a log axis rounded out to powers of 10 is mostly empty
        y_scale = alt.Scale(type="log", domain=[float(data["y"].min()) * 0.95, float(data["y"].max()) * 1.05],
                            nice=False)
    chart = alt.Chart(data).mark_line(point=points, strokeWidth=2).encode(
        x=alt.X("x:Q", title=x_title, axis=alt.Axis(tickMinStep=1) if points else alt.Axis(),
                scale=alt.Scale(nice=True)),
        y=alt.Y("y:Q", title=y_title, scale=y_scale),
        color=alt.Color("series:N", title=series_title, sort=names,
                        # below the plot, so that it never pushes the chart off a narrow page
                        legend=alt.Legend(orient="bottom", columns=2, labelLimit=320)),
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


def loss_curves_chart(
    curves: Mapping[str, Any],
    *,
    steps: Any = None,
    y_title: str = "training loss",
    x_title: str = "step",
    series_title: str = "run",
    title: str | None = None,
    log_y: bool = False,
    smooth: int = 1,
    max_points: int = 600,
    width: int = 480,
    height: int = 260,
) -> Any:
    """Training curves, one line per run, with a clickable legend.

    Args:
        curves: run name -> values (one per logged step).
        steps: the step of each value (default 1, 2, ...).
        y_title, x_title, series_title, title: labels.
        log_y: logarithmic y axis (fitted to the values, not rounded out to powers of 10).
        smooth: draw the mean of this many consecutive values (fewer at the start), so that noisy
            curves can be told apart; the y title says so.
        max_points: draw at most about this many points per run: a longer run is drawn at every
            k-th step (after smoothing) and its last, so that the page stays light (and within
            altair's 5,000 rows of inline data) however long the training was.

    Returns:
        An ``alt.Chart``.
    """
    if smooth < 1:
        raise ValueError(f"smooth must be at least 1 (values per mean), got {smooth}")
    if max_points < 2:
        raise ValueError(f"max_points must be at least 2 (a line needs two points), got {max_points}")
    curves = {name: _as_array(v).ravel() for name, v in curves.items()}
    if smooth > 1:
        curves = {name: pd.Series(y).rolling(smooth, min_periods=1).mean().to_numpy() for name, y in curves.items()}
        y_title = f"{y_title}, mean of {smooth} steps"
    xs = {name: np.arange(1, len(y) + 1) if steps is None else _as_array(steps).ravel() for name, y in curves.items()}
    for name, y in curves.items():
        if len(y) > max_points and len(xs[name]) == len(y):  # (a length mismatch is reported by _lines)
            keep = np.unique(np.r_[np.arange(0, len(y), -(-len(y) // max_points)), len(y) - 1])
            curves[name], xs[name] = y[keep], xs[name][keep]
    few = max((len(y) for y in curves.values()), default=0) <= FEW_POINTS  # short runs: a marker per value
    return _lines({"": curves}, xs, x_title=x_title, y_title=y_title, series_title=series_title, title=title,
                  log_y=log_y, points=few, width=width, height=height)


FEW_POINTS = 30
"""Curves of at most this many values are drawn with a marker at each: a reader can hover each value
(a line's tooltip needs the pointer on the line itself, which few segments make hard to find)."""


PAGE_WIDTH_INCHES = 6.6
"""A figure this wide (at matplotlib's 100 dpi) fills the website's text column (688 px) unshrunk,
so its text shows at the size it was drawn (10 pt = 14 px, 8 pt = 11 px)."""


def _panel_grid(count: int, columns: int, *, width: float, panel_height: float, margin: float) -> Any:
    """A new figure's ``count`` axes, in rows of at most ``columns``, ``width`` inches wide and
    ``panel_height`` a row plus ``margin`` (for the title); the grid's unused cells are removed."""
    import matplotlib.pyplot as plt

    columns = min(count, columns)
    rows = -(-count // columns)
    _, grid = plt.subplots(rows, columns, figsize=(width, panel_height * rows + margin), squeeze=False,
                           layout="constrained")
    for ax in grid.ravel()[count:]:
        ax.remove()
    return grid.ravel()[:count]


def _panel_axes(axes: Any, count: int, *, panel_height: float, columns: int = 4) -> Any:
    """``axes`` as an array, or a new figure's: ``count`` panels, at most ``columns`` a row, one page wide."""
    import numpy as np

    if axes is not None:
        return np.asarray(axes).ravel()
    width = min(PAGE_WIDTH_INCHES, 2.6 * min(count, columns) + 0.6)
    return _panel_grid(count, columns, width=width, panel_height=panel_height, margin=0.5)


# --- Training curves (chapter 5, and the train command's loss.png) -------------------------------


def _history_frames(history: dict[str, list[dict[str, float]]]) -> tuple[Any, Any]:

    train = pd.DataFrame(history.get("train", []), columns=["step", "epoch", "loss", "lr", "tokens_per_s"])
    val = pd.DataFrame(history.get("val", []), columns=["step", "epoch", "loss", "ppl", "token_accuracy", "exact_match"])
    return train, val


def plot_training_curves(history: dict[str, list[dict[str, float]]], ax: Any = None, title: str | None = None) -> Any:
    """Training loss (a line) and validation loss (dots) against the optimizer step, with matplotlib.

    Args:
        history: ``{"train": [{"step", "loss", ...}, ...], "val": [{"step", "loss", ...}, ...]}``,
            as ``Trainer.history`` and the ``metrics.json`` of ``python -m transformer_lib.cli.train`` hold.
        ax: axes to draw on (default: a new figure's).
        title: optional title.

    Returns:
        The ``matplotlib.axes.Axes``.
    """
    if ax is None:
        from matplotlib.figure import Figure

        ax = Figure(figsize=(6, 3.5), layout="constrained").add_subplot()
    train, val = _history_frames(history)
    ax.plot(train["step"], train["loss"], label="training loss (label-smoothed)", color=style.color(0))
    if len(val):
        ax.plot(val["step"], val["loss"], "o-", label="validation loss (cross-entropy)", color=style.color(1), markersize=4)
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("loss per target token (nats)")
    ax.grid(alpha=0.3)
    if len(train) or len(val):
        ax.legend()
    if title:
        ax.set_title(title)
    return ax


def training_curves_chart(history: dict[str, list[dict[str, float]]], title: str = "Loss during training") -> Any:
    """The same curves as :func:`plot_training_curves`, as an altair chart with hover tooltips."""

    train, val = _history_frames(history)
    rows = [
        *({"step": r.step, "loss": r.loss, "curve": "training (label-smoothed)"} for r in train.itertuples()),
        *({"step": r.step, "loss": r.loss, "curve": "validation (cross-entropy)", "exact match": r.exact_match} for r in val.itertuples()),
    ]
    frame = pd.DataFrame(rows, columns=["step", "loss", "curve", "exact match"])
    return (
        alt.Chart(frame, title=title)
        .mark_line(point=True)
        .encode(
            x=alt.X("step:Q", title="optimizer step"),
            y=alt.Y("loss:Q", title="loss per target token (nats)"),
            color=alt.Color("curve:N", title=None, legend=alt.Legend(orient="top")),
            tooltip=["curve", "step", alt.Tooltip("loss:Q", format=".3f"), alt.Tooltip("exact match:Q", format=".1%")],
        )
        .properties(width=520, height=260)
    )


# --- The architecture map that opens every chapter -----------------------------------------------
#
# Drawn for a phone's column: 4.3 inches wide, every text 8.8 pt. Shown 342 px wide on a 390 px phone,
# the smallest text is 9.3 px high (tests/test_site.py measures it on every landing page); on a laptop
# the drawing is shown at its own size. Coordinates are inches from the bottom left.

# The boxes of each column, bottom up: (label, component, height in lines). Column 0 is the encoder,
# column 1 the decoder.
_LAYERS = {
    0: [("multi-head self-attention", "attention", 2), ("add & norm", "blocks", 1), ("feed-forward", "blocks", 1),
        ("add & norm", "blocks", 1)],
    1: [("masked multi-head attention", "attention", 2), ("add & norm", "blocks", 1),
        ("multi-head cross-attention", "attention", 2), ("add & norm", "blocks", 1), ("feed-forward", "blocks", 1),
        ("add & norm", "blocks", 1)],
}
_INPUTS = [("token embedding", "embeddings", 1), ("+ positional encoding", "embeddings", 1)]
_OUTPUTS = [("linear to vocabulary size", "blocks", 1), ("softmax: probabilities", "training", 1)]

# The masks each attention sees, as tags on the arrow into it: (column, index in _LAYERS, text).
_MASK_TAGS = [(0, 0, "padding mask (ch. 2)"), (1, 0, "causal & padding mask (ch. 2)"),
              (1, 2, "padding mask (source, ch. 2)")]


ARCHITECTURE_CHAPTERS = {
    "attention": "1 attention",
    "masks": "2 masking",
    "embeddings": "3 embeddings",
    "blocks": "4 blocks",
    "training": "5 training",
    "decoding": "6 decoding",
}


def architecture_diagram(highlight: Sequence[str] = (), ax: Axes | None = None) -> Axes:
    """The encoder-decoder Transformer (Vaswani et al. 2017, figure 1) with chosen parts highlighted.

    Each chapter opens with this picture, highlighting what it builds. Every box is tagged with
    the chapter that builds it, and every attention with the masks it sees. Drawn for a phone's column
    (4.3 by 6.65 inches, text of 8.8 pt).

    Args:
        highlight: any of ``"attention"``, ``"masks"``, ``"embeddings"``, ``"blocks"``,
            ``"training"``, ``"decoding"`` (the keys of ``ARCHITECTURE_CHAPTERS``).
        ax: where to draw (default: a new figure); its limits are set to the drawing's, in inches.

    Returns:
        The matplotlib ``Axes``.
    """
    import matplotlib.pyplot as plt

    unknown = set(highlight) - set(ARCHITECTURE_CHAPTERS)
    if unknown:
        raise ValueError(f"unknown parts {sorted(unknown)}; choose from {sorted(ARCHITECTURE_CHAPTERS)}")
    if ax is None:
        figure = plt.figure(figsize=(_WIDTH, _HEIGHT))
        ax = figure.add_axes((0, 0, 1, 1))
    chapter_of = {part: label.split()[0] for part, label in ARCHITECTURE_CHAPTERS.items()}
    tops = {}
    for column, tokens in ((0, "source tokens"), (1, "target tokens (shifted right)")):
        tops[column] = _draw_column(ax, column, tokens, highlight, chapter_of)
    _draw_memory(ax, tops)
    lit = "training" in highlight or "decoding" in highlight
    y = _OUTPUT_TOP + _GAP + 0.27
    ax.text(_WIDTH / 2, y, "training: the loss (ch. 5)\ndecoding: greedy and beam search (ch. 6)", ha="center",
            va="center", fontsize=_FONT, color=_INK, linespacing=1.3,
            bbox=dict(boxstyle="round,pad=0.35", **_box_style(lit)))
    _arrow(ax, [(_CENTRE[1], _OUTPUT_TOP + 0.02), (_CENTRE[1], y - 0.25)])
    ax.set_xlim(0, _WIDTH)
    ax.set_ylim(0, _HEIGHT)
    ax.axis("off")
    return ax


# Geometry and colours of the architecture diagram (inches, points).
_WIDTH, _HEIGHT, _FONT = 4.3, 6.65, 8.8
_BOX_WIDTH, _LINE_HEIGHT, _GAP, _TAG_ROOM = 2.0, 0.27, 0.13, 0.34
_CENTRE = {0: 1.05, 1: 3.25}
_OUTPUT_TOP = 5.8  # the top of the decoder's softmax box (computed by _draw_column; checked there)


_LIT, _UNLIT, _EDGE, _FAINT, _INK, _LINE = "#f6ad55", "#edf2f7", "#2d3748", "#a0aec0", "#1a202c", "#4a5568"


def _box_style(lit: bool) -> dict[str, Any]:
    return dict(facecolor=_LIT if lit else _UNLIT, edgecolor=_EDGE if lit else _FAINT, linewidth=1.4 if lit else 0.8)


def _arrow(ax: Axes, points: list[tuple[float, float]], head: bool = True) -> None:
    """A line through ``points``, with an arrow head at the last one."""
    xs, ys = zip(*points)
    ax.plot(xs, ys, color=_LINE, lw=0.9, solid_capstyle="round", zorder=1)
    if head:
        ax.annotate("", xy=points[-1], xytext=points[-2], arrowprops=dict(arrowstyle="->", color=_LINE, lw=0.9),
                    zorder=1)


def _box(ax: Axes, column: int, bottom: float, label: str, part: str, lines: int, lit: bool, chapter: str) -> float:
    """One component's box from ``bottom`` up, its label and the chapter that builds it (beside the
    label, or under it in a box of two lines); returns its top."""
    from matplotlib.patches import FancyBboxPatch

    x, height = _CENTRE[column], lines * _LINE_HEIGHT
    ax.add_patch(FancyBboxPatch((x - _BOX_WIDTH / 2, bottom), _BOX_WIDTH, height,
                                boxstyle="round,pad=0.0,rounding_size=0.06", zorder=2, **_box_style(lit)))
    middle = bottom + height / 2
    if lines == 1:
        ax.text(x - 0.18, middle, label, ha="center", va="center", fontsize=_FONT, color=_INK, zorder=3)
        ax.text(x + _BOX_WIDTH / 2 - 0.06, middle, f"ch. {chapter}", ha="right", va="center", fontsize=_FONT,
                color=_LINE, zorder=3)
    else:
        ax.text(x, middle + _LINE_HEIGHT / 2 - 0.02, label, ha="center", va="center", fontsize=_FONT, color=_INK, zorder=3)
        ax.text(x, middle - _LINE_HEIGHT / 2 + 0.03, f"ch. {chapter}", ha="center", va="center", fontsize=_FONT,
                color=_LINE, zorder=3)
    return bottom + height


def _draw_column(ax: Axes, column: int, tokens: str, highlight: Sequence[str], chapter_of: dict[str, str]) -> dict:
    """A column bottom up: its tokens, embedding boxes, the layer (framed, its attentions' mask tags on
    the arrows into them), and for the decoder the output boxes. Returns the tops of its layer's boxes."""
    from matplotlib.patches import FancyBboxPatch

    x = _CENTRE[column]
    ax.text(x, 0.12, tokens, ha="center", va="center", fontsize=_FONT, color=_INK)
    y, previous = 0.32, 0.22
    for label, part, lines in _INPUTS:
        _arrow(ax, [(x, previous), (x, y)])
        previous = _box(ax, column, y, label, part, lines, part in highlight, chapter_of[part])
        y = previous + _GAP
    frame_bottom = y - 0.05
    y += 0.05
    tags = {index: text for c, index, text in _MASK_TAGS if c == column}
    layer_tops = []
    for index, (label, part, lines) in enumerate(_LAYERS[column]):
        if index in tags:
            y += _TAG_ROOM
            ax.text(x, y - _TAG_ROOM / 2 - _GAP / 2 + 0.02, tags[index], ha="center", va="center", fontsize=_FONT,
                    color=_INK, zorder=3, bbox=dict(boxstyle="round,pad=0.2", **_box_style("masks" in highlight)))
        _arrow(ax, [(x, previous), (x, y)])
        previous = _box(ax, column, y, label, part, lines, part in highlight, chapter_of[part])
        layer_tops.append(previous)
        y = previous + _GAP
    frame_top = y + 0.22
    ax.add_patch(FancyBboxPatch((x - _BOX_WIDTH / 2 - 0.04, frame_bottom), _BOX_WIDTH + 0.08, frame_top - frame_bottom,
                                boxstyle="round,pad=0.0,rounding_size=0.1", facecolor="none", edgecolor=_FAINT,
                                linestyle="--", zorder=0))
    ax.text(x - _BOX_WIDTH / 2 + 0.02, frame_top - 0.05, f"{'encoder' if column == 0 else 'decoder'} layer × N",
            ha="left", va="top", fontsize=_FONT, color=_LINE)
    if column == 1:
        y = frame_top + 0.12
        for label, part, lines in _OUTPUTS:
            _arrow(ax, [(x, previous), (x, y)])
            previous = _box(ax, column, y, label, part, lines, part in highlight, chapter_of[part])
            y = previous + _GAP
        if abs(previous - _OUTPUT_TOP) > 1e-9:
            raise AssertionError(f"architecture_diagram: the softmax box ends at {previous:.2f}, _OUTPUT_TOP says {_OUTPUT_TOP}")
    return {"layer_tops": layer_tops, "frame_top": frame_top}


def _draw_memory(ax: Axes, tops: dict[int, dict]) -> None:
    """The encoder's output (memory) into every decoder layer's cross-attention, between the columns."""
    encoder_top = tops[0]["layer_tops"][-1]
    above = tops[0]["frame_top"] + 0.28
    between = (_CENTRE[0] + _CENTRE[1]) / 2
    cross_index = [label for label, _, _ in _LAYERS[1]].index("multi-head cross-attention")
    cross_middle = tops[1]["layer_tops"][cross_index] - _LINE_HEIGHT  # the middle of its two lines
    _arrow(ax, [(_CENTRE[0], encoder_top), (_CENTRE[0], above), (between, above), (between, cross_middle),
                (_CENTRE[1] - _BOX_WIDTH / 2 - 0.01, cross_middle)])
    ax.text(_CENTRE[0] - _BOX_WIDTH / 2 + 0.02, above + 0.05, "memory (B, S, D)", ha="left", va="bottom",
            fontsize=_FONT, color=_LINE)
