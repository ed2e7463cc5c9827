"""The chapters' figures: altair charts where interaction helps, matplotlib for static plots.

Functions return charts (``alt.Chart``) or axes (``matplotlib.axes.Axes``); they never call
``plt.show()``. Conventions: queries on rows, keys on columns, axes labelled with tokens.
Nothing here imports the model: functions take tensors/arrays and labels. Charts display
interactively once :func:`transformer_lib.book.charts.enable_charts` has been called.
"""

from __future__ import annotations

import json
import textwrap
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import altair as alt
import numpy as np
import pandas as pd

if TYPE_CHECKING:
    from matplotlib.axes import Axes

# --- 1. Attention and mask figures (chapters 1, 2, 6) -------------------------------------------


def _to_numpy(x: Any) -> Any:
    """A tensor (any device, with or without grad) or array-like as a NumPy array."""

    if hasattr(x, "detach"):
        x = x.detach().cpu()
        x = (x.float() if x.is_floating_point() else x).numpy()  # NumPy has no bfloat16
    return np.asarray(x)


def _check_labels(tokens: Sequence[str], size: int, what: str) -> list[str]:
    tokens = [str(token) for token in tokens]
    if len(tokens) != size:
        raise ValueError(f"got {len(tokens)} {what} tokens for {size} {what} positions; they must match")
    return tokens


def _token_axis(tokens: list[str], title: str, **kwargs: Any) -> Any:
    """An axis over positions 0, 1, ... that shows the token at each position.

    Positions, not tokens, are the field: a sentence may hold the same word twice ("the"), and a
    nominal token field would merge their rows.
    """

    return alt.Axis(title=title, labelExpr=f"{json.dumps(tokens)}[datum.value]", **kwargs)


def attention_heatmap(
    weights: Any,
    query_tokens: Sequence[str],
    key_tokens: Sequence[str],
    *,
    layer_names: Sequence[str] | None = None,
    head_names: Sequence[str] | None = None,
    title: str | None = None,
    cell_size: int = 30,
    vmax: float | None = None,
) -> alt.Chart:
    """An interactive heatmap of attention weights: queries on rows, keys on columns.

    Hovering a cell shows the query token, the key token and the weight. With several heads a radio
    button picks the head; with several layers a dropdown picks the layer. The colour scale is the
    same for every layer and head (``0`` to ``vmax``), so their cells can be compared.

    Args:
        weights: attention weights of *one* sequence (pick the batch element first), as a tensor or
            array of shape ``(T, L)``, ``(H, T, L)`` or ``(N, H, T, L)`` for ``N`` layers, or a list
            of ``N`` ``(H, T, L)`` tensors (e.g. ``[w[0] for w in maps.decoder_cross]``).
        query_tokens: ``T`` labels for the rows (self-attention: the sequence; cross-attention: the
            target).
        key_tokens: ``L`` labels for the columns (cross-attention: the source).
        layer_names: ``N`` names for the layer menu (default ``"layer 0"``, ...).
        head_names: ``H`` names for the head buttons (default ``"head 0"``, ...).
        title: chart title.
        cell_size: pixels per cell.
        vmax: top of the colour scale (default: the largest weight).

    Returns:
        An ``alt.Chart`` whose data holds one record per layer and head (``layer``, ``head``, and
        ``weights``, the ``(T, L)`` grid as nested lists); its transforms keep the selected layer
        and head (parameters ``layer`` and ``head``, present when there is a choice) and expand
        the grid into cells with fields ``query_pos``, ``key_pos``, ``query``, ``key``, ``weight``.
    """

    w = _attention_grids(weights)  # (N, H, T, L)
    n_layers, n_heads, n_queries, n_keys = w.shape
    query_tokens = _check_labels(query_tokens, n_queries, "query")
    key_tokens = _check_labels(key_tokens, n_keys, "key")
    layer_names = _names(layer_names, "layer", n_layers)
    head_names = _names(head_names, "head", n_heads)
    # One record per (layer, head) holding its (T, L) weights; the chart's transforms pick the
    # selected layer and head first and only then expand that one grid into cells. This keeps the
    # embedded data small (altair refuses more than 5,000 rows by default, and a trained model's
    # maps across 6 layers and 8 heads easily have 40,000 cells).
    records = [
        {
            "layer": layer_names[layer],
            "head": head_names[head],
            "weights": np.round(w[layer, head], 6).tolist(),  # (T, L)
            "query_pos": list(range(n_queries)),
        }
        for layer in range(n_layers)
        for head in range(n_heads)
    ]
    chart = _layer_and_head_menus(alt.Chart(alt.Data(values=records)), layer_names, head_names)
    top = float(w.max()) if vmax is None else float(vmax)
    chart = _attention_cells(chart, query_tokens, key_tokens, top, cell_size)
    return chart if title is None else chart.properties(title=title)


def _attention_grids(weights: Any) -> np.ndarray:
    """Attention weights of one sequence as a float array ``(N, H, T, L)``."""
    if isinstance(weights, (list, tuple)):
        weights = np.stack([_to_numpy(w) for w in weights])
    w = _to_numpy(weights).astype(np.float64)
    if w.ndim not in (2, 3, 4):
        raise ValueError(
            f"weights must have shape (T, L), (H, T, L) or (layers, H, T, L) for one sequence, got {w.shape}; "
            "select the batch element first (weights[0])"
        )
    return w.reshape((1,) * (4 - w.ndim) + w.shape)  # (N, H, T, L)


def _names(names: Sequence[str] | None, kind: str, count: int) -> list[str]:
    """``count`` names for the layer or head menu: the given ones, else ``"<kind> 0"``, ..."""
    names = [f"{kind} {i}" for i in range(count)] if names is None else list(names)
    if len(names) != count:
        raise ValueError(f"got {len(names)} {kind} names for weights with {count} {kind}s")
    return names


