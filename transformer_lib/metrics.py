"""Measuring a model while it trains (chapter 5): running means, token accuracy, exact match, and the
teacher-forced evaluation of a translation model over a data set.

Shapes::

    B  batch size    T  target length    V  target vocabulary size
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor, nn

from .device import autocast_context
from .distributed import get_world_size
from .losses import label_smoothed_cross_entropy

__all__ = ["RunningMean", "token_accuracy", "exact_match_counts", "evaluate_teacher_forced"]


class RunningMean:
    """A mean kept as a running sum and count: ``update(total, count)``, then :attr:`mean`, then ``reset()``.

    ``update`` adds ``total``, the sum of ``count`` values (a batch's summed loss and its number of
    target tokens, say). The sum and count are float64 tensors on ``device``: adding a tensor that
    lives on a GPU never waits for the GPU, and float64 keeps a long run's sum exact enough to be
    saved in a checkpoint and resumed bit for bit. :attr:`updates` counts the calls.

    Example:
        >>> meter = RunningMean()
        >>> meter.update(6.0, 3); meter.update(4.0, 1)
        >>> meter.mean, int(meter.count), meter.updates
        (2.5, 4, 2)
    """

    def __init__(self, device: torch.device | str | None = None) -> None:
        self.total = torch.zeros((), dtype=torch.float64, device=device)
        self.count = torch.zeros((), dtype=torch.float64, device=device)
        self.updates = 0

    def update(self, total: Tensor | float, count: Tensor | float = 1) -> None:
        self.total += total
        self.count += count
        self.updates += 1

    @property
    def mean(self) -> float:
        """``total / count`` (0 before any update; a sync with the GPU)."""
        return float(self.total) / max(float(self.count), 1.0)

    def reset(self) -> None:
        self.total.zero_()
        self.count.zero_()
        self.updates = 0

    def all_reduce(self) -> None:
        """Sum the totals and counts of every process (in a process group), so each holds the overall mean."""
        if get_world_size() > 1:
            both = torch.stack([self.total, self.count])
            dist.all_reduce(both)
            self.total, self.count = both[0].clone(), both[1].clone()


def _correct_tokens(logits: Tensor, target: Tensor, ignore_index: int) -> tuple[Tensor, Tensor]:
    """``(correct, scored)``: argmax predictions right at non-padding positions, both ``(B, T)``."""
    scored = target != ignore_index  # (B, T)
    return (logits.argmax(dim=-1) == target) & scored, scored


def token_accuracy(logits: Tensor, target: Tensor, ignore_index: int = 0) -> tuple[int, int]:
    """``(correct, total)`` next-token predictions (argmax) over non-padding positions."""
    correct, scored = _correct_tokens(logits, target, ignore_index)
    return int(correct.sum()), int(scored.sum())


def _exact_rows(logits: Tensor, target: Tensor, ignore_index: int) -> Tensor:
    """``(B,)``: rows whose every non-padding position is predicted right."""
    correct, scored = _correct_tokens(logits, target, ignore_index)
    return (correct | ~scored).all(dim=-1)


def exact_match_counts(logits: Tensor, target: Tensor, ignore_index: int = 0) -> tuple[int, int]:
    """``(matches, B)``: sequences whose every non-padding position is predicted right under teacher forcing.

    This equals exact match under greedy decoding: if the argmax is right at every position given
    the true prefix, greedy decoding, which feeds its own argmax back, sees the true prefix at every
    step and so produces the target exactly (induction over positions); and if greedy decoding
    produces the target, its prefixes were the true ones, so every teacher-forced argmax was right.
    One batched forward pass therefore measures it, with no decoding loop (chapter 5 checks it).
    """
    return int(_exact_rows(logits, target, ignore_index).sum()), target.size(0)


@torch.no_grad()
def evaluate_teacher_forced(
    model: nn.Module,
    batches: Iterable[Any],
    *,
    device: torch.device | str | None = None,
    pad_id: int = 0,
    label_smoothing: float = 0.0,
    amp: str = "auto",
    all_reduce: bool = False,
) -> dict[str, float]:
    """Teacher-forced evaluation over ``batches`` (:class:`~transformer_lib.batching.Batch` es).

    With ``all_reduce=True`` (several processes, each given its own slice of the data, e.g. by
    ``make_loader(..., num_replicas, rank)``) the counts are summed over all processes first, so
    every process returns the metrics of the whole data set, the same numbers on each. The counts
    stay on the device until the end: one synchronisation, not one per batch.

    Returns:
        ``loss`` (cross-entropy per target token, with ``label_smoothing``; default none, so
        ``ppl = exp(loss)`` is the perplexity), ``token_accuracy``, ``exact_match`` (see
        :func:`exact_match_counts`), and ``n_sentences``.
    """
    device = torch.device(device) if device is not None else next(model.parameters()).device
    was_training = model.training
    model.eval()
    loss, accuracy, exact = RunningMean(device), RunningMean(device), RunningMean(device)
    try:
        for batch in batches:
            batch = batch.to(device, non_blocking=True)
            with autocast_context(device, amp):
                logits = model(batch.src, batch.tgt_in)  # (B, T, V)
            correct, scored = _correct_tokens(logits, batch.tgt_out, pad_id)
            loss.update(label_smoothed_cross_entropy(logits, batch.tgt_out, label_smoothing, pad_id, "sum").double(),
                        batch.n_tokens)
            accuracy.update(correct.sum(), scored.sum())
            exact.update(_exact_rows(logits, batch.tgt_out, pad_id).sum(), len(batch))
    finally:
        model.train(was_training)
    if all_reduce:
        for meter in (loss, accuracy, exact):
            meter.all_reduce()
    if exact.count == 0:  # summed over the processes: one process may hold no batch of a small split
        raise ValueError("evaluate_teacher_forced got no batches")
    return {
        "loss": loss.mean,
        "ppl": math.exp(min(loss.mean, 50.0)),
        "token_accuracy": accuracy.mean,
        "exact_match": exact.mean,
        "n_sentences": int(exact.count),
    }
