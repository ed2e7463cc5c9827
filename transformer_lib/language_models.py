"""Language models on plain sentences (chapter 7): batches for next-token prediction, the loss, perplexity,
and the short training loop that the decoder-only and the masked (encoder-only) models share.

- Data: :func:`caption_corpus`, one side of Multi30k (the English captions) as word ids.
- Batches: :func:`lm_batch` (one batch of sentences, shifted by one), :func:`lm_batches` (a corpus,
  length-bucketed with chapter 5's :class:`~transformer_lib.batching.BucketBatchSampler`).
- Loss and evaluation: :func:`next_token_loss`, :func:`token_nll`, :func:`perplexity`.
- Training: :func:`train_steps`, one pass of chapter 5's :class:`~transformer_lib.trainer.Trainer`
  with a loss function passed in (Adam, linear warm-up).

Shapes::

    B  batch size    T  sequence length    V  vocabulary size
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .batching import BucketBatchSampler, pad_sequences
from .multi30k import load_multi30k
from .tokenizers import tokenize_corpus
from .trainer import TrainConfig, Trainer
from .vocab import SPECIALS, Vocab

__all__ = [
    "IGNORE_INDEX",
    "CaptionCorpus",
    "caption_corpus",
    "lm_batch",
    "lm_batches",
    "next_token_loss",
    "token_nll",
    "perplexity",
    "train_steps",
]

# Targets with this value are not scored (F.cross_entropy's default ignore_index).
IGNORE_INDEX = -100

LossFn = Callable[[nn.Module, Tensor, Tensor], Tensor]


@dataclass
class CaptionCorpus:
    """Sentences of one language as word ids: a vocabulary built on ``train``, and each split's ids and text."""

    vocab: Vocab
    ids: dict[str, list[list[int]]]
    text: dict[str, list[str]]


def caption_corpus(
    root: str | Path | None = None,
    *,
    lang: str = "en",
    splits: Sequence[str] = ("train", "val"),
    min_freq: int = 2,
    lowercase: bool = True,
    extra_specials: Sequence[str] = (),
    **find_options: Any,
) -> CaptionCorpus:
    """One side of Multi30k as a monolingual corpus: spaCy words, a vocabulary of the training words
    seen at least ``min_freq`` times (after :data:`~transformer_lib.vocab.SPECIALS` and
    ``extra_specials``, e.g. ``<mask>``), and each split as ids (rarer words are ``<unk>``).

    ``root`` and ``find_options`` are :func:`~transformer_lib.multi30k.load_multi30k`'s (the files
    are looked for in ``root``, then ``MULTI30K_DIR``, then downloaded).
    """
    other = "de" if lang == "en" else "en"
    text = {split: [pair[1] for pair in load_multi30k(split, root, src_lang=other, tgt_lang=lang, **find_options)]
            for split in splits}
    words = {split: tokenize_corpus(sentences, lang, lowercase=lowercase) for split, sentences in text.items()}
    if "train" not in words:
        raise ValueError(f"the vocabulary is built on the training split: include 'train' in splits, got {list(splits)}")
    vocab = Vocab.build(words["train"], min_freq=min_freq, specials=(*SPECIALS, *extra_specials))
    ids = {split: [vocab.encode(sentence) for sentence in sentences if sentence] for split, sentences in words.items()}
    return CaptionCorpus(vocab, ids, text)


def lm_batch(sentences: Sequence[Sequence[int]], *,
             bos_id: int, eos_id: int, pad_id: int) -> tuple[Tensor, Tensor]:
    """One batch for next-token prediction: ``<bos> w1 .. wn`` in, ``w1 .. wn <eos>`` out.

    Padding in the targets becomes :data:`IGNORE_INDEX`, so it is never scored.

    Returns:
        ``(inputs, targets)``, both ``(B, T)`` with ``T`` the longest sentence plus one.

    Example:
        >>> inputs, targets = lm_batch([[7, 8], [9]], bos_id=2, eos_id=3, pad_id=0)
        >>> inputs.tolist(), targets.tolist()
        ([[2, 7, 8], [2, 9, 0]], [[7, 8, 3], [9, 3, -100]])
    """
    if len(sentences) == 0:
        raise ValueError("lm_batch needs at least one sentence, got none")
    if any(len(s) == 0 for s in sentences):
        raise ValueError("every sentence needs a token: drop empty ones")
    inputs = pad_sequences([[bos_id, *s] for s in sentences], pad_id)
    targets = pad_sequences([[*s, eos_id] for s in sentences], IGNORE_INDEX)
    return inputs, targets  # (B, T) each


