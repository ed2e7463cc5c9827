"""Chapter 7's figures: how RoPE turns a pair of coordinates, score biases per head, sparse attention
patterns, and the two language models side by side (their attention, masked words filled in).

Book support, not the model: the functions take tensors, trained models and vocabularies and return
matplotlib axes or pandas tables; nothing in the library imports this module. Panels are sized for
a phone as well as the page.
"""

from __future__ import annotations

import textwrap
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
import torch

from . import style
from .figures import _panel_axes, _panel_grid, _to_numpy
from .masking_figures import mask_heatmap

__all__ = ["NARROW_WIDTH_INCHES", "attention_side_by_side", "bias_heatmap", "fill_in_table", "mask_patterns",
           "narrow_panels", "rotation_plot"]

# --- Positions inside attention, sparse patterns ---------------------------------------------------


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
    colours = plt.get_cmap(style.SEQUENTIAL_CMAP)(np.linspace(0.35, 0.95, n_positions))  # light to dark
    for ax, pair, name in zip(axes, p, names):
        ax.add_patch(plt.Circle((0, 0), radius, fill=False, color=style.MUTED, linestyle="--", linewidth=0.8))
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


# --- Language models: panels, attention side by side, masked words filled in ----------------------

# Narrower than the page column (6.6 in): a phone shows a figure at about 360 px, so a figure drawn
# much wider than ~540 px (at 100 dpi) shrinks its text below reading size there.
NARROW_WIDTH_INCHES = 5.4


def narrow_panels(count: int, *, columns: int = 2, panel_height: float = 2.3, width: float = NARROW_WIDTH_INCHES) -> Any:
    """``count`` matplotlib axes in rows of ``columns``, in a figure ``width`` inches wide."""
    if count < 1 or columns < 1:
        raise ValueError(f"count and columns must be positive, got count={count}, columns={columns}")
    return _panel_grid(count, columns, width=width, panel_height=panel_height, margin=0.6)


def attention_side_by_side(weights: Mapping[str, Any], tokens: Sequence[str], *, title: str | None = None) -> Any:
    """Attention weights of one sentence from several models, one heatmap each; queries on rows.

    Args:
        weights: a name -> ``(T, T)`` weights (e.g. averaged over heads), same tokens for each.
        tokens: the ``T`` tokens, labelling rows and columns.
        title: a title over the panels.

    Returns:
        The array of matplotlib ``Axes``.
    """
    grids = {name: np.asarray(torch.as_tensor(w).detach().cpu(), dtype=np.float64) for name, w in weights.items()}
    for name, grid in grids.items():
        if grid.shape != (len(tokens), len(tokens)):
            raise ValueError(f"weights {name!r} have shape {grid.shape}; expected ({len(tokens)}, {len(tokens)}) for the tokens")
    axes = narrow_panels(len(grids), panel_height=2.9)
    top = max(float(g.max()) for g in grids.values())
    image = None
    for k, (ax, (name, grid)) in enumerate(zip(axes, grids.items())):
        image = ax.imshow(grid, cmap="Blues", vmin=0.0, vmax=top)
        ax.set_xticks(range(len(tokens)), tokens, rotation=90, fontsize=8)
        ax.set_yticks(range(len(tokens)), tokens if k == 0 else [], fontsize=8)
        ax.set_title(textwrap.fill(name, 30), fontsize=9)
        ax.set_xlabel("key", fontsize=8)
    axes[0].set_ylabel("query", fontsize=8)
    fig = axes[0].figure
    bar = fig.colorbar(image, ax=list(axes), shrink=0.7)
    bar.ax.tick_params(labelsize=8)
    if title is not None:
        fig.suptitle(title, fontsize=10)
    return axes


@torch.no_grad()
def fill_in_table(model: Any, sentences: Sequence[Sequence[int]], vocab: Any, *, mask_id: int, top: int = 3,
                  seed: int = 0) -> pd.DataFrame:
    """Hide one word of each sentence behind ``<mask>`` and list the model's ``top`` guesses.

    The hidden word is drawn (seeded) among the sentence's words that are not punctuation. Rows:
    the sentence with ``___`` for the hidden word, the word, the guesses, and whether the first is right.
    """
    generator = torch.Generator().manual_seed(seed)
    model.eval()
    device = next(model.parameters()).device
    rows = []
    for ids in sentences:
        words = vocab.decode(ids, strip_specials=False)
        candidates = [i for i, w in enumerate(words) if w.isalpha()]
        if not candidates:
            continue
        position = candidates[int(torch.randint(len(candidates), (), generator=generator))]
        tokens = [vocab.bos_id, *ids]
        tokens[position + 1] = mask_id  # +1: after <bos>
        logits = model(torch.tensor([tokens], device=device))[0, position + 1]  # (V,)
        guesses = vocab.decode(logits.topk(top).indices.tolist(), strip_specials=False)
        shown = [*words[:position], "___", *words[position + 1:]]
        rows.append({"caption (one word hidden)": " ".join(shown), "hidden word": words[position],
                     f"model's top {top}": ", ".join(guesses), "top 1 right": guesses[0] == words[position]})
    return pd.DataFrame(rows)
