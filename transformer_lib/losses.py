"""Losses: label-smoothed cross-entropy (and the Annotated Transformer's convention, for comparison),
and the loss of one translation batch, as the trainer calls it (chapter 5).

Shapes::

    B  batch size    T  target length    V  target vocabulary size    N  number of positions (B * T)
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = [
    "label_smoothed_cross_entropy",
    "smoothed_target_distribution",
    "annotated_smoothed_targets",
    "TranslationLoss",
]

_REDUCTIONS = ("mean", "sum", "none")


def label_smoothed_cross_entropy(
    logits: Tensor,
    target: Tensor,
    label_smoothing: float = 0.0,
    ignore_index: int = 0,
    reduction: str = "mean",
) -> Tensor:
    r"""Cross-entropy against a smoothed target, skipping padding positions.

    With smoothing :math:`\varepsilon` the target distribution puts :math:`1-\varepsilon` on the
    correct token and spreads :math:`\varepsilon` uniformly over all ``V`` tokens, the pad included,
    as PyTorch does (the paper, section 5.4, gives only :math:`\varepsilon = 0.1`), so per position

    .. math:: \ell = (1-\varepsilon)\,(-\log p_y) + \varepsilon \cdot \tfrac{1}{V}\textstyle\sum_v (-\log p_v).

    This is exactly ``F.cross_entropy(logits, target, label_smoothing=eps, ignore_index=pad)``,
    written out so the chapter can show it. One difference, on purpose: a batch with no
    non-padding target gives ``0``, not ``nan`` (``0 / 0``), so one empty batch cannot poison training.

    The computation runs in at least float32 (bf16 logits under autocast would otherwise lose the
    loss's small differences). Target ids are not range-checked here (that would stall a GPU every
    step): the data pipeline checks them when it makes the batches.

    Args:
        logits: ``(B, T, V)`` or ``(N, V)`` unnormalised scores.
        target: ``(B, T)`` or ``(N,)`` token ids in ``[0, V)``.
        label_smoothing: :math:`\varepsilon` in ``[0, 1]``.
        ignore_index: target id that contributes nothing (the padding id).
        reduction: ``"mean"`` (over non-ignored positions), ``"sum"``, or ``"none"`` (same shape as
            ``target``, zeros at ignored positions).

    Example:
        >>> logits, target = torch.randn(2, 3, 7), torch.tensor([[4, 5, 0], [6, 0, 0]])
        >>> ours = label_smoothed_cross_entropy(logits, target, 0.1, ignore_index=0)
        >>> ref = F.cross_entropy(logits.view(-1, 7), target.view(-1), label_smoothing=0.1, ignore_index=0)
        >>> torch.allclose(ours, ref)
        True
    """
    _check_loss_inputs(logits, target, label_smoothing, reduction)
    keep = target != ignore_index  # (B, T)
    # at least float32 (bf16/fp16 logits from autocast are upcast; float64 stays float64)
    log_probs = F.log_softmax(logits.to(torch.promote_types(logits.dtype, torch.float32)), dim=-1)  # (B, T, V)
    safe_target = target.masked_fill(~keep, 0)  # any valid id; these positions are zeroed below
    nll = -log_probs.gather(-1, safe_target.unsqueeze(-1)).squeeze(-1)  # (B, T)
    loss = nll
    if label_smoothing > 0.0:
        uniform = -log_probs.mean(dim=-1)  # (B, T): cross-entropy against the uniform distribution
        loss = (1.0 - label_smoothing) * nll + label_smoothing * uniform  # (B, T)
    loss = loss.masked_fill(~keep, 0.0)
    if reduction == "none":
        return loss
    total = loss.sum()
    if reduction == "sum":
        return total
    return total / keep.sum().clamp_min(1)


def _check_loss_inputs(logits: Tensor, target: Tensor, label_smoothing: float, reduction: str) -> None:
    """Types and shapes only: nothing that reads the tensors' values."""
    if not isinstance(logits, Tensor) or not isinstance(target, Tensor):
        raise TypeError(f"logits and target must be tensors, got {type(logits).__name__} and {type(target).__name__}")
    if not logits.is_floating_point():
        raise TypeError(f"logits must be floating point, got dtype {logits.dtype}")
    if target.is_floating_point() or target.dtype == torch.bool:
        raise TypeError(f"target must hold integer token ids (torch.long), got dtype {target.dtype}")
    if logits.dim() != target.dim() + 1 or logits.shape[:-1] != target.shape:
        raise ValueError(
            f"logits {tuple(logits.shape)} must be target {tuple(target.shape)} plus a vocabulary dimension, "
            "e.g. logits (B, T, V) with target (B, T)"
        )
    _check_smoothing(label_smoothing)
    if reduction not in _REDUCTIONS:
        raise ValueError(f"reduction must be one of {_REDUCTIONS}, got {reduction!r}")


