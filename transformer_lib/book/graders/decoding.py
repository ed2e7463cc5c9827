"""Chapter 6's grader: greedy decoding with a key/value cache.

The reader's function gets a small untrained :class:`transformer_lib.model.Transformer` that records
how it is called (each ``encode``, and each ``decode`` with its number of new positions, its
``start`` and whether a cache was active), so the grader can tell *how* the tokens were produced,
not only which. Shapes: ``B`` sentences, ``S`` source length, ``T`` generated tokens.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from transformer_lib.config import TransformerConfig
from transformer_lib.decoding import greedy_decode
from transformer_lib.masking import padding_mask
from transformer_lib.model import Transformer

from .report import Case, GradeReport, Grading, KnownBug, Problem, call, expect_cases_close, fmt_inputs

__all__ = ["grade_greedy_decode"]

PAD, BOS = 0, 1
MAX_NEW_TOKENS = 6
SOURCE = [[4, 5, 6, 7], [8, 4, 5, 0], [6, 6, 0, 0]]


class _RecordingTransformer(Transformer):
    """The library's model, recording its calls: ``("encode", S, 0, False)`` and
    ``("decode", new positions, start, cache active)``."""

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__(config)
        self.calls: list[tuple[str, int, int, bool]] = []
        self._own_attention = (self.decoder.layers[0].self_attn,)  # a tuple: not registered as a submodule

    def cache_active(self) -> bool:
        return self.decoder.layers[0].self_attn is not self._own_attention[0]

    def encode(self, src: Tensor, src_mask: Tensor | None = None) -> Tensor:
        self.calls.append(("encode", src.size(1), 0, False))
        return super().encode(src, src_mask)

    def decode(self, tgt: Tensor, memory: Tensor, src_mask: Tensor | None = None, tgt_mask: Tensor | None = None,
               start: int = 0) -> Tensor:
        self.calls.append(("decode", tgt.size(1), start, self.cache_active()))
        return super().decode(tgt, memory, src_mask, tgt_mask, start)


@functools.cache
def _scenario() -> tuple[int, int, Tensor, Tensor]:
    """A seed for a small untrained model and an ``<eos>`` id, chosen so that the batch's greedy
    outputs end at different steps (one row ends early, one runs to ``MAX_NEW_TOKENS``); with greedy
    decoding's outputs with that ``<eos>`` and without any, both ``(B, MAX_NEW_TOKENS)``."""
    src = torch.tensor(SOURCE)
    src_mask = padding_mask(src, PAD)
    for seed in range(200):
        model = _model(seed)
        free = greedy_decode(model, src, src_mask, max_new_tokens=MAX_NEW_TOKENS, bos_id=BOS, eos_id=None,
                             pad_id=PAD, use_cache=False)  # (B, MAX_NEW_TOKENS), no end token
        if bool((free <= BOS).any()):
            continue  # no generated pad or <bos>: the printed outputs stay readable
        for eos in range(BOS + 1, model.config.tgt_vocab_size):
            ends = [(row == eos).nonzero() for row in free]
            first = [int(e[0]) if len(e) else None for e in ends]
            if None in first and any(f is not None and 1 <= f <= MAX_NEW_TOKENS - 3 for f in first):
                ref = greedy_decode(model, src, src_mask, max_new_tokens=MAX_NEW_TOKENS, bos_id=BOS, eos_id=eos,
                                    pad_id=PAD, use_cache=False)
                return seed, eos, ref, free
    raise RuntimeError("no seed gave a batch whose outputs end at different steps")  # never on a working install


def _model(seed: int) -> _RecordingTransformer:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        config = TransformerConfig(src_vocab_size=9, tgt_vocab_size=9, d_model=16, n_heads=2, n_encoder_layers=1,
                                   n_decoder_layers=2, d_ff=32, dropout=0.0, max_len=16)
        return _RecordingTransformer(config).eval()


def _decoding_bugs(ref: Tensor, free: Tensor, eos: int) -> list[KnownBug]:
    ended = (ref == eos).any(dim=1)
    first_end = int(min(int((row == eos).nonzero()[0]) for row, e in zip(ref, ended) if e))
    return [
        KnownBug("output_includes_bos", "the output starts with <bos>", "return tokens[:, 1:]: the generated "
                 "tokens only", lambda: torch.cat([torch.full_like(ref[:, :1], BOS), ref], dim=1)),
        KnownBug("no_padding_after_eos", "a row keeps producing tokens after its <eos>",
                 "keep a boolean `finished` per row; once a row has its <eos>, append pad_id to it",
                 lambda: free[:, : ref.size(1)]),
        KnownBug("stops_at_first_eos", "decoding stops when the first row ends, cutting the others short",
                 "stop only when every row has its <eos> (finished.all())", lambda: ref[:, : first_end + 1]),
        KnownBug("eos_dropped", "the <eos> tokens are missing", "append the <eos> itself, then pad_id after it",
                 lambda: ref.masked_fill(ref == eos, PAD)),
    ]


@dataclass(frozen=True)
class _Setting:
    """What every check of one decoding grading shares: the recording model, its batch and the reference."""

    model: _RecordingTransformer
    src: Tensor
    src_mask: Tensor
    eos: int
    ref: Tensor
    free: Tensor
    example: str


def _setting() -> _Setting:
    seed, eos, ref, free = _scenario()
    src = torch.tensor(SOURCE)
    example = (fmt_inputs(src=src) + f"\nsrc_mask = padding_mask(src, {PAD}), max_new_tokens = {MAX_NEW_TOKENS}\n"
               f"bos_id = {BOS}, eos_id = {eos}, pad_id = {PAD}\n"
               "model: an untrained Transformer (d_model 16, 2 decoder layers, 9 tokens)")
    return _Setting(_model(seed), src, padding_mask(src, PAD), eos, ref, free, example)


