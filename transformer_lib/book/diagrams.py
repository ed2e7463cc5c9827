"""Diagrams drawn by code, so that their numbers come from the same sizes the chapter uses.

    multi_head_diagram  multi-head attention as split -> attend -> concat, with every shape (chapter 1)

Like :func:`transformer_lib.book.figures.architecture_diagram`, a function draws on a white page
into the ``ax`` given (or a new figure) and returns the ``Axes``; the website inverts matplotlib
figures in dark mode (``_static/site.css``), so the colours are light tints that invert to dark ones.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from matplotlib.axes import Axes

__all__ = ["multi_head_diagram"]

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
