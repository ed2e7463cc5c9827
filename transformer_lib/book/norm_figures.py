"""Chapter 4's LayerNorm figures: the BatchNorm-against-LayerNorm probe and plot, the unbiased-std plot.

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