def _layer_and_head_menus(chart: alt.Chart, layer_names: list[str], head_names: list[str]) -> alt.Chart:
    """A dropdown for the layer and radio buttons for the head, where there is a choice."""
    if len(layer_names) > 1:
        layer_param = alt.param(
            name="layer", value=layer_names[0], bind=alt.binding_select(options=layer_names, name="layer ")
        )
        chart = chart.add_params(layer_param).transform_filter(alt.datum.layer == layer_param)
    if len(head_names) > 1:
        binding = alt.binding_radio if len(head_names) <= 8 else alt.binding_select
        head_param = alt.param(name="head", value=head_names[0], bind=binding(options=head_names, name="head "))
        chart = chart.add_params(head_param).transform_filter(alt.datum.head == head_param)
    return chart


def _attention_cells(
    chart: alt.Chart, query_tokens: list[str], key_tokens: list[str], top: float, cell_size: int
) -> alt.Chart:
    """Expand the selected ``(T, L)`` grid into one rectangle per query and key, with tooltips."""
    n_queries, n_keys = len(query_tokens), len(key_tokens)
    # Key labels stay horizontal while they fit in a column (about 7 pixels a character).
    key_angle = 0 if max(len(t) for t in key_tokens) * 7 <= cell_size else -90
    return (
        chart.transform_flatten(["weights", "query_pos"], as_=["row", "query_pos"])  # one datum per query
        .transform_calculate(key_pos=f"sequence(0, {n_keys})")
        .transform_flatten(["row", "key_pos"], as_=["weight", "key_pos"])  # one datum per cell
        .transform_calculate(
            query=f"{json.dumps(query_tokens)}[datum.query_pos]",
            key=f"{json.dumps(key_tokens)}[datum.key_pos]",
        )
        .mark_rect(stroke="white", strokeWidth=0.5)
        .encode(
            x=alt.X("key_pos:O", axis=_token_axis(key_tokens, "key", orient="top", labelAngle=key_angle)),
            y=alt.Y("query_pos:O", axis=_token_axis(query_tokens, "query", labelAngle=0)),
            color=alt.Color(
                "weight:Q",
                scale=alt.Scale(scheme="blues", domain=[0.0, top if top > 0 else 1.0]),
                legend=alt.Legend(title="weight"),
            ),
            tooltip=_weight_tooltips(),
        )
        .properties(width=cell_size * n_keys, height=cell_size * n_queries)
    )


# What each kind of attention relates: (rows: the queries, columns: the keys), by the names that
# transformer_lib.book.artifacts.attention_weights gives them.
ATTENTION_KINDS = {
    "decoder_cross": ("cross-attention", "output_tokens", "source_tokens"),
    "encoder_self": ("encoder self-attention", "source_tokens", "source_tokens"),
    "decoder_self": ("decoder self-attention", "output_tokens", "decoder_input_tokens"),
}


def attention_explorer(sentences: Sequence[Mapping[str, Any]], *, title: str | None = None, cell_size: int = 24) -> alt.Chart:
    """Every attention weight of a few sentences in one chart: pick the sentence, the attention
    (cross, encoder self or decoder self), the layer and the head (or the mean of the heads).

    Rows are queries, columns keys; in the decoder a row is labelled with the token written at that
    step. The colour scale is 0 to 1 for every choice, so they can be compared. The chart has a
    fixed size, that of the longest sentence.

    Args:
        sentences: one mapping per sentence as :func:`transformer_lib.book.artifacts.attention_weights`
            returns it (and the committed artifacts hold it): ``source``, ``source_tokens`` (``S``),
            ``output_tokens`` and ``decoder_input_tokens`` (``T``), and ``encoder_self``
            ``(N, H, S, S)``, ``decoder_self`` ``(N, H, T, T)``, ``decoder_cross`` ``(N, H, T, S)``.

    Returns:
        An ``alt.Chart`` with parameters ``sentence``, ``attention``, ``layer`` and ``head``
        (dropdowns), whose data holds one record per choice (its grid, and its row and column tokens).
    """
    if not sentences:
        raise ValueError("attention_explorer needs at least one sentence")
    names = [f"{i + 1}. {s['source']}" for i, s in enumerate(sentences)]
    records, labels = [], {}
    for name, sentence in zip(names, sentences):
        labels[name] = {}
        for kind, (kind_name, rows, cols) in ATTENTION_KINDS.items():
            labels[name][kind_name] = [list(sentence[rows]), list(sentence[cols])]
            records += _explorer_records(name, kind_name, _attention_grids(sentence[kind]), sentence[rows], sentence[cols])
    w = _attention_grids(sentences[0]["decoder_cross"])
    menus = {
        "sentence": names,
        "attention": [kind_name for kind_name, _, _ in ATTENTION_KINDS.values()],
        "layer": [f"layer {i + 1}" for i in range(w.shape[0])],
        "head": ["mean of heads", *[f"head {h + 1}" for h in range(w.shape[1])]],
    }
    chart = alt.Chart(alt.Data(values=records))
    for param_name, options in menus.items():
        param = alt.param(name=param_name, value=options[0], bind=alt.binding_select(options=options, name=f"{param_name} "))
        chart = chart.add_params(param).transform_filter(alt.datum[param_name] == param)
    size = cell_size * max(len(s[key]) for s in sentences for key in ("source_tokens", "output_tokens"))
    chart = _explorer_cells(chart, json.dumps(labels, ensure_ascii=False)).properties(width=size, height=size)
    return chart if title is None else chart.properties(title=title)


