"""Chapter 7's graders: rotary embeddings, ALiBi biases, a decoder-only model's greedy continuation
with a cache, a sliding-window mask and RMSNorm.

Shapes: ``L`` positions (keys), ``T`` queries, ``Dh`` a head's width, ``H`` heads, ``D`` model width.
Positions follow the library's convention: ``L`` keys at ``0 .. L-1``, and queries at
``query_start ..`` (the last ``T`` positions during incremental decoding).
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from transformer_lib.attention import scaled_dot_product_attention
from transformer_lib.config import TransformerConfig
from transformer_lib.decoding import decoding_step, generation_loop, greedy_continue, sample_continue
from transformer_lib.embeddings import ALiBiBias, RotaryEmbedding, alibi_slopes
from transformer_lib.masking import sliding_window_mask
from transformer_lib.model import DecoderOnlyTransformer
from transformer_lib.normalization import RMSNorm
from transformer_lib.properties import assert_causal
from transformer_lib.validation import check_mask

from .. import pitfalls
from .masking import BOOLEAN_HINT
from .report import (
    Case, GradeReport, Grading, KnownBug, Problem, Refused, call, expect_cases_close, expect_close,
    expect_finite, expect_gradients, expect_shape, fmt, fmt_inputs, inputs, property_check,
)

__all__ = ["grade_rotary", "grade_alibi_bias", "grade_greedy_continue", "grade_sliding_window_mask", "grade_rms_norm"]

BASE = 10000.0  # RoPE's wavelength scale, as in the sinusoidal table

# --- 7.1 Rotary embeddings -------------------------------------------------------------------------

REFUSED_ROTARY = (Refused("the library's RotaryEmbedding", (RotaryEmbedding.__init__, RotaryEmbedding.forward)),)
# (shape of x, start), smallest first: Dh = 2 turns one pair by 1 radian per position (by hand); Dh = 4
# has two frequencies; leading (batch, head) dimensions; a decoding step whose first position is 5.
ROTARY_CASES: list[tuple[tuple[int, ...], int]] = [((2, 2), 0), ((3, 4), 0), ((2, 3, 4, 8), 0), ((2, 3, 8), 5)]
ROTARY_ARGUMENTS = ("x", "start")


def rotate(x: Tensor, start: int = 0, *, exponent: float = 2.0, sign: float = 1.0) -> Tensor:
    """RoPE in float64 (the reference, and with other arguments the known bugs): pair ``(2i, 2i+1)`` of the
    vector at position ``p`` turned by ``sign · p · base^(-exponent · i / Dh)``."""
    Dh = x.size(-1)
    i = torch.arange(Dh // 2, dtype=torch.float64)
    position = torch.arange(start, start + x.size(-2), dtype=torch.float64)[:, None]  # (L, 1)
    angles = sign * position * BASE ** (-exponent * i / Dh)  # (L, Dh/2)
    cos, sin = angles.cos(), angles.sin()
    x = x.double()
    first, second = x[..., 0::2], x[..., 1::2]
    turned = (first * cos - second * sin, first * sin + second * cos)  # (..., L, Dh/2) each
    return torch.stack(turned, dim=-1).flatten(-2)  # (..., L, Dh)


def _rotary_bugs(x: Tensor, start: int) -> list[KnownBug]:
    Dh = x.size(-1)
    return [
        KnownBug("pairs_as_halves", "coordinate i is paired with i + Dh/2 (GPT-NeoX's and Hugging Face's "
                 "'rotate half'), not with its neighbour: the same method up to a permutation, but not the "
                 "paper's layout, and weights trained for one give wrong scores under the other",
                 "pair neighbours: x[..., 0::2] with x[..., 1::2], and put each turned pair back in its place "
                 "(torch.stack([...], dim=-1).flatten(-2))",
                 lambda: pitfalls.rotary_in_halves(x.double(), start) if Dh > 2 else None),
        KnownBug("rotates_backwards", "every pair turns the other way: by -p·θ, a sine's sign is flipped",
                 "(x₀, x₁) turned by the angle a is (x₀ cos a - x₁ sin a, x₀ sin a + x₁ cos a)",
                 lambda: rotate(x, start, sign=-1.0)),
        KnownBug("start_ignored", f"the vectors are turned as if the first sat at position 0, not at start = "
                 f"{start}: a decoding step with a cache would rotate every new token as the first",
                 "positions are start, start + 1, ...: torch.arange(start, start + x.size(-2))",
                 lambda: rotate(x, 0) if start else None),
        KnownBug("positions_start_at_one", "the vector at position p is turned by (p + 1)·θ",
                 "the first position is start itself (0 when start = 0): torch.arange(start, start + L)",
                 lambda: rotate(x, start + 1)),
        KnownBug("frequency_exponent", "pair i turns at base^(-i/Dh), not base^(-2i/Dh): the frequencies fall "
                 "half as fast", "θ_i = 10000^(-2i/Dh): torch.arange(0, Dh, 2) / Dh",
                 lambda: rotate(x, start, exponent=1.0) if Dh > 2 else None),
    ]


def _rotary_case(index: int) -> tuple[Tensor, int, str]:
    shape, start = ROTARY_CASES[index]
    x = inputs(*shape, seed=70 + index)
    return x, start, fmt_inputs(x=x, start=start)


def _rotated(fn: Callable[..., Any], x: Tensor, start: int, example: str, what: str = "your rotation",
             grad: bool = False) -> Tensor:
    out = call(fn, x, start, what=what, example=example, names=ROTARY_ARGUMENTS, grad=grad)
    if not isinstance(out, Tensor):
        raise Problem("returns_tensor", f"{what} returned {type(out).__name__}, not a tensor", example=example,
                      hint="return the turned vectors, a tensor of x's shape")
    expect_shape(out, tuple(x.shape), what="the output", example=example,
                 hint="the output has x's shape: each pair turned and put back in its place")
    return out


def _rotary_runs(fn: Callable[..., Any]) -> None:
    x, start, example = _rotary_case(0)
    expect_finite(_rotated(fn, x, start, example), what="the output", example=example)


def _rotary_compared(fn: Callable[..., Any], index: int) -> Case:
    x, start, example = _rotary_case(index)
    got = _rotated(fn, x, start, example)
    expected = RotaryEmbedding(x.size(-1), max_len=start + x.size(-2))(x, start)
    return got, expected, example, _rotary_bugs(x, start)


def _rotary_matches(fn: Callable[..., Any]) -> None:
    expect_cases_close([partial(_rotary_compared, fn, i) for i in range(len(ROTARY_CASES))],
                       check="matches_reference", message="the output differs from RotaryEmbedding's",
                       hint="pair (2i, 2i+1) of the vector at position p turns by p·θ_i, θ_i = 10000^(-2i/Dh)")


def _rotary_relative(fn: Callable[..., Any]) -> None:
    """RoPE's point: a query at m and a key at n score by n - m alone (both moved by 3, same scores)."""
    q, k = inputs(1, 8, seed=77), inputs(4, 8, seed=78)
    example = fmt_inputs(query=q, key=k) + "\n(the query at position 3, the keys at 0..3; then all moved by 7)"
    scores = [_rotated(fn, q, 3 + s, example) @ _rotated(fn, k, s, example).T for s in (0, 7)]  # (1, 4) each
    expect_close(scores[1], scores[0], check="relative_scores", example=example, rtol=1e-4, atol=1e-4,
                 message="moving the query and its keys by the same number of positions changes their scores: "
                         "the score must depend on the distance n - m only",
                 hint="turn the query and the key by the same rule, each by its own position; a rotation keeps "
                      "lengths and ⟨R_m q, R_n k⟩ = ⟨q, R_(n-m) k⟩")


