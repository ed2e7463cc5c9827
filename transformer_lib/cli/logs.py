"""What a training run writes while it trains: ``metrics.jsonl`` (one JSON record per line, appended at
every logging window and validation), and, with ``--tensorboard``, TensorBoard event files.

``metrics.jsonl`` can be followed while the run goes (``tail -f``) and read by any tool; each line is
``{"kind": "train" | "val", "step": ..., ...}`` with the trainer's record. A resumed run first drops
the lines past its checkpoint's step (the steps it trains again), so the file holds each step once.
TensorBoard is optional: ``--tensorboard`` without the ``tensorboard`` package is a clear error.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..checkpoint import atomic_write
from .runs import json_safe

__all__ = ["METRICS_LOG", "TENSORBOARD_DIR", "RunLog", "check_tensorboard"]

METRICS_LOG = "metrics.jsonl"
TENSORBOARD_DIR = "tensorboard"


def check_tensorboard() -> None:
    """Refuse ``--tensorboard`` before anything starts when the package is not installed."""
    try:
        from torch.utils.tensorboard import SummaryWriter  # noqa: F401
    except ImportError:
        raise ValueError("--tensorboard needs the tensorboard package: pip install tensorboard "
                         "(or leave out --tensorboard: metrics.jsonl has the same records)") from None


class RunLog:
    """Appends the trainer's records to ``OUT/metrics.jsonl`` (and TensorBoard's files, if asked)."""

    def __init__(self, out: Path, resumed_step: int | None, tensorboard: bool) -> None:
        self.path = out / METRICS_LOG
        if resumed_step is not None:
            self._drop_after(resumed_step)
        elif self.path.exists():
            self.path.unlink()  # a fresh run into a folder whose earlier results were moved aside
        self.writer: Any = None
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            self.writer = SummaryWriter(str(out / TENSORBOARD_DIR), purge_step=resumed_step)

    def _drop_after(self, step: int) -> None:
        if not self.path.exists():
            return
        lines = self.path.read_text(encoding="utf-8").splitlines()
        kept = []
        for line in lines:
            try:
                if json.loads(line)["step"] <= step:
                    kept.append(line)
            except (ValueError, KeyError, TypeError):
                continue  # a line cut short by a killed process
        text = "".join(f"{line}\n" for line in kept)
        atomic_write(self.path, lambda f: f.write(text.encode("utf-8")))  # a crash here keeps every line

    def record(self, kind: str, record: dict[str, Any]) -> None:
        """Append one record (``kind``: ``"train"`` or ``"val"``), flushed at once."""
        line = json.dumps(json_safe({"kind": kind, **record}), allow_nan=False)
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(line + "\n")
        if self.writer is not None:
            for name, value in record.items():
                if name != "step" and isinstance(value, (int, float)):
                    self.writer.add_scalar(f"{kind}/{name}", value, record["step"])
            self.writer.flush()

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