def _explorer_records(
    sentence: str, kind: str, w: np.ndarray, rows: Sequence[str], cols: Sequence[str]
) -> list[dict[str, Any]]:
    """One record per layer and head (and the mean of the heads) of one sentence's attention."""
    n_layers, n_heads, n_rows, n_cols = w.shape
    _check_labels(rows, n_rows, "query")
    _check_labels(cols, n_cols, "key")
    records = []
    for layer in range(n_layers):
        grids = {"mean of heads": w[layer].mean(0), **{f"head {h + 1}": w[layer, h] for h in range(n_heads)}}
        records += [
            {"sentence": sentence, "attention": kind, "layer": f"layer {layer + 1}", "head": head,
             "weights": np.round(grid, 3).tolist()}
            for head, grid in grids.items()
        ]
    return records


def _explorer_cells(chart: alt.Chart, labels: str) -> alt.Chart:
    """The selected grid as one rectangle per query and key; axis labels follow the chosen sentence.

    ``labels`` (JSON): sentence -> attention -> [row tokens, column tokens]. The tokens are looked
    up there, not stored with each of the hundreds of grids: the page stays small.
    """
    tokens = f"{labels}[datum.sentence][datum.attention]"
    return (
        chart.transform_calculate(query_pos="sequence(0, length(datum.weights))")
        .transform_flatten(["weights", "query_pos"], as_=["row", "query_pos"])
        .transform_calculate(key_pos="sequence(0, length(datum.row))")
        .transform_flatten(["row", "key_pos"], as_=["weight", "key_pos"])
        .transform_calculate(query=f"{tokens}[0][datum.query_pos]", key=f"{tokens}[1][datum.key_pos]")
        .mark_rect(stroke="white", strokeWidth=0.5)
        .encode(
            x=alt.X("key_pos:O", axis=alt.Axis(title="key", orient="top", labelAngle=-60, labelAlign="left",
                                               labelExpr=f"{labels}[sentence][attention][1][datum.value]")),
            y=alt.Y("query_pos:O", axis=alt.Axis(title="query", labelAngle=0,
                                                 labelExpr=f"{labels}[sentence][attention][0][datum.value]")),
            color=alt.Color("weight:Q", scale=alt.Scale(scheme="blues", domain=[0.0, 1.0]), legend=alt.Legend(title="weight")),
            tooltip=_weight_tooltips(),
        )
    )


def _weight_tooltips() -> list[Any]:
    """What hovering a cell of an attention map shows: the pair of tokens, the weight, the positions."""
    return [
        alt.Tooltip("query:N", title="query"),
        alt.Tooltip("key:N", title="key"),
        alt.Tooltip("weight:Q", title="weight", format=".3f"),
        alt.Tooltip("query_pos:O", title="query position"),
        alt.Tooltip("key_pos:O", title="key position"),
    ]


def mask_heatmap(
    mask: Any,
    query_tokens: Sequence[str],
    key_tokens: Sequence[str],
    *,
    ax: Axes | None = None,
    title: str | None = None,
) -> Axes:
    """Draw a boolean mask (``True`` = may attend) as a grid: queries on rows, keys on columns.

    The mask is *broadcast* to ``(T, L)`` first, which is the point of the picture: a padding mask
    ``(1, 1, 1, L)`` becomes the same row repeated for every query, a causal mask ``(1, 1, T, T)``
    the same lower triangle for every sentence. Leading dimensions must be 1 (select the batch
    element first). Filled cells may be attended to; empty cells are blocked.

    Returns:
        The matplotlib ``Axes`` (a new figure's when ``ax`` is ``None``).
    """
    import matplotlib.pyplot as plt

    m = _to_numpy(mask)
    if m.dtype != np.bool_:
        raise TypeError(f"mask must be boolean (True = may attend), got dtype {m.dtype}")
    n_queries, n_keys = len(query_tokens), len(key_tokens)
    if m.ndim < 2 or any(size != 1 for size in m.shape[:-2]):
        raise ValueError(f"mask of shape {m.shape}: leading dimensions must be 1 (select one sequence first)")
    try:
        grid = np.broadcast_to(m.reshape(m.shape[-2:]), (n_queries, n_keys))
    except ValueError as error:
        raise ValueError(
            f"mask of shape {m.shape} does not broadcast to ({n_queries} queries, {n_keys} keys)"
        ) from error
    if ax is None:
        _, ax = plt.subplots(figsize=(0.45 * n_keys + 1.5, 0.45 * n_queries + 1.2))
    ax.imshow(grid, cmap=plt.matplotlib.colors.ListedColormap(["#f4f4f4", "#2b6cb0"]), vmin=0, vmax=1)
    ax.set_xticks(range(n_keys), [str(t) for t in key_tokens], rotation=90)
    ax.set_yticks(range(n_queries), [str(t) for t in query_tokens])
    ax.xaxis.tick_top()
    ax.xaxis.set_label_position("top")
    ax.set_xlabel("key")
    ax.set_ylabel("query")
    ax.set_xticks(np.arange(-0.5, n_keys), minor=True)
    ax.set_yticks(np.arange(-0.5, n_queries), minor=True)
    ax.grid(which="minor", color="white", linewidth=1.5)
    ax.tick_params(which="minor", length=0)
    if title is not None:
        ax.set_title(title, fontsize="medium", pad=6, y=-0.02 - 0.5 / max(n_queries, 1), va="top")
    return ax