LONG_ROTARY = (4094, 2, 64)  # (start, L, Dh): positions of a long document


def _rotary_large(fn: Callable[..., Any], matched: bool) -> None:
    start, L, Dh = LONG_ROTARY
    x = torch.randn(L, Dh, generator=torch.Generator().manual_seed(79))
    example = f"x ({L}, {Dh}): random, scale 1; start = {start:,} (positions of a long document)"
    got = _rotated(fn, x, start, example)
    if not bool(torch.isfinite(got).all()):
        raise Problem("large_positions", f"at positions near {start:,} the output holds NaN or infinite values",
                      example=example, hint="compute base^(-2i/Dh) in floating point (a power of an integer "
                                            "tensor stays an integer and overflows)")
    if matched:
        # float32 holds an angle of 4,095 radians to about 2.4e-4; an entry of scale 1 moves by about that
        expect_close(got, rotate(x, start), check="large_positions", example=example, rtol=0.0, atol=2e-3,
                     message=f"at positions near {start:,} the output differs from the float64 one by more than "
                             "float32 rounding",
                     hint="compute positions and angles in float32 or float64, never in float16 (whose whole "
                          "numbers are exact only up to 2,048) or in x's dtype")


def _rotary_half(fn: Callable[..., Any], matched: bool) -> None:
    x, start = torch.randn(2, 3, 16, generator=torch.Generator().manual_seed(80)), 100
    example = f"float16 x (2, 3, 16): random, scale 1; start = {start} (mixed-precision training)"
    got = _rotated(fn, x.half(), start, example, what="your rotation in float16")
    if got.dtype != torch.float16:
        raise Problem("dtype", f"float16 vectors come back as {got.dtype}", example=example,
                      hint="cast cos and sin to x's dtype (cos.to(x.dtype)): the queries and keys stay in the "
                           "model's precision")
    expect_finite(got, what="the float16 output", example=example)
    if matched:
        # float16 rounds each entry by 5e-4 relative: a turned entry of scale 2 moves by ~3e-3
        expect_close(got.float(), rotate(x.half().double(), start), check="half_precision", example=example,
                     rtol=0.0, atol=1e-2, message="in float16 the output differs from the float64 one by more than "
                     "float16 rounding", hint="compute the angles in float32 or float64 (in float16 a position of "
                     "100 times a frequency loses about 0.03 radians), then cast cos and sin to x's dtype")


def _rotary_gradients(fn: Callable[..., Any], matched: bool) -> None:
    x, start, example = _rotary_case(3)
    expect_gradients(lambda t: _rotated(fn, t["x"], start, example, grad=True), lambda t: rotate(t["x"], start),
                     {"x": x}, example=example, compare=matched)


def grade_rotary(fn: Callable[[Tensor, int], Tensor], *, from_scratch: bool = True) -> GradeReport:
    """Grade the reader's rotary position embedding (RoPE, Su et al. 2021).

    ``fn(x, start)`` gets vectors ``x (..., L, Dh)`` (queries or keys, any leading batch and head
    dimensions) at positions ``start .. start + L - 1`` and must return them rotated as
    :class:`transformer_lib.embeddings.RotaryEmbedding` does: pair ``(2i, 2i+1)`` at position ``p``
    turned by ``p · 10000^(-2i/Dh)``. Checked against it on small inputs (``Dh = 2`` by hand, a
    decoding step at ``start = 5``), then the relative property (scores depend on the distance only),
    positions near 4,096 against float64, float16 inputs (kept in float16, within its rounding),
    gradients (the library's), ``x`` left unchanged; and, from scratch (the default), no use of the
    library's ``RotaryEmbedding``.

    Example:
        >>> grade_rotary(lambda x, start: RotaryEmbedding(x.size(-1), start + x.size(-2))(x, start),
        ...              from_scratch=False).passed
        True
    """
    grading = Grading("Rotary position embedding", refused=REFUSED_ROTARY, from_scratch=from_scratch)
    with grading:
        grading.check("returns vectors of x's shape", partial(_rotary_runs, fn), gate=True)
        matched = grading.check("equals RotaryEmbedding: Dh = 2 (one pair, by hand), Dh = 4 and 8, with batch "
                                "and head dimensions, and a decoding step at start = 5", partial(_rotary_matches, fn))
        grading.check("scores depend on the distance only (query and keys moved together)",
                      partial(_rotary_relative, fn))
        grading.check(f"exact at positions near {LONG_ROTARY[0] + LONG_ROTARY[1]:,} (within float32 rounding of "
                      "float64)", partial(_rotary_large, fn, matched))
        grading.check("keeps float16 inputs in float16, within its rounding", partial(_rotary_half, fn, matched))
        grading.check("gradients reach x and equal RoPE's", partial(_rotary_gradients, fn, matched))
    return grading.report


