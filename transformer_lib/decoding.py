"""From a trained model to output sequences: greedy decoding, beam search and sampling.

All three generate one token at a time, left to right: run the decoder on what has been produced so
far, turn the last position's output into a distribution over the next token, pick a token, repeat
until every sequence has produced ``<eos>`` or ``max_len`` tokens. They differ only in how they pick.

Each decoding function takes the model as its first argument (rasbt's ``generate_text_simple``
does the same): the model stays a plain ``nn.Module``, and a new strategy is a new function rather
than a flag on a method. Anything with ``encode``/``decode``/``generator`` and a ``decoder`` stack
works, as :class:`transformer_lib.model.Transformer` provides (see :class:`EncoderDecoder`).

**The key/value cache.** Without a cache, step ``t`` re-runs the decoder over all ``t`` prefix
positions to use the last one: ``O(T^2)`` position-computations for ``T`` tokens, every one but
the last already done at the step before. Causal masking is what makes the old ones reusable:
position ``i`` never sees positions after it, so its keys and values never change. With
``use_cache=True`` decoding runs inside :func:`transformer_lib.kv_cache.kv_cache`: each step feeds
only the newest token, appends its self-attention keys/values to the cache, and reuses the
cross-attention keys/values of the encoder memory, which are computed on the first step only. The
result is the same to float rounding (``tests/test_decoding.py``).

Conventions shared by every function here:

- The encoder runs once per call.
- Outputs hold the *generated* tokens only: no ``<bos>``; a row ends with its ``<eos>`` and is
  padded with ``pad_id`` after it. A row that reaches ``max_len`` tokens has no ``<eos>``.
- ``max_len`` counts generated tokens, ``<eos>`` included; the decoder input is ``<bos>`` plus up
  to ``max_len - 1`` tokens, so ``max_len`` may be at most the model's ``config.max_len``.
- The model is put in eval mode (no dropout) and gradients are off while decoding; its previous
  mode is restored afterwards.

**Decoder-only models** (chapter 7) have no source: :func:`greedy_continue` and
:func:`sample_continue` extend a *prompt* instead, with the same step (:func:`next_token_logits`),
the same cache and the same ways of picking a token. With a cache the whole prompt goes through the
decoder in one step, then one token per step. A model needs ``decode``/``generator`` and a
``decoder`` stack (see :class:`DecoderOnly`), as :class:`transformer_lib.model.DecoderOnlyTransformer` provides.

Shapes:

    B  batch size (sentences)   S  source length   T  tokens decoded so far (with <bos>)
    K  beam size                V  target vocabulary size   D  model width
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from typing import Any, Protocol

import torch
from torch import Tensor

from .kv_cache import KVCache, kv_cache
from .masking import causal_mask

__all__ = [
    "EncoderDecoder",
    "DecoderOnly",
    "next_token_logits",
    "greedy_decode",
    "gnmt_length_penalty",
    "Hypothesis",
    "BeamSearchResult",
    "beam_search",
    "sampling_distribution",
    "sample",
    "greedy_continue",
    "sample_continue",
]


class EncoderDecoder(Protocol):
    """What decoding needs from a model (``transformer_lib.model.Transformer`` has all of it).

    - ``encode(src, src_mask) -> memory`` ``(B, S, D)``
    - ``decode(tgt, memory, src_mask, tgt_mask, start=0) -> states`` ``(B, T, D)``, ``start`` the
      position of ``tgt``'s first token
    - ``generator(states) -> logits`` ``(..., V)``
    - ``decoder.layers``, each with ``self_attn`` and ``cross_attn``, for the key/value cache
    """

    training: bool

    def encode(self, src: Tensor, src_mask: Tensor | None = None) -> Tensor: ...

    def decode(
        self,
        tgt: Tensor,
        memory: Tensor,
        src_mask: Tensor | None = None,
        tgt_mask: Tensor | None = None,
        start: int = 0,
    ) -> Tensor: ...

    def generator(self, x: Tensor) -> Tensor: ...

    def train(self, mode: bool = True) -> Any: ...


@contextmanager
def _inference(model: EncoderDecoder, use_cache: bool = False) -> Iterator[KVCache | None]:
    """Eval mode, no gradients and (with ``use_cache``) a key/value cache while decoding; the
    model's previous mode and modules are restored after."""
    was_training = model.training
    model.train(False)
    try:
        with torch.no_grad(), (kv_cache(model) if use_cache else nullcontext()) as cache:
            yield cache
    finally:
        model.train(was_training)