def _runs(fn: Callable[..., Any], setting: _Setting, state: dict[str, Tensor]) -> None:
    model, src, example = setting.model, setting.src, setting.example
    model.calls.clear()
    try:
        out = call(fn, model, src.clone(), setting.src_mask.clone(), MAX_NEW_TOKENS, BOS, setting.eos, PAD,
                   what="your decoding", example=example)
    except Problem as problem:
        fed = [n for kind, n, _, cached in model.calls if kind == "decode" and cached]
        if problem.failure.check == "raises" and any(n > 1 for n in fed[1:]):
            raise Problem("prefix_fed_to_cache", f"{problem.failure.message}, after feeding the decoder {fed} "
                          "positions with the cache on: the cache already holds the old positions",
                          example=example, hint="with a cache, feed only the newest token: tokens[:, -1:]") from None
        raise
    if not isinstance(out, Tensor):
        raise Problem("returns_tensor", f"your decoding returned {type(out).__name__}, not a tensor",
                      example=example, hint="return the (B, T) tensor of generated token ids")
    if out.dim() != 2 or out.size(0) != src.size(0) or out.is_floating_point():
        raise Problem("output_shape", f"the output is {tuple(out.shape)} {out.dtype}, expected ({src.size(0)}, T) "
                      "integer token ids", example=example, hint="one row of token ids per source sentence")
    state["out"] = out


def _encoder_once(setting: _Setting) -> None:
    n = sum(kind == "encode" for kind, *_ in setting.model.calls)
    if n != 1:
        raise Problem("encoder_recomputed", f"the encoder ran {n} times for one batch", example=setting.example,
                      hint="encode the source once, before the loop: memory = model.encode(src, src_mask)")


def _uses_the_cache(setting: _Setting) -> None:
    example = setting.example
    steps = [(n, start, cached) for kind, n, start, cached in setting.model.calls if kind == "decode"]
    fed = [n for n, _, _ in steps]
    if not any(cached for *_, cached in steps):
        raise Problem("cache_not_used", f"every step recomputes the whole prefix: the decoder was fed "
                      f"{fed} positions, {sum(fed)} in all, where {len(fed)} do", example=example,
                      hint="decode inside `with kv_cache(model) as cache:` and feed only the newest token, "
                           "tokens[:, -1:]")
    if any(n != 1 for n, _, _ in steps):
        raise Problem("prefix_fed_to_cache", f"with the cache on, the decoder was fed {fed} positions per step: "
                      "the cache already holds the old ones, which are now appended twice", example=example,
                      hint="with a cache, feed only the newest token: tokens[:, -1:]")
    starts = [start for _, start, _ in steps]
    if starts != list(range(len(steps))):
        raise Problem("positions_restart_at_zero" if not any(starts) else "positions_wrong",
                      f"the new tokens were placed at positions {starts}, not {list(range(len(steps)))}: "
                      "each step looks like the first to the positional encoding", example=example,
                      hint="pass start=cache.length to model.decode (next_token_logits does it for you); "
                           "chapter 6's pitfall 'new tokens at position 0'")


def _matches_reference(setting: _Setting, state: dict[str, Tensor]) -> None:
    def compared() -> Case:
        return state["out"], setting.ref, setting.example, _decoding_bugs(setting.ref, setting.free, setting.eos)

    expect_cases_close([compared], check="matches_reference",
                       message="the tokens differ from greedy_decode's (which recomputes the prefix)",
                       hint="take argmax of the next-token logits at every step")


def _model_restored(setting: _Setting) -> None:
    if setting.model.cache_active():
        raise Problem("cache_left_on", "after decoding, the model's attention is still wrapped by the cache",
                      example=setting.example,
                      hint="use the cache as a context manager: with kv_cache(model) as cache:")


def grade_greedy_decode(fn: Callable[..., Any]) -> GradeReport:
    """Grade the reader's greedy decoding with a key/value cache.

    ``fn(model, src, src_mask, max_new_tokens, bos_id, eos_id, pad_id)`` must return the generated tokens
    ``(B, T)``, ``T <= max_new_tokens``, as :func:`transformer_lib.decoding.greedy_decode` does: no
    ``<bos>``, each row ending with its ``<eos>`` and padded with ``pad_id`` after it, stopping when
    every row has ended. It must run the encoder once, and decode inside
    ``transformer_lib.kv_cache.kv_cache(model)`` feeding only the newest token at each step, at its
    own position (``start = cache.length``, which ``next_token_logits`` does for you).

    Example:
        >>> grade_greedy_decode(lambda model, src, src_mask, max_new_tokens, bos_id, eos_id, pad_id: greedy_decode(
        ...     model, src, src_mask, max_new_tokens=max_new_tokens, bos_id=bos_id, eos_id=eos_id, pad_id=pad_id)).passed
        True
    """
    grading = Grading("Greedy decoding with a key/value cache")
    setting = _setting()
    state: dict[str, Tensor] = {}
    with grading:
        grading.check("runs and returns (B, T) token ids", functools.partial(_runs, fn, setting, state), gate=True)
        grading.check("runs the encoder once per batch", functools.partial(_encoder_once, setting))
        grading.check("uses the key/value cache: one new token per step, at its own position",
                      functools.partial(_uses_the_cache, setting))
        grading.check("equals greedy_decode: no <bos>, pads after each row's <eos>, stops when every row has "
                      "ended", functools.partial(_matches_reference, setting, state))
        grading.check("gives the model back without the cache", functools.partial(_model_restored, setting))
    return grading.report
