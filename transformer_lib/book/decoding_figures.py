"""Chapter 6's figures: the decoding loop with its key/value cache, and every attention weight of a
few translated sentences in one interactive chart.

The loop is drawn by code in the style of :func:`transformer_lib.book.figures.architecture_diagram`
(its boxes, arrows and colours; what the chapter builds is lit), for a white page: the website
inverts matplotlib figures in dark mode (``_static/site.css``). It is narrower than the text column,
so that on a phone, where the figure is scaled down to the screen, its text stays readable.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import altair as alt
import numpy as np

from .attention_figures import _attention_grids, _weight_tooltips
from .figures import _EDGE, _FAINT, _INK, _LINE, _arrow, _box_style, _check_labels, readable_tokens

if TYPE_CHECKING:
    from matplotlib.axes import Axes

__all__ = ["ATTENTION_KINDS", "DECODING_LOOP_WIDTH_INCHES", "TEASER_WIDTH_INCHES", "attention_explorer",
           "decoding_loop_diagram", "translation_teaser"]

# --- The attention explorer --------------------------------------------------------------------------


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
    records: list[dict[str, Any]] = []
    labels: dict[str, Any] = {}
    for name, sentence in zip(names, sentences):
        labels[name] = {}
        for kind, (kind_name, rows, cols) in ATTENTION_KINDS.items():
            labels[name][kind_name] = [readable_tokens(sentence[rows]), readable_tokens(sentence[cols])]
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


# --- The introduction's teaser: a trained model's translation and where it looked -----------------

TEASER_WIDTH_INCHES = 4.3
"""The teaser's width: its text (9 points, the book's smallest) over 9 px high on a 390 px phone."""


def translation_teaser(index: int = 18, ax: Axes | None = None) -> Axes:
    """One test sentence as the book's trained model translated it, with its cross-attention.

    The committed artifacts (:func:`transformer_lib.book.artifacts.load_artifacts`) hold the
    model's greedy translation of every test sentence and every attention weight of six of them;
    this draws the last decoder layer's cross-attention (mean of the heads) of one, output tokens
    on the rows, source tokens on the columns, under the sentence and its translation.

    Args:
        index: the test sentence (one of the six the artifacts hold attention for).
        ax: where to draw (default: a new figure ``TEASER_WIDTH_INCHES`` wide).
    """
    import textwrap

    import matplotlib.pyplot as plt

    from .artifacts import load_artifacts

    artifacts = load_artifacts()
    if artifacts is None:
        raise FileNotFoundError("no committed artifacts (transformer_lib/book/runs/artifacts/) to draw from")
    entries = {entry["index"]: entry for entry in artifacts["attention"]}
    if index not in entries:
        raise ValueError(f"the artifacts hold attention for test sentences {sorted(entries)}, not {index}")
    entry = entries[index]
    weights = np.asarray(entry["decoder_cross"], dtype=float)[-1].mean(0)  # (T, S): last layer, mean of heads
    rows, cols = readable_tokens(entry["output_tokens"]), readable_tokens(entry["source_tokens"])
    if ax is None:
        _, ax = plt.subplots(figsize=(TEASER_WIDTH_INCHES, 0.3 * len(rows) + 2.4), layout="constrained")
    ax.imshow(weights, cmap="Blues", vmin=0, vmax=1)
    ax.set_xticks(range(len(cols)), cols, rotation=45, ha="left", rotation_mode="anchor")
    ax.set_yticks(range(len(rows)), rows)
    ax.xaxis.tick_top()
    ax.set_xlabel("German source (keys)")
    ax.set_ylabel("English output (queries)")
    ax.xaxis.set_label_position("top")
    # each sentence in lines of about equal length, none wider than the drawing is for a phone
    def lines(text: str) -> list[str]:
        return textwrap.wrap(text, min(44, max(len(text) // 2 + 8, 30)))

    title = "\n".join(lines(entry["source"]) + lines(f"→ {entry['translation']}"))
    ax.set_title(title, fontsize=_FONT + 0.7, y=-0.02 - 0.5 / len(rows), va="top")
    return ax


# --- The decoding loop -------------------------------------------------------------------------------

DECODING_LOOP_WIDTH_INCHES = 4.4
"""The figure's width. Drawn for a phone's column, as the architecture map is: shown 342 px wide on a
390 px phone, its smallest text (``_FONT`` points) is over 9 px high."""
_FONT = 8.8

# Geometry, in inches from the top left (y grows downwards; drawn negated). Two columns: the encoder
# and the caches on the left, one decoding step on the right; rows go downwards, in the order a step
# runs. Every line of text fits its column at _FONT.
_LEFT, _LEFT_WIDTH = 0.895, 1.55
_RIGHT, _RIGHT_WIDTH = 3.17, 1.9
_LINE_HEIGHT, _PAD = 0.165, 0.085  # a line of text; the room above and below it in a box
_LOOP_X = 4.38  # where the "next step" arrow climbs back to the top
_MEMORY_X = 0.04  # where the memory goes down the left margin

# The decoding step, top to bottom: (y of the box's centre, text, lit)
_STEP = [
    (0.55, "output so far:\n<bos> y₁ … yₜ₋₁", False),
    (1.3, "embed the newest token\nyₜ₋₁ only, at position\nt − 1 (= cache.length)", True),
    (2.45, "masked self-attention", False),
    (3.46, "cross-attention", False),
    (4.02, "feed-forward", False),
    (4.7, "linear + softmax:\np(yₜ | y<ₜ, x)", False),
    (5.36, "pick yₜ: greedy,\nbeam or sample", False),
    (5.94, "append yₜ to the output", False),
    (6.52, "yₜ = <eos> (every\nsentence)?", False),
]
# The caches beside the attention they serve: (y, text)
_CACHES = [
    (_STEP[2][0], "self-attention\ncache: keys, values\nof steps 1 … t\n(one more each step)"),
    (_STEP[3][0], "cross-attention\ncache: keys, values\nof the memory (made\nat step 1, reused)"),
]
_FRAME = (1.9, 4.3)  # top and bottom of the dashed decoder-layer frame
_BOTTOM = 7.05


def decoding_loop_diagram(ax: Axes | None = None) -> Axes:
    """The encoder-decoder decoding loop with a key/value cache, one pass per output token.

    The source is encoded once into the memory. Each step feeds the decoder the newest token only:
    every layer's self-attention appends that token's key and value to its cache and attends over
    all of them; cross-attention reads keys and values of the memory computed at the first step.
    The logits give the next token (greedy, beam search or sampling picks it), which is appended,
    until every sentence has written ``<eos>``. The caches are lit. Drawn for a phone's column
    (``DECODING_LOOP_WIDTH_INCHES`` wide, text of ``_FONT`` points).

    Args:
        ax: where to draw (default: a new figure ``DECODING_LOOP_WIDTH_INCHES`` wide).

    Returns:
        The matplotlib ``Axes``.
    """
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(DECODING_LOOP_WIDTH_INCHES, _BOTTOM + 0.1), layout="constrained")
    _draw_decoder_layer_frame(ax)
    _draw_step(ax)
    _draw_encoder_and_caches(ax)
    _draw_loop(ax)
    ax.set_xlim(0, DECODING_LOOP_WIDTH_INCHES + 0.05)
    ax.set_ylim(-_BOTTOM, 0.05)
    ax.axis("off")
    return ax


def _box(ax: Axes, x: float, y: float, width: float, height: float, text: str, lit: bool, **text_kw: Any) -> None:
    """A box centred at (x, y) (y downwards) with its text."""
    from matplotlib.patches import FancyBboxPatch

    ax.add_patch(FancyBboxPatch((x - width / 2, -(y + height / 2)), width, height,
                                boxstyle="round,pad=0.0,rounding_size=0.07", **_box_style(lit)))
    ax.text(x, -y, text, ha="center", va="center", fontsize=_FONT, color=_INK, linespacing=1.2, **text_kw)


def _height(text: str) -> float:
    return 2 * _PAD + _LINE_HEIGHT * (text.count("\n") + 1)


def _draw_step(ax: Axes) -> None:
    """One decoding step, top to bottom, with an arrow from each box to the next."""
    for (y0, text0, _), (y1, text1, _) in zip(_STEP, _STEP[1:]):
        _arrow(ax, [(_RIGHT, -(y0 + _height(text0) / 2 + 0.01)), (_RIGHT, -(y1 - _height(text1) / 2 - 0.01))])
    for y, text, lit in _STEP:
        _box(ax, _RIGHT, y, _RIGHT_WIDTH, _height(text), text, lit)


def _draw_decoder_layer_frame(ax: Axes) -> None:
    from matplotlib.patches import FancyBboxPatch

    left, (top, bottom) = _RIGHT - _RIGHT_WIDTH / 2 - 0.04, _FRAME
    ax.add_patch(FancyBboxPatch((left, -bottom), _RIGHT_WIDTH + 0.08, bottom - top, facecolor="none",
                                boxstyle="round,pad=0.0,rounding_size=0.1", edgecolor=_FAINT, linestyle="--"))
    ax.text(left + 0.06, -(top + 0.05), "decoder layer × N", ha="left", va="top", fontsize=_FONT, color=_LINE)


def _draw_encoder_and_caches(ax: Axes) -> None:
    """Source -> encoder (once) -> memory, down the left margin into the cross-attention cache."""
    encoder = _STEP[0][0]
    ax.text(_LEFT, -0.08, "source tokens x", ha="center", va="center", fontsize=_FONT, color=_INK)
    encoder_height = _height("encoder: run once")
    _arrow(ax, [(_LEFT, -0.2), (_LEFT, -(encoder - encoder_height / 2 - 0.01))])
    _box(ax, _LEFT, encoder, _LEFT_WIDTH, encoder_height, "encoder: run once", False)
    memory = encoder + encoder_height / 2 + 0.3
    ax.text(_LEFT + 0.06, -memory, "memory (B, S, D)", ha="left", va="center", fontsize=_FONT, color=_LINE)
    y_self, y_cross = _CACHES[0][0], _CACHES[1][0]
    _arrow(ax, [(_LEFT, -(encoder + encoder_height / 2 + 0.01)), (_LEFT, -memory), (_MEMORY_X, -memory),
                (_MEMORY_X, -y_cross), (_LEFT - _LEFT_WIDTH / 2 - 0.01, -y_cross)])
    for y, text in _CACHES:
        _box(ax, _LEFT, y, _LEFT_WIDTH, _height(text), text, True)
    # self-attention: the new key and value go into the cache, every cached one comes back
    edge, cache_edge = _RIGHT - _RIGHT_WIDTH / 2, _LEFT + _LEFT_WIDTH / 2 + 0.01
    for y, start, end, label, va in [(y_self - 0.08, edge, cache_edge, "append", "bottom"),
                                     (y_self + 0.08, cache_edge, edge, "read", "top"),
                                     (y_cross, cache_edge, edge, "read", "top")]:
        ax.annotate("", xy=(end - 0.01 if end == edge else end, -y), xytext=(start, -y),
                    arrowprops=dict(arrowstyle="->", color=_EDGE, lw=1.1))
        ax.text((edge + cache_edge) / 2 - 0.02, -y + (0.04 if va == "bottom" else -0.04), label, ha="center", va=va,
                fontsize=_FONT, color=_LINE)


def _draw_loop(ax: Axes) -> None:
    """No: back to the top for the next step; yes: done."""
    (y_eos, eos_text, _), (y_top, _, _) = _STEP[-1], _STEP[0]
    right = _RIGHT + _RIGHT_WIDTH / 2
    _arrow(ax, [(right + 0.01, -y_eos), (_LOOP_X, -y_eos), (_LOOP_X, -y_top), (right + 0.01, -y_top)])
    ax.text(_LOOP_X - 0.05, -(y_eos + y_top) / 2, "no: next step, t + 1", rotation=90, ha="right", va="center",
            fontsize=_FONT, color=_LINE)
    done = _BOTTOM - 0.1
    _arrow(ax, [(_RIGHT, -(y_eos + _height(eos_text) / 2 + 0.01)), (_RIGHT, -done)])
    ax.text(_RIGHT - 0.1, -done, "yes: done", ha="right", va="center", fontsize=_FONT, color=_INK)