def _check_args(model: EncoderDecoder, src: Tensor, max_len: int, ids: dict[str, int | None], min_len: int = 0) -> None:
    if not isinstance(src, Tensor) or src.dim() != 2:
        shape = tuple(src.shape) if isinstance(src, Tensor) else type(src).__name__
        raise ValueError(f"src must be a (B, S) tensor of token ids, got {shape}")
    if src.size(0) == 0 or src.size(1) == 0:
        raise ValueError(f"src is empty, shape {tuple(src.shape)}: give at least one sentence of at least one token")
    if src.is_floating_point() or src.dtype == torch.bool:
        raise ValueError(f"src must hold integer token ids (torch.long), got dtype {src.dtype}")
    config = getattr(model, "config", None)
    src_vocab = getattr(config, "src_vocab_size", None)
    if src_vocab is not None and not 0 <= int(src.min()) <= int(src.max()) < src_vocab:
        bad = int(src.min()) if int(src.min()) < 0 else int(src.max())
        raise ValueError(f"src holds token id {bad}, outside the source vocabulary [0, {src_vocab - 1}]")
    if isinstance(min_len, bool) or not isinstance(min_len, int) or min_len < 0:
        raise ValueError(f"min_len must be an integer >= 0 (tokens before <eos> may end), got {min_len!r}")
    if isinstance(max_len, bool) or not isinstance(max_len, int) or max_len < 1:
        raise ValueError(f"max_len must be a positive integer (tokens to generate), got {max_len!r}")
    limit = getattr(getattr(model, "config", None), "max_len", None)
    if limit is not None and max_len > limit:
        raise ValueError(
            f"max_len={max_len} is more than the model allows: the decoder input (<bos> plus "
            f"max_len - 1 tokens) must fit its positional table, config.max_len={limit}; "
            f"use max_len <= {limit}"
        )
    tgt_vocab = getattr(config, "tgt_vocab_size", None)
    for name, value in ids.items():
        if value is None and name == "eos_id":
            continue  # no end token: every row runs to max_len
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{name} must be a non-negative integer token id, got {value!r}")
        if tgt_vocab is not None and value >= tgt_vocab:
            raise ValueError(
                f"{name}={value} is outside the target vocabulary [0, {tgt_vocab - 1}]; "
                "pass the ids of the vocabulary the model was trained with"
            )


def _next_logits(model: EncoderDecoder, inputs: Tensor, memory: Tensor, src_mask: Tensor | None, cache: KVCache | None,
                 step: int, eos_id: int | None, min_len: int) -> Tensor:
    """:func:`next_token_logits`, refusing NaN or +inf, with ``<eos>`` barred before ``min_len`` tokens."""
    logits = next_token_logits(model, inputs, memory, src_mask, cache)  # (B, V)
    if bool((logits.isnan() | logits.isposinf()).any()):
        raise ValueError(
            f"the model's scores at output step {step + 1} are NaN or infinite, so no token can be chosen; "
            "its weights are probably corrupt (a diverged training run?)"
        )
    if eos_id is not None and step < min_len:
        logits = logits.clone()
        logits[:, eos_id] = float("-inf")
    return logits