# Boxes of the architecture diagram: (column, row, label, component). Column 0 is the encoder,
# column 1 the decoder; rows go upwards.
_ARCHITECTURE = [
    (0, 0, "token embedding", "embeddings"),
    (0, 1, "+ positional encoding", "embeddings"),
    (0, 2.5, "multi-head self-attention", "attention"),
    (0, 3.5, "add & norm", "blocks"),
    (0, 4.5, "feed-forward", "blocks"),
    (0, 5.5, "add & norm", "blocks"),
    (1, 0, "token embedding", "embeddings"),
    (1, 1, "+ positional encoding", "embeddings"),
    (1, 2.5, "masked multi-head attention", "attention"),
    (1, 3.5, "add & norm", "blocks"),
    (1, 4.5, "multi-head cross-attention", "attention"),
    (1, 5.5, "add & norm", "blocks"),
    (1, 6.5, "feed-forward", "blocks"),
    (1, 7.5, "add & norm", "blocks"),
    (1, 9, "linear to vocabulary size", "blocks"),
    (1, 10, "softmax: probabilities", "training"),
]
# Which masks each attention sees, drawn as tags beside it: (column, row, text).
_MASK_TAGS = [(0, 2.5, "padding\nmask"), (1, 2.5, "causal & padding mask"), (1, 4.5, "padding mask (source)")]
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
    the chapter that builds it.

    Args:
        highlight: any of ``"attention"``, ``"masks"``, ``"embeddings"``, ``"blocks"``,
            ``"training"``, ``"decoding"`` (the keys of ``ARCHITECTURE_CHAPTERS``).
        ax: where to draw (default: a new figure).

    Returns:
        The matplotlib ``Axes``.
    """
    import matplotlib.pyplot as plt

    unknown = set(highlight) - set(ARCHITECTURE_CHAPTERS)
    if unknown:
        raise ValueError(f"unknown parts {sorted(unknown)}; choose from {sorted(ARCHITECTURE_CHAPTERS)}")
    if ax is None:
        _, ax = plt.subplots(figsize=(9.0, 6.6))
    _draw_layer_frames(ax)
    _draw_boxes(ax, highlight)
    _draw_inputs_and_memory(ax)
    lit = "training" in highlight or "decoding" in highlight
    ax.text(_CENTRE[1], 11.1, "training: the loss (ch. 5)  ·  decoding: greedy and beam search (ch. 6)",
            ha="center", va="center", fontsize=8, color=_INK, bbox=dict(boxstyle="round,pad=0.35", **_box_style(lit)))
    _arrow(ax, [(_CENTRE[1], 10 + _BOX_HEIGHT / 2 + 0.02), (_CENTRE[1], 10.8)])
    _draw_mask_tags(ax, lit="masks" in highlight)
    ax.set_xlim(-1.9, 13.7)
    ax.set_ylim(-1.2, 11.6)
    ax.axis("off")
    return ax


# Geometry and colours of the architecture diagram: box size, the x of each column's centre.
_BOX_WIDTH, _BOX_HEIGHT, _CENTRE = 4.6, 0.62, {0: 2.6, 1: 8.8}
_LIT, _UNLIT, _EDGE, _FAINT, _INK, _LINE = "#f6ad55", "#edf2f7", "#2d3748", "#a0aec0", "#1a202c", "#4a5568"


def _box_style(lit: bool) -> dict[str, Any]:
    return dict(facecolor=_LIT if lit else _UNLIT, edgecolor=_EDGE if lit else _FAINT, linewidth=1.4 if lit else 0.8)


def _arrow(ax: Axes, points: list[tuple[float, float]], head: bool = True) -> None:
    """A line through ``points``, with an arrow head at the last one."""
    xs, ys = zip(*points)
    ax.plot(xs, ys, color=_LINE, lw=0.9, solid_capstyle="round")
    if head:
        ax.annotate("", xy=points[-1], xytext=points[-2], arrowprops=dict(arrowstyle="->", color=_LINE, lw=0.9))


def _draw_layer_frames(ax: Axes) -> None:
    """The dashed frames of the stacked layers, drawn first so that boxes sit on top."""
    from matplotlib.patches import FancyBboxPatch

    for column, (bottom, top, name) in {0: (1.9, 6.4, "encoder layer × N"), 1: (1.9, 8.4, "decoder layer × N")}.items():
        ax.add_patch(
            FancyBboxPatch(
                (_CENTRE[column] - _BOX_WIDTH / 2 - 0.3, bottom), _BOX_WIDTH + 0.6, top - bottom,
                boxstyle="round,pad=0.02,rounding_size=0.2", facecolor="none", edgecolor=_FAINT, linestyle="--",
            )
        )
        ax.text(_CENTRE[column] - _BOX_WIDTH / 2 - 0.2, top - 0.08, name, ha="left", va="top", fontsize=7.5, color=_LINE)


def _draw_boxes(ax: Axes, highlight: Sequence[str]) -> None:
    """Each component's box, tagged with its chapter, and the arrows between boxes of a column."""
    from matplotlib.patches import FancyBboxPatch

    chapter_of = {part: label.split()[0] for part, label in ARCHITECTURE_CHAPTERS.items()}
    rows: dict[int, list[float]] = {0: [], 1: []}
    for column, row, text, part in _ARCHITECTURE:
        x = _CENTRE[column]
        ax.add_patch(
            FancyBboxPatch((x - _BOX_WIDTH / 2, row - _BOX_HEIGHT / 2), _BOX_WIDTH, _BOX_HEIGHT,
                           boxstyle="round,pad=0.02,rounding_size=0.12", **_box_style(part in highlight))
        )
        ax.text(x - 0.3, row, text, ha="center", va="center", fontsize=8.2, color=_INK)
        ax.text(x + _BOX_WIDTH / 2 - 0.1, row, f"ch. {chapter_of[part]}", ha="right", va="center", fontsize=6.5,
                color=_LINE)
        rows[column].append(row)
    for column, ys in rows.items():
        for y0, y1 in zip(ys, ys[1:]):
            _arrow(ax, [(_CENTRE[column], y0 + _BOX_HEIGHT / 2 + 0.02), (_CENTRE[column], y1 - _BOX_HEIGHT / 2 - 0.02)])


