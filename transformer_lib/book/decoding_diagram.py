"""Chapter 6's picture of the decoding loop with the key/value cache, drawn by code.

Drawn in the style of :func:`transformer_lib.book.figures.architecture_diagram` (its boxes, arrows
and colours; what the chapter builds is lit), for a white page: the website inverts matplotlib
figures in dark mode (``_static/site.css``). It is narrower than the text column, so that on a
phone, where the figure is scaled down to the screen, its text stays readable.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from transformer_lib.book.figures import _EDGE, _FAINT, _INK, _LINE, _arrow, _box_style

if TYPE_CHECKING:
    from matplotlib.axes import Axes

__all__ = ["DECODING_LOOP_WIDTH_INCHES", "decoding_loop_diagram"]

DECODING_LOOP_WIDTH_INCHES = 5.4
"""The figure's width: 540 px at matplotlib's 100 dpi, so a 390 px phone shrinks it by a third only."""

# x of the two columns' centres and their box widths: the encoder and the caches on the left, one
# decoding step on the right; rows go downwards, in the order a step runs.
_LEFT, _LEFT_WIDTH = 2.0, 3.72
_RIGHT, _RIGHT_WIDTH = 6.95, 4.45
_HEIGHT = 0.66
_LOOP_X = 9.72  # where the "next step" arrow climbs back to the top

# The decoding step, top to bottom: (y, text, lit)
_STEP = [
    (11.55, "output so far: <bos> y₁ … yₜ₋₁", False),
    (10.4, "embed the newest token yₜ₋₁ only,\nat position t − 1 (= cache.length)", True),
    (8.7, "masked self-attention", False),
    (7.0, "cross-attention", False),
    (5.85, "feed-forward", False),
    (4.55, "linear + softmax: p(yₜ | y<ₜ, x)", False),
    (3.45, "pick yₜ: greedy, beam or sample", False),
    (2.35, "append yₜ to the output", False),
    (1.25, "yₜ = <eos> (every sentence)?", False),
]
# The caches beside the attention they serve: (y, text)
_CACHES = [
    (8.7, "self-attention cache:\nkeys, values of steps 1 … t\n(one more each step)"),
    (7.0, "cross-attention cache:\nkeys, values of the memory\n(made at step 1, reused)"),
]


def decoding_loop_diagram(ax: Axes | None = None) -> Axes:
    """The encoder-decoder decoding loop with a key/value cache, one pass per output token.

    The source is encoded once into the memory. Each step feeds the decoder the newest token only:
    every layer's self-attention appends that token's key and value to its cache and attends over
    all of them; cross-attention reads keys and values of the memory computed at the first step.
    The logits give the next token (greedy, beam search or sampling picks it), which is appended,
    until every sentence has written ``<eos>``. The caches are lit.

    Args:
        ax: where to draw (default: a new figure ``DECODING_LOOP_WIDTH_INCHES`` wide).

    Returns:
        The matplotlib ``Axes``.
    """
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(DECODING_LOOP_WIDTH_INCHES, 6.3), layout="constrained")
    _draw_decoder_layer_frame(ax)
    _draw_step(ax)
    _draw_encoder_and_caches(ax)
    _draw_loop(ax)
    ax.set_xlim(-0.3, 10)
    ax.set_ylim(0.2, 12.8)
    ax.axis("off")
    return ax


def _box(ax: Axes, x: float, y: float, width: float, height: float, text: str, lit: bool, **text_kw: Any) -> None:
    from matplotlib.patches import FancyBboxPatch

    ax.add_patch(FancyBboxPatch((x - width / 2, y - height / 2), width, height,
                                boxstyle="round,pad=0.02,rounding_size=0.12", **_box_style(lit)))
    ax.text(x, y, text, ha="center", va="center", fontsize=9, color=_INK, linespacing=1.25, **text_kw)


def _height(text: str) -> float:
    return _HEIGHT + 0.36 * text.count("\n")


def _draw_step(ax: Axes) -> None:
    """One decoding step, top to bottom, with an arrow from each box to the next."""
    for (y0, text0, _), (y1, text1, _) in zip(_STEP, _STEP[1:]):
        _arrow(ax, [(_RIGHT, y0 - _height(text0) / 2 - 0.02), (_RIGHT, y1 + _height(text1) / 2 + 0.02)])
    for y, text, lit in _STEP:
        _box(ax, _RIGHT, y, _RIGHT_WIDTH, _height(text), text, lit)


def _draw_decoder_layer_frame(ax: Axes) -> None:
    from matplotlib.patches import FancyBboxPatch

    left, bottom, top = _RIGHT - _RIGHT_WIDTH / 2 - 0.15, 5.25, 9.6
    ax.add_patch(FancyBboxPatch((left, bottom), _RIGHT_WIDTH + 0.3, top - bottom, facecolor="none",
                                boxstyle="round,pad=0.02,rounding_size=0.2", edgecolor=_FAINT, linestyle="--"))
    ax.text(left + 0.1, top - 0.08, "decoder layer × N", ha="left", va="top", fontsize=8, color=_LINE)


def _draw_encoder_and_caches(ax: Axes) -> None:
    """Source -> encoder (once) -> memory, down the left margin into the cross-attention cache."""
    ax.text(_LEFT, 12.55, "source tokens x", ha="center", va="center", fontsize=9, color=_INK)
    _arrow(ax, [(_LEFT, 12.3), (_LEFT, 11.55 + _HEIGHT / 2 + 0.02)])
    _box(ax, _LEFT, 11.55, _LEFT_WIDTH, _HEIGHT, "encoder: run once", False)
    ax.text(_LEFT + 0.1, 10.6, "memory (B, S, D)", ha="left", va="center", fontsize=8.5, color=_LINE)
    _arrow(ax, [(_LEFT, 11.55 - _HEIGHT / 2 - 0.02), (_LEFT, 10.6), (-0.12, 10.6), (-0.12, 7.0),
                (_LEFT - _LEFT_WIDTH / 2 - 0.02, 7.0)])
    edge = _RIGHT - _RIGHT_WIDTH / 2
    for y, text in _CACHES:
        _box(ax, _LEFT, y, _LEFT_WIDTH, _height(text), text, True)
    # self-attention: the new key and value go into the cache, every cached one comes back
    cache_edge, y_self, y_cross = _LEFT + _LEFT_WIDTH / 2 + 0.02, _CACHES[0][0], _CACHES[1][0]
    for y, start, end, label, va in [(y_self + 0.2, edge, cache_edge, "append", "bottom"),
                                     (y_self - 0.2, cache_edge, edge, "read", "top"),
                                     (y_cross, cache_edge, edge, "read", "top")]:
        ax.annotate("", xy=(end - 0.02 if end == edge else end, y), xytext=(start, y),
                    arrowprops=dict(arrowstyle="->", color=_EDGE, lw=1.1))
        ax.text((edge + cache_edge) / 2, y + (0.06 if va == "bottom" else -0.06), label, ha="center", va=va,
                fontsize=7.5, color=_LINE)


def _draw_loop(ax: Axes) -> None:
    """No: back to the top for the next step; yes: done."""
    y_eos, y_top = _STEP[-1][0], _STEP[0][0]
    right = _RIGHT + _RIGHT_WIDTH / 2
    _arrow(ax, [(right + 0.02, y_eos), (_LOOP_X, y_eos), (_LOOP_X, y_top), (right + 0.02, y_top)])
    ax.text(_LOOP_X - 0.1, (y_eos + y_top) / 2, "no: next step, t + 1", rotation=90, ha="right", va="center",
            fontsize=8.5, color=_LINE)
    _arrow(ax, [(_RIGHT, y_eos - _HEIGHT / 2 - 0.02), (_RIGHT, 0.45)])
    ax.text(_RIGHT - 0.15, 0.45, "yes: done", ha="right", va="center", fontsize=8.5, color=_INK)