# --- 7.2 ALiBi biases ------------------------------------------------------------------------------

REFUSED_ALIBI = (Refused("the library's ALiBiBias and alibi_slopes",
                         (ALiBiBias.__init__, ALiBiBias.forward, alibi_slopes)),)
# (n_heads, n_queries, n_keys, query_start), smallest first: one head, two; a decoding step (one query,
# the last of four keys); 6 heads (not a power of two: the paper's code fills in between); 12 heads.
ALIBI_CASES = [(1, 2, 2, 0), (2, 3, 3, 0), (4, 1, 4, 3), (6, 2, 4, 2), (12, 3, 5, 2)]
ALIBI_ARGUMENTS = ("n_heads", "n_queries", "n_keys", "query_start")


def _bias(slopes: Tensor, n_queries: int, n_keys: int, query_start: int, signed: bool = False) -> Tensor:
    """``-m_h |i - j|`` (``(1, H, T, L)``, float64) for given slopes; ``signed``: ``m_h (j - i)`` instead."""
    query = torch.arange(query_start, query_start + n_queries, dtype=torch.float64)[:, None]  # (T, 1)
    key = torch.arange(n_keys, dtype=torch.float64)[None, :]  # (1, L)
    distance = key - query if signed else -(key - query).abs()  # (T, L)
    return (slopes.double()[:, None, None] * distance)[None]  # (1, H, T, L)


def _alibi_bugs(H: int, T: int, L: int, start: int) -> list[KnownBug]:
    slopes = alibi_slopes(H)
    power_of_two = H & (H - 1) == 0
    return [
        KnownBug("bias_sign", "the bias grows with distance instead of falling: far keys are favoured",
                 "subtract: the bias is -m_h·|i - j|, zero on the diagonal and negative elsewhere",
                 lambda: -_bias(slopes, T, L, start)),
        KnownBug("slopes_reversed", "the slopes run from the smallest to the largest: head 1 gets the gentlest",
                 "m_h = 2^(-8h/H) for h = 1 .. H: head 1 has the steepest slope, 2^(-8/H)",
                 lambda: _bias(slopes.flip(0), T, L, start) if H > 1 else None),
        KnownBug("slopes_not_power_of_two", f"with {H} heads (not a power of two) the slopes are 2^(-8h/{H}): "
                 "the formula holds for a power of two only", "take the slopes of the power of two below H, "
                 "then every other slope of twice that many heads (alibi_slopes' docstring, the paper's code)",
                 lambda: None if power_of_two else _bias(pitfalls.power_of_two_alibi_slopes(H), T, L, start)),
        KnownBug("query_start_ignored", f"the queries are placed at 0 .. {T - 1}, not at query_start = {start} "
                 f".. {start + T - 1}: a decoding step would bias its one query as if it were the first",
                 "query i sits at position query_start + i", lambda: _bias(slopes, T, L, 0) if start else None),
        KnownBug("signed_distance", "keys after the query get a positive bias: m·(j - i) instead of -m·|i - j| "
                 "(the same under a causal mask, not in an encoder)",
                 "use the absolute distance: -m_h · (j - i).abs()", lambda: _bias(slopes, T, L, start, signed=True)),
    ]


def _alibi_of(fn: Callable[..., Any], H: int, T: int, L: int, start: int, example: str) -> Tensor:
    what = f"your bias({H}, {T}, {L}, {start})"
    out = call(fn, H, T, L, start, what=what, example=example, names=ALIBI_ARGUMENTS)
    if not isinstance(out, Tensor):
        raise Problem("returns_tensor", f"{what} returned {type(out).__name__}, not a tensor", example=example,
                      hint="return the bias, a float tensor (1, H, T, L)")
    if out.dim() == 3:
        out = out[None]
    expect_shape(out, (1, H, T, L), what="the bias", example=example,
                 hint="one (T, L) table per head: (1, H, T, L), to be added to scores (B, H, T, L)")
    if not out.is_floating_point():
        raise Problem("dtype", f"{what} has dtype {out.dtype}, not a floating-point type", example=example,
                      hint="the slopes are fractions: multiply float slopes by the distances")
    return out


def _alibi_case(fn: Callable[..., Any], index: int) -> Case:
    H, T, L, start = ALIBI_CASES[index]
    example = fmt_inputs(n_heads=H, n_queries=T, n_keys=L, query_start=start)
    got = _alibi_of(fn, H, T, L, start, example)
    return got, ALiBiBias(H)(T, L, start), example, _alibi_bugs(H, T, L, start)


def _alibi_runs(fn: Callable[..., Any]) -> None:
    _alibi_case(fn, 0)


def _alibi_matches(fn: Callable[..., Any]) -> None:
    expect_cases_close([partial(_alibi_case, fn, i) for i in range(len(ALIBI_CASES))], check="matches_reference",
                       message="the bias differs from ALiBiBias's", rtol=1e-5, atol=1e-7,
                       hint="head h adds -m_h·|i - j| to the score of query i and key j; m_h = 2^(-8h/H) for H a "
                            "power of two")


LONG_ALIBI = (8, 1, 8192, 8191)  # a decoding step at position 8,191 of a long document


def _alibi_large(fn: Callable[..., Any], matched: bool) -> None:
    H, T, L, start = LONG_ALIBI
    example = fmt_inputs(n_heads=H, n_queries=T, n_keys=L, query_start=start) + " (a long document)"
    got = _alibi_of(fn, H, T, L, start, example)
    expect_finite(got, what="the bias", example=example)
    if matched:
        # the slopes of 8 heads are powers of two and the distances whole numbers: exact in float32
        expect_close(got, _bias(alibi_slopes(H), T, L, start), check="large_positions", example=example,
                     rtol=1e-6, atol=0.0, message=f"at distances up to {L - 1:,} the bias differs from the float64 "
                     "one", hint="compute the distances in an integer type or float32, not float16 (whose whole "
                                 "numbers are exact only up to 2,048)")


