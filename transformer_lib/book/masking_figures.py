"""Chapter 2's figures: mask grids side by side, and the weight real queries give to pads.

Matplotlib only (static figures), drawn narrow enough (about 5.6 in, ~560 px) that their text still
reads on a phone. Functions return the figure or axes and never call ``plt.show()``; they take
tensors and token labels, never a model.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from .figures import _check_labels, _to_numpy

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = ["mask_heatmap", "mask_panels", "pad_weight_bars"]

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


PHONE_FRIENDLY_WIDTH = 5.6
"""Inches (at 100 dpi, ~560 px): on a 390 px phone such a figure shrinks to ~0.6, text stays legible."""


def mask_panels(
    panels: Sequence[tuple[Any, Sequence[str], Sequence[str], str]],
    *,
    title: str | None = None,
    width: float = PHONE_FRIENDLY_WIDTH,
) -> Figure:
    """Several boolean masks side by side, each broadcast to its grid by :func:`mask_heatmap`.

    Args:
        panels: one ``(mask, query_tokens, key_tokens, title)`` per panel; each mask's leading
            dimensions must be 1 (select one sentence first). When every panel has the same
            queries, only the first panel labels them.
        title: a title over all panels.
        width: the figure's width in inches; the height follows from the grids.

    Returns:
        The matplotlib ``Figure``.
    """
    import matplotlib.pyplot as plt

    if not panels:
        raise ValueError("mask_panels needs at least one (mask, query_tokens, key_tokens, title) panel")
    rows = max(len(queries) for _, queries, _, _ in panels)
    cols = sum(len(keys) for _, _, keys, _ in panels)
    height = min(width * rows / cols * 1.15 + 1.0, 4.5)  # square cells, room for labels
    with plt.rc_context({"font.size": 9}):
        fig, axes = plt.subplots(1, len(panels), figsize=(width, height), layout="constrained",
                                 squeeze=False)
        same_queries = all(list(q) == list(panels[0][1]) for _, q, _, _ in panels)
        for k, (ax, (mask, queries, keys, panel_title)) in enumerate(zip(axes[0], panels)):
            mask_heatmap(mask, queries, keys, ax=ax, title=panel_title)
            if same_queries and k > 0:  # the rows are the first panel's: label them once
                ax.set_ylabel("")
                ax.tick_params(axis="y", labelleft=False)
        if title is not None:
            fig.suptitle(title, fontsize=10)
    return fig


def pad_weight_bars(
    on_pads: Mapping[str, Any],
    query_tokens: Sequence[str],
    *,
    ax: Axes | None = None,
) -> Axes:
    """How much attention weight each query gives to pad keys, one bar per mask.

    Args:
        on_pads: mask name -> ``(T,)`` weights in ``[0, 1]``: the sum of each query's weights
            over the pad keys.
        query_tokens: the ``T`` query tokens (rows, top to bottom).
        ax: where to draw (a new ~5.6 in figure when ``None``).

    Returns:
        The matplotlib ``Axes``; bar ``i`` of series ``k`` is ``ax.containers[k][i]``.
    """
    import matplotlib.pyplot as plt

    if not on_pads:
        raise ValueError("pad_weight_bars needs at least one mask name -> weights entry")
    series = {name: _to_numpy(w).astype(float).reshape(-1) for name, w in on_pads.items()}
    sizes = {name: len(w) for name, w in series.items()}
    tokens = _check_labels(query_tokens, len(next(iter(series.values()))), "query")
    if len(set(sizes.values())) != 1:
        raise ValueError(f"every mask needs one weight per query, got sizes {sizes}")
    outside = {name: float(w.max()) for name, w in series.items() if w.min() < -1e-6 or w.max() > 1 + 1e-6}
    if outside:
        raise ValueError(f"weights on pads must lie in [0, 1] (they are sums of softmax weights), got {outside}")
    if ax is None:
        _, ax = plt.subplots(figsize=(PHONE_FRIENDLY_WIDTH, 0.42 * len(tokens) + 1.1), layout="constrained")
    rows = np.arange(len(tokens))
    height = 0.8 / len(series)
    for k, (name, weights) in enumerate(series.items()):
        bars = ax.barh(rows + (k - (len(series) - 1) / 2) * height, weights, height=height, label=name)
        color = bars.patches[0].get_facecolor() if bars.patches else None
        ax.bar_label(bars, labels=[f"{w:.2f}" for w in weights], padding=2, fontsize=9, color=color)
    ax.set_yticks(rows, tokens)
    ax.invert_yaxis()  # the first query on top, as in the mask grids
    ax.set_xlim(0, 1.08)
    ax.set_xlabel("attention weight on pad keys (sum over the pads)")
    ax.set_ylabel("query")
    ax.legend(loc="lower right", fontsize=9, frameon=False)
    ax.spines[["top", "right"]].set_visible(False)
    return ax