def next_token_logits(
    model: EncoderDecoder,
    tokens: Tensor,
    memory: Tensor,
    src_mask: Tensor | None = None,
    cache: KVCache | None = None,
) -> Tensor:
    """Scores for the token that follows ``tokens``: one decoding step.

    Without a cache, ``tokens`` is the whole prefix ``(B, T)`` (starting with ``<bos>``): the decoder
    runs over all ``T`` positions under a causal mask and the last position's output is used.
    With a cache (``with kv_cache(model) as cache``), ``tokens`` holds only the positions the cache
    has not seen, usually the newest token ``(B, 1)``; their keys and values are appended to the
    cache, and their positions continue from ``cache.length``.

    Args:
        model: an :class:`EncoderDecoder`.
        tokens: ``(B, T)`` prefix, or ``(B, T_new)`` new tokens with a cache.
        memory: encoder output ``(B, S, D)``.
        src_mask: source padding mask, broadcastable to ``(B, H, T, S)``, or ``None``.
        cache: the model's key/value cache, updated in place, or ``None``.

    Returns:
        Logits ``(B, V)`` for the next token (not normalised).
    """
    n_new = tokens.size(1)
    start = 0 if cache is None else cache.length  # position of tokens[:, 0]
    if n_new == 1 and cache is not None:
        tgt_mask = None  # the newest position may see every cached one and itself
    else:
        tgt_mask = causal_mask(n_new, start + n_new, device=tokens.device)  # (1, 1, T_new, T)
    states = model.decode(tokens, memory, src_mask, tgt_mask, start=start)  # (B, T_new, D)
    return model.generator(states[:, -1])  # (B, V)


def _decode_loop(
    model: EncoderDecoder,
    src: Tensor,
    src_mask: Tensor | None,
    pick: Callable[[Tensor], Tensor],
    max_len: int,
    bos_id: int,
    eos_id: int,
    pad_id: int,
    cache: KVCache | None,
    min_len: int = 0,
) -> Tensor:
    """The loop greedy decoding and sampling share; ``pick`` maps logits ``(B, V)`` to ids ``(B,)``."""
    B = src.size(0)
    memory = model.encode(src, src_mask)  # (B, S, D), once for the whole loop
    tokens = torch.full((B, 1), bos_id, dtype=torch.long, device=src.device)  # (B, 1)
    finished = torch.zeros(B, dtype=torch.bool, device=src.device)  # (B,)
    for step in range(max_len):
        inputs = tokens[:, -1:] if cache is not None else tokens  # (B, 1) or (B, T)
        logits = _next_logits(model, inputs, memory, src_mask, cache, step, eos_id, min_len)  # (B, V)
        next_token = pick(logits)  # (B,)
        next_token = next_token.masked_fill(finished, pad_id)  # a finished row only grows padding
        tokens = torch.cat([tokens, next_token[:, None]], dim=1)  # (B, T + 1)
        if eos_id is not None:
            finished |= next_token == eos_id
        if bool(finished.all()):  # every row has its <eos>: stop early
            break
    return tokens[:, 1:]  # (B, <= max_len), without <bos>