def grade_alibi_bias(fn: Callable[[int, int, int, int], Tensor], *, from_scratch: bool = True) -> GradeReport:
    """Grade the reader's ALiBi bias (Press et al. 2022).

    ``fn(n_heads, n_queries, n_keys, query_start)`` must return the float bias ``(1, H, T, L)`` (or
    ``(H, T, L)``) of :class:`transformer_lib.embeddings.ALiBiBias`: head ``h`` adds
    ``-m_h·|i - j|`` for query ``i`` at position ``query_start + i`` and key ``j``, with the slopes of
    :func:`~transformer_lib.embeddings.alibi_slopes` (``m_h = 2^(-8h/H)`` for ``H`` a power of two,
    the paper's code's fill-in otherwise). Checked against it on small inputs (one query of a
    decoding step, 6 and 12 heads included), then distances up to 8,191 against float64; from
    scratch (the default), no use of the library's ``ALiBiBias`` or ``alibi_slopes``.

    Example:
        >>> grade_alibi_bias(lambda H, T, L, start: ALiBiBias(H)(T, L, start), from_scratch=False).passed
        True
    """
    grading = Grading("ALiBi bias", refused=REFUSED_ALIBI, from_scratch=from_scratch)
    with grading:
        grading.check("returns a float bias (1, H, T, L)", partial(_alibi_runs, fn), gate=True)
        matched = grading.check("equals ALiBiBias for 1, 2, 4, 6 and 12 heads, one decoding step included",
                                partial(_alibi_matches, fn))
        grading.check(f"exact at distances up to {LONG_ALIBI[2] - 1:,} (float64's answer)",
                      partial(_alibi_large, fn, matched))
    return grading.report


# --- 7.7 A sliding-window mask ---------------------------------------------------------------------

REFUSED_WINDOW = (Refused("the library's sliding_window_mask", (sliding_window_mask,)),)
# (n_queries, n_keys, window), smallest first: a window of one (each query sees itself), then two; a
# window as long as the sequence (= causal_mask); one decoding step; the last queries of six keys.
WINDOW_CASES = [(2, 2, 1), (3, 3, 2), (5, 5, 2), (4, 4, 4), (1, 5, 3), (2, 6, 3)]
WINDOW_ARGUMENTS = ("n_queries", "n_keys", "window")


def _window_bugs(T: int, L: int, window: int) -> list[KnownBug]:
    query = torch.arange(L - T, L)[:, None]  # (T, 1) absolute positions
    distance = query - torch.arange(L)[None, :]  # (T, L), > 0 for keys in the past
    right = (distance >= 0) & (distance < window)
    return [
        KnownBug("mask_polarity", "True marks the keys outside the window: the mask is the wrong way round",
                 "True means 'may attend': keys at distance 0 .. window - 1 before the query", lambda: ~right),
        KnownBug("window_off_by_one", "each query sees window + 1 keys: distances 0 .. window, itself included",
                 "window counts the query itself: keep distances 0 .. window - 1 (distance < window)",
                 lambda: pitfalls.sliding_window_one_too_wide(T, L, window)[0, 0]),
        KnownBug("window_short_by_one", "each query sees window - 1 keys: the window leaves out one",
                 "window counts the query itself: keep distances 0 .. window - 1 (distance < window)",
                 lambda: (distance >= 0) & (distance < window - 1)),
        KnownBug("not_causal", "each query also sees keys after it, up to window - 1 ahead (Longformer's "
                 "bidirectional window, not Mistral's causal one)", "also require distance >= 0: the key is at or "
                 "before the query", lambda: distance.abs() < window),
        KnownBug("queries_not_last", f"query i is placed at position i, not at n_keys - n_queries + i = {L - T} "
                 "+ i: with a cache the new queries are the last positions", "align the queries with the last keys: "
                 "query positions torch.arange(n_keys - n_queries, n_keys)",
                 lambda: None if T == L else ((distance - (L - T)) >= 0) & ((distance - (L - T)) < window)),
    ]


def _window_of(fn: Callable[..., Any], T: int, L: int, window: int, example: str) -> Tensor:
    what = f"your mask({T}, {L}, {window})"
    mask = call(fn, T, L, window, what=what, example=example, names=WINDOW_ARGUMENTS)
    if not isinstance(mask, Tensor):
        raise Problem("returns_tensor", f"{what} returned {type(mask).__name__}, not a tensor", example=example,
                      hint="return a boolean torch.Tensor")
    if mask.dtype != torch.bool:
        raise Problem("mask_dtype", f"{what} returned dtype {mask.dtype}, not torch.bool", example=example,
                      hint=BOOLEAN_HINT)
    try:
        check_mask(mask, (2, 2, T, L))
    except ValueError:
        raise Problem("mask_shape", f"the mask's shape {tuple(mask.shape)} does not broadcast to the scores "
                      f"(B, H, {T}, {L})", example=example,
                      hint="queries on rows, keys on columns: (T, L), or (1, 1, T, L) as the library's masks") from None
    return torch.broadcast_to(mask, (1, 1, T, L))[0, 0]  # (T, L)


def _window_case(fn: Callable[..., Any], index: int) -> Case:
    T, L, window = WINDOW_CASES[index]
    example = fmt_inputs(n_queries=T, n_keys=L, window=window)
    got = _window_of(fn, T, L, window, example)
    return got, sliding_window_mask(T, L, window=window)[0, 0], example, _window_bugs(T, L, window)


def _window_runs(fn: Callable[..., Any]) -> None:
    for index in range(len(WINDOW_CASES)):
        T, L, window = WINDOW_CASES[index]
        _window_of(fn, T, L, window, fmt_inputs(n_queries=T, n_keys=L, window=window))


def _window_matches(fn: Callable[..., Any]) -> None:
    expect_cases_close([partial(_window_case, fn, i) for i in range(len(WINDOW_CASES))],
                       check="matches_reference",
                       message="the mask (queries on rows, keys on columns) differs from sliding_window_mask",
                       hint="query i (at position n_keys - n_queries + i) sees the keys at distance 0 .. window - 1 "
                            "before it, itself included")


def _window_causal(fn: Callable[..., Any]) -> None:
    T, window = 6, 3
    example = fmt_inputs(n_queries=T, n_keys=T, window=window)
    mask = _window_of(fn, T, T, window, example)
    x = inputs(2, T, 4, seed=75)
    attend = lambda x: scaled_dot_product_attention(x[:, None], x[:, None], x[:, None], mask)[0][:, 0]  # noqa: E731
    property_check("causality", lambda: assert_causal(attend, x), example=example + "\n" + fmt_inputs(x=x),
                   hint="a key after the query must be hidden: changing later tokens must not change earlier outputs")


