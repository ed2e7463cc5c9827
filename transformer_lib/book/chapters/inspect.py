"""Chapters 1 to 4 on the shipped trained model: what each mechanism looks like after training.

Each chapter builds a mechanism on numbers small enough to check by hand; its last section opens the
trained German-to-English model (:mod:`transformer_lib.book.trained`) and measures the same
mechanism there: chapter 1 its cross-attention aligning German and English pieces, chapter 2 its
masks, chapter 3 its learned embeddings beside the positional signal, chapter 4 what each block
does to a sentence. Everything here reads the model; nothing trains.

Shape letters: ``S`` source length, ``T`` target length, ``D`` model width, ``V`` vocabulary.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

import torch
from torch import Tensor

from transformer_lib.blocks import DecoderLayer
from transformer_lib.book import trained
from transformer_lib.masking import padding_mask, target_mask

__all__ = ["LEXICON", "written_alignment", "lexicon_alignment", "alignment_by_head", "future_weight",
           "PaddingComparison", "alone_and_in_batch", "nearest_pieces", "scaled_embedding_norms",
           "position_norms", "LayerReadout", "logit_lens", "sublayer_update_sizes"]

LEXICON = {
    "Männer": "men", "Fußball": "soccer", "Wiese": "field", "Frau": "woman", "Hut": "hat",
    "Hund": "dog", "See": "lake", "Mann": "man", "Obst": "fruit", "Markt": "market",
    "grünen": "green", "roten": "red", "kleiner": "small", "junge": "young",
}
"""German words of :data:`~transformer_lib.book.trained.SENTENCES` and the English word a
translation uses for each: the hand-made answer key that cross-attention's alignment is scored by."""


def written_alignment(maps: trained.SentenceAttention, layer: int, head: int) -> list[tuple[str, str, float]]:
    """For each target piece the decoder *writes*, the source piece one cross-attention head looks
    at most while writing it, and that weight.

    The decoder's query at position ``i`` reads the pieces up to ``i`` and predicts piece ``i + 1``,
    so the row of query ``i`` is paired with the piece written there (``maps.target[i + 1]``, or
    ``<eos>`` after the last one)."""
    weights = maps.decoder_cross[layer][head]  # (T, S)
    written = [*maps.target[1:], "<eos>"]
    best = weights.max(dim=-1)
    return [(piece, maps.source[j], float(w)) for piece, j, w in zip(written, best.indices.tolist(), best.values.tolist())]


def lexicon_alignment(maps: trained.SentenceAttention, layer: int, head: int) -> list[tuple[str, str, bool]]:
    """``(german, english, aligned)`` for each :data:`LEXICON` pair present in the sentence as whole
    pieces on both sides: ``aligned`` when writing the English piece, the head looks most at the German."""
    pairs = []
    looked_at = {piece: source for piece, source, _ in written_alignment(maps, layer, head)}
    for german, english in LEXICON.items():
        if "▁" + german in maps.source and "▁" + english in maps.target[1:]:
            pairs.append((german, english, looked_at["▁" + english] == "▁" + german))
    return pairs


def alignment_by_head(sentences: Sequence[str] = trained.SENTENCES) -> list[dict[str, float]]:
    """Per cross-attention layer and head: the share of :data:`LEXICON` pairs of ``sentences`` it
    aligns (German word looked at most while writing its English word), and how many pairs there were."""
    maps = [trained.attention(s) for s in sentences]
    rows = []
    for layer in range(len(maps[0].decoder_cross)):
        for head in range(maps[0].decoder_cross[layer].size(0)):
            pairs = [aligned for m in maps for _, _, aligned in lexicon_alignment(m, layer, head)]
            rows.append({"layer": layer + 1, "head": head + 1, "aligned": sum(pairs) / len(pairs), "pairs": len(pairs)})
    return rows


def future_weight(maps: trained.SentenceAttention) -> float:
    """The largest attention weight any decoder self-attention head of any layer puts on a later
    position (above the diagonal): 0 exactly when the causal mask holds."""
    return max(float(torch.triu(w, diagonal=1).max()) for w in maps.decoder_self)


@dataclass(frozen=True)
class PaddingComparison:
    """One sentence translated alone and as row 0 of a padded batch with longer sentences."""

    alone: str
    in_batch: str
    pads: int
    memory_difference: float  # largest |difference| of the encoder's outputs at the real positions
    logits_difference: float  # same, for the decoder's logits along the sentence's own translation


