"""Chapter 5's small matplotlib figures: a batch's target mask and the two label-smoothing conventions.

Book support only: the model code never imports this module. Each function draws on ``ax`` (a new
figure when ``None``), returns the ``Axes`` and never calls ``plt.show()``. Figures are at most
5.4 inches (540 px at matplotlib's 100 dpi) wide, so their text stays readable on a phone.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from torch import Tensor

__all__ = ["target_mask_figure", "smoothing_conventions_figure"]


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