def _draw_inputs_and_memory(ax: Axes) -> None:
    """The input tokens, and the encoder's output (memory) into every decoder layer's cross-attention."""
    ax.text(_CENTRE[0], -0.85, "source tokens", ha="center", va="center", fontsize=8.5)
    ax.text(_CENTRE[1], -0.85, "target tokens (shifted right)", ha="center", va="center", fontsize=8.5)
    for column in (0, 1):
        _arrow(ax, [(_CENTRE[column], -0.65), (_CENTRE[column], -_BOX_HEIGHT / 2 - 0.02)])
    cross_x = (_CENTRE[0] + _BOX_WIDTH / 2 + 0.3 + _CENTRE[1] - _BOX_WIDTH / 2 - 0.3) / 2
    _arrow(ax, [(_CENTRE[0], 5.5 + _BOX_HEIGHT / 2 + 0.02), (_CENTRE[0], 6.9), (cross_x, 6.9), (cross_x, 4.5),
                (_CENTRE[1] - _BOX_WIDTH / 2 - 0.02, 4.5)])
    ax.text(_CENTRE[0] + 0.15, 6.98, "memory (B, S, D)", ha="left", va="bottom", fontsize=7.5, color=_LINE)


def _draw_mask_tags(ax: Axes, lit: bool) -> None:
    """Which masks each attention sees, as tags beside it."""
    for column, row, text in _MASK_TAGS:
        if column == 0:
            x, ha = _CENTRE[0] - _BOX_WIDTH / 2 - 0.45, "right"
        else:
            x, ha = _CENTRE[1] + _BOX_WIDTH / 2 + 0.45, "left"
        ax.text(x, row, f"{text}\n(ch. 2)", ha=ha, va="center", fontsize=7, color=_INK,
                bbox=dict(boxstyle="round,pad=0.3", **_box_style(lit)))


# --- 2. Embedding and block figures (chapters 3, 4) ---------------------------------------------
#
# Inputs are tensors or arrays (CPU, any float dtype; no gradient needed) plus labels. altair charts
# carry tooltips and a legend that highlights one series on click; matplotlib functions draw into
# the ``ax`` given (or a new figure) and return it.


def _as_array(values: Any) -> np.ndarray:
    """A float numpy array from a tensor (detached, on the CPU), an array or nested sequences."""
    if hasattr(values, "detach"):
        values = values.detach().float().cpu().numpy()
    return np.asarray(values, dtype=float)


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
    scale = (alt.Scale(scheme="redblue", domain=[-limit, limit], reverse=True) if diverging
             else alt.Scale(scheme="viridis", zero=False))
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


