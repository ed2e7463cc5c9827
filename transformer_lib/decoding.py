"""From a trained model to output sequences: greedy decoding, sampling and prompt continuation, with
one generation loop (beam search, which keeps several hypotheses, is in :mod:`transformer_lib.beam_search`).

They generate one token at a time, left to right: run the decoder on what has been produced so far,
turn the last position's output into a distribution over the next token, pick a token, repeat
until every sequence has produced ``<eos>`` or ``max_new_tokens`` tokens. They differ only in how
they pick (:func:`greedy_decode`: the most likely token; :func:`sample`: a random draw), and in
where they start: a translation starts from ``<bos>`` with the encoder's memory of the source, a
decoder-only model (chapter 7) from a prompt (:func:`greedy_continue`, :func:`sample_continue`).
Both run :func:`generation_loop`, whose every step is :func:`decoding_step`.

Each decoding function takes the model as its first argument (rasbt's ``generate_text_simple``
does the same): the model stays a plain ``nn.Module``, and a new strategy is a new function rather
than a flag on a method. Anything with ``encode``/``decode``/``output_layer`` and ``decoder_layers``
works, as :class:`transformer_lib.model.Transformer` provides (see :class:`EncoderDecoder`).

**The key/value cache.** Without a cache, step ``t`` re-runs the decoder over all ``t`` prefix
positions to use the last one: ``O(T^2)`` position-computations for ``T`` tokens, every one but
the last already done at the step before. Causal masking is what makes the old ones reusable:
position ``i`` never sees positions after it, so its keys and values never change. With
``use_cache=True`` decoding runs inside :func:`transformer_lib.kv_cache.kv_cache`: each step feeds
only the positions the cache has not seen (the prompt at the first step, then the newest token),
appends their self-attention keys/values to the cache, and reuses the cross-attention keys/values
of the encoder memory, which are computed on the first step only. The result is the same to float
rounding (``tests/test_decoding.py``).

**Checks at the boundary.** The public functions check their arguments once (ids in the
vocabularies, lengths within the model's positions). A decoding step reads no tensor value on the
host: the only synchronisation per step is the loop's question "has every row ended?", and scores
that are NaN or infinite (a corrupt model) are collected on the device and reported once, at the end.

Conventions shared by every function here:

- The encoder runs once per call.
- Outputs hold the *generated* tokens only: no ``<bos>``, no prompt; a row ends with its ``<eos>``
  and is padded with ``pad_id`` after it. A row that reaches ``max_new_tokens`` has no ``<eos>``.
- ``<bos>`` and ``<pad>`` are never generated: their scores are set to ``-inf`` (an undertrained
  model may rank them first, and they would decode to nothing).
- ``max_new_tokens`` counts generated tokens, ``<eos>`` included; ``min_new_tokens`` is how many
  must come before ``<eos>`` may.
- The model is put in eval mode (no dropout) and gradients are off while decoding; its previous
  mode is restored afterwards.

Shapes::

    B  batch size (sentences)   S  source length   T  tokens decoded so far (with <bos> or the prompt)
    P  prompt length            V  target vocabulary size   D  model width
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from typing import Any, Protocol, cast

import torch
from torch import Tensor, nn

from .kv_cache import KVCache, kv_cache
from .masking import causal_mask
from .validation import check_bool, check_int, check_number, check_token_ids

__all__ = [
    "EncoderDecoder",
    "DecoderOnly",
    "next_token_logits",
    "never_generated",
    "decoding_step",
    "generation_loop",
    "greedy_decode",
    "sampling_distribution",
    "sample",
    "greedy_continue",
    "sample_continue",
]

Pick = Callable[[Tensor], Tensor]  # logits (B, V) -> token ids (B,)


class EncoderDecoder(Protocol):
    """What decoding needs from a model (``transformer_lib.model.Transformer`` has all of it).

    - ``encode(src, src_mask) -> memory`` ``(B, S, D)``
    - ``decode(tgt, memory, src_mask, tgt_mask, start=0) -> states`` ``(B, T, D)``, ``start`` the
      position of ``tgt``'s first token
    - ``output_layer(states) -> logits`` ``(..., V)``
    - ``decoder_layers``, each with ``self_attn`` and ``cross_attn``, for the key/value cache
    """

    training: bool

    @property
    def decoder_layers(self) -> nn.ModuleList: ...  # read-only: the models give their decoder's layers

    def encode(self, src: Tensor, src_mask: Tensor | None = None) -> Tensor: ...

    def decode(self, tgt: Tensor, memory: Tensor, src_mask: Tensor | None = None,
               tgt_mask: Tensor | None = None, start: int = 0) -> Tensor: ...

    def output_layer(self, x: Tensor) -> Tensor: ...

    def train(self, mode: bool = True) -> Any: ...


class DecoderOnly(Protocol):
    """What prompt continuation needs (``transformer_lib.model.DecoderOnlyTransformer`` has it):
    :class:`EncoderDecoder`'s ``decode``/``output_layer``/``decoder_layers``, with no encoder, so
    ``decode`` is called with ``memory=None`` and ``src_mask=None``."""

    training: bool

    @property
    def decoder_layers(self) -> nn.ModuleList: ...

    def decode(self, tokens: Tensor, memory: None = None, src_mask: None = None, tgt_mask: Tensor | None = None,
               start: int = 0) -> Tensor: ...

    def output_layer(self, x: Tensor) -> Tensor: ...

    def train(self, mode: bool = True) -> Any: ...


@contextmanager
def _inference(model: Any, use_cache: bool = False) -> Iterator[KVCache | None]:
    """Eval mode, no gradients and (with ``use_cache``) a key/value cache while decoding; the
    model's previous mode and modules are restored after."""
    check_bool("use_cache", use_cache)
    was_training = model.training
    model.train(False)
    try:
        with torch.no_grad(), (kv_cache(model) if use_cache else nullcontext()) as cache:
            yield cache
    finally:
        model.train(was_training)


