"""Chapter 7's language-model figures and tables: the two attention patterns side by side, masked
words filled in, and panels sized for a phone as well as the page.

Book support, not the model: the functions take trained models, tensors and vocabularies and return
matplotlib axes or pandas tables; nothing in the library imports this module.
"""

from __future__ import annotations

import textwrap
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
import torch

__all__ = ["NARROW_WIDTH_INCHES", "narrow_panels", "attention_side_by_side", "fill_in_table"]

# Narrower than the page column (6.6 in): a phone shows a figure at about 360 px, so a figure drawn
# much wider than ~540 px (at 100 dpi) shrinks its text below reading size there.
NARROW_WIDTH_INCHES = 5.4


def narrow_panels(count: int, *, columns: int = 2, panel_height: float = 2.3, width: float = NARROW_WIDTH_INCHES) -> Any:
    """``count`` matplotlib axes in rows of ``columns``, in a figure ``width`` inches wide."""
    import matplotlib.pyplot as plt

    if count < 1 or columns < 1:
        raise ValueError(f"count and columns must be positive, got count={count}, columns={columns}")
    columns = min(count, columns)
    rows = -(-count // columns)
    _, grid = plt.subplots(rows, columns, figsize=(width, panel_height * rows + 0.6), squeeze=False,
                           layout="constrained")
    for ax in grid.ravel()[count:]:
        ax.remove()
    return grid.ravel()[:count]


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