def greedy_decode(
    model: EncoderDecoder,
    src: Tensor,
    src_mask: Tensor | None,
    *,
    max_len: int,
    bos_id: int,
    eos_id: int | None,
    pad_id: int,
    use_cache: bool = True,
    min_len: int = 0,
) -> Tensor:
    """Decode by taking the most likely token at every step.

    Args:
        model: an :class:`EncoderDecoder`, e.g. :class:`transformer_lib.model.Transformer`.
        src: source token ids ``(B, S)``, padded with ``pad_id``.
        src_mask: its padding mask ``(B, 1, 1, S)`` (``model.make_masks(src)[0]``), or ``None``
            when nothing is padded.
        max_len: the most tokens to generate per sequence, ``<eos>`` included.
        bos_id, eos_id, pad_id: the target vocabulary's special ids, each in ``[0, V_tgt)``;
            ``eos_id=None``: no end token, every row runs to ``max_len`` (``<eos>`` is then a token like any other).
        use_cache: reuse keys/values between steps (fast); ``False`` recomputes the whole prefix
            every step, which gives the same tokens and is only there to show that it does.
        min_len: ``<eos>`` may not come before this many tokens (fairseq's ``--min-len``); the
            translator uses 1, since an empty output never translates a sentence.

    Raises:
        ValueError: an empty ``src`` (no rows or no columns), ids outside the vocabularies, or a
            model whose scores are NaN or infinite.

    Returns:
        Token ids ``(B, T_out)`` with ``T_out <= max_len``: each row is its generated tokens up to and
        including ``<eos>``, then ``pad_id``. Decoding stops when every row has its ``<eos>``.

    Example:
        >>> from transformer_lib.model import Transformer, TransformerConfig
        >>> model = Transformer(TransformerConfig.from_preset("tiny", src_vocab_size=12, tgt_vocab_size=12))
        >>> src = torch.tensor([[5, 6, 7, 3], [8, 9, 3, 0]])
        >>> out = greedy_decode(model, src, model.make_masks(src)[0], max_len=6, bos_id=2, eos_id=3, pad_id=0)
        >>> out.shape[0], out.shape[1] <= 6
        (2, True)
    """
    _check_args(model, src, max_len, dict(bos_id=bos_id, eos_id=eos_id, pad_id=pad_id), min_len)
    with _inference(model, use_cache) as cache:
        return _decode_loop(
            model, src, src_mask, lambda logits: logits.argmax(dim=-1),
            max_len, bos_id, eos_id, pad_id, cache, min_len,
        )


# --------------------------------------------------------------------------------------------------
# Beam search


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
        tokens: generated token ids, ending with ``<eos>`` unless it stopped at ``max_len``.
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
    max_len: int,
    bos_id: int,
    eos_id: int | None,
    pad_id: int,
    length_penalty: float = 0.6,
    use_cache: bool = True,
    min_len: int = 0,
) -> BeamSearchResult:
    """Keep the ``beam_size`` most probable partial outputs at every step, not just one.

    Every sentence of the batch keeps ``K = beam_size`` hypotheses, laid out as ``B * K`` rows
    (rows ``b*K .. b*K + K - 1`` belong to sentence ``b``). Each step extends every hypothesis by
    every token, scores the ``K * V`` candidates by their summed log-probability, and keeps the best.
    A candidate ending in ``<eos>`` is set aside as finished, with score
    ``log_prob / gnmt_length_penalty(length, alpha)``; the next beam is the best ``K`` candidates that do
    not end. A sentence is done when it has ``K`` finished hypotheses (fairseq's stopping rule);
    hypotheses still open at ``max_len`` are finished there. The batch stops when every sentence
    is done. With ``beam_size=1`` this is exactly :func:`greedy_decode`.

    Args:
        model, src, src_mask, max_len, bos_id, eos_id, pad_id, use_cache, min_len: as :func:`greedy_decode`.
        beam_size: ``K``, the number of hypotheses kept per sentence. A wide beam finishes many
            short hypotheses early, the empty one among them: ``min_len=1`` stops it from winning.
        length_penalty: ``alpha`` of :func:`gnmt_length_penalty`; 0 ranks hypotheses by their raw
            log-probability, which favours short ones.

    Returns:
        A :class:`BeamSearchResult`: the best sequence and score per sentence, and every finished
        hypothesis (best first), e.g. to show the beam's alternatives.
    """
    _check_args(model, src, max_len, dict(bos_id=bos_id, eos_id=eos_id, pad_id=pad_id), min_len)
    if isinstance(beam_size, bool) or not isinstance(beam_size, int) or beam_size < 1:
        raise ValueError(f"beam_size must be a positive integer, got {beam_size!r}")
    if not isinstance(length_penalty, (int, float)) or not 0 <= length_penalty < float("inf"):
        raise ValueError(f"length_penalty (GNMT's alpha) must be a finite number >= 0, got {length_penalty!r}")
    with _inference(model, use_cache) as cache:
        return _beam_search(
            model, src, src_mask, beam_size, max_len, bos_id, eos_id, pad_id, float(length_penalty), cache, min_len
        )


