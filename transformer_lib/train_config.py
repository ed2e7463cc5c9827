"""How to train (chapter 5): :class:`TrainConfig`, every setting of the :class:`~transformer_lib.trainer.Trainer`,
checked when created and stored in every checkpoint.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any

from .device import AMP_MODES
from .schedules import SCHEDULES, required_settings
from .validation import check_choice, check_int, check_number

__all__ = ["TrainConfig"]


@dataclass
class TrainConfig:
    """How to train. Stored in every checkpoint (``"train_config"``).

    Args:
        epochs: passes over the training data (``None``: until ``max_steps``).
        max_steps: stop after this many optimizer updates (``None``: after ``epochs``).
        schedule: a name in :data:`~transformer_lib.schedules.SCHEDULES`: ``"noam"`` (paper),
            ``"cosine"`` (warm-up + cosine) or ``"constant"``.
        lr: peak learning rate. ``None`` with ``noam``: the paper's ``1 / sqrt(d_model * warmup)``.
        warmup_steps: updates of linear warm-up; the rate peaks exactly here.
        label_smoothing: :math:`\\varepsilon` of the training loss (paper: 0.1).
        clip_norm: clip the gradients' global L2 norm to this (``None``: no clipping).
        weight_decay: AdamW decay of matrices.
        betas, adam_eps: AdamW's; the paper's (0.9, 0.98) and 1e-9.
        amp: ``"auto"`` (bf16 autocast on a GPU with native bf16, fp16 with a gradient scaler on
            older GPUs, float32 on CPU), ``"bf16"``, ``"fp16"`` or ``"off"``.
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
        batches_per_update: gradient accumulation: this many batches of the loader (micro-batches)
            make one optimizer update, its loss averaged over all their target tokens, so a batch
            too large for the memory (the paper's 25,000 tokens) is trained on in parts.
            ``max_steps``, ``warmup_steps`` and the other step counts count updates.
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
    batches_per_update: int = 1

    def __post_init__(self) -> None:
        self.betas = tuple(self.betas)  # type: ignore[assignment]
        if self.epochs is None and self.max_steps is None:
            raise ValueError("set epochs or max_steps (or both): otherwise training never stops")
        for name in ("epochs", "max_steps", "eval_every", "checkpoint_every"):
            check_int(name, getattr(self, name), optional=True)
        for name in ("warmup_steps", "log_every", "batches_per_update"):
            check_int(name, getattr(self, name))
        check_int("keep_weights", self.keep_weights, minimum=0)
        check_number("lr", self.lr, 0, low_open=True, optional=True)
        check_choice("schedule", self.schedule, SCHEDULES)
        if "peak_lr" in required_settings(self.schedule) and self.lr is None:
            raise ValueError(f"the {self.schedule} schedule needs lr (its peak learning rate), got lr=None")
        check_number("label_smoothing", self.label_smoothing, 0, 1)
        check_number("clip_norm", self.clip_norm, 0, low_open=True, optional=True)
        check_number("weight_decay", self.weight_decay, 0)
        check_choice("amp", self.amp, AMP_MODES)
        check_number("target_exact_match", self.target_exact_match, 0, 1, low_open=True, high_open=False, optional=True)

    def to_dict(self) -> dict[str, Any]:
        values = asdict(self)
        values["betas"] = list(self.betas)
        return values

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> TrainConfig:
        """The config :meth:`to_dict` wrote; an unknown key is an error (a misspelled setting must not be dropped)."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"unknown TrainConfig field(s) {unknown}; the fields are {sorted(known)}")
        return cls(**values)
