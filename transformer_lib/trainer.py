"""The training loop (chapter 5): one optimizer update at a time, validation, checkpoints that resume
exactly, and several processes. Every model of the book trains through it: the translation models
(with :class:`~transformer_lib.losses.TranslationLoss`, the default), and chapter 7's language models
(a loss passed in, :func:`transformer_lib.language_models.next_token_loss` say).

It writes its state with :mod:`transformer_lib.checkpoint` and runs in several processes with
:mod:`transformer_lib.distributed`; its learning rate comes from :data:`transformer_lib.schedules.SCHEDULES`.

Shapes:

    B  batch size    T  target length    V  target vocabulary size
"""

from __future__ import annotations

import contextlib
import inspect
import itertools
import math
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor, nn

from .checkpoint import CHECKPOINT_FORMAT_VERSION, save_checkpoint, save_kept_weights
from .device import AMP_MODES, autocast_context, default_device, needs_grad_scaler
from .distributed import get_rank, get_world_size, wait_for_all
from .losses import TranslationLoss
from .metrics import RunningMean, evaluate
from .schedules import SCHEDULES, _torch_version, make_optimizer, make_scheduler  # noqa: F401 - make_optimizer's home was here
from .validation import check_choice, check_int, check_number

__all__ = ["make_optimizer", "TrainConfig", "Trainer", "TrainingDiverged", "LossFn"]

# loss(model, batch) -> (the batch's summed loss, how many tokens it sums over)
LossFn = Callable[[nn.Module, Any], tuple[Tensor, "Tensor | int"]]


class TrainingDiverged(RuntimeError):
    """The loss, a gradient norm or a weight became NaN or infinite; nothing diverged was saved."""


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
        if self.schedule != "noam" and self.lr is None:
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


def _to_device(batch: Any, device: torch.device) -> Any:
    """A batch on ``device``: an object with ``.to`` (a :class:`~transformer_lib.batching.Batch`), or a
    tuple of tensors (a language model's ``(inputs, targets)``)."""
    if isinstance(batch, tuple) and not hasattr(batch, "to"):
        return tuple(x.to(device, non_blocking=True) for x in batch)
    return batch.to(device, non_blocking=True)


def _groups(batches: Iterable[Any], size: int) -> Iterator[list[Any]]:
    iterator = iter(batches)  # consecutive lists of `size` batches, the last perhaps shorter
    while group := list(itertools.islice(iterator, size)):
        yield group