def _beam_search(
    model: EncoderDecoder,
    src: Tensor,
    src_mask: Tensor | None,
    K: int,
    max_len: int,
    bos_id: int,
    eos_id: int,
    pad_id: int,
    alpha: float,
    cache: KVCache | None,
    min_len: int,
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
    finished: list[list[Hypothesis]] = [[] for _ in range(B)]
    done = [False] * B

    for step in range(max_len):
        inputs = tokens[:, -1:] if cache is not None else tokens  # (B*K, 1) or (B*K, T)
        logits = _next_logits(model, inputs, memory, src_mask, cache, step, eos_id, min_len).float()  # (B*K, V)
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
        _finish_open(finished, done, tokens, beam_scores, alpha)  # max_len reached
    return _best_of_beams(finished, K, pad_id, device)


def _set_aside_ended(finished: list[list[Hypothesis]], done: list[bool], tokens: Tensor, ends: Tensor,
                     top_scores: Tensor, top_origin: Tensor, K: int, eos_id: int, length: int, alpha: float) -> None:
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
    """At ``max_len``, the hypotheses still open are finished as they are (no ``<eos>``)."""
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


# --------------------------------------------------------------------------------------------------
# Sampling


def _check_sampling_args(temperature: float, top_k: int | None, top_p: float | None) -> None:
    if not (isinstance(temperature, (int, float)) and 0 < temperature < float("inf")):
        raise ValueError(
            f"temperature must be a positive finite number, got {temperature!r}; for temperature 0 "
            "(always the most likely token) use greedy_decode"
        )
    if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1):
        raise ValueError(f"top_k must be None or an integer >= 1, got {top_k!r}")
    if top_p is not None and not (isinstance(top_p, (int, float)) and 0 < top_p <= 1):
        raise ValueError(f"top_p must be None or a number in (0, 1], got {top_p!r}")


def sampling_distribution(
    logits: Tensor,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
) -> Tensor:
    """The distribution :func:`sample` draws from: temperature, then top-k, then top-p.

    - **temperature** divides the logits: below 1 sharpens the distribution towards the most
      likely token (0 would be greedy), above 1 flattens it towards uniform.
    - **top-k** keeps the ``k`` most likely tokens (Fan et al. 2018); ties with the ``k``-th are kept.
    - **top-p** (nucleus sampling, Holtzman et al. 2020) keeps the smallest set of most likely tokens
      whose probabilities add up to at least ``p``; the most likely token is always kept.

    The removed tokens get probability exactly 0 and the rest is renormalised.

    Args:
        logits: ``(..., V)``.
        temperature: a positive number.
        top_k: ``None`` (no limit) or an integer ``>= 1``.
        top_p: ``None`` (no limit) or a number in ``(0, 1]``.

    Returns:
        Probabilities ``(..., V)`` that sum to 1 over the last dimension.

    Example:
        >>> sampling_distribution(torch.tensor([2.0, 1.0, 0.0, -1.0]), top_k=2)
        tensor([0.7311, 0.2689, 0.0000, 0.0000])
    """
    _check_sampling_args(temperature, top_k, top_p)
    logits = logits.float() / temperature  # (..., V)
    if top_k is not None and top_k < logits.size(-1):
        kth_best = logits.topk(top_k, dim=-1).values[..., -1:]  # (..., 1)
        logits = logits.masked_fill(logits < kth_best, float("-inf"))
    if top_p is not None and top_p < 1:
        sorted_logits, order = logits.sort(dim=-1, descending=True)  # (..., V)
        sorted_probs = sorted_logits.softmax(dim=-1)  # (..., V)
        # Remove a token when the more likely tokens before it already reach top_p.
        mass_before = sorted_probs.cumsum(dim=-1) - sorted_probs  # (..., V)
        remove_sorted = mass_before >= top_p  # (..., V), never the first token
        remove = remove_sorted.scatter(-1, order, remove_sorted)  # back to vocabulary order
        logits = logits.masked_fill(remove, float("-inf"))
    if bool((~(logits > float("-inf"))).all(dim=-1).any()):  # a row of -inf (or NaN): softmax gives NaN
        raise ValueError("every token's logit is -inf or NaN in some row: there is no distribution to sample from")
    return logits.softmax(dim=-1)  # (..., V)