def lm_batches(
    sentences: Sequence[Sequence[int]],
    batch_size: int,
    *,
    bos_id: int,
    eos_id: int,
    pad_id: int,
    shuffle: bool = True,
    seed: int = 0,
    epoch: int = 0,
) -> list[tuple[Tensor, Tensor]]:
    """A corpus as :func:`lm_batch` batches of sentences of similar length (little padding).

    ``shuffle=False`` keeps the corpus order (for evaluation); otherwise epoch ``epoch`` of ``seed``
    always gives the same batches.
    """
    sampler = BucketBatchSampler([len(s) for s in sentences], batch_size, bucket=shuffle, shuffle=shuffle, seed=seed)
    sampler.set_epoch(epoch)
    return [lm_batch([sentences[i] for i in batch], bos_id=bos_id, eos_id=eos_id, pad_id=pad_id)
            for batch in sampler.batches()]


def next_token_loss(model: nn.Module, inputs: Tensor, targets: Tensor) -> Tensor:
    """Mean cross-entropy of the next token over the scored targets (``model(inputs)`` gives ``(B, T, V)``)."""
    logits = model(inputs)  # (B, T, V)
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=IGNORE_INDEX)


@torch.no_grad()
def token_nll(model: nn.Module, inputs: Tensor, targets: Tensor) -> tuple[float, int]:
    """Summed negative log-likelihood (nats) of the scored targets of one batch, and how many there are."""
    logits = model(inputs)  # (B, T, V)
    nll = F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten(), ignore_index=IGNORE_INDEX, reduction="sum")
    return float(nll), int((targets != IGNORE_INDEX).sum())


def perplexity(
    model: nn.Module, batches: Sequence[tuple[Tensor, Tensor]], device: torch.device | str = "cpu"
) -> float:
    """``exp`` of the mean negative log-likelihood per scored token, over all batches.

    The mean is over tokens, not over batches, so a batch of long sentences counts for more. A
    model that spreads its probability evenly over ``V`` tokens has perplexity ``V``.
    """
    was_training = model.training
    model.eval()
    total, count = 0.0, 0
    try:
        for inputs, targets in batches:
            nll, n = token_nll(model, inputs.to(device), targets.to(device))
            total, count = total + nll, count + n
    finally:
        model.train(was_training)
    if count == 0:
        raise ValueError("no scored tokens in the batches: perplexity is undefined")
    return math.exp(total / count)


def train_steps(
    model: nn.Module,
    batches: Sequence[tuple[Tensor, Tensor]],
    loss_fn: LossFn = next_token_loss,
    *,
    lr: float = 3e-3,
    warmup_steps: int = 50,
    clip_norm: float | None = 1.0,
    device: torch.device | str = "cpu",
) -> list[float]:
    """One pass over ``batches`` with Adam, a linear warm-up to ``lr`` and a constant rate after.

    ``loss_fn(model, inputs, targets)`` gives the mean loss of one batch (:func:`next_token_loss`,
    or :func:`~transformer_lib.masked_lm.masked_token_loss`). The updates are chapter 5's
    :class:`~transformer_lib.trainer.Trainer`'s, with Adam's own betas and epsilon (AdamW without
    weight decay is Adam) and the ``constant`` schedule of :data:`~transformer_lib.schedules.SCHEDULES`.
    Returns the loss of every step.
    """
    if lr <= 0 or warmup_steps < 0:
        raise ValueError(f"lr must be positive and warmup_steps non-negative, got lr={lr}, warmup_steps={warmup_steps}")
    config = TrainConfig(
        epochs=1, schedule="constant", lr=lr, warmup_steps=warmup_steps + 1, clip_norm=clip_norm, label_smoothing=0.0,
        betas=(0.9, 0.999), adam_eps=1e-8, log_every=1, progress=False,
    )
    trainer = Trainer(model, batches, config, loss=partial(_mean_loss, loss_fn), device=device)
    trainer.fit()
    return [record["loss"] for record in trainer.history["train"]]


def _mean_loss(loss_fn: LossFn, model: nn.Module, batch: tuple[Tensor, Tensor]) -> tuple[Tensor, int]:
    """``loss_fn``'s mean loss as the trainer's ``(summed loss, count)``: a count of 1."""
    return loss_fn(model, *batch), 1