LONG_WINDOW = (2, 4096, 512)  # (n_queries, n_keys, window): the last two queries of a long document


def _window_large(fn: Callable[..., Any], matched: bool) -> None:
    T, L, window = LONG_WINDOW
    example = fmt_inputs(n_queries=T, n_keys=L, window=window) + " (a long document)"
    got = _window_of(fn, T, L, window, example)
    expected = sliding_window_mask(T, L, window=window)[0, 0]
    if matched and not bool(torch.equal(got, expected)):  # a wrong mask is wrong here too: reported already
        wrong = (got != expected).nonzero()[:4].tolist()
        raise Problem("large_positions", f"at {L:,} keys the mask differs from sliding_window_mask, first at "
                      f"(query, key) {', '.join(map(str, map(tuple, wrong)))}", example=example,
                      hint="compute positions as integers (torch.arange(n) without a float dtype): float16 holds "
                           "whole numbers exactly only up to 2,048")


def grade_sliding_window_mask(fn: Callable[[int, int, int], Tensor], *, from_scratch: bool = True) -> GradeReport:
    """Grade the reader's causal sliding-window mask (Mistral's, Jiang et al. 2023).

    ``fn(n_queries, n_keys, window)`` must return a boolean mask broadcastable to ``(..., T, L)``,
    ``True`` where query ``i`` (at position ``n_keys - n_queries + i``: the last positions, as in
    decoding with a cache) may see key ``j``: ``0 <= i' - j < window``. Checked against
    :func:`transformer_lib.masking.sliding_window_mask` on small masks (a decoding step included),
    causality through the library's attention (:mod:`transformer_lib.properties`), and 4,096 keys;
    from scratch (the default), no use of the library's ``sliding_window_mask``.

    Example:
        >>> grade_sliding_window_mask(lambda T, L, w: sliding_window_mask(T, L, window=w), from_scratch=False).passed
        True
    """
    grading = Grading("Sliding-window mask", refused=REFUSED_WINDOW, from_scratch=from_scratch)
    with grading:
        grading.check("returns a boolean mask that broadcasts to (..., T, L)", partial(_window_runs, fn), gate=True)
        matched = grading.check("equals sliding_window_mask: windows of 1, 2, 3 and the whole sequence, one "
                                "decoding step and the last queries of six keys", partial(_window_matches, fn))
        grading.check("attention under it is causal (transformer_lib.properties)", partial(_window_causal, fn))
        grading.check(f"exact at {LONG_WINDOW[1]:,} keys", partial(_window_large, fn, matched))
    return grading.report


# --- 7.9 RMSNorm -----------------------------------------------------------------------------------

D = 8  # the width every RMSNorm check uses
_TORCH_RMS = tuple(t for t in (getattr(getattr(nn, "RMSNorm", None), "__init__", None),
                               getattr(F, "rms_norm", None)) if t is not None)  # PyTorch 2.4 and later
REFUSED_RMS = (Refused("the library's RMSNorm", (RMSNorm.__init__,)),) + (
    (Refused("PyTorch's nn.RMSNorm", _TORCH_RMS),) if _TORCH_RMS else ())


def _rms(x: Tensor, gain: Tensor, eps: float) -> Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * gain


def _rms_bugs(x: Tensor, gain: Tensor, eps: float) -> list[KnownBug]:
    x, gain = x.double(), gain.detach().double()
    mean_square = x.pow(2).mean(-1, keepdim=True)
    return [
        KnownBug("mean_subtracted", "the mean is subtracted first: this is LayerNorm without its bias, not "
                 "RMSNorm", "RMSNorm only divides by the root mean square: x / sqrt(mean(x²) + eps) · g",
                 lambda: _rms(x - x.mean(-1, keepdim=True), gain, eps)),
        KnownBug("eps_outside_root", "eps is added after the square root: x / (sqrt(mean(x²)) + eps). Close for "
                 "large x, far off for small x", "add eps under the root: torch.rsqrt(mean(x²) + eps)",
                 lambda: x / (mean_square.sqrt() + eps) * gain),
        KnownBug("no_root", "x is divided by the mean square itself, not by its square root",
                 "take the square root: x / sqrt(mean(x²) + eps)", lambda: x / (mean_square + eps) * gain),
        KnownBug("norm_not_rms", "x is divided by its length (the root of the *sum* of squares), not the root "
                 "of their *mean*: off by √D", "mean over the last dimension, not sum: x.pow(2).mean(-1, keepdim=True)",
                 lambda: x * torch.rsqrt(x.pow(2).sum(-1, keepdim=True) + eps) * gain),
        KnownBug("gain_not_applied", "the gain is never applied (or applied before the division, where it cancels)",
                 "multiply the normalised x by self.weight", lambda: _rms(x, torch.ones_like(gain), eps)),
        KnownBug("normalised_over_everything", "the mean square is taken over the whole tensor, not over each "
                 "vector's D features", "normalise each vector on its own: mean over dim=-1, keepdim=True",
                 lambda: x * torch.rsqrt(x.pow(2).mean() + eps) * gain),
    ]


def _rms_build(module_class: Callable[..., nn.Module]) -> nn.Module:
    what = f"{getattr(module_class, '__name__', 'your module')}({D})"
    module = call(module_class, D, what=what)
    if not isinstance(module, nn.Module):
        raise Problem("not_a_module", f"{what} is a {type(module).__name__}, not an nn.Module",
                      hint="subclass nn.Module and call super().__init__() first")
    return module


def _rms_run(module: nn.Module, x: Tensor, example: str, grad: bool = False) -> Tensor:
    out = call(module, x, what="your RMSNorm", example=example, names=("x",), grad=grad)
    if not isinstance(out, Tensor):
        raise Problem("returns_tensor", f"forward returned {type(out).__name__}, not a tensor", example=example,
                      hint="return the normalised tensor (did you forget `return`?)")
    expect_shape(out, tuple(x.shape), what="the output", example=example, hint="RMSNorm keeps x's shape")
    return out


