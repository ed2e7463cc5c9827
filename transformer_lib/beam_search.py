"""Beam search (chapter 6): keep the ``K`` most probable partial outputs at every step, not just one.

Each step is :func:`~transformer_lib.decoding.next_token_logits`, the decoding step of greedy
decoding and sampling; what beam search adds is the bookkeeping of hypotheses: which to extend,
which have ended, which to return. That bookkeeping is host-side Python (lists of finished
hypotheses per sentence, as in fairseq and Hugging Face), so unlike
:func:`~transformer_lib.decoding.greedy_decode` it reads a few numbers from the device at every step.

Shapes::

    B  batch size (sentences)   K  beam size   T  tokens decoded so far (with <bos>)
    S  source length            V  target vocabulary size   D  model width
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from .decoding import EncoderDecoder, _inference, check_source, never_generated, next_token_logits
from .kv_cache import KVCache
from .validation import check_int, check_number

__all__ = ["MAX_BEAM_ELEMENTS", "gnmt_length_penalty", "Hypothesis", "BeamSearchResult", "beam_search", "check_beam_work"]

# The most numbers one beam-search tensor may hold: a step's scores (B*K rows of V) or the key/value
# cache (B*K rows of every decoder layer's keys and values): 2**30 float32 numbers are 4 GiB. Beam 100
# over 4,096 sentences of an 8,000-token vocabulary would be 13 GB of scores a step, an allocator's
# traceback (or a machine swapping) instead of a message; the trainer's final BLEU (256 sentences,
# beam 4) stays well inside.
MAX_BEAM_ELEMENTS = 2**30


def gnmt_length_penalty(length: int, alpha: float) -> float:
    r"""GNMT's length normalisation (Wu et al. 2016, eq. 14): :math:`((5 + |Y|) / 6)^\alpha`.

    Beam search compares hypotheses by ``log P(Y) / gnmt_length_penalty(|Y|, alpha)``. A sum of
    log-probabilities only falls as a hypothesis grows, so without normalisation (``alpha = 0``)
    short outputs win; ``alpha`` around 0.6 (the paper's choice, also the Transformer paper's)
    compensates part of that. ``|Y|`` counts generated tokens, ``<eos>`` included.
    """
    return ((5.0 + length) / 6.0) ** alpha


@dataclass(frozen=True)
class Hypothesis:
    """One finished beam-search hypothesis.

    Attributes:
        tokens: generated token ids, ending with ``<eos>`` unless it stopped at ``max_new_tokens``.
        log_prob: the sum of its tokens' log-probabilities.
        score: ``log_prob / gnmt_length_penalty(len(tokens), alpha)``; hypotheses are ranked by it.
    """

    tokens: list[int]
    log_prob: float
    score: float


@dataclass(frozen=True)
class BeamSearchResult:
    """What :func:`beam_search` returns.

    Attributes:
        sequences: the best hypothesis of each sentence, ``(B, T_out)``, padded with ``pad_id``
            after ``<eos>`` (the same layout as :func:`greedy_decode`'s output).
        scores: their length-normalised scores ``(B,)``.
        hypotheses: for each sentence, its finished hypotheses (at most ``beam_size``), best first.
    """

    sequences: Tensor
    scores: Tensor
    hypotheses: list[list[Hypothesis]]


def beam_search(
    model: EncoderDecoder,
    src: Tensor,
    src_mask: Tensor | None,
    *,
    beam_size: int,
    max_new_tokens: int,
    bos_id: int,
    eos_id: int | None,
    pad_id: int,
    length_penalty: float = 0.6,
    use_cache: bool = True,
    min_new_tokens: int = 0,
) -> BeamSearchResult:
    """Keep the ``beam_size`` most probable partial outputs at every step, not just one.

    Every sentence of the batch keeps ``K = beam_size`` hypotheses, laid out as ``B * K`` rows
    (rows ``b*K .. b*K + K - 1`` belong to sentence ``b``). Each step extends every hypothesis by
    every token, scores the ``K * V`` candidates by their summed log-probability, and keeps the best.
    A candidate ending in ``<eos>`` is set aside as finished, with score
    ``log_prob / gnmt_length_penalty(length, alpha)``; the next beam is the best ``K`` candidates that do
    not end. A sentence is done when it has ``K`` finished hypotheses (fairseq's stopping rule);
    hypotheses still open at ``max_new_tokens`` are finished there. The batch stops when every sentence
    is done. With ``beam_size=1`` this is exactly :func:`greedy_decode`.

    Args:
        model, src, src_mask, max_new_tokens, bos_id, eos_id, pad_id, use_cache, min_new_tokens: as
            :func:`~transformer_lib.decoding.greedy_decode`.
        beam_size: ``K``, the number of hypotheses kept per sentence. A wide beam finishes many
            short hypotheses early, the empty one among them: ``min_new_tokens=1`` stops it from winning.
        length_penalty: ``alpha`` of :func:`gnmt_length_penalty`; 0 ranks hypotheses by their raw
            log-probability, which favours short ones.

    Returns:
        A :class:`BeamSearchResult`: the best sequence and score per sentence, and every finished
        hypothesis (best first), e.g. to show the beam's alternatives.
    """
    check_source(model, src, max_new_tokens, min_new_tokens, dict(bos_id=bos_id, eos_id=eos_id, pad_id=pad_id))
    check_int("beam_size", beam_size)
    check_number("length_penalty", length_penalty, 0)
    check_beam_work(model, src.size(0), beam_size, src.size(1), max_new_tokens)
    with _inference(model, use_cache) as cache:
        return _beam_search(
            model, src, src_mask, beam_size, max_new_tokens, bos_id, eos_id, pad_id, float(length_penalty), cache,
            min_new_tokens,
        )


def check_beam_work(model: EncoderDecoder, batch_size: int, beam_size: int, src_len: int, max_new_tokens: int,
                    limit: int | None = None) -> None:
    """Refuse, before anything is allocated, a beam search whose largest tensors would hold more than
    ``limit`` numbers (default :data:`MAX_BEAM_ELEMENTS`): a step's scores, ``B * K * V``, and the key/value cache, ``B * K`` rows of
    ``(S + max_new_tokens) * D`` keys and values in each decoder layer. The message names the product,
    the limit, and the largest batch that fits with this beam.

    Raises:
        ValueError: naming ``batch_size``, ``beam_size``, the vocabulary or length, and the limit.
    """
    limit = MAX_BEAM_ELEMENTS if limit is None else limit
    config = getattr(model, "config", None)
    vocab = int(getattr(config, "tgt_vocab_size", 0) or 0)
    width = int(getattr(config, "d_model", 0) or 0) * 2 * len(getattr(model, "decoder_layers", ()))
    per_row = {"scores": (vocab, f"vocabulary of {vocab:,}"),
               "key/value cache": ((src_len + max_new_tokens) * width, f"{src_len + max_new_tokens} positions of "
                                   f"{width:,} keys and values (all decoder layers)")}
    fits = limit // (beam_size * max(max(row for row, _ in per_row.values()), 1))
    for what, (row, described) in per_row.items():
        if batch_size * beam_size * row > limit:
            raise ValueError(
                f"beam search of {batch_size:,} sentences x beam {beam_size} x {described} needs {what} of "
                f"{batch_size * beam_size * row:,} numbers, over the limit of {limit:,} (MAX_BEAM_ELEMENTS, 4 GiB of "
                f"float32): decode at most {fits:,} sentences at a time with this beam (batch size), or a smaller beam"
            )


def _beam_search(
    model: EncoderDecoder,
    src: Tensor,
    src_mask: Tensor | None,
    K: int,
    max_new_tokens: int,
    bos_id: int,
    eos_id: int | None,
    pad_id: int,
    alpha: float,
    cache: KVCache | None,
    min_new_tokens: int,
) -> BeamSearchResult:
    B, device = src.size(0), src.device
    memory = model.encode(src, src_mask).repeat_interleave(K, dim=0)  # (B*K, S, D), encoder run once
    if src_mask is not None and src_mask.size(0) == B:
        src_mask = src_mask.repeat_interleave(K, dim=0)  # (B*K, 1, 1, S)
    tokens = torch.full((B * K, 1), bos_id, dtype=torch.long, device=device)  # (B*K, T)
    # All K hypotheses start as the same "<bos>". Only the first may expand at step 1, or the
    # beam would hold K copies of each candidate.
    beam_scores = torch.full((B, K), float("-inf"), device=device)  # (B, K) summed log-probs
    beam_scores[:, 0] = 0.0
    first_row = torch.arange(B, device=device)[:, None] * K  # (B, 1) row of each sentence's beam 0
    never = torch.tensor(never_generated(bos_id, eos_id, pad_id), dtype=torch.long, device=device)
    finished: list[list[Hypothesis]] = [[] for _ in range(B)]
    done = [False] * B

    for step in range(max_new_tokens):
        inputs = tokens[:, -1:] if cache is not None else tokens  # (B*K, 1) or (B*K, T)
        logits = _scores(model, inputs, memory, src_mask, cache, step, eos_id, min_new_tokens)  # (B*K, V)
        logits[:, never] = float("-inf")  # <bos> and <pad> are never output
        # We keep 2K candidates: at most K of them end in <eos> (one per hypothesis), so K can go
        # on. Each of the best 2K of all K*V extensions is among the best 2K of its own hypothesis,
        # so we look at those only: log P = logit - logsumexp(logits), for 2K tokens instead of V.
        n = min(2 * K, logits.size(-1))
        best_logits, best_tokens = logits.topk(n, dim=-1)  # (B*K, n)
        log_probs = best_logits - logits.logsumexp(dim=-1, keepdim=True)  # (B*K, n)
        candidates = (beam_scores.view(B * K, 1) + log_probs).view(B, K * n)  # (B, K*n)
        top_scores, top_index = candidates.topk(min(2 * K, K * n), dim=-1)  # (B, 2K)
        top_origin = torch.div(top_index, n, rounding_mode="floor")  # (B, 2K) which hypothesis
        top_token = best_tokens.view(B, K * n).gather(1, top_index)  # (B, 2K) which token extends it
        ends = top_token == eos_id if eos_id is not None else torch.zeros_like(top_token, dtype=torch.bool)  # (B, 2K)

        _set_aside_ended(finished, done, tokens, ends, top_scores, top_origin, K, eos_id, step + 1, alpha)

        # The next beam: the best K candidates that do not end (topk keeps their order).
        beam_scores, keep = top_scores.masked_fill(ends, float("-inf")).topk(K, dim=-1)  # (B, K)
        rows = (first_row + top_origin.gather(1, keep)).view(-1)  # (B*K,) rows the new beam extends
        new_tokens = top_token.gather(1, keep).view(-1, 1)  # (B*K, 1)
        tokens = torch.cat([tokens[rows], new_tokens], dim=1)  # (B*K, T + 1)
        if cache is not None:
            cache.reorder(rows)  # each hypothesis continues from its parent's keys and values

        for b in range(B):
            done[b] = done[b] or len(finished[b]) >= K
        if all(done):
            break
    else:
        _finish_open(finished, done, tokens, beam_scores, alpha)  # max_new_tokens reached
    return _best_of_beams(finished, K, pad_id, device)


def _scores(model: EncoderDecoder, inputs: Tensor, memory: Tensor, src_mask: Tensor | None, cache: KVCache | None,
            step: int, eos_id: int | None, min_new_tokens: int) -> Tensor:
    """One step's scores ``(B*K, V)`` in float32, ``<eos>`` barred before ``min_new_tokens``; NaN or
    +inf scores (a corrupt model) are refused, since beam search reads its scores on the host anyway."""
    logits = next_token_logits(model, inputs, memory, src_mask, cache).float()  # (B*K, V)
    if bool((logits.isnan() | logits.isposinf()).any()):
        raise ValueError(
            f"the model's scores at output step {step + 1} are NaN or infinite, so no token can be chosen; "
            "its weights are probably corrupt (a diverged training run?)"
        )
    if eos_id is not None and step < min_new_tokens:
        logits[:, eos_id] = float("-inf")
    return logits


def _set_aside_ended(finished: list[list[Hypothesis]], done: list[bool], tokens: Tensor, ends: Tensor,
                     top_scores: Tensor, top_origin: Tensor, K: int, eos_id: int | None, length: int, alpha: float) -> None:
    """Set aside the candidates that end in ``<eos>``, if they rank among the best K (a lower-ranked
    one would not have survived into the beam either; fairseq and Hugging Face do the same)."""
    for b, j in (ends[:, :K] & torch.isfinite(top_scores[:, :K])).nonzero().tolist():
        if done[b] or len(finished[b]) >= K:
            continue
        row = b * K + int(top_origin[b, j])
        log_prob = float(top_scores[b, j])
        hypothesis_tokens = tokens[row, 1:].tolist() + [eos_id]
        finished[b].append(Hypothesis(hypothesis_tokens, log_prob, log_prob / gnmt_length_penalty(length, alpha)))


def _finish_open(finished: list[list[Hypothesis]], done: list[bool], tokens: Tensor, beam_scores: Tensor,
                 alpha: float) -> None:
    """At ``max_new_tokens``, the hypotheses still open are finished as they are (no ``<eos>``)."""
    B, K = beam_scores.shape
    for b in range(B):
        if done[b]:
            continue
        for k in range(K):
            log_prob = float(beam_scores[b, k])
            if log_prob == float("-inf"):
                continue
            hypothesis_tokens = tokens[b * K + k, 1:].tolist()
            finished[b].append(
                Hypothesis(hypothesis_tokens, log_prob, log_prob / gnmt_length_penalty(len(hypothesis_tokens), alpha))
            )


def _best_of_beams(finished: list[list[Hypothesis]], K: int, pad_id: int, device: torch.device) -> BeamSearchResult:
    hypotheses = [sorted(h, key=lambda hyp: hyp.score, reverse=True)[:K] for h in finished]
    best = [h[0] for h in hypotheses]
    width = max(len(h.tokens) for h in best)
    sequences = torch.full((len(best), width), pad_id, dtype=torch.long, device=device)  # (B, T_out)
    for b, hypothesis in enumerate(best):
        sequences[b, : len(hypothesis.tokens)] = torch.tensor(hypothesis.tokens, device=device)
    scores = torch.tensor([h.score for h in best], device=device)  # (B,)
    return BeamSearchResult(sequences=sequences, scores=scores, hypotheses=hypotheses)