def sample(
    model: EncoderDecoder,
    src: Tensor,
    src_mask: Tensor | None,
    *,
    max_len: int,
    bos_id: int,
    eos_id: int | None,
    pad_id: int,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    generator: torch.Generator | None = None,
    use_cache: bool = True,
) -> Tensor:
    """Decode by drawing each token at random from the model's (reshaped) distribution.

    Args:
        model, src, src_mask, max_len, bos_id, eos_id, pad_id, use_cache: as :func:`greedy_decode`.
        temperature, top_k, top_p: how the distribution is reshaped; see :func:`sampling_distribution`.
        generator: a seeded ``torch.Generator`` on ``src``'s device makes the output reproducible,
            independent of the global random state.

    Returns:
        Token ids ``(B, T_out)``, laid out as :func:`greedy_decode`'s.

    Example:
        >>> from transformer_lib.model import Transformer, TransformerConfig
        >>> model = Transformer(TransformerConfig.from_preset("tiny", src_vocab_size=12, tgt_vocab_size=12))
        >>> src = torch.tensor([[5, 6, 7, 3]])
        >>> draw = lambda seed: sample(model, src, None, max_len=5, bos_id=2, eos_id=3, pad_id=0,
        ...                            top_k=4, generator=torch.Generator().manual_seed(seed))
        >>> torch.equal(draw(1), draw(1))
        True
    """
    _check_args(model, src, max_len, dict(bos_id=bos_id, eos_id=eos_id, pad_id=pad_id))
    _check_sampling_args(temperature, top_k, top_p)

    def pick(logits: Tensor) -> Tensor:
        probs = sampling_distribution(logits, temperature, top_k, top_p)  # (B, V)
        return torch.multinomial(probs, 1, generator=generator).squeeze(1)  # (B,)

    with _inference(model, use_cache) as cache:
        return _decode_loop(model, src, src_mask, pick, max_len, bos_id, eos_id, pad_id, cache)


# --------------------------------------------------------------------------------------------------
# Decoder-only models: continue a prompt (chapter 7)


class DecoderOnly(Protocol):
    """What prompt continuation needs (``transformer_lib.model.DecoderOnlyTransformer`` has it):
    :class:`EncoderDecoder`'s ``decode``/``generator``/``decoder``, with no encoder, so
    ``decode`` is called with ``memory=None`` and ``src_mask=None``."""

    training: bool

    def decode(self, tokens: Tensor, memory: None = None, src_mask: None = None, tgt_mask: Tensor | None = None, start: int = 0) -> Tensor: ...

    def generator(self, x: Tensor) -> Tensor: ...

    def train(self, mode: bool = True) -> Any: ...


def _check_prompt(model: DecoderOnly, prompt: Tensor, max_len: int, ids: dict[str, int]) -> None:
    if not isinstance(prompt, Tensor) or prompt.dim() != 2 or prompt.size(1) < 1:
        shape = tuple(prompt.shape) if isinstance(prompt, Tensor) else type(prompt).__name__
        raise ValueError(f"prompt must be a (B, P) tensor of token ids with P >= 1, got {shape}")
    if isinstance(max_len, bool) or not isinstance(max_len, int) or max_len < 1:
        raise ValueError(f"max_len must be a positive integer (tokens to generate), got {max_len!r}")
    for name, value in ids.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{name} must be a non-negative integer token id, got {value!r}")
    if bool((prompt == ids["pad_id"]).any()):
        raise ValueError(
            f"the prompt holds pad_id={ids['pad_id']}: prompts of one batch must have the same length, "
            "unpadded (a pad would take a position); group prompts by length"
        )
    limit = getattr(getattr(model, "config", None), "max_len", None)
    if limit is not None and prompt.size(1) + max_len - 1 > limit:
        raise ValueError(
            f"a prompt of {prompt.size(1)} tokens and max_len={max_len} need {prompt.size(1) + max_len - 1} "
            f"positions, more than the model's config.max_len={limit}; use max_len <= {limit - prompt.size(1) + 1}"
        )


