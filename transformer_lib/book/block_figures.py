"""Chapter 4's figures: per-layer measurements, which positions an output change reaches, and the
LayerNorm probes (BatchNorm against LayerNorm, the unbiased-std variant).

Why Transformers normalise with LayerNorm: BatchNorm's statistics for a feature are taken over every
position of the batch, pads included, so one sentence's output depends on its batch-mates and on how
much padding the batch has. The probe here measures that drift; the figures draw it. Nothing here is
part of the model: the chapter uses ``torch.nn.BatchNorm1d`` and ``torch.nn.LayerNorm`` directly.

Shapes: ``B`` batch, ``L`` positions, ``D`` features (``d_model``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from .figures import _as_array, _lines

__all__ = ["PHONE_FRIENDLY_WIDTH", "feature_means_and_drift", "normalise_tokens", "pad_batch", "padding_drift",
           "per_layer_chart", "position_change_bars", "unbiased_gap_plot", "unbiased_layernorm_gap"]

# --- Per-layer measurements and changed positions --------------------------------------------------


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


# --- LayerNorm against BatchNorm, and the unbiased-std LayerNorm --------------------------------------

PHONE_FRIENDLY_WIDTH = 5.4
"""Inches at matplotlib's 100 dpi: 540 px, which a 390 px phone shrinks by less than 1.4x."""


def normalise_tokens(norm: nn.Module, x: Tensor) -> Tensor:
    """Apply a ``BatchNorm1d`` or a ``LayerNorm`` to a batch of token vectors.

    ``nn.BatchNorm1d`` wants the features on dimension 1, ``(B, D, L)``; ``nn.LayerNorm`` on the last.

    Args:
        norm: an ``nn.BatchNorm1d(D)`` or an ``nn.LayerNorm(D)``.
        x: ``(B, L, D)`` token vectors.

    Returns:
        ``(B, L, D)``, normalised.
    """
    if x.dim() != 3:
        raise ValueError(f"x must be (B, L, D) token vectors, got shape {tuple(x.shape)}")
    if isinstance(norm, nn.BatchNorm1d):
        return norm(x.transpose(1, 2)).transpose(1, 2)  # (B, D, L) -> (B, L, D)
    if isinstance(norm, nn.LayerNorm):
        return norm(x)
    raise TypeError(f"norm must be nn.BatchNorm1d or nn.LayerNorm, got {type(norm).__name__}")


def pad_batch(sentences: Sequence[Sequence[int]], length: int, pad_id: int = 0) -> Tensor:
    """Token ids padded at the end to ``length``: a ``(B, length)`` tensor."""
    longest = max(len(s) for s in sentences)
    if length < longest:
        raise ValueError(f"length {length} is shorter than the longest sentence ({longest} tokens)")
    return torch.tensor([[*s, *[pad_id] * (length - len(s))] for s in sentences])


def padding_drift(
    norms: Mapping[str, nn.Module],
    embed: Callable[[Tensor], Tensor],
    sentences: Sequence[Sequence[int]],
    max_extra_pads: int,
    pad_id: int = 0,
) -> dict[str, list[float]]:
    """How much the first sentence's output moves as the batch gets more padding.

    The batch is ``sentences`` padded to the longest one, plus ``extra`` pad positions at the end of
    every row, for ``extra = 0 .. max_extra_pads``. Each norm runs as it would in training
    (BatchNorm with the batch's own statistics; its running statistics are updated).

    Args:
        norms: name -> ``nn.BatchNorm1d(D)`` or ``nn.LayerNorm(D)``.
        embed: token ids ``(B, L)`` -> vectors ``(B, L, D)`` (embedding plus positions).
        sentences: token ids, the sentence whose output is measured first.
        max_extra_pads: the most pad positions added.

    Returns:
        name -> for each ``extra``, the largest ``|change|`` of the first sentence's real tokens'
        outputs against ``extra = 0``.
    """
    if max_extra_pads < 0:
        raise ValueError(f"max_extra_pads must be >= 0, got {max_extra_pads}")
    longest, n_real = max(len(s) for s in sentences), len(sentences[0])
    drift: dict[str, list[float]] = {}
    with torch.no_grad():
        for name, norm in norms.items():
            norm.train()
            outputs = [normalise_tokens(norm, embed(pad_batch(sentences, longest + extra, pad_id)))
                       [0, :n_real] for extra in range(max_extra_pads + 1)]  # each (n_real, D)
            drift[name] = [(out - outputs[0]).abs().max().item() for out in outputs]
    return drift


