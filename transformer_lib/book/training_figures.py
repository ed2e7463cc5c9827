"""Chapter 5's figures: the training pipeline, the schedules, label smoothing, sentence lengths and
padding, a batch's target mask, and a loss curve that redraws while a model trains.

Book support only: the model code never imports this module. altair charts are interactive (menus,
tooltips); each matplotlib function draws on ``ax`` (a new figure when ``None``), returns the
``Axes`` and never calls ``plt.show()``. Figures are at most 5.4 inches (540 px at matplotlib's
100 dpi) wide, so their text stays readable on a phone. The loss curves of a run
(``plot_training_curves``, ``training_curves_chart``) are in :mod:`transformer_lib.book.figures`,
since the train command draws them too.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import altair as alt
import pandas as pd
from torch import Tensor

from .figures import _EDGE, _INK, _LINE, _arrow, _box_style, plot_training_curves

__all__ = ["LiveLossPlot", "PIPELINE_WIDTH_INCHES", "label_smoothing_chart", "length_histogram_chart",
           "lr_schedule_chart", "padding_waste_chart", "recipe_chart", "smoothing_conventions_figure",
           "target_mask_figure", "training_pipeline_diagram", "validation_bleu_chart"]

# --- The pipeline: from text to batches, from batches to updates -------------------------------------

PIPELINE_WIDTH_INCHES = 4.4
"""The diagram's width. Drawn for a phone's column, as the architecture map is: shown 342 px wide on a
390 px phone, its smallest text (``_PIPELINE_FONT`` points) is over 9 px high."""
_PIPELINE_FONT = 8.8

# (title, what does it, lit): the data side (left column, top down) and one update (right column).
# Each line of a box's text fits its column at _PIPELINE_FONT.
_DATA_STEPS = [
    ("text", "German and English\ncaptions", False),
    ("tokens", "a tokenizer: spaCy\nwords or BPE", False),
    ("ids", "Vocab", False),
    ("batches", "BucketBatchSampler\n+ collate: Batch(src,\ntgt_in, tgt_out)", True),
]
_UPDATE_STEPS = [
    ("forward", "Transformer(src,\ntgt_in): logits", False),
    ("loss", "label-smoothed cross-\nentropy against tgt_out", True),
    ("backward", "gradients of the loss", False),
    ("clip", "gradients rescaled to\na global norm", True),
    ("step", "AdamW; the learning-\nrate schedule", True),
    ("checkpoint", "every few steps,\nwritten atomically", True),
]


def training_pipeline_diagram(ax: Any = None) -> Any:
    """Chapter 5's pipeline: text becomes batches (left), and each batch one update (right), in a loop.

    The pieces the chapter builds are lit; each box says which library piece does the step
    (``transformer_lib.prepared`` and ``batching`` on the left, ``training`` on the right). Drawn
    for a phone's column (``PIPELINE_WIDTH_INCHES`` wide, text of ``_PIPELINE_FONT`` points or more).

    Args:
        ax: where to draw (default: a new figure ``PIPELINE_WIDTH_INCHES`` wide).

    Returns:
        The matplotlib ``Axes``; its coordinates are inches from the top left (y grows downwards,
        drawn negated).
    """
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyBboxPatch

    width, line, gap, pad = 1.86, 0.165, 0.2, 0.1  # inches: box width, a line of text, between boxes
    centres = {0: 0.98, 1: 3.12}
    loop_x = centres[1] + width / 2 + 0.2

    def height(what: str) -> float:  # the title's line and the text's lines, with padding
        return pad * 2 + line * 1.25 + line * (what.count("\n") + 1)

    columns = [(centres[0], _DATA_STEPS, "text to batches"), (centres[1], _UPDATE_STEPS, "one update per batch")]
    total = max(sum(height(w) + gap for _, w, _ in steps) for _, steps, _ in columns) + 0.35
    if ax is None:
        _, ax = plt.subplots(figsize=(PIPELINE_WIDTH_INCHES, total), layout="constrained")
    boxes: dict[int, list[tuple[float, float]]] = {}  # column -> (top, bottom) of each box
    for column, (x, steps, heading) in enumerate(columns):
        ax.text(x, -0.12, heading, ha="center", va="center", fontsize=_PIPELINE_FONT + 0.5, color=_LINE,
                style="italic")
        top = 0.32
        for title, what, lit in steps:
            h = height(what)
            ax.add_patch(FancyBboxPatch((x - width / 2, -(top + h)), width, h,
                                        boxstyle="round,pad=0.0,rounding_size=0.08", **_box_style(lit)))
            ax.text(x, -(top + pad + line * 0.55), title, ha="center", va="center", fontsize=_PIPELINE_FONT + 0.7,
                    color=_INK, weight="bold")
            ax.text(x, -(top + pad + line * 1.25), what, ha="center", va="top", fontsize=_PIPELINE_FONT,
                    color=_INK, linespacing=1.15)
            boxes.setdefault(column, []).append((top, top + h))
            top += h + gap
        for (_, above), (below, _) in zip(boxes[column], boxes[column][1:]):
            _arrow(ax, [(x, -(above + 0.01)), (x, -(below - 0.01))])
    # the batches feed the forward pass; after the step, the next batch
    batches = sum(boxes[0][-1]) / 2
    forward = sum(boxes[1][0]) / 2
    middle = (centres[0] + width / 2 + centres[1] - width / 2) / 2
    _arrow(ax, [(centres[0] + width / 2 + 0.01, -batches), (middle, -batches), (middle, -forward),
                (centres[1] - width / 2 - 0.01, -forward)])
    step = sum(boxes[1][4]) / 2
    right = centres[1] + width / 2
    _arrow(ax, [(right + 0.01, -step), (loop_x, -step), (loop_x, -forward), (right + 0.01, -forward)])
    ax.text(loop_x + 0.06, -(step + forward) / 2, "next batch", rotation=90, ha="left", va="center",
            fontsize=_PIPELINE_FONT, color=_LINE)
    ax.set_xlim(0, PIPELINE_WIDTH_INCHES)
    ax.set_ylim(-total, 0.05)
    ax.axis("off")
    return ax


def recipe_chart(grid: Any, *, bleu: str = "val BLEU beam 4", title: str | None = None) -> Any:
    """The recipe comparison as one dot per run, best first: validation BLEU, coloured by the layout
    and schedule it used, hover for every choice.

    Args:
        grid: :func:`transformer_lib.book.results.recipe_table`'s frame (one row per run, indexed by
            the run's name).
        bleu: the column to draw.
    """
    frame = grid.reset_index()
    frame["layout and schedule"] = frame["LayerNorm"] + ", " + frame["schedule"]
    order = frame.sort_values(bleu, ascending=False)["run"].tolist()
    return (
        alt.Chart(frame, title=title or "")
        .mark_circle(size=70, opacity=1)
        .encode(
            y=alt.Y("run:N", sort=order, title=None, axis=alt.Axis(labelLimit=220, grid=True)),
            x=alt.X(f"{bleu}:Q", title=f"{bleu} (lowercased)", scale=alt.Scale(zero=False)),
            color=alt.Color("layout and schedule:N", title=None, legend=alt.Legend(orient="bottom", columns=2)),
            tooltip=["run", "tokens", "LayerNorm", "schedule", alt.Tooltip("peak lr:Q", format=".1e"), "dropout",
                     "seed", alt.Tooltip(f"{bleu}:Q", format=".2f")],
        )
        .properties(width=360, height=14 * len(frame))
    )

# --- Charts ------------------------------------------------------------------------------------------


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
            ``transformer_lib.trainer`` (so the chart shows the library's numbers).

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
        import io
        import time

        from IPython.display import Image, display

        ax = plot_training_curves(self.history, title=self.title)
        # As a PNG, not the Figure itself: a Figure made without pyplot has no PNG formatter until the
        # inline backend registers one, so the page showed "<Figure size 600x350 with 1 Axes>".
        png = io.BytesIO()
        ax.figure.savefig(png, format="png", bbox_inches="tight")
        image = Image(data=png.getvalue(), format="png")
        if self._handle is None:
            self._handle = display(image, display_id=True)
        else:
            self._handle.update(image)
        self._last_draw = time.perf_counter()


# --- Small matplotlib figures: a batch's target mask, the two label-smoothing conventions ----------

def target_mask_figure(mask: Tensor, labels: Sequence[str], title: str, ax: Any = None) -> Any:
    """One ``(T, T)`` boolean mask as filled squares: queries on rows, keys on columns.

    Args:
        mask: ``(T, T)``, True = may attend.
        labels: the ``T`` tokens, for both axes.
        title: the figure's title.
        ax: where to draw (default: a new 4.2 x 3.6 inch figure).
    """
    if mask.dim() != 2 or mask.size(0) != mask.size(1) or mask.size(0) != len(labels):
        raise ValueError(f"mask must be (T, T) with T = len(labels) = {len(labels)}, got {tuple(mask.shape)}")
    if ax is None:
        import matplotlib.pyplot as plt

        _, ax = plt.subplots(figsize=(4.2, 3.6), layout="constrained")
    ax.imshow(mask.float().numpy(), cmap="Blues", vmin=0, vmax=1.4)
    ax.set_xticks(range(len(labels)), labels, rotation=90)
    ax.set_yticks(range(len(labels)), labels)
    ax.set_xlabel("key (tgt_in)")
    ax.set_ylabel("query (tgt_in)")
    ax.set_title(title)
    return ax


def smoothing_conventions_figure(distributions: Mapping[str, Tensor], labels: Sequence[str], ax: Any = None) -> Any:
    """Target distributions of one position side by side, one group of bars per token.

    Args:
        distributions: ``{convention name: (V,) probabilities}``.
        labels: the ``V`` token names.
        ax: where to draw (default: a new 5.4 x 2.8 inch figure).
    """
    if not distributions:
        raise ValueError("distributions is empty: pass at least one {name: (V,) tensor}")
    for name, dist in distributions.items():
        if dist.dim() != 1 or dist.numel() != len(labels):
            raise ValueError(f"{name!r} must be (V,) with V = len(labels) = {len(labels)}, got {tuple(dist.shape)}")
    if ax is None:
        import matplotlib.pyplot as plt

        _, ax = plt.subplots(figsize=(5.4, 2.8), layout="constrained")
    width = 0.8 / len(distributions)
    for k, (name, dist) in enumerate(distributions.items()):
        x = [v + (k - (len(distributions) - 1) / 2) * width for v in range(len(labels))]
        bars = ax.bar(x, dist.tolist(), width=width, label=name)
        ax.bar_label(bars, fmt="%.3f", fontsize=7, padding=1)
    ax.set_xticks(range(len(labels)), labels)
    ax.set_ylabel("target probability")
    ax.set_ylim(0, 1.1)
    ax.legend(loc="upper left", fontsize=8)
    return ax