def _rms_runs(module_class: Callable[..., nn.Module], state: dict[str, Any]) -> None:
    state["module"] = module = _rms_build(module_class)
    x = inputs(2, 3, D, seed=90)
    _rms_run(module, x, fmt_inputs(x=x))


def _rms_gain(state: dict[str, Any]) -> None:
    module = state["module"]
    params = [p for p in module.parameters()]
    if not params:
        raise Problem("no_gain", "the module has no parameter: RMSNorm learns a gain g, one number per feature",
                      hint="self.weight = nn.Parameter(torch.ones(d_model)), and multiply by it in forward")
    if len(params) > 1 or params[0].numel() != D:
        shapes = ", ".join(str(tuple(p.shape)) for p in params)
        raise Problem("gain_shape", f"the module's parameters have shapes {shapes}; RMSNorm has one gain ({D},) "
                      "and no bias", hint="self.weight = nn.Parameter(torch.ones(d_model)), nothing else")
    gain = params[0]
    if not bool((gain == 1).all()):
        raise Problem("gain_init", "the gain does not start at ones: a new layer should only normalise",
                      got=fmt(gain), hint="nn.Parameter(torch.ones(d_model))")
    with torch.no_grad():  # a gain away from 1, so that a gain left out shows
        gain.copy_(0.5 + torch.rand(D, generator=torch.Generator().manual_seed(91)))
    state["gain"], state["eps"] = gain, float(getattr(module, "eps", 1e-5))


def _rms_case(state: dict[str, Any], index: int) -> Case:
    module, gain, eps = state["module"], state["gain"], state["eps"]
    x = [inputs(1, D, seed=92), 3.0 + inputs(2, 3, D, seed=93), 1e-3 * inputs(2, D, seed=94)][index]
    example = fmt_inputs(x=x) + ("\n(tiny entries: mean(x²) is below eps)" if index == 2 else "")
    example += f"\ngain g: {fmt(gain)}, eps = {eps:g}"
    got = _rms_run(module, x, example)
    reference = RMSNorm(D, eps=eps)
    with torch.no_grad():
        reference.weight.copy_(gain)
        expected = reference(x)
    return got.detach(), expected, example, _rms_bugs(x, gain, eps)


def _rms_matches(state: dict[str, Any]) -> None:
    expect_cases_close([partial(_rms_case, state, i) for i in range(3)], check="matches_reference",
                       message="the output differs from transformer_lib.normalization.RMSNorm's",
                       hint="y = x / sqrt(mean(x²) + eps) · g, the mean over the last dimension")


def _rms_zero(state: dict[str, Any]) -> None:
    x = torch.zeros(2, D)
    example = fmt_inputs(x=x) + " (a vector of zeros: a padded position's)"
    got = _rms_run(state["module"], x, example)
    if not bool(torch.isfinite(got).all()):
        raise Problem("zero_input", "a vector of zeros gives NaN or infinite values", example=example, got=fmt(got),
                      hint="add eps under the square root: 0 / sqrt(0 + eps) = 0")
    expect_close(got, torch.zeros_like(got), check="zero_input", example=example,
                 message="a vector of zeros does not stay zero", hint="y = x / sqrt(mean(x²) + eps) · g")


def _rms_large(state: dict[str, Any], matched: bool) -> None:
    x = 1e4 * torch.randn(2, 3, D, generator=torch.Generator().manual_seed(95))
    example = f"x (2, 3, {D}): random, scale 10,000 (activations deep in a stack reach that)"
    got = _rms_run(state["module"], x, example)
    expect_finite(got, what="the output", example=example)
    if matched:  # the output is of scale 1: float32 rounding, about 1e-7 relative
        expect_close(got, _rms(x.double(), state["gain"].detach().double(), state["eps"]), check="large_inputs",
                     example=example, rtol=1e-5, atol=1e-5, message="on inputs of scale 10,000 the output differs "
                     "from the float64 answer by more than float32 rounding",
                     hint="square in the input's dtype and take the mean: torch.rsqrt(x.pow(2).mean(-1, keepdim=True) "
                          "+ eps)")


def _rms_half(state: dict[str, Any], matched: bool) -> None:
    x = 4 * torch.randn(2, 3, D, generator=torch.Generator().manual_seed(96))
    example = f"float16 x (2, 3, {D}): random, scale 4; the module in float16 (module.half())"
    half = copy.deepcopy(state["module"]).half()
    got = _rms_run(half, x.half(), example)
    if got.dtype != torch.float16:
        raise Problem("dtype", f"a float16 module given float16 x returns {got.dtype}", example=example,
                      hint="build no float32 tensor in forward (torch.tensor(...), torch.ones(...) without "
                           "dtype=): use x's dtype")
    expect_finite(got, what="the float16 output", example=example)
    if matched:  # float16 rounds by 5e-4 relative; an output of scale 2 after a few operations: 1e-2
        expect_close(got.float(), _rms(x.half().double(), state["gain"].detach().half().double(), state["eps"]),
                     check="half_precision", example=example, rtol=1e-2, atol=1e-2,
                     message="in float16 the output differs from the float64 one by more than float16 rounding",
                     hint="mean(x²) of entries of scale 4 is about 16, well within float16: look for a constant "
                          "too small for float16 (below 6e-8) or a sum of squares of many features")


def _rms_gradients(state: dict[str, Any], matched: bool) -> None:
    x = 3.0 + inputs(2, 3, D, seed=93)
    gain, eps = state["gain"].detach().double(), state["eps"]
    expect_gradients(lambda t: _rms_run(state["module"], t["x"], fmt_inputs(x=x), grad=True),
                     lambda t: _rms(t["x"], gain, eps), {"x": x}, example=fmt_inputs(x=x), compare=matched)


