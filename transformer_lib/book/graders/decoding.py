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

from transformer_lib.beam_search import beam_search
from transformer_lib.config import TransformerConfig
from transformer_lib.decoding import decoding_step, generation_loop, greedy_decode
from transformer_lib.masking import CausalMask, padding_mask
from transformer_lib.model import Transformer

from .report import Case, GradeReport, Grading, KnownBug, Problem, Refused, call, expect_cases_close, fmt_inputs

__all__ = ["grade_greedy_decode"]

PAD, BOS = 0, 1
FAIRSEQ_PAD, FAIRSEQ_BOS = 1, 0  # fairseq's order: <s> = 0, <pad> = 1 (the special ids elsewhere)
REFUSED_DECODING = (
    Refused("the library's greedy_decode", (greedy_decode, generation_loop, decoding_step)),
    Refused("the library's beam_search", (beam_search,)),
)
ARGUMENTS = ("model", "src", "src_mask", "max_new_tokens", "bos_id", "eos_id", "pad_id")
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

    def decode(self, tgt: Tensor, memory: Tensor, src_mask: Tensor | None = None,
               tgt_mask: Tensor | CausalMask | None = None, start: int = 0) -> Tensor:
        self.calls.append(("decode", tgt.size(1), start, self.cache_active()))
        return super().decode(tgt, memory, src_mask, tgt_mask, start)


@functools.cache
def _scenario(pad: int = PAD, bos: int = BOS, all_end: bool = False) -> tuple[int, int, Tensor, Tensor]:
    """A seed for a small untrained model and an ``<eos>`` id, chosen so that the batch's greedy
    outputs end at different steps (one row ends early, one runs to ``MAX_NEW_TOKENS``; with
    ``all_end``, every row ends, the last before ``MAX_NEW_TOKENS``); with greedy decoding's outputs
    with that ``<eos>`` and without any (``(B, MAX_NEW_TOKENS)``)."""
    src = _source(pad)
    src_mask = padding_mask(src, pad)
    for seed in range(200):
        model = _model(seed)
        free = greedy_decode(model, src, src_mask, max_new_tokens=MAX_NEW_TOKENS, bos_id=bos, eos_id=None,
                             pad_id=pad, use_cache=False)  # (B, MAX_NEW_TOKENS), no end token
        if bool((free <= max(pad, bos)).any()):
            continue  # no generated pad or <bos>: the printed outputs stay readable
        for eos in range(max(pad, bos) + 1, model.config.tgt_vocab_size):
            ends = [(row == eos).nonzero() for row in free]
            first = [int(e[0]) if len(e) else None for e in ends]
            if all_end:
                wanted = None not in first and len(set(first)) > 1 and max(f or 0 for f in first) <= MAX_NEW_TOKENS - 3
            else:
                wanted = None in first and any(f is not None and 1 <= f <= MAX_NEW_TOKENS - 3 for f in first)
            if wanted:
                ref = greedy_decode(model, src, src_mask, max_new_tokens=MAX_NEW_TOKENS, bos_id=bos, eos_id=eos,
                                    pad_id=pad, use_cache=False)
                return seed, eos, ref, free
    raise RuntimeError("no seed gave a batch whose outputs end at different steps")  # never on a working install


def _source(pad: int) -> Tensor:
    """The source batch with its pads (0 in ``SOURCE``) written as ``pad``."""
    src = torch.tensor(SOURCE)
    return src.masked_fill(src == 0, pad) if pad != 0 else src


def _model(seed: int) -> _RecordingTransformer:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        config = TransformerConfig(src_vocab_size=9, tgt_vocab_size=9, d_model=16, n_heads=2, n_encoder_layers=1,
                                   n_decoder_layers=2, d_ff=32, dropout=0.0, max_len=16)
        return _RecordingTransformer(config).eval()