def _continue_loop(
    model: DecoderOnly,
    prompt: Tensor,
    pick: Callable[[Tensor], Tensor],
    max_len: int,
    eos_id: int,
    pad_id: int,
    cache: KVCache | None,
) -> Tensor:
    """:func:`_decode_loop` for a decoder-only model: start from the prompt, not from ``<bos>``."""
    tokens = prompt  # (B, P)
    finished = torch.zeros(prompt.size(0), dtype=torch.bool, device=prompt.device)  # (B,)
    for _ in range(max_len):
        inputs = tokens[:, cache.length :] if cache is not None else tokens  # the prompt first, then the newest token
        logits = next_token_logits(model, inputs, None, None, cache)  # (B, V)
        next_token = pick(logits).masked_fill(finished, pad_id)  # (B,) a finished row only grows padding
        tokens = torch.cat([tokens, next_token[:, None]], dim=1)  # (B, P + t)
        finished |= next_token == eos_id
        if bool(finished.all()):
            break
    return tokens[:, prompt.size(1) :]  # (B, <= max_len), the continuation only


def greedy_continue(
    model: DecoderOnly,
    prompt: Tensor,
    *,
    max_len: int,
    eos_id: int,
    pad_id: int,
    use_cache: bool = True,
) -> Tensor:
    """Continue a prompt with a decoder-only model, taking the most likely token at every step.

    Args:
        model: a :class:`DecoderOnly` model, e.g. :class:`transformer_lib.model.DecoderOnlyTransformer`.
        prompt: token ids ``(B, P)``, all of the same length (no padding).
        max_len, eos_id, pad_id, use_cache: as :func:`greedy_decode`; ``prompt + max_len - 1``
            positions must fit ``config.max_len``.

    Returns:
        The continuation ``(B, T_out)``, ``T_out <= max_len`` (without the prompt), laid out as
        :func:`greedy_decode`'s output.

    Example:
        >>> from transformer_lib.model import DecoderOnlyTransformer, TransformerConfig
        >>> model = DecoderOnlyTransformer(TransformerConfig.decoder_only("tiny", vocab_size=12))
        >>> prompt = torch.tensor([[5, 6, 7, 2], [8, 9, 4, 2]])
        >>> greedy_continue(model, prompt, max_len=3, eos_id=3, pad_id=0).shape[1] <= 3
        True
    """
    _check_prompt(model, prompt, max_len, dict(eos_id=eos_id, pad_id=pad_id))
    with _inference(model, use_cache) as cache:
        return _continue_loop(model, prompt, lambda logits: logits.argmax(dim=-1), max_len, eos_id, pad_id, cache)


def sample_continue(
    model: DecoderOnly,
    prompt: Tensor,
    *,
    max_len: int,
    eos_id: int,
    pad_id: int,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    generator: torch.Generator | None = None,
    use_cache: bool = True,
) -> Tensor:
    """Continue a prompt with a decoder-only model, drawing each token as :func:`sample` does.

    Args: as :func:`greedy_continue`, and ``temperature``, ``top_k``, ``top_p``, ``generator`` as
    :func:`sample`.
    """
    _check_prompt(model, prompt, max_len, dict(eos_id=eos_id, pad_id=pad_id))
    _check_sampling_args(temperature, top_k, top_p)

    def pick(logits: Tensor) -> Tensor:
        probs = sampling_distribution(logits, temperature, top_k, top_p)  # (B, V)
        return torch.multinomial(probs, 1, generator=generator).squeeze(1)  # (B,)

    with _inference(model, use_cache) as cache:
        return _continue_loop(model, prompt, pick, max_len, eos_id, pad_id, cache)