def grade_rms_norm(module_class: Callable[..., nn.Module], *, from_scratch: bool = True) -> GradeReport:
    """Grade the reader's RMSNorm (Zhang and Sennrich 2019): ``y = x / sqrt(mean(x²) + eps) · g``.

    ``module_class(d_model)`` (``eps`` an optional argument, default ``1e-5``, kept as ``self.eps``)
    must hold one parameter, the gain ``(d_model,)``, starting at ones, and ``forward(x)`` normalise
    the last dimension. Checked against :class:`transformer_lib.normalization.RMSNorm` with the same
    (random) gain on a row, a batch with a mean offset, and tiny entries (where ``eps``'s place shows);
    then a vector of zeros, inputs of scale 10,000 and float16 (against float64), gradients (the
    library's), ``x`` left unchanged; and, from scratch (the default), no use of the library's or
    PyTorch's ``RMSNorm``.

    Example:
        >>> grade_rms_norm(RMSNorm, from_scratch=False).passed
        True
    """
    grading = Grading("RMSNorm", refused=REFUSED_RMS, from_scratch=from_scratch)
    state: dict[str, Any] = {}
    with grading:
        grading.check(f"builds with d_model = {D} and keeps x's shape", partial(_rms_runs, module_class, state),
                      gate=True)
        gained = grading.check(f"holds one gain ({D},), starting at ones, and no bias", partial(_rms_gain, state))
        if gained:
            matched = grading.check("equals RMSNorm (the same gain): a row, a batch with a mean offset, tiny "
                                    "entries", partial(_rms_matches, state))
            grading.check("maps a vector of zeros to zeros", partial(_rms_zero, state))
            grading.check("stays exact on inputs of scale 10,000", partial(_rms_large, state, matched))
            grading.check("keeps float16 in float16, within its rounding", partial(_rms_half, state, matched))
            grading.check("gradients reach x and equal RMSNorm's", partial(_rms_gradients, state, matched))
        else:
            grading.skip("the comparisons with the library's RMSNorm, which copy the gain")
    return grading.report


# --- 7.4 A decoder-only model's greedy continuation with a cache -----------------------------------

REFUSED_CONTINUE = (Refused("the library's greedy_continue", (greedy_continue, sample_continue, generation_loop,
                                                              decoding_step)),)
CONTINUE_ARGUMENTS = ("model", "prompt", "max_new_tokens", "eos_id", "pad_id")
NEW_TOKENS = 6
PROMPT = [[4, 5, 6, 2], [7, 8, 4, 2], [6, 6, 5, 2]]  # three questions, each ending with <bos> (id 2)


class _RecordingLM(DecoderOnlyTransformer):
    """The library's decoder-only model, recording each ``decode``: (new positions, start, cache active)."""

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__(config)
        self.calls: list[tuple[int, int, bool]] = []
        self._own_attention = (self.blocks.layers[0].self_attn,)  # a tuple: not registered as a submodule

    def cache_active(self) -> bool:
        return self.blocks.layers[0].self_attn is not self._own_attention[0]

    def decode(self, tokens: Tensor, memory: None = None, src_mask: None = None, tgt_mask: Tensor | None = None,
               start: int = 0) -> Tensor:
        self.calls.append((tokens.size(1), start, self.cache_active()))
        return super().decode(tokens, memory, src_mask, tgt_mask, start)


def _lm(seed: int) -> _RecordingLM:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        config = TransformerConfig.decoder_only("tiny", vocab_size=9, d_model=16, n_heads=2, n_decoder_layers=2,
                                                d_ff=32, dropout=0.0, max_len=16, tie_output=False)
        return _RecordingLM(config).eval()


@functools.cache
def _lm_scenario(pad: int = 0, all_end: bool = False) -> tuple[int, int, Tensor, Tensor]:
    """A seed and an ``<eos>`` id for which the rows' continuations end at different steps (with
    ``all_end``, all before ``NEW_TOKENS``), with the recomputed continuation and the one without ``<eos>``."""
    prompt = torch.tensor(PROMPT)
    for seed in range(300):
        model = _lm(seed)
        free = greedy_continue(model, prompt, max_new_tokens=NEW_TOKENS, eos_id=None, pad_id=pad, use_cache=False)
        for eos in range(4, 9):  # a symbol as <eos>: an untrained model's continuations end at different steps
            first = [int(e[0]) if len(e) else None for e in ((row == eos).nonzero() for row in free)]
            if all_end:
                wanted = None not in first and len(set(first)) > 1 and max(f or 0 for f in first) <= NEW_TOKENS - 3
            else:
                wanted = None in first and any(f is not None and 1 <= f <= NEW_TOKENS - 3 for f in first)
            if wanted:
                ref = greedy_continue(model, prompt, max_new_tokens=NEW_TOKENS, eos_id=eos, pad_id=pad,
                                      use_cache=False)
                return seed, eos, ref, free
    raise RuntimeError("no seed gave continuations that end at different steps")  # never on a working install


def _continue_bugs(prompt: Tensor, ref: Tensor, free: Tensor, eos: int, pad: int) -> list[KnownBug]:
    ended = (ref == eos).any(dim=1)
    first_end = min(int((row == eos).nonzero()[0]) for row, e in zip(ref, ended) if e)
    after_end = (ref == eos).int().cumsum(dim=1).bool() & (ref != eos)
    return [
        KnownBug("output_includes_prompt", "the output starts with the prompt", "return only the new tokens: "
                 "tokens[:, prompt.size(1):]", lambda: torch.cat([prompt, ref], dim=1)),
        KnownBug("pad_id_ignored", "the rows are padded with 0 after their <eos>, not with pad_id",
                 "pad finished rows with the pad_id argument", lambda: ref.masked_fill(after_end, 0) if pad else None),
        KnownBug("no_padding_after_eos", "a row keeps producing tokens after its <eos>",
                 "keep a boolean `finished` per row; once a row has its <eos>, append pad_id to it",
                 lambda: free[:, : ref.size(1)]),
        KnownBug("stops_at_first_eos", "decoding stops when the first row ends, cutting the others short",
                 "stop only when every row has its <eos> (finished.all())", lambda: ref[:, : first_end + 1]),
        KnownBug("no_early_stop", "decoding goes on after every row has ended", "stop the loop as soon as every "
                 "row has its <eos>", lambda: torch.cat([ref, ref.new_full((ref.size(0), NEW_TOKENS - ref.size(1)),
                                                                             pad)], dim=1)
                 if ref.size(1) < NEW_TOKENS else None),
    ]


@dataclass(frozen=True)
class _LMSetting:
    model: _RecordingLM
    prompt: Tensor
    eos: int
    pad: int
    ref: Tensor
    free: Tensor
    example: str


