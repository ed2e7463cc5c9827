"""Training: the label-smoothed loss, learning-rate schedules, metrics and the training loop.

The loop is model-agnostic: it trains any module with ``make_masks(src, tgt_in)`` and
``forward(src, tgt_in, src_mask, tgt_mask) -> logits (B, T, V)``, fed with
:class:`transformer_lib.batching.Batch` es (teacher forcing: ``tgt_in`` is the target shifted right).
It writes its state with :mod:`transformer_lib.checkpoint` and runs in several processes with
:mod:`transformer_lib.distributed`.

Shapes:

    B  batch size    T  target length    V  target vocabulary size    N  number of positions (B * T)
"""

from __future__ import annotations

import contextlib
import inspect
import itertools
import math
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import Tensor, nn

from .checkpoint import CHECKPOINT_FORMAT_VERSION, save_checkpoint, save_kept_weights
from .device import default_device
from .distributed import get_rank, get_world_size, wait_for_all

__all__ = [
    "label_smoothed_cross_entropy",
    "smoothed_target_distribution",
    "annotated_smoothed_targets",
    "noam_rate",
    "warmup_cosine_rate",
    "NoamSchedule",
    "WarmupCosineSchedule",
    "ConstantSchedule",
    "make_optimizer",
    "make_scheduler",
    "RunningMean",
    "token_accuracy",
    "exact_match_counts",
    "autocast_context",
    "TrainConfig",
    "Trainer",
    "TrainingDiverged",
    "evaluate",
]

# --- 1. The loss -------------------------------------------------------------------------------


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
    loss's small differences).

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
    _check_target_ids(target, keep, logits.size(-1))
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
    if not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"label_smoothing must be in [0, 1], got {label_smoothing}")
    if reduction not in ("mean", "sum", "none"):
        raise ValueError(f"reduction must be 'mean', 'sum' or 'none', got {reduction!r}")


def _check_target_ids(target: Tensor, keep: Tensor, vocab_size: int) -> None:
    """Every kept target id is in ``[0, V)``; checked on CPU only (on a GPU it would stall every step)."""
    if target.device.type == "cpu" and bool(keep.any()):
        low, high = int(target[keep].min()), int(target[keep].max())
        if low < 0 or high >= vocab_size:
            bad = low if low < 0 else high
            raise ValueError(f"target id {bad} is outside the vocabulary [0, {vocab_size - 1}] (V={vocab_size})")


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
    if not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"label_smoothing must be in [0, 1], got {label_smoothing}")
    if target.dim() != 1:
        raise ValueError(f"target must be (N,), got {tuple(target.shape)}")
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
    if not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"label_smoothing must be in [0, 1], got {label_smoothing}")
    if target.dim() != 1:
        raise ValueError(f"target must be (N,), got {tuple(target.shape)}")
    if vocab_size < 3:
        raise ValueError(f"vocab_size must be at least 3 (target, pad and one more), got {vocab_size}")
    if not 0 <= pad_id < vocab_size:
        raise ValueError(f"pad_id {pad_id} is outside the vocabulary [0, {vocab_size - 1}]")
    dist = torch.full((target.size(0), vocab_size), label_smoothing / (vocab_size - 2))  # (N, V)
    dist[torch.arange(target.size(0)), target] = 1.0 - label_smoothing
    dist[:, pad_id] = 0.0
    dist[target == pad_id] = 0.0
    return dist


# --- 2. Learning-rate schedules ----------------------------------------------------------------


def _check_step(step: int, warmup_steps: int) -> None:
    if step < 1:
        raise ValueError(f"step counts optimizer updates from 1, got {step}")
    if warmup_steps < 1:
        raise ValueError(f"warmup_steps must be at least 1, got {warmup_steps}")


def noam_rate(step: int, d_model: int, warmup_steps: int = 4000, factor: float = 1.0) -> float:
    r"""The paper's schedule (section 5.3): linear warm-up, then decay with the inverse square root.

    .. math:: \mathrm{lr}(s) = \text{factor} \cdot d_\text{model}^{-0.5} \cdot \min(s^{-0.5},\; s \cdot w^{-1.5})

    The two terms are equal at :math:`s = w`, so the peak is exactly at the warm-up step, with
    value :math:`\text{factor} / \sqrt{d_\text{model}\, w}` (7.0e-4 for the base model, ``w = 4000``).

    Args:
        step: the optimizer update, counted from 1.
        d_model: model width.
        warmup_steps: :math:`w`.
        factor: a constant multiplier (1 in the paper).
    """
    _check_step(step, warmup_steps)
    return factor * d_model**-0.5 * min(step**-0.5, step * warmup_steps**-1.5)