def per_layer_chart(
    series: Mapping[str, Any],
    *,
    y_title: str,
    x_title: str = "layer (1 = bottom)",
    series_title: str = "variant",
    first_layer: int = 1,
    title: str | None = None,
    log_y: bool = False,
    width: int = 260,
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
    return _lines({"": curves}, xs, x_title=x_title, y_title=y_title, series_title=series_title, title=title,
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


# --- 3. Training figures (chapter 5) -------------------------------------------------------------


def _history_frames(history: dict[str, list[dict[str, float]]]) -> tuple[Any, Any]:

    train = pd.DataFrame(history.get("train", []), columns=["step", "epoch", "loss", "lr", "tokens_per_s"])
    val = pd.DataFrame(history.get("val", []), columns=["step", "epoch", "loss", "ppl", "token_accuracy", "exact_match"])
    return train, val


def plot_training_curves(history: dict[str, list[dict[str, float]]], ax: Any = None, title: str | None = None) -> Any:
    """Training loss (a line) and validation loss (dots) against the optimizer step, with matplotlib.

    Args:
        history: ``{"train": [{"step", "loss", ...}, ...], "val": [{"step", "loss", ...}, ...]}``,
            as ``Trainer.history`` and the ``metrics.json`` of ``python -m transformer_lib.train`` hold.
        ax: axes to draw on (default: a new figure's).
        title: optional title.

    Returns:
        The ``matplotlib.axes.Axes``.
    """
    if ax is None:
        from matplotlib.figure import Figure

        ax = Figure(figsize=(6, 3.5), layout="constrained").add_subplot()
    train, val = _history_frames(history)
    ax.plot(train["step"], train["loss"], label="training loss (label-smoothed)", color="tab:blue")
    if len(val):
        ax.plot(val["step"], val["loss"], "o-", label="validation loss (cross-entropy)", color="tab:orange", markersize=4)
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


def validation_bleu_chart(runs: dict[str, dict[str, Any]], title: str = "Validation BLEU after each epoch") -> Any:
    """Validation BLEU (greedy, lowercased) per epoch of several runs' results files, one line each.

    Clicking a legend entry highlights its run; hovering shows the numbers.
    """

    rows = [
        {"run": name, "epoch": row["epoch"], "BLEU": row["val_bleu_lowercased"]}
        for name, metrics in runs.items()
        for row in metrics["per_epoch"]
        if "val_bleu_lowercased" in row
    ]
    pick = alt.selection_point(fields=["run"], bind="legend")
    return (
        alt.Chart(pd.DataFrame(rows), title=title)
        .mark_line(point=True)
        .encode(
            x=alt.X("epoch:Q", title="epoch", scale=alt.Scale(domainMin=1)),
            y=alt.Y("BLEU:Q", title="validation BLEU (greedy, lowercased)", scale=alt.Scale(zero=False)),
            color=alt.Color("run:N", title=None, legend=alt.Legend(orient="bottom", columns=2, labelLimit=0)),
            opacity=alt.condition(pick, alt.value(1.0), alt.value(0.15)),
            tooltip=["run", "epoch", alt.Tooltip("BLEU:Q", format=".2f")],
        )
        .add_params(pick)
        .properties(width=520, height=280)
    )


def lr_schedule_chart(frame: Any, title: str = "Learning rate over training") -> Any:
    """An interactive plot of learning-rate schedules: sliders pick the warm-up and ``d_model``.

    Args:
        frame: a ``pandas.DataFrame`` with columns ``step``, ``lr``, ``warmup`` and ``d_model``, and
            optionally ``schedule`` (one curve per value), computed by the caller from
            ``transformer_lib.training`` (so the chart shows the library's numbers).

    Returns:
        An ``altair.Chart``: a line per schedule for the slider-chosen warm-up and ``d_model``, with
        a rule at the warm-up step and tooltips.
    """

    frame = frame.copy()
    if "schedule" not in frame:
        frame["schedule"] = "noam"
    warmups = sorted(frame["warmup"].unique().tolist())
    widths = sorted(frame["d_model"].unique().tolist())
    warmup = alt.param(name="warmup", value=warmups[len(warmups) // 2],
                       bind=alt.binding_select(options=warmups, name="warm-up steps "))
    d_model = alt.param(name="d_model", value=widths[len(widths) // 2],
                        bind=alt.binding_select(options=widths, name="d_model "))
    base = alt.Chart(frame, title=title).transform_filter(
        (alt.datum.warmup == warmup) & (alt.datum.d_model == d_model)
    )
    lines = base.mark_line().encode(
        x=alt.X("step:Q", title="optimizer step"),
        y=alt.Y("lr:Q", title="learning rate", axis=alt.Axis(format=".1e")),
        color=alt.Color("schedule:N", title="schedule", legend=alt.Legend(orient="top")),
        tooltip=["schedule", "step", alt.Tooltip("lr:Q", format=".3e"), "warmup", "d_model"],
    )
    rule = (
        alt.Chart(frame)
        .transform_filter(alt.datum.step == 1)
        .transform_filter((alt.datum.warmup == warmup) & (alt.datum.d_model == d_model))
        .mark_rule(strokeDash=[4, 4], color="gray")
        .encode(x="warmup:Q", tooltip=[alt.Tooltip("warmup:Q", title="warm-up ends (peak)")])
    )
    return (lines + rule).add_params(warmup, d_model).properties(width=520, height=260)


def label_smoothing_chart(frame: Any, title: str = "The target distribution for one position") -> Any:
    """Bars of the target distribution over a small vocabulary, with a slider for epsilon.

    Args:
        frame: a ``pandas.DataFrame`` with columns ``token``, ``probability`` and ``epsilon``
            (one row per token and epsilon), e.g. from ``training.smoothed_target_distribution``.
    """

    epsilons = sorted(frame["epsilon"].unique().tolist())
    epsilon = alt.param(name="epsilon", value=epsilons[len(epsilons) // 2],
                        bind=alt.binding_select(options=epsilons, name="label smoothing ε "))
    tokens = list(dict.fromkeys(frame["token"].tolist()))
    return (
        alt.Chart(frame, title=title)
        .transform_filter(alt.datum.epsilon == epsilon)
        .mark_bar()
        .encode(
            x=alt.X("token:N", sort=tokens, title="vocabulary token"),
            y=alt.Y("probability:Q", title="target probability", scale=alt.Scale(domain=[0, 1])),
            tooltip=["token", alt.Tooltip("probability:Q", format=".4f"), "epsilon"],
        )
        .add_params(epsilon)
        .properties(width=520, height=220)
    )


def length_histogram_chart(
    lengths: dict[str, list[int]], title: str = "Sentence lengths", x_title: str = "tokens per sentence"
) -> Any:
    """Overlaid histograms of sentence lengths, one per named list; hover for counts.

    Args:
        lengths: name (e.g. ``"German (source)"``) -> lengths in tokens.
    """


    rows = [{"language": name, "length": length, "sentences": count}
            for name, values in lengths.items() for length, count in sorted(Counter(values).items())]
    frame = pd.DataFrame(rows)
    return (
        alt.Chart(frame, title=title)
        .mark_bar(opacity=0.55, binSpacing=0)
        .encode(
            x=alt.X("length:Q", title=x_title, bin=alt.Bin(step=1)),
            y=alt.Y("sentences:Q", title="sentences", stack=None),
            color=alt.Color("language:N", title=None, legend=alt.Legend(orient="top")),
            tooltip=["language", "length", "sentences"],
        )
        .properties(width=520, height=220)
    )


def padding_waste_chart(frame: Any, title: str = "Padding per sentence, batch by batch") -> Any:
    """Bars comparing padding waste of batching strategies.

    Args:
        frame: a ``pandas.DataFrame`` with columns ``batching``, ``side`` (e.g. "source"/"target")
            and ``pads per sentence``.
    """

    return (
        alt.Chart(frame, title=title)
        .mark_bar()
        .encode(
            y=alt.Y("batching:N", title=None),
            x=alt.X("pads per sentence:Q", title="average padding tokens per sentence"),
            color=alt.Color("side:N", title=None, legend=alt.Legend(orient="top")),
            yOffset="side:N",
            tooltip=["batching", "side", alt.Tooltip("pads per sentence:Q", format=".2f")],
        )
        .properties(width=400, height=160)  # with its labels, inside the page's 688 px column
    )


class LiveLossPlot:
    """A loss curve that redraws in place while a model trains (in a notebook).

    Pass its methods to the trainer: ``Trainer(..., on_log=live.log, on_eval=live.eval)``; call
    :meth:`close` at the end for the final picture. Redraws at most every ``min_interval_s``
    seconds, so drawing costs little of the training time.

    Args:
        title: the plot's title.
        min_interval_s: least time between two redraws.
    """

    def __init__(self, title: str = "", min_interval_s: float = 1.0) -> None:
        self.title = title
        self.min_interval_s = min_interval_s
        self.history: dict[str, list[dict[str, float]]] = {"train": [], "val": []}
        self._handle: Any = None
        self._last_draw = 0.0

    def log(self, record: dict[str, float]) -> None:
        self.history["train"].append(dict(record))
        self._maybe_draw()

    def eval(self, record: dict[str, float]) -> None:
        self.history["val"].append(dict(record))
        self._maybe_draw()

    def close(self) -> None:
        self._draw()

    def _maybe_draw(self) -> None:
        import time

        if time.perf_counter() - self._last_draw >= self.min_interval_s:
            self._draw()

    def _draw(self) -> None:
        import time

        from IPython.display import display

        ax = plot_training_curves(self.history, title=self.title)
        if self._handle is None:
            self._handle = display(ax.figure, display_id=True)
        else:
            self._handle.update(ax.figure)
        self._last_draw = time.perf_counter()


# --- 4. Beyond figures (chapter 7) ----------------------------------------------------------------


def rotation_plot(
    pairs: Any,
    *,
    pair_names: Sequence[str] | None = None,
    axes: Any = None,
    title: str | None = None,
) -> Any:
    """How RoPE turns one pair of coordinates as the position grows: one circle per pair.

    Each panel draws the pair's 2-D vector at positions ``0, 1, ..., P - 1`` as arrows from the
    origin, light to dark with the position; a fast pair (high frequency) sweeps round the circle,
    a slow one barely moves. The arrows all have the same length: a rotation does not change it.

    Args:
        pairs: ``(n_pairs, P, 2)``: the coordinates of each pair at each position, e.g.
            ``rope(x)[0, 0].view(P, -1, 2).transpose(0, 1)[chosen]`` for a constant input ``x``.
        pair_names: a title per panel (default ``"pair 0"``, ...).
        axes: a sequence of ``n_pairs`` matplotlib axes (default: a new figure's).
        title: a title over the panels.

    Returns:
        The array of matplotlib ``Axes``.
    """
    import matplotlib.pyplot as plt
    import numpy as np

    p = _to_numpy(pairs).astype(np.float64)
    if p.ndim != 3 or p.shape[-1] != 2:
        raise ValueError(f"pairs must have shape (n_pairs, positions, 2), got {p.shape}")
    n_pairs, n_positions, _ = p.shape
    names = [f"pair {i}" for i in range(n_pairs)] if pair_names is None else list(pair_names)
    if len(names) != n_pairs:
        raise ValueError(f"got {len(names)} pair names for {n_pairs} pairs")
    if axes is None:
        fig, axes = plt.subplots(1, n_pairs, figsize=(2.9 * n_pairs, 3.2), squeeze=False)
        axes = axes[0]
    else:
        fig = axes[0].figure
    axes = np.asarray(axes)
    radius = float(np.linalg.norm(p, axis=-1).max()) or 1.0
    colours = plt.get_cmap("viridis")(np.linspace(0.15, 0.9, n_positions))
    for ax, pair, name in zip(axes, p, names):
        ax.add_patch(plt.Circle((0, 0), radius, fill=False, color="#cbd5e0", linestyle="--", linewidth=0.8))
        for position, ((x, y), colour) in enumerate(zip(pair, colours)):
            ax.annotate("", xy=(x, y), xytext=(0, 0), arrowprops=dict(arrowstyle="->", color=colour, lw=1.2))
            if position in (0, n_positions - 1) or n_positions <= 8:
                ax.text(1.13 * x, 1.13 * y, str(position), ha="center", va="center", fontsize=7, color=colour)
        ax.set_xlim(-1.3 * radius, 1.3 * radius)
        ax.set_ylim(-1.3 * radius, 1.3 * radius)
        ax.set_aspect("equal")
        ax.set_xticks([])
        ax.set_yticks([])
        ax.set_title(name, fontsize="medium")
    if title is not None:
        fig.suptitle(title, fontsize="medium")
    return axes


def bias_heatmap(
    bias: Any,
    *,
    head_names: Sequence[str] | None = None,
    axes: Any = None,
    title: str | None = None,
    shared_scale: bool | None = None,
) -> Any:
    """Score biases (ALiBi, relative positions) as heatmaps, one panel per head; queries on rows.

    Penalties only (ALiBi) are shades of blue, white at 0, each head on its own scale (its colour bar
    under it): ALiBi's slopes differ by a factor of 4 from head to head, and on one shared scale the
    flat heads would look blank. Biases of both signs (learned relative positions) share one scale,
    red below 0 and blue above, so heads can be compared.

    Args:
        bias: ``(H, T, L)`` or ``(1, H, T, L)`` as :class:`~transformer_lib.embeddings.ALiBiBias`
            returns.
        head_names: a title per panel (default ``"head 0"``, ...).
        axes: ``H`` matplotlib axes (default: a new figure's, at most 4 panels a row, sized for a
            page column).
        title: a title over the panels.
        shared_scale: one colour scale for all heads (default: only for biases of both signs).

    Returns:
        The array of matplotlib ``Axes``; the colour bars are attached to the figure.
    """
    import matplotlib.pyplot as plt
    import numpy as np

    b = _to_numpy(bias).astype(np.float64)
    if b.ndim == 4 and b.shape[0] == 1:
        b = b[0]
    if b.ndim != 3:
        raise ValueError(f"bias must have shape (H, T, L) or (1, H, T, L), got {_to_numpy(bias).shape}")
    n_heads = b.shape[0]
    names = [f"head {h}" for h in range(n_heads)] if head_names is None else list(head_names)
    if len(names) != n_heads:
        raise ValueError(f"got {len(names)} head names for {n_heads} heads")
    penalties_only = max(float(b.max()), 0.0) == 0.0
    shared = (not penalties_only) if shared_scale is None else shared_scale
    axes = _panel_axes(axes, n_heads, panel_height=2.0 if shared else 2.4)
    fig = axes[0].figure
    cmap = "Blues_r" if penalties_only else "RdBu"
    image = None
    for ax, grid, name in zip(axes, b, names):
        image = _bias_panel(ax, grid, name, cmap, _bias_norm(b if shared else grid), own_colorbar=not shared)
    for k, ax in enumerate(axes):
        if k % min(n_heads, 4):
            ax.set_ylabel("")
    if shared:
        bar = fig.colorbar(image, ax=list(axes), shrink=0.8)
        bar.set_label("bias added to the score", fontsize=9)
        bar.ax.tick_params(labelsize=8)
    if title is not None:
        fig.suptitle(title, fontsize=10)
    return axes


def _bias_panel(ax: Any, grid: Any, name: str, cmap: str, norm: Any, own_colorbar: bool) -> Any:
    """One head's panel of :func:`bias_heatmap`, with its own colour bar under it if asked."""
    import matplotlib.pyplot as plt

    image = ax.imshow(grid, cmap=cmap, norm=norm)
    ax.set_title(name, fontsize=9)
    ax.set_xlabel("key position", fontsize=9)
    ax.set_ylabel("query position", fontsize=9)
    ax.tick_params(labelsize=8)
    ax.xaxis.set_major_locator(plt.MaxNLocator(integer=True, nbins=4))
    ax.yaxis.set_major_locator(plt.MaxNLocator(integer=True, nbins=4))
    if own_colorbar:
        bar = ax.figure.colorbar(image, ax=ax, orientation="horizontal", shrink=0.9, pad=0.02, aspect=14)
        bar.ax.tick_params(labelsize=8)
        bar.locator = plt.MaxNLocator(nbins=2)
        bar.update_ticks()
    return image


def _bias_norm(values: Any) -> Any:
    """White at 0: penalties only darken towards the largest; signed biases diverge around 0."""
    import matplotlib.colors as colors

    low, high = min(float(values.min()), 0.0), max(float(values.max()), 0.0)
    if high == 0.0:
        return colors.Normalize(vmin=min(low, -1e-9), vmax=0.0)
    return colors.TwoSlopeNorm(vcenter=0.0, vmin=min(low, -1e-9), vmax=high)


PAGE_WIDTH_INCHES = 6.6
"""A figure this wide (at matplotlib's 100 dpi) fills the website's text column (688 px) unshrunk,
so its text shows at the size it was drawn (10 pt = 14 px, 8 pt = 11 px)."""


def _panel_axes(axes: Any, count: int, *, panel_height: float, columns: int = 4) -> Any:
    """``axes`` as an array, or a new figure's: ``count`` panels, at most ``columns`` a row, one page wide."""
    import matplotlib.pyplot as plt
    import numpy as np

    if axes is not None:
        return np.asarray(axes).ravel()
    columns = min(count, columns)
    rows = -(-count // columns)
    width = min(PAGE_WIDTH_INCHES, 2.6 * columns + 0.6)
    fig, grid = plt.subplots(rows, columns, figsize=(width, panel_height * rows + 0.5), squeeze=False,
                             layout="constrained")
    for ax in grid.ravel()[count:]:
        ax.remove()
    return grid.ravel()[:count]


def mask_patterns(masks: Any, *, axes: Any = None, title: str | None = None) -> Any:
    """Several attention patterns side by side (local, strided, global, ...): one panel per mask.

    Each panel is :func:`mask_heatmap` over positions ``0 .. T - 1``, with how many of the
    ``T x L`` query/key pairs it keeps in its caption: the share a kernel that skips blocked pairs
    would compute.

    Args:
        masks: a mapping from a name to a boolean mask broadcastable to ``(T, L)`` (leading
            dimensions 1), ``True`` = may attend.
        axes: one matplotlib axis per mask (default: a new figure's).
        title: a title over the panels.

    Returns:
        The array of matplotlib ``Axes``.
    """
    import numpy as np

    items = list(dict(masks).items())
    if not items:
        raise ValueError("masks is empty: give at least one name -> mask")
    grids = []
    for name, mask in items:
        m = _to_numpy(mask)
        if m.dtype != np.bool_ or m.ndim < 2 or any(size != 1 for size in m.shape[:-2]):
            raise ValueError(f"mask {name!r} must be boolean with shape (..., T, L), leading dimensions 1; got {m.dtype} {m.shape}")
        grids.append(m.reshape(m.shape[-2:]))
    axes = _panel_axes(axes, len(items), panel_height=2.6)
    fig = axes[0].figure
    for ax, (name, _), grid in zip(axes, items, grids):
        n_queries, n_keys = grid.shape
        mask_heatmap(grid, [str(i) for i in range(n_queries)], [str(j) for j in range(n_keys)], ax=ax)
        step = max(1, -(-n_keys // 4))  # about 4 labels an axis: legible on a panel a quarter page wide
        ax.set_xticks(range(0, n_keys, step), [str(j) for j in range(0, n_keys, step)], rotation=0)
        ax.set_yticks(range(0, n_queries, step), [str(i) for i in range(0, n_queries, step)])
        ax.tick_params(labelsize=8)
        ax.set_xlabel("key", fontsize=9)
        ax.set_ylabel("query", fontsize=9)
        if n_keys > 24:  # thin cells: white grid lines would hide them
            ax.grid(False, which="minor")
        ax.set_title(f"{textwrap.fill(name, 20)}\n{grid.mean():.0%} of pairs", fontsize=9)
    if title is not None:
        fig.suptitle(title, fontsize=10)
    return axes
