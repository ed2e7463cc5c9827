"""The shipped pretrained model (:mod:`transformer_lib.pretrained`) as the chapters show it.

Every chapter puts the trained German-to-English model beside its small worked examples: its
attention on a real sentence, its embeddings and positions, what each block does, its translations,
beams and samples, and what its heads do. This module loads it once per kernel and gives the
chapters what they measure on it. Nothing here trains or downloads: the model is package data.

    >>> from transformer_lib.book import trained
    >>> translator = trained.translator()                     # doctest: +SKIP
    >>> trained.translate(["Ein Hund rennt."])                 # doctest: +SKIP
    ['A dog is running.']
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, cast

import torch
from torch import Tensor

from transformer_lib import pretrained
from transformer_lib.attention import MultiHeadAttention
from transformer_lib.evaluation import bleu_scores
from transformer_lib.masking import padding_mask, target_mask
from transformer_lib.translator import Translator

__all__ = ["SENTENCES", "translator", "record", "headline", "decoding", "translate", "SentenceAttention",
           "attention", "attention_modules", "without_head", "head_statistics", "bleu"]

SENTENCES = (
    "Zwei junge Männer spielen Fußball auf einer grünen Wiese.",
    "Eine Frau mit einem roten Hut fährt Fahrrad.",
    "Ein kleiner Hund springt in den See.",
    "Ein Mann verkauft Obst auf einem Markt.",
)
"""Sentences written for the book (none is in Multi30k), which the chapters translate and dissect."""


@lru_cache(maxsize=None)
def translator() -> Translator:
    """The pretrained model, loaded once per process (weights checked against their checksum)."""
    return pretrained.load()


@lru_cache(maxsize=None)
def record() -> pretrained.PretrainedInfo:
    """The file's record: config, tokenizer, the training run's metrics, the chosen decoding."""
    return pretrained.info()


def headline() -> dict[str, Any]:
    """The numbers the book quotes about the model (:func:`transformer_lib.pretrained.headline`)."""
    return pretrained.headline(record())


def decoding() -> dict[str, Any]:
    """The decoding chosen on validation, as keywords of :meth:`Translator.translate`."""
    return dict(record().decoding)


def translate(sentences: Sequence[str], **options: Any) -> list[str]:
    """Translations with the chosen decoding unless ``options`` say otherwise (``beam_size=1``: greedy)."""
    return translator().translate(list(sentences), **options)  # the model's default is its chosen decoding


@dataclass
class SentenceAttention:
    """One sentence pair's attention in the trained model, every layer and head.

    ``encoder_self[l]`` is ``(H, S, S)``, ``decoder_self[l]`` ``(H, T, T)``, ``decoder_cross[l]``
    ``(H, T, S)``; rows are queries. ``source``/``target`` are the tokens (pieces) on each axis: the
    source with its ``<eos>``, the target from ``<bos>`` (the decoder's inputs).
    """

    source: list[str]
    target: list[str]
    encoder_self: list[Tensor]
    decoder_self: list[Tensor]
    decoder_cross: list[Tensor]


def attention(sentence: str, translation: str | None = None) -> SentenceAttention:
    """The trained model's attention weights for ``sentence`` and ``translation`` (its own
    translation, with the chosen decoding, if none is given), teacher-forced in one pass."""
    model = translator()
    translation = translate([sentence])[0] if translation is None else translation
    src_ids = model.source_ids([sentence])[0]
    tgt_tokens = model.tgt_tokenizer.tokenize(translation)
    vocab = model.tgt_vocab
    tgt_ids = [vocab.bos_id, *vocab.encode(tgt_tokens)]
    src, tgt = torch.tensor([src_ids]), torch.tensor([tgt_ids])
    pad = model.model.config.pad_id
    with torch.no_grad():
        maps = model.model.attention_maps(src, tgt, padding_mask(src, pad), target_mask(tgt, pad))
    return SentenceAttention(
        source=[model.src_vocab.tokens[i] for i in src_ids],
        target=[vocab.tokens[i] for i in tgt_ids],
        encoder_self=[w[0] for w in maps.encoder_self], decoder_self=[w[0] for w in maps.decoder_self],
        decoder_cross=[w[0] for w in maps.decoder_cross],
    )


def attention_modules(kind: str) -> list[MultiHeadAttention]:
    """The attention modules of one kind, layer by layer: ``"encoder_self"``, ``"decoder_self"`` or
    ``"decoder_cross"``."""
    model = translator().model
    layers = {"encoder_self": (model.encoder.layers, "self_attn"), "decoder_self": (model.decoder.layers, "self_attn"),
              "decoder_cross": (model.decoder.layers, "cross_attn")}
    if kind not in layers:
        raise ValueError(f"kind={kind!r}: choose one of {sorted(layers)}")
    stack, name = layers[kind]
    return [cast(MultiHeadAttention, getattr(layer, name)) for layer in stack]


@contextmanager
def without_head(kind: str, layer: int, head: int) -> Iterator[None]:
    """Inside the block, one head of the trained model contributes nothing: its slice of the
    concatenated heads is zeroed before the output projection (the model is restored after)."""
    module = attention_modules(kind)[layer]
    if not 0 <= head < module.n_heads:
        raise ValueError(f"head={head}: the model has heads 0 to {module.n_heads - 1}")
    width = module.d_v

    def zero(_: torch.nn.Module, inputs: tuple[Tensor, ...]) -> tuple[Tensor, ...]:
        x = inputs[0].clone()
        x[..., head * width:(head + 1) * width] = 0
        return (x, *inputs[1:])

    handle = module.out_proj.register_forward_pre_hook(zero)
    try:
        yield
    finally:
        handle.remove()


def head_statistics(sentences: Sequence[str], kind: str = "encoder_self") -> list[dict[str, Any]]:
    """Per layer and head, averaged over every query of ``sentences``: the entropy of its attention
    (bits; low = it looks at one token) and the mean distance, in tokens, from each query to where
    it looks (signed for self-attention: negative = to the left). Cross-attention has no distance."""
    rows = []
    per_sentence = [attention(s) for s in sentences]
    for layer in range(len(getattr(per_sentence[0], kind))):
        for head in range(getattr(per_sentence[0], kind)[layer].size(0)):
            entropy, distance, count = 0.0, 0.0, 0
            for maps in per_sentence:
                w = getattr(maps, kind)[layer][head]  # (queries, keys)
                entropy += float(-(w * w.clamp_min(1e-12).log2()).sum())
                if kind != "decoder_cross":
                    offsets = torch.arange(w.size(1)) - torch.arange(w.size(0))[:, None]
                    distance += float((w * offsets).sum())
                count += w.size(0)
            rows.append({"layer": layer + 1, "head": head + 1, "entropy_bits": entropy / count,
                         "mean_offset": distance / count if kind != "decoder_cross" else None})
    return rows


def bleu(pairs: Sequence[tuple[str, str]], beam_size: int = 1, change: Callable[[], Any] | None = None) -> float:
    """Cased sacreBLEU of the trained model on ``pairs`` (source, reference), greedy by default;
    ``change`` is a context-manager factory applied while translating (e.g. removing a head)."""
    sources = [source for source, _ in pairs]
    if change is None:
        hypotheses = translate(sources, beam_size=beam_size)
    else:
        with change():
            hypotheses = translate(sources, beam_size=beam_size)
    return bleu_scores(hypotheses, [reference for _, reference in pairs])["cased"].score