def warmup_cosine_rate(step: int, peak_lr: float, warmup_steps: int, total_steps: int, final_lr: float = 0.0) -> float:
    """Linear warm-up to ``peak_lr`` at ``warmup_steps``, then a cosine decay to ``final_lr`` at ``total_steps``.

    The common alternative to :func:`noam_rate` (e.g. GPT-3, Llama): it reaches a chosen final
    rate at a known end instead of decaying forever. Steps past ``total_steps`` stay at ``final_lr``.
    """
    _check_step(step, warmup_steps)
    if total_steps < warmup_steps:
        raise ValueError(f"total_steps={total_steps} must be at least warmup_steps={warmup_steps}")
    if step <= warmup_steps:
        return peak_lr * step / warmup_steps
    progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
    return final_lr + 0.5 * (peak_lr - final_lr) * (1.0 + math.cos(math.pi * progress))


# Schedules as callable objects for ``LambdaLR``: unlike lambdas, their settings are plain
# attributes, which ``LambdaLR.state_dict`` saves and a checkpoint can hold. ``LambdaLR`` calls
# them with the number of updates done so far, so update number ``done + 1`` gets that rate;
# they return the rate itself, and the optimizer's base lr is set to 1.


class NoamSchedule:
    """:func:`noam_rate` for ``LambdaLR``; the peak rate is ``peak_lr`` (default: the paper's)."""

    def __init__(self, d_model: int, warmup_steps: int, peak_lr: float | None = None) -> None:
        self.d_model = d_model
        self.warmup_steps = warmup_steps
        paper_peak = noam_rate(warmup_steps, d_model, warmup_steps)
        self.factor = 1.0 if peak_lr is None else peak_lr / paper_peak

    def __call__(self, done: int) -> float:
        return noam_rate(done + 1, self.d_model, self.warmup_steps, self.factor)


class WarmupCosineSchedule:
    """:func:`warmup_cosine_rate` for ``LambdaLR``."""

    def __init__(self, peak_lr: float, warmup_steps: int, total_steps: int, final_lr: float = 0.0) -> None:
        self.peak_lr, self.warmup_steps, self.total_steps, self.final_lr = peak_lr, warmup_steps, total_steps, final_lr

    def __call__(self, done: int) -> float:
        return warmup_cosine_rate(done + 1, self.peak_lr, self.warmup_steps, self.total_steps, self.final_lr)


class ConstantSchedule:
    """Linear warm-up to ``peak_lr``, then constant."""

    def __init__(self, peak_lr: float, warmup_steps: int = 1) -> None:
        self.peak_lr, self.warmup_steps = peak_lr, warmup_steps

    def __call__(self, done: int) -> float:
        return self.peak_lr * min(1.0, (done + 1) / self.warmup_steps)


def make_optimizer(
    model: nn.Module,
    weight_decay: float = 0.0,
    betas: tuple[float, float] = (0.9, 0.98),
    eps: float = 1e-9,
) -> torch.optim.AdamW:
    """AdamW with the paper's betas and epsilon (section 5.3), base lr 1 (the schedule sets the rate).

    Weight decay, if any, applies to matrices only: biases and LayerNorm gains are left alone, as
    is usual (decaying a gain towards 0 has no regularising meaning).
    """
    if weight_decay < 0:
        raise ValueError(f"weight_decay must be non-negative, got {weight_decay}")
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]
    # fused: one kernel for the whole update (CPU since PyTorch 2.4, CUDA before); measured 10-15%
    # faster per training step than foreach on the tiny model's CPU step. foreach where fused is not
    # available (older PyTorch, or a device/dtype it does not support): still far less Python per step.
    try:
        return torch.optim.AdamW(groups, lr=1.0, betas=betas, eps=eps, fused=True)
    except (RuntimeError, ValueError, TypeError):
        return torch.optim.AdamW(groups, lr=1.0, betas=betas, eps=eps, foreach=True)


def make_scheduler(
    optimizer: torch.optim.Optimizer,
    schedule: str,
    *,
    warmup_steps: int,
    peak_lr: float | None = None,
    d_model: int | None = None,
    total_steps: int | None = None,
) -> torch.optim.lr_scheduler.LambdaLR:
    """A ``LambdaLR`` for ``"noam"``, ``"cosine"`` or ``"constant"``; call ``.step()`` after each update.

    ``noam`` needs ``d_model`` (``peak_lr`` defaults to the paper's ``1 / sqrt(d_model * warmup)``);
    ``cosine`` needs ``peak_lr`` and ``total_steps``; ``constant`` needs ``peak_lr``.
    """
    if schedule == "noam":
        if d_model is None:
            raise ValueError("the noam schedule needs d_model")
        rule: Callable[[int], float] = NoamSchedule(d_model, warmup_steps, peak_lr)
    elif schedule == "cosine":
        if peak_lr is None or total_steps is None:
            raise ValueError("the cosine schedule needs peak_lr and total_steps")
        rule = WarmupCosineSchedule(peak_lr, warmup_steps, total_steps)
    elif schedule == "constant":
        if peak_lr is None:
            raise ValueError("the constant schedule needs peak_lr")
        rule = ConstantSchedule(peak_lr, warmup_steps)
    else:
        raise ValueError(f"unknown schedule {schedule!r}; choose 'noam', 'cosine' or 'constant'")
    for group in optimizer.param_groups:
        group["lr"] = group["initial_lr"] = 1.0  # the rule returns the rate itself
    return torch.optim.lr_scheduler.LambdaLR(optimizer, rule)