def _decoding_bugs(ref: Tensor, free: Tensor, eos: int, pad: int = PAD, bos: int = BOS) -> list[KnownBug]:
    ended = (ref == eos).any(dim=1)
    first_end = int(min(int((row == eos).nonzero()[0]) for row, e in zip(ref, ended) if e))
    after_end = (ref == eos).int().cumsum(dim=1).bool() & (ref != eos)  # the positions padded after <eos>
    return [
        KnownBug("output_includes_bos", "the output starts with <bos>", "return tokens[:, 1:]: the generated "
                 "tokens only", lambda: torch.cat([torch.full_like(ref[:, :1], bos), ref], dim=1)),
        KnownBug("pad_id_ignored", "the rows are padded with 0 after their <eos>, not with pad_id",
                 "pad finished rows with the pad_id argument: special ids can sit anywhere in a vocabulary",
                 lambda: ref.masked_fill(after_end, 0) if pad != 0 else None),
        KnownBug("no_padding_after_eos", "a row keeps producing tokens after its <eos>",
                 "keep a boolean `finished` per row; once a row has its <eos>, append pad_id to it",
                 lambda: free[:, : ref.size(1)]),
        KnownBug("stops_at_first_eos", "decoding stops when the first row ends, cutting the others short",
                 "stop only when every row has its <eos> (finished.all())", lambda: ref[:, : first_end + 1]),
        KnownBug("eos_dropped", "the <eos> tokens are missing", "append the <eos> itself, then pad_id after it",
                 lambda: ref.masked_fill(ref == eos, pad)),
        KnownBug("no_early_stop", "decoding goes on after every row has ended: the output ends in columns of "
                 "padding only, each a wasted pass of the decoder", "stop the loop as soon as every row has its "
                 "<eos>: if finished.all(): break",
                 lambda: torch.cat([ref, ref.new_full((ref.size(0), MAX_NEW_TOKENS - ref.size(1)), pad)], dim=1)
                 if ref.size(1) < MAX_NEW_TOKENS else None),
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
    pad: int = PAD
    bos: int = BOS


def _setting(pad: int = PAD, bos: int = BOS, all_end: bool = False) -> _Setting:
    seed, eos, ref, free = _scenario(pad, bos, all_end)
    src = _source(pad)
    order = "" if (pad, bos) == (PAD, BOS) else " (fairseq's order: <s> = 0, <pad> = 1)"
    example = (fmt_inputs(src=src) + f"\nsrc_mask = padding_mask(src, {pad}), max_new_tokens = {MAX_NEW_TOKENS}\n"
               f"bos_id = {bos}, eos_id = {eos}, pad_id = {pad}{order}\n"
               "model: an untrained Transformer (d_model 16, 2 decoder layers, 9 tokens)")
    return _Setting(_model(seed), src, padding_mask(src, pad), eos, ref, free, example, pad, bos)


def _runs(fn: Callable[..., Any], setting: _Setting, state: dict[str, Tensor]) -> None:
    model, src, example = setting.model, setting.src, setting.example
    model.calls.clear()
    try:
        out = call(fn, model, src.clone(), setting.src_mask.clone(), MAX_NEW_TOKENS, setting.bos, setting.eos,
                   setting.pad, what="your decoding", example=example, names=ARGUMENTS)
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
    right = list(range(len(steps)))
    if starts != right:
        if not any(starts):
            raise Problem("positions_restart_at_zero", f"the new tokens were placed at positions {starts}, not "
                          f"{right}: each step looks like the first to the positional encoding", example=example,
                          hint="give next_token_logits the cache as its last argument, next_token_logits(model, "
                               "newest, memory, src_mask, cache): it places the new token at cache.length (with "
                               "model.decode, pass start=cache.length); chapter 6's pitfall 'new tokens at position 0'")
        shift = {s - r for s, r in zip(starts, right)}
        says = (f"every token sits {shift.pop():+d} from its own position (<bos> is at 0, the token of step t at t)"
                if len(shift) == 1 else "the positions do not count up one per step from 0")
        raise Problem("positions_wrong", f"the new tokens were placed at positions {starts}, not {right}: {says}",
                      example=example, hint="the position of the token fed at a step is the number of tokens the "
                      "cache holds before it: start=cache.length (next_token_logits passes it for you)")


def _matches_reference(setting: _Setting, state: dict[str, Tensor]) -> None:
    def compared() -> Case:
        return state["out"], setting.ref, setting.example, _decoding_bugs(setting.ref, setting.free, setting.eos,
                                                                          setting.pad, setting.bos)

    expect_cases_close([compared], check="matches_reference",
                       message="the tokens differ from greedy_decode's (which recomputes the prefix)",
                       hint="take argmax of the next-token logits at every step")


def _model_restored(setting: _Setting) -> None:
    if setting.model.cache_active():
        raise Problem("cache_left_on", "after decoding, the model's attention is still wrapped by the cache",
                      example=setting.example,
                      hint="use the cache as a context manager: with kv_cache(model) as cache:")


def _stops_early(fn: Callable[..., Any]) -> None:
    setting, state = _setting(all_end=True), dict[str, Any]()
    _runs(fn, setting, state)
    _matches_reference(setting, state)


def _special_ids(fn: Callable[..., Any]) -> None:
    setting, state = _setting(FAIRSEQ_PAD, FAIRSEQ_BOS), dict[str, Any]()
    _runs(fn, setting, state)
    _matches_reference(setting, state)


def grade_greedy_decode(fn: Callable[..., Any], *, from_scratch: bool = True) -> GradeReport:
    """Grade the reader's greedy decoding with a key/value cache.

    ``fn(model, src, src_mask, max_new_tokens, bos_id, eos_id, pad_id)`` must return the generated tokens
    ``(B, T)``, ``T <= max_new_tokens``, as :func:`transformer_lib.decoding.greedy_decode` does: no
    ``<bos>``, each row ending with its ``<eos>`` and padded with ``pad_id`` after it, stopping when
    every row has ended. It must run the encoder once, and decode inside
    ``transformer_lib.kv_cache.kv_cache(model)`` feeding only the newest token at each step, at its
    own position (``start = cache.length``, which ``next_token_logits`` does for you). It is run
    again with the special ids in fairseq's order (``<s> = 0``, ``<pad> = 1``), and must leave its
    arguments unchanged; from scratch (the default) it may use ``next_token_logits`` and the cache,
    not ``greedy_decode`` or ``beam_search``.

    Example:
        >>> grade_greedy_decode(lambda model, src, src_mask, max_new_tokens, bos_id, eos_id, pad_id: greedy_decode(
        ...     model, src, src_mask, max_new_tokens=max_new_tokens, bos_id=bos_id, eos_id=eos_id, pad_id=pad_id),
        ...     from_scratch=False).passed
        True
    """
    grading = Grading("Greedy decoding with a key/value cache", refused=REFUSED_DECODING, from_scratch=from_scratch)
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
        grading.check("stops as soon as every row has ended (a batch whose rows all end early)",
                      functools.partial(_stops_early, fn))
        grading.check("equals greedy_decode with the special ids elsewhere (fairseq's order: <s> = 0, <pad> = 1)",
                      functools.partial(_special_ids, fn))
    return grading.report
