"""Where a training run is (chapter 5): :class:`TrainState`, the position, the history and the running
sums of the loss, and the random state of every process; everything a checkpoint needs, besides the
model, optimizer and schedule, to resume a run exactly.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor

from .metrics import RunningMean

__all__ = ["TrainState", "rng_state", "restore_rng"]


def _empty_history() -> dict[str, list[dict[str, float]]]:
    return {"train": [], "val": [], "epochs": []}


@dataclass
class TrainState:
    """The position of a run and what it has recorded.

    Args:
        device: where the running sums live (no GPU sync per update).
        step: optimizer updates done.
        epoch: epochs completed.
        batch_in_epoch: batches of the current epoch done.
        elapsed_s: training time so far, over all sessions.
        history: the records, ``{"train": [...], "val": [...], "epochs": [...]}``.
        stopped_because: why the last :meth:`~transformer_lib.trainer.Trainer.fit` stopped.

    The training loss per target token (over all processes) of the current logging window
    (``window_loss``) and of the current epoch (``epoch_loss``) are running sums, saved exactly.
    """

    device: torch.device
    step: int = 0
    epoch: int = 0
    batch_in_epoch: int = 0
    elapsed_s: float = 0.0
    history: dict[str, list[dict[str, float]]] = field(default_factory=_empty_history)
    stopped_because: str = ""

    def __post_init__(self) -> None:
        self.window_loss = RunningMean(self.device)
        self.epoch_loss = RunningMean(self.device)
        self.window_start = time.perf_counter()
        self.window_carried_s = 0.0  # seconds the current logging window ran before a resume

    def elapsed_now(self) -> float:
        """Training time so far: earlier sessions, plus this one up to now."""
        return self.elapsed_s + (time.perf_counter() - self.window_start)

    def position(self, batches_per_epoch: int) -> float:
        """Epochs done, in fractions of an epoch."""
        return self.epoch + self.batch_in_epoch / batches_per_epoch

    def log(self, lr: float, batches_per_epoch: int) -> dict[str, float]:
        """Record the training loss of the logging window that ends now (and restart the window)."""
        window_s = time.perf_counter() - self.window_start
        self.elapsed_s += window_s
        record = {
            "step": self.step,
            "epoch": self.position(batches_per_epoch),
            "loss": self.window_loss.mean,
            "lr": lr,
            "tokens_per_s": float(self.window_loss.count) / window_s if window_s > 0 else float("nan"),
            "elapsed_s": self.elapsed_s,
        }
        self.window_loss.reset()
        self.history["train"].append(record)
        self.window_start = time.perf_counter()
        return record

    def end_epoch(self) -> None:
        """Count the epoch as done, and record its average training loss."""
        self.epoch += 1
        self.batch_in_epoch = 0
        self.history["epochs"].append({
            "epoch": self.epoch, "step": self.step, "train_loss": self.epoch_loss.mean,
            "train_tokens": int(self.epoch_loss.count), "elapsed_s": self.elapsed_now(),
        })
        self.epoch_loss.reset()

    def to_dict(self) -> dict[str, Any]:
        """The checkpoint's entries for this state: plain values and CPU tensors."""
        window, epoch = self.window_loss, self.epoch_loss
        seconds = (self.window_carried_s or time.perf_counter() - self.window_start) if window.updates else 0.0
        return {
            "step": self.step,
            "epoch": self.epoch,
            "batch_in_epoch": self.batch_in_epoch,
            "elapsed_s": self.elapsed_s,
            "window": {
                "loss": window.total.cpu().clone(), "tokens": int(window.count), "steps": window.updates,
                "seconds": seconds, "epoch_loss": epoch.total.cpu().clone(), "epoch_tokens": int(epoch.count),
            },
            "metrics": {name: [dict(r) for r in records] for name, records in self.history.items()},
        }

    def load(self, state: Mapping[str, Any]) -> None:
        """Take the position, history and running sums of a checkpoint (:meth:`to_dict`'s entries)."""
        self.step, self.epoch, self.batch_in_epoch = int(state["step"]), int(state["epoch"]), int(state["batch_in_epoch"])
        self.elapsed_s = float(state.get("elapsed_s", 0.0))
        self.history = {name: [dict(r) for r in state["metrics"].get(name, [])] for name in ("train", "val", "epochs")}
        window = state["window"]
        self.window_loss.reset()
        self.window_loss.update(torch.as_tensor(window["loss"]).to(self.device, torch.float64), float(window["tokens"]))
        self.window_loss.updates, self.window_carried_s = int(window["steps"]), float(window.get("seconds", 0.0))
        self.epoch_loss.reset()
        self.epoch_loss.update(torch.as_tensor(window.get("epoch_loss", 0.0)).to(self.device, torch.float64),
                               float(window.get("epoch_tokens", 0)))
        self.stopped_because = ""


def _own_rng_state(device: torch.device) -> dict[str, Tensor]:
    rng = {"torch": torch.get_rng_state()}
    if device.type == "cuda":
        # Only this process's GPU: get_rng_state_all() would create a CUDA context on every
        # GPU of the machine in every process.
        rng["cuda"] = torch.cuda.get_rng_state(device)
    return rng


def rng_state(device: torch.device, world_size: int) -> dict[str, Any]:
    """The random state of this process (dropout's), and with several processes every process's
    (``"processes"``, gathered: every process must call it)."""
    rng: dict[str, Any] = _own_rng_state(device)
    if world_size > 1:
        per_process: list[Any] = [None] * world_size
        dist.all_gather_object(per_process, {k: v.cpu() for k, v in rng.items()})
        rng = {**per_process[0], "processes": per_process}
    return rng


def restore_rng(rng: Mapping[str, Any], device: torch.device, rank: int, world_size: int) -> None:
    """Set this process's random state from :func:`rng_state`'s record."""
    processes = rng.get("processes")
    own = processes[rank] if processes is not None and len(processes) == world_size else rng
    torch.set_rng_state(own["torch"].cpu())
    cuda = own.get("cuda")
    if cuda is not None and device.type == "cuda":
        torch.cuda.set_rng_state(cuda.cpu(), device)
    if own is rng and rank > 0:
        # Saved by a different number of processes: give this one its own dropout stream
        # (deterministic, but not the stream it would have had).
        torch.manual_seed(int(torch.randint(2**62, ())) + rank)