# --- checks at the boundary ---------------------------------------------------------------------


def _check_lengths(max_new_tokens: int, min_new_tokens: int, positions: int, model: Any) -> None:
    """Token counts are non-negative integers, and ``positions`` decoder inputs fit the model's table."""
    check_int("max_new_tokens", max_new_tokens)
    check_int("min_new_tokens", min_new_tokens, minimum=0)
    limit = getattr(getattr(model, "config", None), "max_len", None)
    if limit is not None and positions > limit:
        raise ValueError(
            f"max_new_tokens={max_new_tokens} needs {positions} decoder positions, more than the model's "
            f"config.max_len={limit}; use max_new_tokens <= {max_new_tokens - (positions - limit)}"
        )


def _check_special_ids(model: Any, ids: dict[str, int | None]) -> None:
    """Special token ids are non-negative integers inside the target vocabulary (``eos_id`` may be ``None``)."""
    tgt_vocab = getattr(getattr(model, "config", None), "tgt_vocab_size", None)
    for name, value in ids.items():
        if value is None and name == "eos_id":
            continue  # no end token: every row runs to max_new_tokens
        check_int(name, value, minimum=0)
        if tgt_vocab is not None and value >= tgt_vocab:
            raise ValueError(
                f"{name}={value} is outside the target vocabulary [0, {tgt_vocab - 1}]; "
                "pass the ids of the vocabulary the model was trained with"
            )


def check_source(model: Any, src: Tensor, max_new_tokens: int, min_new_tokens: int, ids: dict[str, int | None]) -> None:
    """What every translation decoding checks once, before its first step: a non-empty ``(B, S)``
    batch of source ids inside the source vocabulary, token counts the model's positions can hold
    (``<bos>`` plus ``max_new_tokens - 1`` decoder inputs), and special ids in the target vocabulary."""
    check_token_ids(src, "src", getattr(getattr(model, "config", None), "src_vocab_size", None), batched=True)
    if src.size(0) == 0 or src.size(1) == 0:
        raise ValueError(f"src is empty, shape {tuple(src.shape)}: give at least one sentence of at least one token")
    _check_lengths(max_new_tokens, min_new_tokens, max_new_tokens, model)
    _check_special_ids(model, ids)