class Trainer:
    """Trains a model, one optimizer update per batch (or per `batches_per_update`), and checkpoints it.

    One update: the loss of the batch (forward under bf16 autocast on a GPU), averaged over the
    batch's target tokens, backward, gradient clipping, AdamW step, schedule step. Nothing in it
    waits for the GPU: the loss and the finiteness checks stay on the device until a log record,
    a validation or a save reads them.

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
        loss: ``loss(model, batch) -> (summed loss, number of tokens)``; default
            :class:`~transformer_lib.losses.TranslationLoss` with the config's ``label_smoothing``
            and ``pad_id``. Batches are moved to ``device`` first (objects with ``.to``, or tuples
            of tensors).
        val_loader: batches for :func:`~transformer_lib.metrics.evaluate` (``None``: no validation).
        device: where to train (default: CUDA when available, else CPU).
        checkpoint_path: where :meth:`save` writes (``None``: never saves).
        metadata: what the checkpoint holds besides the training state: ``model_config``,
            ``tokenizers``, ``task``, ``data`` (see :data:`~transformer_lib.checkpoint.CHECKPOINT_KEYS`).
        on_log: called with each training record (e.g. to draw a live loss curve).
        on_eval: called with each validation record.
        val_metrics: called with the (unwrapped) model at each validation; the numbers it returns
            join the validation record (e.g. ``{"bleu": ...}`` from decoding the validation set).
            With several processes it is called on each, and must return the same numbers on each.
        on_save: called (process 0 only) with the checkpoint's path after each checkpoint is written.

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
        loss: LossFn | None = None,
        val_loader: Iterable[Any] | None = None,
        device: torch.device | str | None = None,
        checkpoint_path: str | Path | None = None,
        metadata: Mapping[str, Any] | None = None,
        on_log: Callable[[dict[str, float]], None] | None = None,
        on_eval: Callable[[dict[str, float]], None] | None = None,
        val_metrics: Callable[[nn.Module], Mapping[str, float]] | None = None,
        on_save: Callable[[Path], None] | None = None,
    ) -> None:
        self.config = config
        self.device = torch.device(device) if device is not None else default_device()
        self.model = model.to(self.device)
        self.loss = loss if loss is not None else TranslationLoss(config.label_smoothing, config.pad_id)
        self.train_loader, self.val_loader = train_loader, val_loader
        self.checkpoint_path = Path(checkpoint_path) if checkpoint_path is not None else None
        self.metadata = dict(metadata or {})
        self.on_log, self.on_eval, self.val_metrics, self.on_save = on_log, on_eval, val_metrics, on_save
        self.rank, self.world_size = get_rank(), get_world_size()
        # What the training step calls: the model itself, or wrappers that call it. Checkpoints and
        # evaluation always use self.model, so its state_dict keys never gain a "module." (DDP) or
        # "_orig_mod." (torch.compile) prefix.
        self.train_module = _training_module(self.model, self.device, self.world_size, config.compile)
        self.batches_per_epoch = len(train_loader)  # type: ignore[arg-type]
        if self.batches_per_epoch == 0:
            raise ValueError("train_loader yields no batches")
        self.steps_per_epoch = math.ceil(self.batches_per_epoch / config.batches_per_update)  # optimizer updates
        by_epochs = config.epochs * self.steps_per_epoch if config.epochs is not None else None
        self.total_steps: int = min(s for s in (by_epochs, config.max_steps) if s is not None)
        self.optimizer = make_optimizer(model, config.weight_decay, config.betas, config.adam_eps)
        # The model's parameters, listed once (clipping walks them at every update), in the model's order:
        # the gradient norm sums them in this order, and another order changes a run's weights in the last bits.
        self._parameters = list(self.model.parameters())
        self.scheduler = make_scheduler(
            self.optimizer, config.schedule, warmup_steps=config.warmup_steps, peak_lr=config.lr,
            d_model=getattr(getattr(model, "config", None), "d_model", None),
            total_steps=max(self.total_steps, config.warmup_steps),
        )
        # fp16 needs loss scaling; elsewhere the scaler is disabled and each of its calls passes through.
        self.scaler = torch.amp.GradScaler(self.device.type, enabled=needs_grad_scaler(self.device, config.amp))
        self.step = 0  # optimizer updates done
        self.epoch = 0  # epochs completed
        self.batch_in_epoch = 0  # batches of the current epoch done
        self.elapsed_s = 0.0  # training time so far, over all sessions
        self.history: dict[str, list[dict[str, float]]] = {"train": [], "val": [], "epochs": []}
        self.stopped_because = ""
        # Set (to a reason, e.g. "SIGINT") to stop after the current update, checkpoint and return:
        # how a command line finishes the step it is in when the user presses Ctrl-C.
        self.stop_requested: str | None = None
        self._saved_at: tuple[int, int, int] | None = None
        # The training loss per target token (over all processes) of the current logging window
        # and of the current epoch: no GPU sync per step, and saved exactly in checkpoints.
        self._window_loss = RunningMean(self.device)
        self._epoch_loss = RunningMean(self.device)
        self._window_start = time.perf_counter()
        self._window_carried_s = 0.0  # seconds the current logging window ran before a resume
        self._all_finite = torch.ones((), dtype=torch.bool, device=self.device)

    @property
    def is_main(self) -> bool:
        """Whether this is process 0 (always, without a process group): the one that writes files."""
        return self.rank == 0

    # -- one update -----------------------------------------------------------------------------

    def train_step(self, batch: Any, *micro_batches: Any) -> Tensor:
        """One optimizer update on ``batch`` (and ``micro_batches``, whose gradients accumulate with
        its own); returns the summed (not averaged) loss, detached.

        With several processes, ``batch`` is this process's slice of the batch, and the returned
        loss is summed over all the processes' slices.
        """
        # Back in training mode after a validation or a callback put the model in eval mode. Only then:
        # .train() visits every submodule, about a twentieth of a small model's update on the CPU.
        if not (self.train_module.training and self.model.training):
            self.train_module.train()
        self.optimizer.zero_grad(set_to_none=True)
        if micro_batches:
            batch_loss, batch_tokens = self._accumulate([batch, *micro_batches])
        else:
            batch_loss, batch_tokens = self._backward(*self._forward(batch))
        finite = torch.isfinite(batch_loss)
        self.scaler.unscale_(self.optimizer)
        if self.config.clip_norm is not None:
            norm = nn.utils.clip_grad_norm_(self._parameters, self.config.clip_norm, foreach=True)
            if not self.scaler.is_enabled():  # with fp16 an overflow is expected now and then: the scaler skips that step
                finite = finite & torch.isfinite(norm)
        self._all_finite &= finite  # checked (one sync) before anything is logged, validated or saved
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.scheduler.step()
        self.step += 1
        self._window_loss.update(batch_loss, batch_tokens)
        self._epoch_loss.update(batch_loss, batch_tokens)
        return batch_loss

    def _forward(self, batch: Any) -> tuple[Tensor, Tensor | int]:
        with autocast_context(self.device, self.config.amp):
            return self.loss(self.train_module, _to_device(batch, self.device))

    def _accumulate(self, micro_batches: list[Any]) -> tuple[Tensor, Tensor]:
        """Backward of each micro-batch's summed loss, then the gradients divided by the target tokens
        of them all (over every process): the gradient of their union's mean loss per token, as one
        batch would give (dividing by each one's tokens would weight a short micro-batch's more)."""
        totals = torch.zeros(2, dtype=torch.float64, device=self.device)
        for i, batch in enumerate(micro_batches):  # DDP averages the gradients once, at the last one
            with contextlib.nullcontext() if i == len(micro_batches) - 1 or self.world_size == 1 else self.train_module.no_sync():
                loss_sum, n_tokens = self._forward(batch)
                loss_sum.backward()
            totals += torch.stack([loss_sum.detach().double(), torch.as_tensor(n_tokens, device=self.device).double()])
        if self.world_size > 1:
            dist.all_reduce(totals)
        scale = self.world_size / totals[1].clamp_min(1.0)  # DDP divided the summed gradients by world_size
        for p in self._parameters:
            if p.grad is not None:
                p.grad.mul_(scale.to(p.grad.dtype))
        return totals[0], totals[1]

    def _backward(self, loss_sum: Tensor, n_tokens: Tensor | int) -> tuple[Tensor, Tensor | int]:
        """Backward of the mean loss per token; returns the summed loss and token count of the whole batch."""
        if self.world_size == 1:
            mean = loss_sum / (n_tokens.clamp_min(1) if isinstance(n_tokens, Tensor) else max(n_tokens, 1))
            self.scaler.scale(mean).backward()
            return loss_sum.detach(), n_tokens
        # The loss and token count of the whole batch: one all-reduce of two numbers.
        totals = torch.stack([loss_sum.detach().double(), torch.as_tensor(n_tokens, device=loss_sum.device).double()])
        dist.all_reduce(totals)
        # DDP averages the processes' gradients (divides their sum by world_size), so scaling by
        # world_size / all tokens makes the result the gradient of the whole batch's mean.
        self.scaler.scale(loss_sum * (self.world_size / totals[1].clamp_min(1.0)).to(loss_sum.dtype)).backward()
        return totals[0], totals[1]

    # -- the loop -------------------------------------------------------------------------------

    def fit(self) -> dict[str, list[dict[str, float]]]:
        """Train until ``epochs``, ``max_steps`` or ``target_exact_match``; returns :attr:`history`.

        Called on a trainer restored with :meth:`load_state_dict`, it continues from there.
        """
        from tqdm import tqdm  # tqdm reads TQDM_DISABLE=1 (CI) for its default

        config = self.config
        bar_options = {} if config.progress and self.is_main else {"disable": True}
        bar = tqdm(total=self.total_steps, initial=self.step, unit="step", dynamic_ncols=True, **bar_options)
        self._window_start, self._window_carried_s = time.perf_counter() - self._window_carried_s, 0.0  # a resumed window goes on
        try:
            while not self._should_stop():
                sampler = getattr(self.train_loader, "batch_sampler", None)
                if hasattr(sampler, "set_epoch"):
                    sampler.set_epoch(self.epoch)
                # Resuming mid-epoch: skip the batches this epoch already trained on.
                batches = itertools.islice(iter(self.train_loader), self.batch_in_epoch, None)
                for group in _groups(batches, config.batches_per_update):
                    self.train_step(*group)
                    self.batch_in_epoch += len(group)
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
                    if self._should_stop() and self.batch_in_epoch < self.batches_per_epoch:
                        break
                else:  # the epoch ran to its end
                    self._end_epoch()
                    if config.eval_every is None:
                        self._validate()
                    if config.checkpoint_every is None and config.eval_every is None:
                        self.save()
            # The last, partial window (a signal's stop leaves it to the checkpoint: resumed, the same history)
            if self._window_loss.updates and self.stop_requested is None:
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
        finite = [self._all_finite, *(torch.isfinite(p).all() for p in self._parameters)]
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
        if self.stop_requested is not None:
            self.stopped_because = f"stopped by {self.stop_requested} at step {self.step}"
            return True
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
            "epoch": self.epoch + self.batch_in_epoch / self.batches_per_epoch,
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
        record = {"step": self.step, "epoch": self.epoch + self.batch_in_epoch / self.batches_per_epoch, "elapsed_s": elapsed, **metrics}
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
            "scaler_state": self.scaler.state_dict(),  # empty when disabled
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
                "seconds": (self._window_carried_s or time.perf_counter() - self._window_start) if self._window_loss.updates else 0.0,
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
        if state.get("scaler_state") and self.scaler.is_enabled():
            self.scaler.load_state_dict(state["scaler_state"])  # the loss scale it had found
        self.step, self.epoch, self.batch_in_epoch = int(state["step"]), int(state["epoch"]), int(state["batch_in_epoch"])
        self.elapsed_s = float(state.get("elapsed_s", 0.0))
        metrics = state["metrics"]
        self.history = {name: [dict(r) for r in metrics.get(name, [])] for name in ("train", "val", "epochs")}
        window = state["window"]
        self._window_loss.reset()
        self._window_loss.update(torch.as_tensor(window["loss"]).to(self.device, torch.float64), float(window["tokens"]))
        self._window_loss.updates, self._window_carried_s = int(window["steps"]), float(window.get("seconds", 0.0))
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
        if self.on_save is not None and self.is_main:
            self.on_save(path)
        return path