def _check_smoothing(label_smoothing: float) -> None:
    if not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"label_smoothing must be in [0, 1], got {label_smoothing}")


def _check_flat_targets(target: Tensor, label_smoothing: float) -> None:
    _check_smoothing(label_smoothing)
    if target.dim() != 1:
        raise ValueError(f"target must be (N,), got {tuple(target.shape)}")


def smoothed_target_distribution(target: Tensor, vocab_size: int, label_smoothing: float) -> Tensor:
    """The distribution :func:`label_smoothed_cross_entropy` compares against, one row per target.

    Args:
        target: ``(N,)`` token ids.
        vocab_size: ``V``.
        label_smoothing: :math:`\\varepsilon`.

    Returns:
        ``(N, V)`` rows summing to 1: :math:`1 - \\varepsilon + \\varepsilon / V` on the target id and
        :math:`\\varepsilon / V` everywhere else.
    """
    _check_flat_targets(target, label_smoothing)
    dist = torch.full((target.size(0), vocab_size), label_smoothing / vocab_size)  # (N, V)
    dist[torch.arange(target.size(0)), target] += 1.0 - label_smoothing
    return dist


def annotated_smoothed_targets(target: Tensor, vocab_size: int, label_smoothing: float, pad_id: int = 0) -> Tensor:
    r"""The Annotated Transformer's smoothed targets: the other convention, for comparison.

    The correct token gets exactly :math:`1-\varepsilon`; the mass :math:`\varepsilon` is spread over
    the :math:`V-2` tokens that are neither the correct one nor the pad; the pad's column is zero, and
    so is every row whose target is the pad (that position is not trained). The Annotated
    Transformer compares these rows with the model's log-probabilities by KL divergence
    (``nn.KLDivLoss(reduction="sum")``). The library's training uses
    :func:`smoothed_target_distribution`'s convention instead (PyTorch's).

    Args:
        target: ``(N,)`` token ids.
        vocab_size: ``V``, at least 3 (the target, the pad and one more).
        label_smoothing: :math:`\varepsilon`.
        pad_id: the padding id.

    Returns:
        ``(N, V)``: rows summing to 1, all-zero rows where ``target == pad_id``.
    """
    _check_flat_targets(target, label_smoothing)
    if vocab_size < 3:
        raise ValueError(f"vocab_size must be at least 3 (target, pad and one more), got {vocab_size}")
    if not 0 <= pad_id < vocab_size:
        raise ValueError(f"pad_id {pad_id} is outside the vocabulary [0, {vocab_size - 1}]")
    dist = torch.full((target.size(0), vocab_size), label_smoothing / (vocab_size - 2))  # (N, V)
    dist[torch.arange(target.size(0)), target] = 1.0 - label_smoothing
    dist[:, pad_id] = 0.0
    dist[target == pad_id] = 0.0
    return dist


class TranslationLoss:
    """The loss of one teacher-forced translation batch, as :class:`~transformer_lib.trainer.Trainer`
    calls it: ``loss(model, batch) -> (summed loss, number of target tokens)``.

    ``model(batch.src, batch.tgt_in)`` gives the logits (the model builds its padding and causal
    masks itself); the loss is :func:`label_smoothed_cross_entropy` summed over the non-padding
    targets. The trainer divides by the token count (over every process, when there are several).

    Args:
        label_smoothing: :math:`\\varepsilon` (paper: 0.1).
        pad_id: the targets' padding id, which is not scored.
    """

    def __init__(self, label_smoothing: float = 0.0, pad_id: int = 0) -> None:
        _check_smoothing(label_smoothing)
        self.label_smoothing, self.pad_id = label_smoothing, pad_id

    def __call__(self, model: nn.Module, batch: Any) -> tuple[Tensor, int]:
        logits = model(batch.src, batch.tgt_in)  # (B, T, V)
        loss = label_smoothed_cross_entropy(logits, batch.tgt_out, self.label_smoothing, self.pad_id, "sum")
        return loss, batch.n_tokens