def feature_means_and_drift(
    with_pads: Any,
    real_only: Any,
    drift: Mapping[str, Sequence[float]],
    *,
    title: str | None = None,
) -> Any:
    """Two panels: each feature's mean with and without the pads, and the drift against padding.

    Args:
        with_pads, real_only: ``(D,)`` per-feature means over every position and over real tokens.
        drift: name -> drift per number of extra pads (from :func:`padding_drift`).

    Returns:
        The matplotlib ``Figure``, 540 px wide.
    """
    import matplotlib.pyplot as plt

    with_pads, real_only = np.asarray(with_pads).ravel(), np.asarray(real_only).ravel()
    if len(with_pads) != len(real_only):
        raise ValueError(f"{len(with_pads)} means with pads but {len(real_only)} without")
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(PHONE_FRIENDLY_WIDTH, 5.0), layout="constrained")
    features = np.arange(len(with_pads))
    top.plot(features, real_only, "o", label="real tokens only")
    top.plot(features, with_pads, "x", label="all positions (BatchNorm)")
    top.vlines(features, real_only, with_pads, color="gray", linewidth=0.8)
    top.set(xlabel="feature", ylabel="mean over the batch", title="What BatchNorm subtracts")
    top.margins(y=0.3)  # room above the points for the legend
    top.legend(frameon=False, fontsize=9, ncols=2, loc="upper left")
    for name, values in drift.items():
        bottom.plot(np.arange(len(values)), values, "o-", label=name, markersize=4)
    bottom.set(xlabel="extra pad positions in the batch",
               ylabel="max |change| of sentence 1",
               title="Sentence 1's output as the batch gets more padding")
    bottom.legend(frameon=False, fontsize=9)
    if title:
        fig.suptitle(title)
    return fig


def unbiased_layernorm_gap(widths: Sequence[int], n_vectors: int = 1000) -> tuple[list[float], list[float]]:
    """The Annotated Transformer's unbiased-std LayerNorm against the definition, per width ``D``.

    Returns:
        (measured median relative difference over ``n_vectors`` random vectors,
        the formula ``1 - sqrt((D - 1) / D)``), one value per width.
    """
    measured = []
    for d in widths:
        if d < 2:
            raise ValueError(f"every width must be at least 2 (std divides by D - 1), got {d}")
        x = torch.randn(n_vectors, d, dtype=torch.float64)
        centred = x - x.mean(-1, keepdim=True)
        standard = centred / torch.sqrt(x.var(-1, unbiased=False, keepdim=True) + 1e-5)  # by D
        annotated = centred / (x.std(-1, keepdim=True) + 1e-6)  # std: by D - 1
        measured.append(((annotated - standard).abs() / standard.abs()).median().item())
    return measured, [1 - math.sqrt((d - 1) / d) for d in widths]


def unbiased_gap_plot(widths: Sequence[int], measured: Sequence[float], formula: Sequence[float]) -> Any:
    """Log-log plot of :func:`unbiased_layernorm_gap`'s two lists. Returns the ``Axes``."""
    import matplotlib.pyplot as plt

    _, ax = plt.subplots(figsize=(PHONE_FRIENDLY_WIDTH, 3.0), layout="constrained")
    ax.loglog(widths, measured, "o", label="measured (median over 1000 vectors)")
    ax.loglog(widths, formula, "-", label=r"$1 - \sqrt{(D-1)/D} \approx 1/(2D)$")
    ax.set(xlabel="width D", ylabel="relative difference",
           title="Unbiased-std LayerNorm against the definition")
    ax.legend(frameon=False)
    return ax