def _check_prompt(model: Any, prompt: Tensor, max_new_tokens: int, ids: dict[str, int | None]) -> None:
    check_token_ids(prompt, "prompt", getattr(getattr(model, "config", None), "tgt_vocab_size", None), batched=True)
    if prompt.size(1) < 1:
        raise ValueError(f"prompt must hold at least one token, got shape {tuple(prompt.shape)}")
    _check_lengths(max_new_tokens, 0, prompt.size(1) + max_new_tokens - 1, model)
    _check_special_ids(model, ids)
    if ids["pad_id"] is not None and bool((prompt == ids["pad_id"]).any()):
        raise ValueError(
            f"the prompt holds pad_id={ids['pad_id']}: prompts of one batch must have the same length, "
            "unpadded (a pad would take a position); group prompts by length"
        )


def _check_sampling_args(temperature: float, top_k: int | None, top_p: float | None) -> None:
    if isinstance(temperature, bool) or not (isinstance(temperature, (int, float)) and 0 < temperature < float("inf")):
        raise ValueError(
            f"temperature must be a positive finite number, got {temperature!r}; for temperature 0 "
            "(always the most likely token) use greedy_decode"
        )
    check_int("top_k", top_k, optional=True)
    check_number("top_p", top_p, 0, 1, low_open=True, high_open=False, optional=True)


# --- one step, and the loop ---------------------------------------------------------------------


