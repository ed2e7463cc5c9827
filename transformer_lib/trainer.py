"""The training loop (chapter 5): one optimizer update at a time, validation, checkpoints that resume
exactly, and several processes. Every model of the book trains through it: the translation models
(with :class:`~transformer_lib.losses.TranslationLoss`, the default), and chapter 7's language models
(a loss passed in, :func:`transformer_lib.language_models.next_token_loss` say).

Its parts: the settings (:class:`~transformer_lib.train_config.TrainConfig`), where the run is
(:class:`~transformer_lib.train_state.TrainState`: step, history, random state per process), and the
loop here, whose :class:`Hook` s (logging, validation, checkpoints) run between updates and which stops
when asked (:attr:`Trainer.stop_requested`, the interruption). It writes its state with
:mod:`transformer_lib.checkpoint` and runs in several processes with :mod:`transformer_lib.distributed`;
its learning rate comes from :data:`transformer_lib.schedules.SCHEDULES`.

Shapes::

    B  batch size    T  target length    V  target vocabulary size
"""

from __future__ import annotations

import contextlib
import itertools
import math
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from operator import attrgetter
from pathlib import Path
from typing import Any, cast

import torch
import torch.distributed as dist
from torch import Tensor, nn

from .checkpoint import CHECKPOINT_FORMAT_VERSION, save_checkpoint, save_kept_weights
from .device import autocast_context, default_device, needs_grad_scaler
from .distributed import data_parallel, get_rank, get_world_size, wait_for_all
from .losses import TranslationLoss
from .metrics import evaluate_teacher_forced
from .schedules import make_optimizer, make_scheduler
from .train_config import TrainConfig
from .train_state import TrainState, restore_rng, rng_state

__all__ = ["TrainConfig", "Trainer", "TrainingDiverged", "LossFn", "Hook"]

# loss(model, batch) -> (the batch's summed loss, how many tokens it sums over)
LossFn = Callable[[nn.Module, Any], tuple[Tensor, "Tensor | int"]]


class TrainingDiverged(RuntimeError):
    """The loss, a gradient norm or a weight became NaN or infinite; nothing diverged was saved."""


def _training_module(model: nn.Module, device: torch.device, world_size: int, compile: bool) -> nn.Module:
    """``model``, wrapped in ``DistributedDataParallel`` with several processes, and compiled if asked."""
    module = data_parallel(model, device) if world_size > 1 else model
    return cast(nn.Module, torch.compile(module)) if compile else module


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