def alone_and_in_batch(sentence: str, others: Sequence[str], mask_pads: bool = True,
                       **decoding: Any) -> PaddingComparison:
    """Translate ``sentence`` alone and in a batch with ``others`` (one of them longer, so that it is
    padded), and compare what the model computes for it in both, teacher-forced on its translation
    alone. ``mask_pads=False`` gives the batch a mask that lets every query see the pads too (the
    bug the padding mask prevents). ``decoding``: greedy unless given (``beam_size=``, ...)."""
    translator = trained.translator()
    model = translator.model
    src_one, mask_one = translator.encode([sentence])  # (1, S), (1, 1, 1, S)
    src_all, mask_all = translator.encode([sentence, *others])  # (B, S'), (B, 1, 1, S')
    length = src_one.size(1)
    if src_all.size(1) <= length:
        raise ValueError(f"others must contain a sentence longer than {sentence!r}, so that it is padded")
    if not mask_pads:
        mask_all = torch.ones_like(mask_all)
    options = {"beam_size": 1, **decoding}
    with torch.no_grad():
        ids_one = translator.translate_ids(src_one, mask_one, **options)  # (1, T_out)
        ids_all = translator.translate_ids(src_all, mask_all, **options)  # (B, T_out')
    alone = translator.detokenize(translator.output_tokens(ids_one[0].tolist()))
    in_batch = translator.detokenize(translator.output_tokens(ids_all[0].tolist()))
    vocab = translator.tgt_vocab
    tgt = torch.tensor([[vocab.bos_id, *vocab.encode(translator.tgt_tokenizer.tokenize(alone))]])  # (1, T)
    tgt_all = tgt.expand(src_all.size(0), -1)  # (B, T)
    pad = model.config.pad_id
    with torch.no_grad():
        memory_one = model.encode(src_one, mask_one)  # (1, S, D)
        memory_all = model.encode(src_all, mask_all)  # (B, S', D)
        logits_one = model.output_layer(model.decode(tgt, memory_one, mask_one, target_mask(tgt, pad)))
        logits_all = model.output_layer(model.decode(tgt_all, memory_all, mask_all, target_mask(tgt_all, pad)))
    return PaddingComparison(
        alone=alone, in_batch=in_batch, pads=src_all.size(1) - length,
        memory_difference=float((memory_one[0] - memory_all[0, :length]).abs().max()),
        logits_difference=float((logits_one[0] - logits_all[0]).abs().max()),
    )


def _piece_id(piece: str) -> int:
    tokens = trained.translator().src_vocab.tokens
    if piece not in tokens:
        raise ValueError(f"{piece!r} is not a piece of the model's vocabulary")
    return tokens.index(piece)


def nearest_pieces(piece: str, k: int = 5) -> list[tuple[str, float]]:
    """The ``k`` pieces whose learned embeddings are closest to ``piece``'s by cosine similarity
    (itself left out), with the similarity."""
    table = trained.translator().model.src_embed.weight.detach()  # (V, D), shared and tied
    unit = torch.nn.functional.normalize(table, dim=-1)
    i = _piece_id(piece)
    similarity = unit @ unit[i]  # (V,)
    similarity[i] = -2.0
    best = similarity.topk(k)
    tokens = trained.translator().src_vocab.tokens
    return [(tokens[j], float(s)) for j, s in zip(best.indices.tolist(), best.values.tolist())]


def scaled_embedding_norms() -> Tensor:
    """``(V,)``: the length of each piece's vector as it enters the model, ``sqrt(D)`` times its
    learned embedding, the special tokens left out."""
    model = trained.translator().model
    vocab = trained.translator().src_vocab
    ids = torch.arange(model.src_embed.weight.size(0))
    with torch.no_grad():
        norms = model.src_embed(ids[None])[0].norm(dim=-1)  # (V,)
    specials = {vocab.pad_id, vocab.bos_id, vocab.eos_id, vocab.unk_id}
    keep = torch.tensor([i not in specials for i in ids.tolist()])
    return norms[keep]


def position_norms(length: int = 64) -> Tensor:
    """``(length,)``: the length of the sinusoidal positional vector added at each position."""
    positions = trained.translator().model.src_positions
    zeros = torch.zeros(1, length, trained.translator().model.config.d_model)
    with torch.no_grad():
        return positions(zeros)[0].norm(dim=-1)


