"""Section 7.9's measurements: the key/value cache read while decoding, and the options that current
models use (RMSNorm, SwiGLU, grouped-query attention, QK-norm) trained side by side.

Shapes: ``B`` batch, ``S`` source length, ``N`` new tokens.

- :func:`cache_while_decoding` decodes greedily inside :func:`~transformer_lib.kv_cache.kv_cache` and
  reads the bytes of the cached tensors after every step, so the page's table is measured, not
  computed from a formula.
- :func:`side_by_side` trains one small model per option on chapter 5's reverse task (the
  command-line trainer's data), each with the same seed, batches and number of updates, and
  returns the validation losses.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd
import torch
from torch import Tensor

from transformer_lib.batching import make_loader
from transformer_lib.book.chapters.training import ReverseTask, reverse_task
from transformer_lib.config import TransformerConfig
from transformer_lib.decoding import decoding_step, never_generated
from transformer_lib.kv_cache import kv_cache
from transformer_lib.model import Transformer, count_parameters
from transformer_lib.trainer import TrainConfig, Trainer

__all__ = ["VARIANTS", "cache_while_decoding", "SideBySide", "side_by_side"]

VARIANTS: Mapping[str, Mapping[str, Any]] = {
    "baseline": {},
    "RMSNorm": {"norm": "rmsnorm"},
    "SwiGLU": {"activation": "swiglu"},
    "GQA (2 K/V heads)": {"n_kv_heads": 2},
    "QK-norm": {"qk_norm": True},
}
"""Section 7.9's models by name: the fields of :class:`TransformerConfig` each one changes."""


def _most_likely(logits: Tensor) -> Tensor:
    return logits.argmax(dim=-1)  # (B,)


@torch.no_grad()
def cache_while_decoding(model: Transformer, src: Tensor, *, new_tokens: int, bos_id: int,
                         pad_id: int) -> tuple[Tensor, list[dict[str, int]]]:
    """Greedy decoding of ``src (B, S)`` for exactly ``new_tokens`` steps (no ``<eos>`` stops it),
    with the library's key/value cache; after each step, the bytes its tensors hold.

    Returns:
        The new tokens ``(B, N)`` (what ``greedy_decode(..., eos_id=None)`` returns), and one record
        per step: ``decoded`` (tokens so far), ``self-attention`` and ``cross-attention`` (bytes).
    """
    model.eval()
    with kv_cache(model) as cache:
        memory = model.encode(src)  # (B, S, D)
        tokens = torch.full((src.size(0), 1), bos_id, dtype=torch.long, device=src.device)  # (B, 1)
        finished = torch.zeros(src.size(0), dtype=torch.bool, device=src.device)  # (B,)
        never = torch.tensor(never_generated(bos_id, None, pad_id), device=src.device)
        records = []
        for step in range(1, new_tokens + 1):
            tokens, finished, _ = decoding_step(model, tokens, finished, _most_likely, memory=memory, src_mask=None,
                                                cache=cache, eos_id=None, pad_id=pad_id, never=never)
            records.append({"decoded": step, "self-attention": cache.nbytes(),
                            "cross-attention": cache.nbytes(cross=True)})
    return tokens[:, 1:], records  # (B, N)


@dataclass(frozen=True)
class SideBySide:
    """What :func:`side_by_side` measured: one row per run (``variant``, ``seed``, ``parameters``,
    the last validation ``loss`` and ``exact match``, ``seconds``), and each run's validation loss
    at ``steps`` (``curves``, keyed ``"variant, seed s"``)."""

    table: pd.DataFrame
    curves: dict[str, list[float]]
    steps: list[int]


def _train(task: ReverseTask, overrides: Mapping[str, Any], seed: int, steps: int, size: Mapping[str, Any],
           lr: float | None) -> Trainer:
    """One model of the reverse task: the trainer's settings (``DEFAULTS["toy"]``) for ``steps``
    updates (at peak rate ``lr``, default the trainer's), validated on the held-out sequences four times."""
    s, vocab = task.settings, task.vocab
    ids: dict[str, Any] = dict(pad_id=vocab.pad_id, bos_id=vocab.bos_id, eos_id=vocab.eos_id)
    torch.manual_seed(seed)
    config = TransformerConfig.from_preset(s["preset"], src_vocab_size=len(vocab), tgt_vocab_size=len(vocab),
                                           dropout=s["dropout"], **{**size, **overrides})
    trainer = Trainer(
        Transformer(config), make_loader(task.train, s["batch_size"], seed=seed, **ids),
        TrainConfig(epochs=None, max_steps=steps, schedule=s["schedule"], lr=s["lr"] if lr is None else lr,
                    warmup_steps=min(s["warmup_steps"], steps // 4), label_smoothing=s["label_smoothing"],
                    clip_norm=s["clip_norm"], pad_id=vocab.pad_id, eval_every=max(steps // 4, 1),
                    log_every=steps, progress=False),
        val_loader=make_loader(task.heldout, 500, shuffle=False, **ids))  # on the GPU if there is one
    trainer.fit()
    return trainer


def side_by_side(variants: Mapping[str, Mapping[str, Any]], *, steps: int, size: Mapping[str, Any] | None = None,
                 seeds: Mapping[str, Sequence[int]] | None = None, lr: float | None = None) -> SideBySide:
    """Train each of ``variants`` (name -> config fields) on the reverse task, ``steps`` updates.

    Args:
        variants: e.g. :data:`VARIANTS`.
        steps: optimizer updates of each run (the cosine schedule's length too).
        size: config fields that every run shares (default: the trainer's preset as it is).
        seeds: the seeds of each variant (default ``(0,)``); a seed chooses the initial weights
            and the order of the batches, so runs with one seed see the same batches in one order.
        lr: the schedule's peak learning rate (default: the trainer's).
    """
    task = reverse_task()
    rows, curves = [], {}
    validated: list[int] = []
    for name, overrides in variants.items():
        for seed in (seeds or {}).get(name, (0,)):
            start = time.perf_counter()
            trainer = _train(task, overrides, seed, steps, size or {}, lr)
            val = trainer.history["val"]
            validated = [int(r["step"]) for r in val]
            curves[f"{name}, seed {seed}"] = [r["loss"] for r in val]
            rows.append({"variant": name, "seed": seed, "parameters": count_parameters(trainer.model),
                         "loss": val[-1]["loss"], "exact match": val[-1]["exact_match"],
                         "seconds": time.perf_counter() - start})
    return SideBySide(pd.DataFrame(rows), curves, validated)