@dataclass(frozen=True)
class Hook:
    """What the loop does between updates: ``action()`` after every ``every``-th update, or at each
    epoch's end where ``every`` is ``None``."""

    action: Callable[[], Any]
    every: int | None


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
        val_loader: batches for :func:`~transformer_lib.metrics.evaluate_teacher_forced` (``None``: no validation).
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
        self.state = TrainState(self.device)
        # Set (to a reason, e.g. "SIGINT") to stop after the current update, checkpoint and return:
        # how a command line finishes the step it is in when the user presses Ctrl-C (the interruption).
        self.stop_requested: str | None = None
        self._saved_at: tuple[int, int, int] | None = None
        self._all_finite = torch.ones((), dtype=torch.bool, device=self.device)
        self._bar: Any = None
        save_every = config.checkpoint_every or config.eval_every  # None: at each epoch's end
        self.hooks = [Hook(self._log, config.log_every), Hook(self._validate, config.eval_every), Hook(self.save, save_every)]

    # The run's position and records live in self.state (TrainState); read them here too.
    step = property(attrgetter("state.step"))
    epoch = property(attrgetter("state.epoch"))
    batch_in_epoch = property(attrgetter("state.batch_in_epoch"))
    elapsed_s = property(attrgetter("state.elapsed_s"))
    history = property(attrgetter("state.history"))
    stopped_because = property(attrgetter("state.stopped_because"))

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
        batch_tokens: Tensor | int
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
        self.state.step += 1
        self.state.window_loss.update(batch_loss, batch_tokens)
        self.state.epoch_loss.update(batch_loss, batch_tokens)
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
            with contextlib.nullcontext() if i == len(micro_batches) - 1 or self.world_size == 1 else cast(Any, self.train_module).no_sync():
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
        """Train until ``epochs``, ``max_steps``, ``target_exact_match`` or :attr:`stop_requested`; returns
        :attr:`history`. After each update, and at each epoch's end, the loop runs its :attr:`hooks`:
        logging, validation, checkpoints.

        Called on a trainer restored with :meth:`load_state_dict`, it continues from there.
        """
        from tqdm import tqdm  # tqdm reads TQDM_DISABLE=1 (CI) for its default

        state, options = self.state, {} if self.config.progress and self.is_main else {"disable": True}
        self._bar = tqdm(total=self.total_steps, initial=state.step, unit="step", dynamic_ncols=True, **options)
        state.window_start, state.window_carried_s = time.perf_counter() - state.window_carried_s, 0.0  # a resumed window goes on
        try:
            while not self._should_stop():
                self._train_epoch()
            # The last, partial window (a signal's stop leaves it to the checkpoint: resumed, the same history)
            if state.window_loss.updates and self.stop_requested is None:
                self._log()
            if self._saved_at != (state.step, len(state.history["train"]), len(state.history["val"])):
                self.save()
        finally:
            self._bar.close()
            self._bar = None
        return state.history

    def _train_epoch(self) -> None:
        """The rest of the current epoch (all of it, unless resumed mid-epoch), or until the loop should stop."""
        state = self.state
        sampler = getattr(self.train_loader, "batch_sampler", None)
        if sampler is not None and hasattr(sampler, "set_epoch"):
            sampler.set_epoch(state.epoch)
        # Resuming mid-epoch: skip the batches this epoch already trained on.
        batches = itertools.islice(iter(self.train_loader), state.batch_in_epoch, None)
        for group in _groups(batches, self.config.batches_per_update):
            self.train_step(*group)
            state.batch_in_epoch += len(group)
            self._bar.update(1)
            for hook in self.hooks:
                if hook.every is not None and state.step % hook.every == 0:
                    hook.action()
            # At an epoch's last batch, fall through to the epoch's end (validation, checkpoint).
            if self._should_stop() and state.batch_in_epoch < self.batches_per_epoch:
                return
        state.end_epoch()
        for hook in self.hooks:
            if hook.every is None:
                hook.action()

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
        state = self.state
        if self.stop_requested is not None:
            state.stopped_because = f"stopped by {self.stop_requested} at step {state.step}"
            return True
        if state.step >= self.total_steps:
            state.stopped_because = state.stopped_because or f"reached {self.total_steps} steps"
            return True
        target = self.config.target_exact_match
        if target is not None and state.history["val"] and state.history["val"][-1]["exact_match"] >= target:
            state.stopped_because = f"validation exact match reached {target:.0%}"
            return True
        return False

    def _log(self) -> dict[str, float]:
        self._check_finite()
        record = self.state.log(self.scheduler.lr_lambdas[0](self.step - 1), self.batches_per_epoch)  # the last update's rate
        if self.on_log is not None:
            self.on_log(record)
        if self._bar is not None:
            self._bar.set_postfix(loss=f"{record['loss']:.3f}", lr=f"{record['lr']:.2e}")
        return record

    def _validate(self) -> None:
        if self.val_loader is None:
            return
        self._check_finite()
        elapsed = self.state.elapsed_now()  # the time it took to train the model being evaluated
        metrics = evaluate_teacher_forced(
            self.model, self.val_loader, device=self.device, pad_id=self.config.pad_id, amp=self.config.amp,
            all_reduce=self.world_size > 1,
        )
        if self.val_metrics is not None:
            metrics.update(self.val_metrics(self.model))
        record = {"step": self.step, "epoch": self.state.position(self.batches_per_epoch), "elapsed_s": elapsed, **metrics}
        self.state.history["val"].append(record)
        if self.on_eval is not None:
            self.on_eval(record)

    # -- state and checkpoints ------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """The training state (everything but :attr:`metadata`), plain values and tensors only.

        With several processes every process must call it (it gathers their random states).
        """
        return {
            "model_state": self.model.state_dict(),
            "optimizer_state": self.optimizer.state_dict(),
            "scheduler_state": self.scheduler.state_dict(),
            "scaler_state": self.scaler.state_dict(),  # empty when disabled
            "train_config": self.config.to_dict(),
            "rng_state": rng_state(self.device, self.world_size),
            **self.state.to_dict(),
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
        self.state.load(state)
        restore_rng(state["rng_state"], self.device, self.rank, self.world_size)

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
