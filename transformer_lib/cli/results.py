"""The results file of a training run (``metrics.json``) and its loss plot (``loss.png``)."""

from __future__ import annotations

import logging
from dataclasses import asdict
from pathlib import Path
from typing import Any, cast

from ..checkpoint import atomic_write

__all__ = ["METRICS_FORMAT_VERSION", "per_epoch", "time_to_bleu", "bleu_record", "save_loss_plot"]

# Version of the metrics.json layout; 2 added BLEU, per-epoch losses, software versions, model
# selection and the distributed setup to version 1's settings and loss history.
METRICS_FORMAT_VERSION = 2


def per_epoch(history: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """One row per completed epoch: its mean training loss, and the validation made at its end."""
    val_at = {record["step"]: record for record in history.get("val", [])}
    rows = []
    for record in history.get("epochs", []):
        row = {"epoch": record["epoch"], "step": record["step"], "train_loss": record["train_loss"], "elapsed_s": record["elapsed_s"]}
        val = val_at.get(record["step"])
        if val is not None:
            row.update({f"val_{k}": v for k, v in val.items() if k in ("loss", "ppl", "token_accuracy", "bleu", "bleu_lowercased")})
        rows.append(row)
    return rows


def time_to_bleu(history: dict[str, list[dict[str, Any]]], threshold: float | None) -> dict[str, Any] | None:
    """When validation BLEU (greedy, lowercased) first reached ``threshold``: training time, step, epoch."""
    if threshold is None:
        return None
    found = next((r for r in history.get("val", []) if r.get("bleu_lowercased", float("-inf")) >= threshold), None)
    result: dict[str, Any] = {"threshold": threshold, "metric": "validation BLEU, greedy, lowercased", "reached": found is not None}
    if found is not None:
        result.update(elapsed_s=found["elapsed_s"], step=found["step"], epoch=found["epoch"], bleu_lowercased=found["bleu_lowercased"])
    return result


def bleu_record(result: dict[str, Any]) -> dict[str, Any]:
    """One decoding's BLEU as metrics.json has recorded it since format 2 (``cased``, ``lowercased``, ``seconds``)."""
    return {"cased": asdict(result["bleu"]), "lowercased": asdict(result["bleu_lowercased"]), "seconds": result["seconds"]}


def save_loss_plot(history: dict[str, Any], path: Path, title: str) -> bool:
    """Training loss (a line) and validation loss (dots) against the update, with matplotlib, if it is
    installed (it comes with the book's extra, ``pip install transformer_lib[book]``); without it,
    say so and go on (metrics.json has every number the plot would show)."""
    try:
        from matplotlib.figure import Figure
    except ImportError as error:
        logging.getLogger(__name__).info("no %s: %s (metrics.json has every number the plot would show)",
                                         path.name, error)
        return False
    ax = Figure(figsize=(6, 3.5), layout="constrained").add_subplot()
    for name, style, label in (("train", "-", "training loss (label-smoothed)"), ("val", "o-", "validation loss")):
        records = history.get(name, [])
        if records:
            ax.plot([r["step"] for r in records], [r["loss"] for r in records], style, label=label, markersize=4)
    ax.set(xlabel="optimizer step", ylabel="loss per target token (nats)", title=title)
    ax.grid(alpha=0.3)
    if history.get("train") or history.get("val"):
        ax.legend()
    atomic_write(path, lambda f: cast(Any, ax.figure).savefig(f, dpi=120, format="png"))
    return True