def _lm_setting(pad: int = 0, all_end: bool = False) -> _LMSetting:
    seed, eos, ref, free = _lm_scenario(pad, all_end)
    prompt = torch.tensor(PROMPT)
    order = " (fairseq's order: <pad> = 1)" if pad == 1 else ""
    example = (fmt_inputs(prompt=prompt) + f"\nmax_new_tokens = {NEW_TOKENS}, eos_id = {eos}, pad_id = {pad}{order}\n"
               "model: an untrained DecoderOnlyTransformer (d_model 16, 2 layers, 9 tokens)")
    return _LMSetting(_lm(seed), prompt, eos, pad, ref, free, example)


def _continue_runs(fn: Callable[..., Any], setting: _LMSetting, state: dict[str, Tensor]) -> None:
    setting.model.calls.clear()
    out = call(fn, setting.model, setting.prompt.clone(), NEW_TOKENS, setting.eos, setting.pad,
               what="your continuation", example=setting.example, names=CONTINUE_ARGUMENTS)
    if not isinstance(out, Tensor):
        raise Problem("returns_tensor", f"your continuation returned {type(out).__name__}, not a tensor",
                      example=setting.example, hint="return the (B, T) tensor of new token ids")
    if out.dim() != 2 or out.size(0) != setting.prompt.size(0) or out.is_floating_point():
        raise Problem("output_shape", f"the output is {tuple(out.shape)} {out.dtype}, expected "
                      f"({setting.prompt.size(0)}, T) integer token ids", example=setting.example,
                      hint="one row of new token ids per prompt")
    state["out"] = out


def _continue_uses_the_cache(setting: _LMSetting) -> None:
    calls, P, example = setting.model.calls, setting.prompt.size(1), setting.example
    fed = [n for n, _, _ in calls]
    if not any(cached for *_, cached in calls):
        raise Problem("cache_not_used", f"every step recomputes the whole sequence: the model was fed {fed} "
                      f"positions, {sum(fed)} in all, where {P + len(fed) - 1} do", example=example,
                      hint="decode inside `with kv_cache(model) as cache:`: feed the prompt once, then only the "
                           "newest token, next_token_logits(model, newest, None, None, cache)")
    if fed[0] != P:
        raise Problem("prompt_not_prefilled", f"the prompt was fed {fed[0]} position(s) at a time ({fed}), not in "
                      f"one pass of its {P}: a causal model reads a whole prompt at once", example=example,
                      hint="the first call takes the whole prompt: next_token_logits(model, prompt, None, None, cache)")
    if any(n != 1 for n in fed[1:]):
        raise Problem("prefix_fed_to_cache", f"after the prompt the model was fed {fed[1:]} positions per step: "
                      "the cache already holds the old ones", example=example,
                      hint="with a cache, feed only the newest token: tokens[:, -1:]")
    starts, right = [start for _, start, _ in calls], [0] + [P + i for i in range(len(calls) - 1)]
    if starts != right:
        restarts = not any(starts[1:])
        raise Problem("positions_restart_at_zero" if restarts else "positions_wrong", f"the new tokens were placed "
                      f"at positions {starts}, not {right}", example=example,
                      hint="a new token's position is the number the cache holds before it: pass the cache to "
                           "next_token_logits, which places it at cache.length")


def _continue_matches(setting: _LMSetting, state: dict[str, Tensor]) -> None:
    def compared() -> Case:
        bugs = _continue_bugs(setting.prompt, setting.ref, setting.free, setting.eos, setting.pad)
        return state["out"], setting.ref, setting.example, bugs

    expect_cases_close([compared], check="matches_reference",
                       message="the tokens differ from greedy_continue's (which recomputes the sequence)",
                       hint="take the argmax of the next-token logits at every step")


def _continue_restored(setting: _LMSetting) -> None:
    if setting.model.cache_active():
        raise Problem("cache_left_on", "after decoding, the model's attention is still wrapped by the cache",
                      example=setting.example, hint="use the cache as a context manager: with kv_cache(model) as cache:")


def _continue_again(fn: Callable[..., Any], pad: int, all_end: bool) -> None:
    setting, state = _lm_setting(pad, all_end), dict[str, Tensor]()
    _continue_runs(fn, setting, state)
    _continue_matches(setting, state)


def grade_greedy_continue(fn: Callable[..., Any], *, from_scratch: bool = True) -> GradeReport:
    """Grade the reader's greedy continuation of a prompt by a decoder-only model, with the key/value cache.

    ``fn(model, prompt, max_new_tokens, eos_id, pad_id)`` gets a
    :class:`~transformer_lib.model.DecoderOnlyTransformer` and prompts ``(B, P)`` and must return the
    new tokens ``(B, T)``, ``T <= max_new_tokens``, as :func:`transformer_lib.decoding.greedy_continue`
    does: each row ending with its ``<eos>`` and padded with ``pad_id`` after it, stopping when every
    row has ended. Inside ``kv_cache(model)`` it must feed the prompt in one pass, then one token per
    step at its own position. It is run again with every row ending early and with ``<pad> = 1``; from
    scratch (the default) it may use ``next_token_logits`` and the cache, not ``greedy_continue``.

    Example:
        >>> grade_greedy_continue(lambda model, prompt, n, eos_id, pad_id: greedy_continue(
        ...     model, prompt, max_new_tokens=n, eos_id=eos_id, pad_id=pad_id), from_scratch=False).passed
        True
    """
    grading = Grading("Greedy continuation with a key/value cache", refused=REFUSED_CONTINUE,
                      from_scratch=from_scratch)
    setting, state = _lm_setting(), dict[str, Tensor]()
    with grading:
        grading.check("runs and returns (B, T) token ids", partial(_continue_runs, fn, setting, state), gate=True)
        grading.check("uses the key/value cache: the prompt in one pass, then one new token per step at its "
                      "position", partial(_continue_uses_the_cache, setting))
        grading.check("equals greedy_continue: the new tokens only, pads after each row's <eos>, stops when every "
                      "row has ended", partial(_continue_matches, setting, state))
        grading.check("gives the model back without the cache", partial(_continue_restored, setting))
        grading.check("stops as soon as every row has ended (prompts whose rows all end early)",
                      partial(_continue_again, fn, 0, True))
        grading.check("equals greedy_continue with <pad> = 1 (fairseq's order)", partial(_continue_again, fn, 1, False))
    return grading.report
