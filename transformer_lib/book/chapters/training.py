"""Chapter 5's shared set-up: the reverse task as the command-line trainer makes it, the Multi30k
corpus as word ids (prepared once, then loaded from the cache), and the full profile's Multi30k
run: the recipe of the shipped model, trained by the command line itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from transformer_lib.book.cache import cached
from transformer_lib.book.experiment import current_profile
from transformer_lib.prepared import PreparedTranslation, prepare_multi30k
from transformer_lib.toy_tasks import toy_task, toy_vocab
from transformer_lib.cli.options import RunConfig
from transformer_lib.cli.profiles import DEFAULTS
from transformer_lib.config import TransformerConfig
from transformer_lib.trainer import TrainConfig
from transformer_lib.vocab import Vocab

__all__ = ["ReverseTask", "accumulation_gap", "batch_costs", "full_recipe_run",
           "multi30k_words", "reverse_task", "shipped_run"]


@dataclass(frozen=True)
class ReverseTask:
    """The reverse task of the trainer's current profile: its ``settings`` (``DEFAULTS["toy"]``),
    its ``vocab`` (four specials, then the digits), and ``train`` and ``heldout`` pairs (no held-out
    sequence occurs in training; every length is held out, as :func:`toy_task` says)."""

    settings: dict[str, Any]
    vocab: Vocab
    train: Any
    heldout: Any

    def run_config(self) -> RunConfig:
        """The command line's run settings: ``python -m transformer_lib.cli.train --task reverse``."""
        return RunConfig(task="reverse", profile=current_profile(), **self.settings)

    def model_config(self) -> TransformerConfig:
        """The model the command line builds for this task (the tiny preset, without dropout)."""
        return self.run_config().model_config(len(self.vocab), len(self.vocab), self.vocab.pad_id)

    def train_config(self, progress: bool = False) -> TrainConfig:
        """The trainer's config the command line uses for this task (schedule, clipping, when to
        validate and stop)."""
        return self.run_config().train_config(self.vocab.pad_id, progress)


def reverse_task() -> ReverseTask:
    """The reverse task with the command-line trainer's settings (``--task reverse``, seed 0): its
    training pairs balanced by length as the trainer's are (``balance_lengths``)."""
    s = DEFAULTS["toy"][current_profile()]
    train, heldout = toy_task("reverse", s["n_train"], s["n_heldout"], n_symbols=s["n_symbols"],
                              shortest=s["shortest"], longest=s["longest"], seed=0, balance_lengths=True)
    return ReverseTask(dict(s), toy_vocab(s["n_symbols"]), train, heldout)


def multi30k_words(min_freq: int = 2) -> PreparedTranslation:
    """Multi30k tokenized into spaCy words, one vocabulary per language (tokens seen ``min_freq``
    times in training): :func:`~transformer_lib.prepared.prepare_multi30k` the first time, then
    its saved copy from the cache."""

    def prepare(folder: Path) -> None:
        prepare_multi30k(min_freq=min_freq).save(folder / "data.pt")

    return PreparedTranslation.load(cached("multi30k-words", {"min_freq": min_freq}, prepare) / "data.pt")


def shipped_run() -> dict[str, Any]:
    """The training record of the model that ships with the book (:mod:`transformer_lib.pretrained`):
    the command, settings, hardware, wall time, per-epoch values and the full history, as
    ``python -m transformer_lib.cli.train`` wrote them."""
    from transformer_lib import pretrained

    return pretrained.info().run


def full_recipe_run() -> tuple[dict[str, Any], Path]:
    """``python -m transformer_lib.cli.train --task multi30k --profile full``, in this process: the
    shipped model's recipe (joint BPE vocabulary of 8,000 tokens, shared and tied; the ``multi30k``
    preset; the Noam schedule peaking at 3e-3; 16 epochs), trained once into the book's cache.
    Returns the run's metrics and the checkpoint that validation chose."""
    import contextlib
    import io
    import json

    from transformer_lib.cli import train

    def run(out: Path) -> None:
        log = io.StringIO()
        with contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
            metrics = train.main(["--task", "multi30k", "--profile", "full", "--out", str(out), "--no-progress"])
        if not isinstance(metrics, dict):
            raise RuntimeError(f"the full-profile run failed:\n{log.getvalue()[-2000:]}")

    folder = cached("multi30k-full-recipe", {"profile": "full"}, run)
    metrics = json.loads((folder / "metrics.json").read_text())
    return metrics, folder / metrics["selection"]["checkpoint"]


def batch_costs(data: Any, loader: Any) -> Any:
    """Each batch of ``loader`` over ``data``: its sentence pairs and its padded size in tokens,
    ``pairs * (longest + 1)`` on the longer side (what memory and compute pay for, ``<bos>``/``<eos>``
    included; :class:`~transformer_lib.batching.TokenBatchSampler` counts the same way)."""
    import pandas as pd

    sizes = [max(s, t) + 1 for s, t in zip(data.src_lengths, data.tgt_lengths)]
    rows = [(len(batch), len(batch) * max(sizes[i] for i in batch)) for batch in loader.batch_sampler]
    return pd.DataFrame(rows, columns=["pairs", "padded tokens"])


def accumulation_gap(make_model: Any, parts: list[list[tuple[list[int], list[int]]]]) -> dict[str, float]:
    """One update on all of ``parts`` (lists of ``(src_ids, tgt_ids)`` pairs) as one batch, against one
    update that accumulates them as micro-batches (``TrainConfig(batches_per_update=len(parts))``).

    Returns the largest difference of any gradient entry over the largest gradient entry (``gap``),
    and the float32 rounding bound they must agree within (``bound``): each entry is a sum over the
    batch's target tokens, through sums of at most ``d_ff`` terms, added in another order, so within
    ``2 * 2 * n * u`` of its scale twice over, ``n`` the larger of the two (Higham 2002, section 4.2).
    ``make_model()`` must build the same weights at each call."""
    import torch

    from transformer_lib.batching import collate
    from transformer_lib.trainer import TrainConfig, Trainer

    micro = [collate(pairs) for pairs in parts]
    whole = collate([pair for pairs in parts for pair in pairs])
    gradients = []
    for batches in ([whole], micro):
        model = make_model()
        config = TrainConfig(epochs=None, max_steps=1, schedule="constant", lr=1e-3, warmup_steps=1, clip_norm=None,
                             amp="off", progress=False, log_every=1, batches_per_update=len(batches))
        Trainer(model, batches, config, device="cpu").train_step(*batches)
        gradients.append(torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None]))
    one, accumulated = gradients
    terms = max(whole.n_tokens, model.config.d_ff)
    u = torch.finfo(torch.float32).eps / 2
    return {"gap": float((accumulated - one).abs().max() / one.abs().max()), "bound": 2 * 2 * 2 * terms * u,
            "micro_batches": len(micro), "target_tokens": whole.n_tokens}