def next_token_logits(
    model: EncoderDecoder | DecoderOnly,
    tokens: Tensor,
    memory: Tensor | None,
    src_mask: Tensor | None = None,
    cache: KVCache | None = None,
) -> Tensor:
    """Scores for the token that follows ``tokens``: one pass of the decoder.

    Without a cache, ``tokens`` is the whole prefix ``(B, T)`` (starting with ``<bos>``, or the
    prompt): the decoder runs over all ``T`` positions under a causal mask and the last position's
    output is used. With a cache (``with kv_cache(model) as cache``), ``tokens`` holds only the
    positions the cache has not seen, usually the newest token ``(B, 1)``; their keys and values
    are appended to the cache, and their positions continue from ``cache.length``.

    Args:
        model: an :class:`EncoderDecoder` (or a :class:`DecoderOnly` model, with ``memory=None``).
        tokens: ``(B, T)`` prefix, or ``(B, T_new)`` new tokens with a cache.
        memory: encoder output ``(B, S, D)``, or ``None`` for a decoder-only model.
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
    # memory and src_mask are None for a decoder-only model, tensors for an encoder-decoder
    states = cast(Any, model).decode(tokens, memory, src_mask, tgt_mask, start=start)  # (B, T_new, D)
    return model.output_layer(states[:, -1])  # (B, V)


def decoding_step(
    model: EncoderDecoder | DecoderOnly,
    tokens: Tensor,
    finished: Tensor,
    pick: Pick,
    *,
    memory: Tensor | None,
    src_mask: Tensor | None,
    cache: KVCache | None,
    eos_id: int | None,
    pad_id: int,
    eos_allowed: bool = True,
    never: Tensor | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """One token more for every row: ``(tokens (B, T+1), finished (B,), logits (B, V))``.

    The decoder reads what the cache has not seen (everything, without a cache), ``pick`` chooses
    the next token from the scores (with ``<eos>`` barred unless ``eos_allowed``, and the ids in
    ``never``, e.g. ``<bos>`` and ``<pad>`` (:func:`never_generated`), always), and a finished row
    only grows padding. Nothing here reads a tensor's value on the host.
    """
    inputs = tokens[:, cache.length:] if cache is not None else tokens  # (B, T_new)
    logits = next_token_logits(model, inputs, memory, src_mask, cache)  # (B, V)
    if never is not None:
        logits = logits.index_fill(-1, never, float("-inf"))
    if eos_id is not None and not eos_allowed:
        logits = logits.index_fill(-1, torch.tensor([eos_id], device=logits.device), float("-inf"))
    next_token = pick(logits).masked_fill(finished, pad_id)  # (B,)
    if eos_id is not None:
        finished = finished | (next_token == eos_id)
    return torch.cat([tokens, next_token[:, None]], dim=1), finished, logits  # (B, T + 1)


def generation_loop(
    model: EncoderDecoder | DecoderOnly,
    tokens: Tensor,
    pick: Pick,
    *,
    memory: Tensor | None,
    src_mask: Tensor | None,
    cache: KVCache | None,
    max_new_tokens: int,
    eos_id: int | None,
    pad_id: int,
    min_new_tokens: int = 0,
    bos_id: int | None = None,
) -> Tensor:
    """Extend ``tokens`` ``(B, T)`` by :func:`decoding_step` until every row has its ``<eos>`` or
    ``max_new_tokens`` tokens; returns the new tokens ``(B, <= max_new_tokens)``. ``<pad>`` (and
    ``<bos>``, if given) is never generated.

    Raises:
        ValueError: the model's scores were NaN or +inf at some step (its weights are corrupt).
    """
    first_new = tokens.size(1)
    finished = torch.zeros(tokens.size(0), dtype=torch.bool, device=tokens.device)  # (B,)
    corrupt = torch.zeros((), dtype=torch.bool, device=tokens.device)  # any NaN or +inf score so far
    never = torch.tensor(never_generated(bos_id, eos_id, pad_id), dtype=torch.long, device=tokens.device)
    for step in range(max_new_tokens):
        tokens, finished, logits = decoding_step(
            model, tokens, finished, pick, memory=memory, src_mask=src_mask, cache=cache, eos_id=eos_id,
            pad_id=pad_id, eos_allowed=step >= min_new_tokens, never=never,
        )
        corrupt |= (logits.isnan() | logits.isposinf()).any()
        if eos_id is not None and bool(finished.all()):  # the step's one synchronisation: all rows ended?
            break
    if bool(corrupt):
        raise ValueError(
            "the model's scores were NaN or infinite while decoding, so no token could be chosen; "
            "its weights are probably corrupt (a diverged training run?)"
        )
    return tokens[:, first_new:]  # (B, <= max_new_tokens)


def never_generated(bos_id: int | None, eos_id: int | None, pad_id: int) -> list[int]:
    """The special ids a decoder must never output: ``<pad>`` and ``<bos>`` (``<eos>`` ends a row, so
    it stays, even where a vocabulary shares its id with another special)."""
    return sorted({i for i in (bos_id, pad_id) if i is not None} - {eos_id})


# --- greedy decoding and sampling ---------------------------------------------------------------


def _most_likely(logits: Tensor) -> Tensor:
    return logits.argmax(dim=-1)  # (B,)


def _translate(model: EncoderDecoder, src: Tensor, src_mask: Tensor | None, pick: Pick, use_cache: bool,
               bos_id: int, **loop: Any) -> Tensor:
    """Encode once, then :func:`generation_loop` from ``<bos>``."""
    with _inference(model, use_cache) as cache:
        memory = model.encode(src, src_mask)  # (B, S, D)
        start = torch.full((src.size(0), 1), bos_id, dtype=torch.long, device=src.device)  # (B, 1)
        return generation_loop(model, start, pick, memory=memory, src_mask=src_mask, cache=cache, bos_id=bos_id, **loop)


def greedy_decode(
    model: EncoderDecoder,
    src: Tensor,
    src_mask: Tensor | None,
    *,
    max_new_tokens: int,
    bos_id: int,
    eos_id: int | None,
    pad_id: int,
    use_cache: bool = True,
    min_new_tokens: int = 0,
) -> Tensor:
    """Decode by taking the most likely token at every step.

    Args:
        model: an :class:`EncoderDecoder`, e.g. :class:`transformer_lib.model.Transformer`.
        src: source token ids ``(B, S)``, padded with ``pad_id``.
        src_mask: its padding mask ``(B, 1, 1, S)`` (``model.masks_for(src)[0]``), or ``None``
            when nothing is padded.
        max_new_tokens: the most tokens to generate per sequence, ``<eos>`` included; at most the
            model's ``config.max_len``.
        bos_id, eos_id, pad_id: the target vocabulary's special ids, each in ``[0, V_tgt)``;
            ``eos_id=None``: no end token, every row runs to ``max_new_tokens``.
        use_cache: reuse keys/values between steps (fast); ``False`` recomputes the whole prefix
            every step, which gives the same tokens and is only there to show that it does.
        min_new_tokens: ``<eos>`` may not come before this many tokens (fairseq's ``--min-len``); the
            translator uses 1, since an empty output never translates a sentence.

    Raises:
        ValueError: an empty ``src`` (no rows or no columns), ids outside the vocabularies, or a
            model whose scores are NaN or infinite.

    Returns:
        Token ids ``(B, T_out)`` with ``T_out <= max_new_tokens``: each row is its generated tokens
        up to and including ``<eos>``, then ``pad_id``. Decoding stops when every row has its ``<eos>``.

    Example:
        >>> from transformer_lib.model import Transformer, TransformerConfig
        >>> model = Transformer(TransformerConfig.from_preset("tiny", src_vocab_size=12, tgt_vocab_size=12))
        >>> src = torch.tensor([[5, 6, 7, 3], [8, 9, 3, 0]])
        >>> out = greedy_decode(model, src, model.masks_for(src)[0], max_new_tokens=6, bos_id=2, eos_id=3, pad_id=0)
        >>> out.shape[0], out.shape[1] <= 6
        (2, True)
    """
    check_source(model, src, max_new_tokens, min_new_tokens, dict(bos_id=bos_id, eos_id=eos_id, pad_id=pad_id))
    return _translate(model, src, src_mask, _most_likely, use_cache, bos_id, max_new_tokens=max_new_tokens,
                      eos_id=eos_id, pad_id=pad_id, min_new_tokens=min_new_tokens)


def _reshaped_logits(logits: Tensor, temperature: float, top_k: int | None, top_p: float | None) -> Tensor:
    """Temperature, then top-k, then top-p, on logits ``(..., V)``: removed tokens get ``-inf``."""
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
    return logits


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
    logits = _reshaped_logits(logits, temperature, top_k, top_p)
    if bool((~(logits > float("-inf"))).all(dim=-1).any()):  # a row of -inf (or NaN): softmax gives NaN
        raise ValueError("every token's logit is -inf or NaN in some row: there is no distribution to sample from")
    return logits.softmax(dim=-1)  # (..., V)


class _Draw:
    """Pick a token by drawing from the reshaped distribution (the step's ``pick`` for sampling)."""

    def __init__(self, temperature: float, top_k: int | None, top_p: float | None,
                 generator: torch.Generator | None) -> None:
        _check_sampling_args(temperature, top_k, top_p)
        self.temperature, self.top_k, self.top_p, self.generator = temperature, top_k, top_p, generator

    def __call__(self, logits: Tensor) -> Tensor:
        probs = _reshaped_logits(logits, self.temperature, self.top_k, self.top_p).softmax(dim=-1)  # (B, V)
        # A row of NaN (a corrupt model) draws uniformly; generation_loop reports it at the end.
        return torch.multinomial(probs.nan_to_num(nan=1.0), 1, generator=self.generator).squeeze(1)  # (B,)


def sample(
    model: EncoderDecoder,
    src: Tensor,
    src_mask: Tensor | None,
    *,
    max_new_tokens: int,
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
        model, src, src_mask, max_new_tokens, bos_id, eos_id, pad_id, use_cache: as :func:`greedy_decode`.
        temperature, top_k, top_p: how the distribution is reshaped; see :func:`sampling_distribution`.
        generator: a seeded ``torch.Generator`` on ``src``'s device makes the output reproducible,
            independent of the global random state.

    Returns:
        Token ids ``(B, T_out)``, laid out as :func:`greedy_decode`'s.

    Example:
        >>> from transformer_lib.model import Transformer, TransformerConfig
        >>> model = Transformer(TransformerConfig.from_preset("tiny", src_vocab_size=12, tgt_vocab_size=12))
        >>> src = torch.tensor([[5, 6, 7, 3]])
        >>> draw = lambda seed: sample(model, src, None, max_new_tokens=5, bos_id=2, eos_id=3, pad_id=0,
        ...                            top_k=4, generator=torch.Generator().manual_seed(seed))
        >>> torch.equal(draw(1), draw(1))
        True
    """
    check_source(model, src, max_new_tokens, 0, dict(bos_id=bos_id, eos_id=eos_id, pad_id=pad_id))
    pick = _Draw(temperature, top_k, top_p, generator)
    return _translate(model, src, src_mask, pick, use_cache, bos_id, max_new_tokens=max_new_tokens, eos_id=eos_id,
                      pad_id=pad_id)


# --- decoder-only models: continue a prompt (chapter 7) -----------------------------------------


def _continue(model: DecoderOnly, prompt: Tensor, pick: Pick, use_cache: bool, **loop: Any) -> Tensor:
    with _inference(model, use_cache) as cache:
        return generation_loop(model, prompt, pick, memory=None, src_mask=None, cache=cache, **loop)


def greedy_continue(
    model: DecoderOnly,
    prompt: Tensor,
    *,
    max_new_tokens: int,
    eos_id: int | None,
    pad_id: int,
    use_cache: bool = True,
) -> Tensor:
    """Continue a prompt with a decoder-only model, taking the most likely token at every step.

    Args:
        model: a :class:`DecoderOnly` model, e.g. :class:`transformer_lib.model.DecoderOnlyTransformer`.
        prompt: token ids ``(B, P)``, all of the same length (no padding).
        max_new_tokens, eos_id, pad_id, use_cache: as :func:`greedy_decode`; ``P + max_new_tokens - 1``
            positions must fit ``config.max_len``.

    Returns:
        The continuation ``(B, T_out)``, ``T_out <= max_new_tokens`` (without the prompt), laid out
        as :func:`greedy_decode`'s output.

    Example:
        >>> from transformer_lib.model import DecoderOnlyTransformer, TransformerConfig
        >>> model = DecoderOnlyTransformer(TransformerConfig.decoder_only("tiny", vocab_size=12))
        >>> prompt = torch.tensor([[5, 6, 7, 2], [8, 9, 4, 2]])
        >>> greedy_continue(model, prompt, max_new_tokens=3, eos_id=3, pad_id=0).shape[1] <= 3
        True
    """
    _check_prompt(model, prompt, max_new_tokens, dict(eos_id=eos_id, pad_id=pad_id))
    return _continue(model, prompt, _most_likely, use_cache, max_new_tokens=max_new_tokens, eos_id=eos_id, pad_id=pad_id)


def sample_continue(
    model: DecoderOnly,
    prompt: Tensor,
    *,
    max_new_tokens: int,
    eos_id: int | None,
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
    _check_prompt(model, prompt, max_new_tokens, dict(eos_id=eos_id, pad_id=pad_id))
    pick = _Draw(temperature, top_k, top_p, generator)
    return _continue(model, prompt, pick, use_cache, max_new_tokens=max_new_tokens, eos_id=eos_id, pad_id=pad_id)