# --- 3. Metrics --------------------------------------------------------------------------------


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


def token_accuracy(logits: Tensor, target: Tensor, ignore_index: int = 0) -> tuple[int, int]:
    """``(correct, total)`` next-token predictions (argmax) over non-padding positions."""
    keep = target != ignore_index  # (B, T)
    correct = (logits.argmax(dim=-1) == target) & keep  # (B, T)
    return int(correct.sum()), int(keep.sum())


def exact_match_counts(logits: Tensor, target: Tensor, ignore_index: int = 0) -> tuple[int, int]:
    """``(matches, B)``: sequences whose every non-padding position is predicted right under teacher forcing.

    This equals exact match under greedy decoding: if the argmax is right at every position given
    the true prefix, greedy decoding, which feeds its own argmax back, sees the true prefix at every
    step and so produces the target exactly (induction over positions); and if greedy decoding
    produces the target, its prefixes were the true ones, so every teacher-forced argmax was right.
    One batched forward pass therefore measures it, with no decoding loop (chapter 5 checks it).
    """
    keep = target != ignore_index  # (B, T)
    right = (logits.argmax(dim=-1) == target) | ~keep  # (B, T)
    return int(right.all(dim=-1).sum()), target.size(0)


def autocast_context(device: torch.device, amp: str = "auto") -> contextlib.AbstractContextManager:
    """bf16 autocast on a CUDA GPU that supports it (``amp="auto"`` or ``"bf16"``), else nothing.

    bf16 has float32's exponent range, so unlike fp16 it needs no loss scaling. On CPU, ``"auto"``
    means float32 (CPU bf16 is slower than float32 on many processors); ``"bf16"`` forces it.
    """
    if amp not in ("auto", "bf16", "off"):
        raise ValueError(f"amp must be 'auto', 'bf16' or 'off', got {amp!r}")
    if amp == "off":
        return contextlib.nullcontext()
    if device.type == "cuda":
        if torch.cuda.is_bf16_supported():
            return torch.autocast("cuda", dtype=torch.bfloat16)
        if amp == "bf16":
            raise ValueError(f"amp='bf16' but {torch.cuda.get_device_name(device)} does not support bfloat16")
        return contextlib.nullcontext()
    if amp == "bf16":
        return torch.autocast(device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


@torch.no_grad()
def evaluate(
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
    every process returns the metrics of the whole data set, the same numbers on each.

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
            src_mask, tgt_mask = model.make_masks(batch.src, batch.tgt_in)
            with autocast_context(device, amp):
                logits = model(batch.src, batch.tgt_in, src_mask, tgt_mask)  # (B, T, V)
            loss_sum = label_smoothed_cross_entropy(logits, batch.tgt_out, label_smoothing, pad_id, "sum")
            correct, tokens = token_accuracy(logits, batch.tgt_out, pad_id)
            loss.update(loss_sum.detach().double(), tokens)
            accuracy.update(correct, tokens)
            exact.update(*exact_match_counts(logits, batch.tgt_out, pad_id))
    finally:
        model.train(was_training)
    if all_reduce:
        for meter in (loss, accuracy, exact):
            meter.all_reduce()
    if exact.count == 0:  # summed over the processes: one process may hold no batch of a small split
        raise ValueError("evaluate got no batches")
    return {
        "loss": loss.mean,
        "ppl": math.exp(min(loss.mean, 50.0)),
        "token_accuracy": accuracy.mean,
        "exact_match": exact.mean,
        "n_sentences": int(exact.count),
    }


# --- 4. The training loop ----------------------------------------------------------------------


class TrainingDiverged(RuntimeError):
    """The loss, a gradient norm or a weight became NaN or infinite; nothing diverged was saved."""

@dataclass
class TrainConfig:
    """How to train. Stored in every checkpoint (``"train_config"``).

    Args:
        epochs: passes over the training data (``None``: until ``max_steps``).
        max_steps: stop after this many optimizer updates (``None``: after ``epochs``).
        schedule: ``"noam"`` (paper), ``"cosine"`` (warm-up + cosine) or ``"constant"``.
        lr: peak learning rate. ``None`` with ``noam``: the paper's ``1 / sqrt(d_model * warmup)``.
        warmup_steps: updates of linear warm-up; the rate peaks exactly here.
        label_smoothing: :math:`\\varepsilon` of the training loss (paper: 0.1).
        clip_norm: clip the gradients' global L2 norm to this (``None``: no clipping).
        weight_decay: AdamW decay of matrices.
        betas, adam_eps: AdamW's; the paper's (0.9, 0.98) and 1e-9.
        amp: ``"auto"`` (bf16 autocast on a CUDA GPU), ``"bf16"`` or ``"off"``.
        pad_id: the padding id of the targets (ignored by the loss).
        eval_every: evaluate every this many updates (``None``: after each epoch).
        checkpoint_every: also save every this many updates (``None``: at each evaluation).
        target_exact_match: stop once validation exact match reaches this (e.g. ``1.0``).
        log_every: record the average training loss every this many updates.
        progress: show a tqdm progress bar (``TQDM_DISABLE=1`` hides it too).
        compile: run the training forward pass through ``torch.compile`` (fewer, fused kernels on
            a GPU; the first steps are slow while it compiles). Checkpoints hold the plain
            module's weights either way.
        keep_weights: also keep the model weights of the last this many checkpoints (files
            ``weights/step_NNNNNNN.pt`` beside the checkpoint), for :func:`average_checkpoints`.
    """

    epochs: int | None = 10
    max_steps: int | None = None
    schedule: str = "noam"
    lr: float | None = None
    warmup_steps: int = 4000
    label_smoothing: float = 0.1
    clip_norm: float | None = 1.0
    weight_decay: float = 0.0
    betas: tuple[float, float] = (0.9, 0.98)
    adam_eps: float = 1e-9
    amp: str = "auto"
    pad_id: int = 0
    eval_every: int | None = None
    checkpoint_every: int | None = None
    target_exact_match: float | None = None
    log_every: int = 50
    progress: bool = True
    compile: bool = False
    keep_weights: int = 0

    def __post_init__(self) -> None:
        self.betas = tuple(self.betas)  # type: ignore[assignment]
        if self.epochs is None and self.max_steps is None:
            raise ValueError("set epochs or max_steps (or both): otherwise training never stops")
        for name in ("epochs", "max_steps", "eval_every", "checkpoint_every"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ValueError(f"{name} must be a positive integer or None, got {value!r}")
        for name in ("warmup_steps", "log_every"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if self.lr is not None and not 0 < self.lr < math.inf:
            raise ValueError(f"lr must be a positive finite number, got {self.lr}")
        if self.schedule not in ("noam", "cosine", "constant"):
            raise ValueError(f"schedule must be 'noam', 'cosine' or 'constant', got {self.schedule!r}")
        if self.schedule != "noam" and self.lr is None:
            raise ValueError(f"the {self.schedule} schedule needs lr (its peak learning rate)")
        if not 0.0 <= self.label_smoothing < 1.0:
            raise ValueError(f"label_smoothing must be in [0, 1), got {self.label_smoothing}")
        if self.clip_norm is not None and not 0 < self.clip_norm < math.inf:
            raise ValueError(f"clip_norm must be a positive finite number or None, got {self.clip_norm}")
        if not 0 <= self.weight_decay < math.inf:
            raise ValueError(f"weight_decay must be a finite number >= 0, got {self.weight_decay}")
        if self.amp not in ("auto", "bf16", "off"):
            raise ValueError(f"amp must be 'auto', 'bf16' or 'off', got {self.amp!r}")
        if self.target_exact_match is not None and not 0.0 < self.target_exact_match <= 1.0:
            raise ValueError(f"target_exact_match must be in (0, 1], got {self.target_exact_match}")
        if isinstance(self.keep_weights, bool) or not isinstance(self.keep_weights, int) or self.keep_weights < 0:
            raise ValueError(f"keep_weights must be a non-negative integer, got {self.keep_weights!r}")

    def to_dict(self) -> dict[str, Any]:
        values = asdict(self)
        values["betas"] = list(self.betas)
        return values

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> TrainConfig:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in values.items() if k in known})


def _training_module(model: nn.Module, device: torch.device, world_size: int, compile: bool) -> nn.Module:
    """``model``, wrapped in ``DistributedDataParallel`` with several processes, and compiled if asked."""
    module = model
    if world_size > 1:
        from torch.nn.parallel import DistributedDataParallel

        # Our buffers (positional tables) are constants, the same on every process; by default
        # DDP would send process 0's copy before every forward pass. (The option was renamed
        # in PyTorch 2.13.) Creating the wrapper copies process 0's parameters to every process.
        renamed = "forward_sync_buffers" in inspect.signature(DistributedDataParallel).parameters
        no_buffer_sync = {"forward_sync_buffers": False} if renamed else {"broadcast_buffers": False}
        module = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None, **no_buffer_sync)
    return torch.compile(module) if compile else module


class Trainer:
    """Trains a sequence-to-sequence model with teacher forcing, and checkpoints it.

    One update: masks from the batch, forward (bf16 autocast on GPU), label-smoothed loss averaged
    over the batch's target tokens, backward, gradient clipping, AdamW step, schedule step.

    Everything that decides the next update is checkpointed: model, optimizer and schedule state,
    the position in the data (epoch and batch), the random number generators and the running
    sums of the loss. So a run resumed from a checkpoint (:meth:`load_state_dict`) continues
    exactly where it stopped: on CPU it produces the same losses, bit for bit, as a run that was
    never interrupted. (On a GPU some kernels, e.g. the embedding's backward, add in a varying
    order, so a resumed run matches to rounding, not bit for bit.)

    **Several processes.** Inside a process group (see :func:`setup_distributed`) the model is
    wrapped in ``DistributedDataParallel``, which averages the gradients over the processes during
    the backward pass. Each process gets its slice of every batch (``make_loader(...,
    num_replicas=world_size, rank=rank)``, for training and validation data alike), and divides its
    summed loss by the number of target tokens of the *whole* batch (summed over the processes,
    one small all-reduce per update) times ``1 / world_size``: the averaged gradient is then
    exactly the gradient of the whole batch's mean loss, the same update one process would make,
    up to the order of floating-point additions. Validation counts are summed over the processes,
    so every process sees the same metrics and takes the same decisions (stop or go on). Every
    process must call :meth:`save` (the :meth:`fit` loop does): they send their random states to
    process 0, the only one that writes. Each process has its own dropout random stream.

    Args:
        model: the model (moved to ``device``).
        train_loader: iterable of :class:`~transformer_lib.batching.Batch`; if it has a
            ``batch_sampler`` with ``set_epoch`` (as :func:`~transformer_lib.batching.make_loader`'s
            does), it is called at each epoch. Its iteration must not use the global random state.
        config: a :class:`TrainConfig`.
        val_loader: batches for :func:`evaluate` (``None``: no validation).
        device: where to train (default: CUDA when available, else CPU).
        checkpoint_path: where :meth:`save` writes (``None``: never saves).
        metadata: what the checkpoint holds besides the training state: ``model_config``,
            ``src_vocab``, ``tgt_vocab``, ``task``, ``data`` (see :data:`CHECKPOINT_KEYS`).
        on_log: called with each training record (e.g. to draw a live loss curve).
        on_eval: called with each validation record.
        val_metrics: called with the (unwrapped) model at each validation; the numbers it returns
            join the validation record (e.g. ``{"bleu": ...}`` from decoding the validation set).
            With several processes it is called on each, and must return the same numbers on each.

    Example:
        >>> trainer = Trainer(model, loader, TrainConfig(epochs=3), val_loader=val)   # doctest: +SKIP
        >>> history = trainer.fit()                                                  # doctest: +SKIP
    """

    def __init__(
        self,
        model: nn.Module,
        train_loader: Iterable[Any],
        config: TrainConfig,
        *,
        val_loader: Iterable[Any] | None = None,
        device: torch.device | str | None = None,
        checkpoint_path: str | Path | None = None,
        metadata: Mapping[str, Any] | None = None,
        on_log: Callable[[dict[str, float]], None] | None = None,
        on_eval: Callable[[dict[str, float]], None] | None = None,
        val_metrics: Callable[[nn.Module], Mapping[str, float]] | None = None,
    ) -> None:
        self.config = config
        self.device = torch.device(device) if device is not None else default_device()
        self.model = model.to(self.device)
        self.train_loader = train_loader
        self.val_loader = val_loader
        self.checkpoint_path = Path(checkpoint_path) if checkpoint_path is not None else None
        self.metadata = dict(metadata or {})
        self.on_log = on_log
        self.on_eval = on_eval
        self.val_metrics = val_metrics
        self.rank, self.world_size = get_rank(), get_world_size()
        # What the training step calls: the model itself, or wrappers that call it. Checkpoints and
        # evaluation always use self.model, so its state_dict keys never gain a "module." (DDP) or
        # "_orig_mod." (torch.compile) prefix.
        self.train_module = _training_module(self.model, self.device, self.world_size, config.compile)
        self.steps_per_epoch = len(train_loader)  # type: ignore[arg-type]
        if self.steps_per_epoch == 0:
            raise ValueError("train_loader yields no batches")
        by_epochs = config.epochs * self.steps_per_epoch if config.epochs is not None else None
        self.total_steps: int = min(s for s in (by_epochs, config.max_steps) if s is not None)
        d_model = getattr(getattr(model, "config", None), "d_model", None)
        if config.schedule == "noam" and config.lr is None and d_model is None:
            raise ValueError("the noam schedule without lr needs model.config.d_model; pass TrainConfig(lr=...)")
        self.optimizer = make_optimizer(model, config.weight_decay, config.betas, config.adam_eps)
        self.scheduler = make_scheduler(
            self.optimizer, config.schedule, warmup_steps=config.warmup_steps, peak_lr=config.lr,
            d_model=d_model, total_steps=max(self.total_steps, config.warmup_steps),
        )
        self.step = 0  # optimizer updates done
        self.epoch = 0  # epochs completed
        self.batch_in_epoch = 0  # batches of the current epoch done
        self.elapsed_s = 0.0  # training time so far, over all sessions
        self.history: dict[str, list[dict[str, float]]] = {"train": [], "val": [], "epochs": []}
        self.stopped_because = ""
        self._saved_at: tuple[int, int, int] | None = None
        # The training loss per target token (over all processes) of the current logging window
        # and of the current epoch: no GPU sync per step, and saved exactly in checkpoints.
        self._window_loss = RunningMean(self.device)
        self._epoch_loss = RunningMean(self.device)
        self._window_start = time.perf_counter()
        self._all_finite = torch.ones((), dtype=torch.bool, device=self.device)

    @property
    def is_main(self) -> bool:
        """Whether this is process 0 (always, without a process group): the one that writes files."""
        return self.rank == 0

    # -- one update -----------------------------------------------------------------------------

    def train_step(self, batch: Any) -> Tensor:
        """One optimizer update on ``batch``; returns the summed (not averaged) loss, detached.

        With several processes, ``batch`` is this process's slice of the batch, and the returned
        loss is summed over all the processes' slices.
        """
        model, config = self.model, self.config
        self.train_module.train()
        batch = batch.to(self.device, non_blocking=True)
        src_mask, tgt_mask = model.make_masks(batch.src, batch.tgt_in)
        with autocast_context(self.device, config.amp):
            logits = self.train_module(batch.src, batch.tgt_in, src_mask, tgt_mask)  # (B, T, V)
        loss_sum = label_smoothed_cross_entropy(logits, batch.tgt_out, config.label_smoothing, config.pad_id, "sum")
        self.optimizer.zero_grad(set_to_none=True)
        if self.world_size == 1:
            batch_loss, batch_tokens = loss_sum.detach(), batch.n_tokens
            (loss_sum / max(batch.n_tokens, 1)).backward()
        else:
            # The loss and token count of the whole batch: one all-reduce of two numbers.
            totals = torch.stack([loss_sum.detach().double(), loss_sum.new_full((), batch.n_tokens, dtype=torch.float64)])
            dist.all_reduce(totals)
            batch_loss, batch_tokens = totals[0], totals[1]
            # DDP averages the processes' gradients (divides their sum by world_size), so scaling
            # by world_size / all tokens makes the result the gradient of the whole batch's mean.
            (loss_sum * (self.world_size / batch_tokens.clamp_min(1.0)).to(loss_sum.dtype)).backward()
        finite = torch.isfinite(batch_loss)
        if config.clip_norm is not None:
            norm = nn.utils.clip_grad_norm_(model.parameters(), config.clip_norm, foreach=True)
            finite = finite & torch.isfinite(norm)
        self._all_finite &= finite  # checked (one sync) before anything is logged, validated or saved
        self.optimizer.step()
        self.scheduler.step()
        self.step += 1
        self._window_loss.update(batch_loss, batch_tokens)
        self._epoch_loss.update(batch_loss, batch_tokens)
        return batch_loss

    # -- the loop -------------------------------------------------------------------------------

    def fit(self) -> dict[str, list[dict[str, float]]]:
        """Train until ``epochs``, ``max_steps`` or ``target_exact_match``; returns :attr:`history`.

        Called on a trainer restored with :meth:`load_state_dict`, it continues from there.
        """
        from tqdm import tqdm  # tqdm reads TQDM_DISABLE=1 (CI) for its default

        config = self.config
        bar_options = {} if config.progress and self.is_main else {"disable": True}
        bar = tqdm(total=self.total_steps, initial=self.step, unit="step", dynamic_ncols=True, **bar_options)
        self._window_start = time.perf_counter()
        try:
            while not self._should_stop():
                sampler = getattr(self.train_loader, "batch_sampler", None)
                if hasattr(sampler, "set_epoch"):
                    sampler.set_epoch(self.epoch)
                # Resuming mid-epoch: skip the batches this epoch already trained on.
                batches = itertools.islice(iter(self.train_loader), self.batch_in_epoch, None)
                for batch in batches:
                    self.train_step(batch)
                    self.batch_in_epoch += 1
                    bar.update(1)
                    if self.step % config.log_every == 0:
                        record = self._log()
                        bar.set_postfix(loss=f"{record['loss']:.3f}", lr=f"{record['lr']:.2e}")
                    if config.eval_every is not None and self.step % config.eval_every == 0:
                        self._validate()
                    if (config.checkpoint_every is not None and self.step % config.checkpoint_every == 0) or (
                        config.checkpoint_every is None and config.eval_every is not None and self.step % config.eval_every == 0
                    ):
                        self.save()
                    # At an epoch's last batch, fall through to the epoch's end (validation, checkpoint).
                    if self._should_stop() and self.batch_in_epoch < self.steps_per_epoch:
                        break
                else:  # the epoch ran to its end
                    self._end_epoch()
                    if config.eval_every is None:
                        self._validate()
                    if config.checkpoint_every is None and config.eval_every is None:
                        self.save()
            if self._window_loss.updates:  # the last, partial logging window
                self._log()
            if self._saved_at != (self.step, len(self.history["train"]), len(self.history["val"])):
                self.save()
        finally:
            bar.close()
        return self.history

    def _check_finite(self) -> None:
        """Raise :class:`TrainingDiverged` if a loss, a gradient norm or a weight is NaN or infinite.

        Called before every log record, validation and save, so a diverged model never reaches
        the history or the checkpoint file: the last checkpoint keeps the last good weights.
        """
        finite = [self._all_finite, *(torch.isfinite(p).all() for p in self.model.parameters())]
        if bool(torch.stack(finite).all()):
            return
        saved = f"step {self._saved_at[0]}" if self._saved_at is not None else "none was saved in this session"
        where = f"; {self.checkpoint_path} keeps the last good weights ({saved})" if self.checkpoint_path else ""
        raise TrainingDiverged(
            f"training diverged by step {self.step}: the loss, the gradient norm or the weights became NaN or infinite "
            f"(peak lr={self.config.lr}, clip_norm={self.config.clip_norm}){where}. Lower the learning rate, "
            "or clip the gradients, and train again"
        )

    def _should_stop(self) -> bool:
        if self.step >= self.total_steps:
            self.stopped_because = self.stopped_because or f"reached {self.total_steps} steps"
            return True
        target = self.config.target_exact_match
        if target is not None and self.history["val"] and self.history["val"][-1]["exact_match"] >= target:
            self.stopped_because = f"validation exact match reached {target:.0%}"
            return True
        return False

    def _elapsed_now(self) -> float:
        """Training time so far: earlier sessions, plus this one up to now."""
        return self.elapsed_s + (time.perf_counter() - self._window_start)

    def _log(self) -> dict[str, float]:
        self._check_finite()
        now = time.perf_counter()
        window_s = now - self._window_start
        self.elapsed_s += window_s
        tokens = float(self._window_loss.count)
        record = {
            "step": self.step,
            "epoch": self.epoch + self.batch_in_epoch / self.steps_per_epoch,
            "loss": self._window_loss.mean,
            "lr": self.scheduler.lr_lambdas[0](self.step - 1),  # the rate of the last update
            "tokens_per_s": tokens / window_s if window_s > 0 else float("nan"),
            "elapsed_s": self.elapsed_s,
        }
        self._window_loss.reset()
        self.history["train"].append(record)
        if self.on_log is not None:
            self.on_log(record)
        self._window_start = time.perf_counter()
        return record

    def _end_epoch(self) -> None:
        """Count the epoch as done, and record its average training loss."""
        self.epoch += 1
        self.batch_in_epoch = 0
        self.history["epochs"].append({
            "epoch": self.epoch,
            "step": self.step,
            "train_loss": self._epoch_loss.mean,
            "train_tokens": int(self._epoch_loss.count),
            "elapsed_s": self._elapsed_now(),
        })
        self._epoch_loss.reset()

    def _validate(self) -> None:
        if self.val_loader is None:
            return
        self._check_finite()
        elapsed = self._elapsed_now()  # the time it took to train the model being evaluated
        metrics = evaluate(
            self.model, self.val_loader, device=self.device, pad_id=self.config.pad_id, amp=self.config.amp,
            all_reduce=self.world_size > 1,
        )
        if self.val_metrics is not None:
            metrics.update(self.val_metrics(self.model))
        record = {"step": self.step, "epoch": self.epoch + self.batch_in_epoch / self.steps_per_epoch, "elapsed_s": elapsed, **metrics}
        self.history["val"].append(record)
        if self.on_eval is not None:
            self.on_eval(record)

    # -- state and checkpoints ------------------------------------------------------------------

    def _rng_state(self) -> dict[str, Tensor]:
        rng = {"torch": torch.get_rng_state()}
        if self.device.type == "cuda":
            # Only this process's GPU: get_rng_state_all() would create a CUDA context on every
            # GPU of the machine in every process.
            rng["cuda"] = torch.cuda.get_rng_state(self.device)
        return rng

    def state_dict(self) -> dict[str, Any]:
        """The training state (everything but :attr:`metadata`), plain values and tensors only.

        With several processes every process must call it (it gathers their random states).
        """
        rng: dict[str, Any] = self._rng_state()
        if self.world_size > 1:
            per_process: list[Any] = [None] * self.world_size
            dist.all_gather_object(per_process, {k: v.cpu() for k, v in rng.items()})
            rng = {**per_process[0], "processes": per_process}
        return {
            "model_state": self.model.state_dict(),
            "optimizer_state": self.optimizer.state_dict(),
            "scheduler_state": self.scheduler.state_dict(),
            "train_config": self.config.to_dict(),
            "step": self.step,
            "epoch": self.epoch,
            "batch_in_epoch": self.batch_in_epoch,
            "elapsed_s": self.elapsed_s,
            "rng_state": rng,
            "window": {
                "loss": self._window_loss.total.cpu().clone(),
                "tokens": int(self._window_loss.count),
                "steps": self._window_loss.updates,
                "epoch_loss": self._epoch_loss.total.cpu().clone(),
                "epoch_tokens": int(self._epoch_loss.count),
            },
            "metrics": {name: [dict(r) for r in records] for name, records in self.history.items()},
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore a state from :meth:`state_dict` or a checkpoint, to continue training exactly."""
        self.model.load_state_dict(state["model_state"])
        self.optimizer.load_state_dict(state["optimizer_state"])
        # The schedule's position comes from the checkpoint, its settings from this trainer's
        # config: resuming with the same settings continues exactly, and a run given more steps
        # stretches its (cosine) schedule to the new end instead of idling at its old final rate.
        scheduler_state = {**state["scheduler_state"], "lr_lambdas": [None] * len(self.scheduler.lr_lambdas)}
        self.scheduler.load_state_dict(scheduler_state)
        for group, rule, base_lr in zip(self.optimizer.param_groups, self.scheduler.lr_lambdas, self.scheduler.base_lrs):
            group["lr"] = base_lr * rule(self.scheduler.last_epoch)
        self.step, self.epoch, self.batch_in_epoch = int(state["step"]), int(state["epoch"]), int(state["batch_in_epoch"])
        self.elapsed_s = float(state.get("elapsed_s", 0.0))
        metrics = state["metrics"]
        self.history = {name: [dict(r) for r in metrics.get(name, [])] for name in ("train", "val", "epochs")}
        window = state["window"]
        self._window_loss.reset()
        self._window_loss.update(torch.as_tensor(window["loss"]).to(self.device, torch.float64), float(window["tokens"]))
        self._window_loss.updates = int(window["steps"])
        self._epoch_loss.reset()
        self._epoch_loss.update(torch.as_tensor(window.get("epoch_loss", 0.0)).to(self.device, torch.float64), float(window.get("epoch_tokens", 0)))
        self._restore_rng(state["rng_state"])
        self.stopped_because = ""

    def _restore_rng(self, rng: Mapping[str, Any]) -> None:
        processes = rng.get("processes")
        own = processes[self.rank] if processes is not None and len(processes) == self.world_size else rng
        torch.set_rng_state(own["torch"].cpu())
        cuda = own.get("cuda")
        if cuda is not None and self.device.type == "cuda":
            if isinstance(cuda, (list, tuple)):  # older checkpoints: every GPU's state
                cuda = cuda[self.device.index or 0] if len(cuda) > (self.device.index or 0) else None
            if cuda is not None:
                torch.cuda.set_rng_state(cuda.cpu(), self.device)
        if own is rng and self.rank > 0:
            # Saved by a different number of processes: give this one its own dropout stream
            # (deterministic, but not the stream it would have had).
            torch.manual_seed(int(torch.randint(2**62, ())) + self.rank)

    def checkpoint(self) -> dict[str, Any]:
        """The full checkpoint: format version, :attr:`metadata` and :meth:`state_dict`."""
        return {"format_version": CHECKPOINT_FORMAT_VERSION, **self.metadata, **self.state_dict()}

    def save(self, path: str | Path | None = None) -> Path | None:
        """Write :meth:`checkpoint` atomically to ``path`` (default :attr:`checkpoint_path`).

        With ``config.keep_weights``, the model weights also go to ``weights/step_NNNNNNN.pt``
        beside it, and only the newest ``keep_weights`` such files are kept. With several
        processes, every process calls this, process 0 writes, and all return once it has.
        """
        path = Path(path) if path is not None else self.checkpoint_path
        if path is None:
            return None
        self._check_finite()  # never replace the last good checkpoint with diverged weights
        checkpoint = self.checkpoint()
        if self.is_main:
            save_checkpoint(path, checkpoint)
            if self.config.keep_weights:
                save_kept_weights(path.parent / "weights", self.step, checkpoint["model_state"], self.config.keep_weights)
        wait_for_all(self.device)  # no process reads the files before they are complete
        self._saved_at = (self.step, len(self.history["train"]), len(self.history["val"]))
        return path
