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

# --- 4. Training figures (chapter 5) -------------------------------------------------------------


def _history_frames(history: dict[str, list[dict[str, float]]]) -> tuple[Any, Any]:
    import pandas as pd

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
    import altair as alt
    import pandas as pd

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
    import altair as alt

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
    import altair as alt

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
    import altair as alt
    import pandas as pd

    from collections import Counter

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
    import altair as alt

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
        .properties(width=520, height=160)
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