@dataclass(frozen=True)
class LayerReadout:
    """The decoder's residual stream read through the tied output layer after each layer.

    ``inputs`` are the decoder's input pieces (from ``<bos>``), ``written`` the pieces the model
    writes (its translation and ``<eos>``); ``top[l][i]`` is the most likely piece at position ``i``
    after ``l`` layers (``l = 0``: the embeddings alone), ``probability[l][i]`` its probability."""

    inputs: list[str]
    written: list[str]
    top: list[list[str]]
    probability: list[list[float]]


def logit_lens(sentence: str, translation: str | None = None) -> LayerReadout:
    """Run the decoder on ``sentence`` and its translation (the model's own if none is given),
    and after the embeddings and after each layer apply the final LayerNorm and the output layer, as
    if the stack ended there (the "logit lens", nostalgebraist 2020)."""
    translator = trained.translator()
    model = translator.model
    translation = trained.translate([sentence])[0] if translation is None else translation
    vocab = translator.tgt_vocab
    src = torch.tensor([translator.source_ids([sentence])[0]])  # (1, S)
    tgt = torch.tensor([[vocab.bos_id, *vocab.encode(translator.tgt_tokenizer.tokenize(translation))]])  # (1, T)
    pad = model.config.pad_id
    src_mask, tgt_mask = padding_mask(src, pad), target_mask(tgt, pad)
    top, probability = [], []
    with torch.no_grad():
        memory = model.encode(src, src_mask)  # (1, S, D)
        x = model._embed_target(tgt, 0)  # (1, T, D)
        states = [x]
        for layer in model.decoder.layers:
            x, _, _ = layer(x, memory, src_mask, tgt_mask)
            states.append(x)
        final_norm = model.decoder.final_norm or torch.nn.Identity()  # Post-LN models have none
        for state in states:
            p = torch.softmax(model.output_layer(final_norm(state)), dim=-1)[0]  # (T, V)
            best = p.max(dim=-1)
            top.append([vocab.tokens[j] for j in best.indices.tolist()])
            probability.append(best.values.tolist())
    pieces = [vocab.tokens[j] for j in tgt[0].tolist()]
    return LayerReadout(inputs=pieces, written=[*pieces[1:], "<eos>"], top=top, probability=probability)


def sublayer_update_sizes(sentences: Sequence[str] = trained.SENTENCES) -> list[dict[str, float | int | str]]:
    """For each decoder layer and sublayer, the length of what the sublayer adds to the residual
    stream over the length of the stream it reads, averaged over the target positions of
    ``sentences`` (each teacher-forced on its own translation)."""
    translator = trained.translator()
    model = translator.model
    vocab = translator.tgt_vocab
    pad = model.config.pad_id
    totals: dict[tuple[int, str], list[float]] = {}
    for sentence in sentences:
        translation = trained.translate([sentence])[0]
        src = torch.tensor([translator.source_ids([sentence])[0]])  # (1, S)
        tgt = torch.tensor([[vocab.bos_id, *vocab.encode(translator.tgt_tokenizer.tokenize(translation))]])  # (1, T)
        src_mask, tgt_mask = padding_mask(src, pad), target_mask(tgt, pad)
        with torch.no_grad():
            memory = model.encode(src, src_mask)  # (1, S, D)
            x = model._embed_target(tgt, 0)  # (1, T, D)
            for number, layer in enumerate(cast("list[DecoderLayer]", model.decoder.layers), start=1):
                steps: tuple[tuple[str, Any, Any], ...] = (
                    ("self-attention", layer.self_attn_residual, lambda h: layer.self_attn(h, h, h, mask=tgt_mask)[0]),
                    ("cross-attention", layer.cross_attn_residual, lambda h: layer.cross_attn(h, memory, memory, mask=src_mask)[0]),
                    ("feed-forward", layer.ff_residual, layer.feed_forward),
                )
                for name, residual, sublayer in steps:
                    update = sublayer(residual.sublayer_input(x))  # (1, T, D)
                    ratio = update.norm(dim=-1) / x.norm(dim=-1)  # (1, T)
                    totals.setdefault((number, name), []).extend(ratio[0].tolist())
                    x = residual.add(x, update)
    return [{"layer": number, "sublayer": name, "relative update": sum(v) / len(v)}
            for (number, name), v in totals.items()]
