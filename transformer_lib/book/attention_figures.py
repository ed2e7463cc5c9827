"""Chapter 1's figures: attention weights as an interactive heatmap, and multi-head attention drawn
step by step with the shape of every tensor.

``attention_heatmap`` is an altair chart (hover a cell for its weight; pick the head and the layer);
chapter 6 draws a trained model's attention with it too. ``multi_head_diagram`` is drawn by code, so
that its numbers come from the same sizes the chapter uses; like
:func:`transformer_lib.book.figures.architecture_diagram` it draws on a white page into the ``ax``
given (or a new figure) and returns the ``Axes``; the website inverts matplotlib figures in dark mode
(``_static/site.css``), so the colours are light tints that invert to dark ones.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import altair as alt
import numpy as np

from .figures import _check_labels, _to_numpy, _token_axis

if TYPE_CHECKING:
    from matplotlib.axes import Axes

__all__ = ["attention_heatmap", "multi_head_diagram"]

# --- Attention weights ------------------------------------------------------------------------------


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


def _weight_tooltips() -> list[Any]:
    """What hovering a cell of an attention map shows: the pair of tokens, the weight, the positions."""
    return [
        alt.Tooltip("query:N", title="query"),
        alt.Tooltip("key:N", title="key"),
        alt.Tooltip("weight:Q", title="weight", format=".3f"),
        alt.Tooltip("query_pos:O", title="query position"),
        alt.Tooltip("key_pos:O", title="key position"),
    ]


# --- Multi-head attention, step by step ---------------------------------------------------------------

# Geometry: x runs 0 .. 10 across the figure, y from 0 (top) downwards; each step is one row.
_LEFT, _RIGHT, _BOX_HEIGHT = 1.2, 9.8, 0.72
# Colours: each stage's band (split, attend, concat), box fill, edges, ink.
_STAGES = {"split": "#dbeafe", "attend": "#fde7c4", "concat": "#d5f5e3"}
_BOX, _EDGE, _INK, _MUTED = "#ffffff", "#2d3748", "#1a202c", "#4a5568"
_MAX_LANES = 4  # more heads than this are drawn as head 1, head 2, ..., head H


def multi_head_diagram(d_model: int = 8, n_heads: int = 2, ax: Axes | None = None) -> Axes:
    """Multi-head self-attention step by step, with the shape of every tensor in letters and numbers.

    Split: the projections make queries, keys and values of width ``D`` and ``split_heads`` turns
    ``(B, T, D)`` into ``(B, H, T, Dh)``. Attend: each head makes its ``(T, T)`` weights and mixes
    its values with them (all heads in one tensor operation). Concat: ``merge_heads`` puts the heads
    side by side again, ``(B, T, D)``, and the output projection mixes them.

    Args:
        d_model: the model width ``D``.
        n_heads: the number of heads ``H``; must divide ``d_model`` (``Dh = D / H``).
        ax: where to draw (default: a new figure about 460 pixels wide, filled by the drawing, so that its
            text still reads when a phone shrinks it to the screen's width).

    Returns:
        The matplotlib ``Axes``.
    """
    import matplotlib.pyplot as plt

    if n_heads < 1 or d_model < 1 or d_model % n_heads:
        raise ValueError(f"n_heads={n_heads} must be at least 1 and divide d_model={d_model} (Dh = D / H)")
    if ax is None:
        fig, ax = plt.subplots(figsize=(4.6, 5.9))
        fig.subplots_adjust(left=0, right=1, bottom=0, top=1)
    _draw_stage_bands(ax)
    _draw_steps(ax, d_model, n_heads, d_model // n_heads)
    ax.set_xlim(0.05, 9.95)
    ax.set_ylim(8.5, -0.5)
    ax.axis("off")
    return ax


def _shape(letters: str, numbers: str) -> str:
    return f"{letters} = {numbers}"
def _box(ax: Axes, x0: float, x1: float, y: float, title: str, shape: str) -> None:
    """A box from ``x0`` to ``x1`` centred on row ``y``: what happens (top line), the shape (below)."""
    from matplotlib.patches import FancyBboxPatch

    ax.add_patch(FancyBboxPatch((x0, y - _BOX_HEIGHT / 2), x1 - x0, _BOX_HEIGHT, facecolor=_BOX,
                                edgecolor=_EDGE, linewidth=0.9, boxstyle="round,pad=0.02,rounding_size=0.12"))
    centre = (x0 + x1) / 2
    ax.text(centre, y - 0.16, title, ha="center", va="center", fontsize=10.5, color=_INK)
    ax.text(centre, y + 0.17, shape, ha="center", va="center", fontsize=10, color=_MUTED, family="monospace")


def _down(ax: Axes, x: float, y0: float, y1: float) -> None:
    """An arrow from the bottom of the box on row ``y0`` to the top of the box on row ``y1``."""
    ax.annotate("", xy=(x, y1 - _BOX_HEIGHT / 2 - 0.03), xytext=(x, y0 + _BOX_HEIGHT / 2 + 0.03),
                arrowprops=dict(arrowstyle="->", color=_MUTED, lw=0.9))


def _draw_stage_bands(ax: Axes) -> None:
    """The three stages as tinted bands with their names written down the left side."""
    from matplotlib.patches import FancyBboxPatch

    for name, (top, bottom) in {"split": (-0.5, 2.5), "attend": (2.5, 6.5), "concat": (6.5, 8.5)}.items():
        ax.add_patch(FancyBboxPatch((0.1, top + 0.05), 9.8, bottom - top - 0.1, facecolor=_STAGES[name],
                                    edgecolor="none", boxstyle="round,pad=0,rounding_size=0.15"))
        ax.text(0.62, (top + bottom) / 2, name, rotation=90, ha="center", va="center", fontsize=11,
                color=_INK, weight="bold")


def _lanes(n_heads: int) -> list[str]:
    """The heads drawn as lanes: all of them, or the first two, a gap and the last."""
    if n_heads <= _MAX_LANES:
        return [str(h) for h in range(1, n_heads + 1)]
    return ["1", "2", "⋯", str(n_heads)]


def _draw_steps(ax: Axes, d_model: int, n_heads: int, d_head: int) -> None:
    """Full-width boxes for tensors of all heads (rows 0-2, 4, 6-8), one lane per head for what
    each head does on its own (rows 3 and 5), and arrows down each lane."""
    rows = {
        0: ("input x", _shape("(B, T, D)", f"(B, T, {d_model})")),
        1: ("q, k, v = q_proj(x), k_proj(x), v_proj(x)", _shape("(B, T, D)", f"(B, T, {d_model})")),
        2: ("split_heads: view, transpose(1, 2)", _shape("(B, H, T, Dh)", f"(B, {n_heads}, T, {d_head})")),
        4: ("weights = softmax(q kᵀ / √Dh)", _shape("(B, H, T, T)", f"(B, {n_heads}, T, T)")),
        6: ("heads = weights @ v", _shape("(B, H, T, Dh)", f"(B, {n_heads}, T, {d_head})")),
        7: ("concat = merge_heads: transpose, reshape", _shape("(B, T, H·Dh)", f"(B, T, {d_model})")),
        8: ("output = out_proj(concat)", _shape("(B, T, D)", f"(B, T, {d_model})")),
    }
    for row, (title, shape) in rows.items():
        _box(ax, _LEFT, _RIGHT, row, title, shape)
    centre = (_LEFT + _RIGHT) / 2
    for y0, y1 in [(0, 1), (1, 2), (6, 7), (7, 8)]:
        _down(ax, centre, y0, y1)
    lanes = _lanes(n_heads)
    width = (_RIGHT - _LEFT) / len(lanes)
    for i, head in enumerate(lanes):
        x0, x1 = _LEFT + i * width + 0.06, _LEFT + (i + 1) * width - 0.06
        middle = (x0 + x1) / 2
        if head == "⋯":
            for row in (3, 5):
                ax.text(middle, row, "⋯", ha="center", va="center", fontsize=14, color=_INK)
            continue
        wide = len(lanes) <= 2  # room for what the head does beside its name
        _box(ax, x0, x1, 3, f"head {head}: weights" if wide else f"head {head}", "(B, T, T)")
        _box(ax, x0, x1, 5, f"head {head}: @ v" if wide else f"head {head}", "(B, T, Dh)")
        for y0 in (2, 3, 4, 5):
            _down(ax, middle, y0, y0 + 1)
