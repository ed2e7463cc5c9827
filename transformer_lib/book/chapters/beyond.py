"""Chapter 7's shared set-up: the English captions of Multi30k as a word corpus, their batches, and
the caption language model that one section trains and the next compares with.

The corpus is tokenized once and the model trained once; both then come from the book's cache
(:mod:`transformer_lib.book.cache`), so the masked-word section need not retrain the model it
measures itself against.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from transformer_lib.book.cache import cached
from transformer_lib.book.experiment import current_profile, pick
from transformer_lib.decoding import sample_continue
from transformer_lib.language_models import IGNORE_INDEX, CaptionCorpus, caption_corpus, lm_batches, train_steps
from transformer_lib.masked_lm import MASK
from transformer_lib.model import DecoderOnlyTransformer
from transformer_lib.config import TransformerConfig
from transformer_lib.vocab import SPECIALS, Vocab

__all__ = ["caption_batches", "caption_data", "caption_language_model", "caption_model_size", "joined",
           "longest_training_source", "reversal_sequences", "sample_captions", "sequence_table", "train_caption_lm"]


def caption_data() -> CaptionCorpus:
    """The English training and validation captions as lowercased spaCy words, with a vocabulary
    of the training words seen at least twice (and ``<mask>``, for the masked model):
    :func:`~transformer_lib.language_models.caption_corpus` the first time, then from the cache."""

    def tokenize(folder: Path) -> None:
        corpus = caption_corpus(min_freq=2, extra_specials=[MASK])
        payload = {"vocab": corpus.vocab.to_dict(), "ids": corpus.ids, "text": corpus.text}
        (folder / "captions.json").write_text(json.dumps(payload, ensure_ascii=False), encoding="utf-8")

    folder = cached("caption-corpus", {"min_freq": 2, "extra_specials": [MASK]}, tokenize)
    payload = json.loads((folder / "captions.json").read_text(encoding="utf-8"))
    return CaptionCorpus(Vocab.from_dict(payload["vocab"]), payload["ids"], payload["text"])


def caption_model_size() -> dict[str, Any]:
    """The size and training length of both caption models: two layers of width 64 for 200 steps in
    the fast profile, four of width 128 for 3,000 in the full one."""
    return {"size": pick(fast=dict(d_model=64, d_ff=256, dropout=0.0), full=dict(d_model=128, d_ff=512, dropout=0.1)),
            "n_layers": pick(fast=2, full=4), "steps": pick(fast=200, full=3000), "epochs": pick(fast=1, full=7)}


def caption_batches(captions: CaptionCorpus) -> tuple[list[tuple[Tensor, Tensor]], list[tuple[Tensor, Tensor]]]:
    """Training batches of 64 captions of similar length (chapter 5's length bucketing), as many as
    the profile trains for, and the validation captions in batches of 256."""
    vocab, steps = captions.vocab, caption_model_size()
    ids: dict[str, Any] = dict(bos_id=vocab.bos_id, eos_id=vocab.eos_id, pad_id=vocab.pad_id)
    train = [b for epoch in range(steps["epochs"]) for b in lm_batches(captions.ids["train"], 64, epoch=epoch, **ids)]
    return train[:steps["steps"]], lm_batches(captions.ids["val"], 256, shuffle=False, **ids)


def train_caption_lm(vocab_size: int, batches: list[tuple[Tensor, Tensor]],
                     device: torch.device | str = "cpu") -> tuple[DecoderOnlyTransformer, list[float]]:
    """The decoder-only caption model with RoPE, trained on ``batches`` by ``train_steps``."""
    steps = caption_model_size()
    torch.manual_seed(0)
    model = DecoderOnlyTransformer(TransformerConfig.decoder_only(
        "tiny", vocab_size=vocab_size, positional="rope", max_len=64,
        n_decoder_layers=steps["n_layers"], **steps["size"])).to(device)
    losses = train_steps(model, batches, lr=3e-3, warmup_steps=30, device=device)
    return model, losses


def caption_language_model(captions: CaptionCorpus,
                           device: torch.device | str = "cpu") -> tuple[DecoderOnlyTransformer, dict[str, Any]]:
    """:func:`train_caption_lm` on :func:`caption_batches`, once; then the trained weights from the
    cache. Returns the model (in eval mode) and its training record: ``losses`` (one per step) and
    ``seconds`` (how long the training took, when it ran)."""
    device = torch.device(device)

    def train(folder: Path) -> None:
        started = time.perf_counter()
        model, losses = train_caption_lm(len(captions.vocab), caption_batches(captions)[0], device)
        torch.save(model.state_dict(), folder / "model.pt")
        record = {"losses": losses, "seconds": time.perf_counter() - started}
        (folder / "training.json").write_text(json.dumps(record), encoding="utf-8")

    key = {"profile": current_profile(), "device": device.type, "vocab": len(captions.vocab)}
    folder = cached("caption-lm", key, train)
    steps = caption_model_size()
    model = DecoderOnlyTransformer(TransformerConfig.decoder_only(
        "tiny", vocab_size=len(captions.vocab), positional="rope", max_len=64,
        n_decoder_layers=steps["n_layers"], **steps["size"])).to(device)
    model.load_state_dict(torch.load(folder / "model.pt", map_location=device, weights_only=True))
    return model.eval(), json.loads((folder / "training.json").read_text(encoding="utf-8"))


def longest_training_source() -> int:
    """The longest Multi30k training source, in the shipped model's tokens (BPE pieces and
    ``<eos>``): what "longer than any input it trained on" means for it. Counted once, then cached."""
    from transformer_lib.book import trained
    from transformer_lib.multi30k import load_multi30k

    model = trained.translator()
    data = model.data

    def count(folder: Path) -> None:
        pairs = load_multi30k("train", src_lang=data["src_lang"], tgt_lang=data["tgt_lang"])
        longest = max(len(ids) for ids in model.source_ids([source for source, _ in pairs]))
        (folder / "longest.json").write_text(json.dumps({"longest": longest}))

    folder = cached("multi30k-longest-source", {"tokenizer": data["tokenizer"], "vocab": data["vocab_size"]}, count)
    return int(json.loads((folder / "longest.json").read_text())["longest"])


def joined(pairs: list[tuple[str, str]], k: int) -> list[tuple[str, str]]:
    """Every ``k`` consecutive pairs joined into one (sources with a space, references too); a
    remainder shorter than ``k`` is left out."""
    if k < 1:
        raise ValueError(f"k={k}: join at least one sentence")
    return [(" ".join(s for s, _ in pairs[i:i + k]), " ".join(r for _, r in pairs[i:i + k]))
            for i in range(0, len(pairs) - k + 1, k)]


def reversal_sequences(vocab: Vocab, n: int, size: int,
                       generator: torch.Generator | None = None) -> tuple[Tensor, Tensor]:
    """``size`` reversal questions of ``n`` symbols written as one sequence for a decoder-only model,
    ``x₁ … xₙ <bos> xₙ … x₁ <eos>``, as the inputs and targets of next-token prediction (section 7.4).

    The symbols are ``vocab``'s ordinary tokens (every id after the four :data:`SPECIALS`). The targets are the
    sequence shifted by one, with the question's ``n`` targets set to ``IGNORE_INDEX``: predicting the
    question is not the task, so the loss skips it.

    Shape:
        inputs, targets: ``(size, 2 n + 1)``, on the CPU.
    """
    first = len(SPECIALS)
    x = torch.randint(first, len(vocab), (size, n), generator=generator)  # (size, n)
    sequence = torch.cat([x, torch.full((size, 1), vocab.bos_id), x.flip(1),
                          torch.full((size, 1), vocab.eos_id)], dim=1)  # (size, 2 n + 2)
    inputs, targets = sequence[:, :-1], sequence[:, 1:].clone()
    targets[:, :n] = IGNORE_INDEX
    return inputs, targets


def sequence_table(vocab: Vocab, inputs: Sequence[int], targets: Sequence[int]) -> Any:
    """One next-token-prediction sequence as a table, a row per position: the token it reads and
    the token it is scored on (``not scored`` where the target is ``IGNORE_INDEX`` or padding)."""
    import pandas as pd

    skip = {IGNORE_INDEX, vocab.pad_id}
    return pd.DataFrame({"position": range(len(inputs)),
                         "reads": vocab.decode(list(inputs), strip_specials=False),
                         "predicts": ["not scored" if t in skip else vocab.tokens[t] for t in targets]})


def sample_captions(model: DecoderOnlyTransformer, vocab: Vocab, prompt: Sequence[str], n: int = 3,
                    seed: int = 0, max_new_tokens: int = 20, **knobs: Any) -> list[list[str]]:
    """``n`` captions sampled from ``model`` after ``<bos>`` and the words of ``prompt``, with
    :func:`~transformer_lib.decoding.sample_continue` and its knobs (``temperature``, ``top_k``,
    ``top_p``), from a generator seeded with ``seed``: each the prompt's words and the sampled ones,
    without specials."""
    device = next(model.parameters()).device
    start = torch.tensor([[vocab.bos_id, *vocab.encode(list(prompt))]], device=device)  # (1, P)
    out = sample_continue(model, start.expand(n, -1), max_new_tokens=max_new_tokens, **knobs,
                          eos_id=vocab.eos_id, pad_id=vocab.pad_id,
                          generator=torch.Generator(device).manual_seed(seed))  # (n, <= max_new_tokens)
    return [vocab.decode([*start[0].tolist(), *row]) for row in out.tolist()]
