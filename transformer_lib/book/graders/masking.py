"""Chapter 2's graders: the padding, causal and target masks, and attention that applies a mask.

One convention throughout: a boolean mask, ``True`` = may attend, broadcastable to the scores
``(B, H, T, L)`` (queries on rows, keys on columns). Shapes: ``B`` batch, ``H`` heads, ``T``
queries, ``L`` keys.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from torch import nn

from transformer_lib import masking as library
from transformer_lib.attention import scaled_dot_product_attention
from transformer_lib.masking import causal_mask, padding_mask, target_mask
from transformer_lib.properties import assert_causal, assert_padding_invariant
from transformer_lib.validation import check_mask

from .. import pitfalls
from .attention import (
    HALF_ATOL, LARGE_ATOL, QKV, REFUSED_ATTENTION, WEIGHTS_DETACHED, _unstable_attention, expect_stable, half_inputs,
    large_inputs,
)
from .report import (
    Case, GradeReport, Grading, KnownBug, Problem, Refused, as_output, call, close, expect_cases_close, expect_close,
    expect_finite, expect_gradients, expect_shape, fmt_inputs, inputs, property_check,
)

__all__ = ["grade_padding_mask", "grade_causal_mask", "grade_target_mask", "grade_masked_attention"]

FAIRSEQ = "fairseq's vocabulary order: <s> = 0, <pad> = 1, </s> = 2, <unk> = 3"
# (token ids, pad_id, a note), smallest first. B = L = 3 shows a (B, L) mask that broadcasts silently;
# then a pad id that is not 0, and one with an id below it (<s> in fairseq's order).
PADDING_CASES = [
    ([[4, 0]], 0, ""),
    ([[5, 7, 0], [3, 0, 0]], 0, ""),
    ([[5, 7, 0], [3, 0, 0], [4, 6, 8]], 0, ""),
    ([[5, 7, 1, 1], [3, 4, 6, 1]], 1, ""),
    ([[0, 5, 6, 2, 1], [0, 7, 2, 1, 1]], 1, FAIRSEQ),
]
# Decoder inputs (<bos> = 2, <eos> = 3), right-padded, then a pad id that is not 0, fairseq's order
# (<s> = 0 below <pad> = 1), then left-padded.
TARGET_CASES = [
    ([[2, 5, 0]], 0, ""),
    ([[2, 5, 6, 3], [2, 7, 3, 0]], 0, ""),
    ([[2, 5, 6, 3, 1], [2, 7, 3, 1, 1]], 1, ""),
    ([[0, 5, 6, 2, 1], [0, 7, 2, 1, 1]], 1, FAIRSEQ),
    ([[0, 0, 2, 5], [2, 5, 6, 3]], 0, ""),
]
BY_ORDER_MESSAGE = ("the mask compares ids by order (tokens > pad_id), not by equality: it also hides every "
                    "token whose id is below pad_id, here <s> = 0 in fairseq's order (<s>, <pad>, </s>, <unk>)")
BY_ORDER_HINT = "compare for equality, tokens != pad_id: a special id can sit anywhere in a vocabulary"
BOOLEAN_HINT = ("the book's masks are boolean, True = may attend; from 0/1 integers use mask.bool(), "
                "from nn.Transformer's float mask (0 and -inf) use mask == 0")


def _grid(mask: Tensor, B: int, T: int, L: int) -> Tensor:
    """The mask as attention sees it: broadcast to ``(B, T, L)`` (one head)."""
    return torch.broadcast_to(mask, (B, 1, T, L))[:, 0]


def _checked_mask(fn: Callable[..., Any], args: tuple[Any, ...], what: str, scores: tuple[int, ...], example: str) -> Tensor:
    """Call the reader's mask function; raise :class:`Problem` unless it returns a boolean tensor that
    broadcasts to ``scores`` ``(B, H, T, L)`` without enlarging it."""
    mask = call(fn, *args, what=what, example=example, names=("tokens", "pad_id"))
    if not isinstance(mask, Tensor):
        raise Problem("returns_tensor", f"{what} returned {type(mask).__name__}, not a tensor", example=example,
                      hint="return a boolean torch.Tensor")
    if mask.dtype != torch.bool:
        raise Problem("mask_dtype", f"{what} returned dtype {mask.dtype}, not torch.bool", example=example,
                      hint=BOOLEAN_HINT)
    try:
        check_mask(mask, scores)
    except ValueError:
        hint = ("add the head and query dimensions: (B, 1, 1, L), e.g. mask[:, None, None, :]" if mask.dim() == 2
                else "one dimension per score dimension: (B, H, T, L), with 1 where the mask is the same")
        raise Problem("mask_shape", f"the mask's shape {tuple(mask.shape)} does not broadcast to the scores "
                      f"{scores} (batch, heads, queries, keys)", example=example, hint=hint) from None
    return mask


def _attention_through(mask: Tensor) -> Callable[[Tensor], Tensor]:
    """Self-attention of ``x`` ``(B, L, D)`` under ``mask`` with the library's attention: ``(B, L, D)``."""
    return lambda x: scaled_dot_product_attention(x[:, None], x[:, None], x[:, None], mask)[0][:, 0]


class _TokenMaskCases:
    """A mask built from token ids, graded case by case against the library's: the cases, the
    reader's mask for each (checked for dtype and shape), and the comparison as attention sees it."""

    def __init__(self, fn: Callable[[Tensor, int], Tensor], cases: list[tuple[list[list[int]], int, str]], what: str,
                 reference: Callable[[Tensor, int], Tensor],
                 bugs: Callable[[Tensor, int, Callable[[Tensor], Tensor]], list[KnownBug]]) -> None:
        self.fn, self.cases, self.what, self.reference, self.bugs = fn, cases, what, reference, bugs

    def case(self, index: int) -> tuple[Tensor, int, Tensor, str]:
        """``(tokens (B, L), pad_id, the reader's mask, the input printed)``."""
        ids, pad, note = self.cases[index]
        tokens = torch.tensor(ids)
        B, L = tokens.shape
        example = fmt_inputs(tokens=tokens, pad_id=pad) + (f"\n({note})" if note else "")
        return tokens, pad, _checked_mask(self.fn, (tokens, pad), self.what, (B, 2, L, L), example), example

    def dtype_and_shape(self) -> None:
        for index in range(len(self.cases)):
            self.case(index)

    def compared(self, index: int) -> Case:
        tokens, pad, mask, example = self.case(index)
        B, L = tokens.shape
        grid = lambda m: _grid(m, B, L, L)  # noqa: E731
        return grid(mask), grid(self.reference(tokens, pad)), example, self.bugs(tokens, pad, grid)

    def matches_reference(self, message: str, hint: str) -> None:
        expect_cases_close((lambda i=i: self.compared(i) for i in range(len(self.cases))),
                           check="matches_reference", message=message, hint=hint)


def _padding_bugs(tokens: Tensor, pad: int, grid: Callable[[Tensor], Tensor]) -> list[KnownBug]:
    keys = padding_mask(tokens, pad)
    return [
        KnownBug("keys_masked_not_queries", "the mask hides padded queries (rows) instead of padded keys "
                 "(columns): every real token still attends to the pads",
                 "padding is a property of keys: shape (B, 1, 1, L), i.e. (tokens != pad_id)[:, None, None, :]",
                 lambda: grid(pitfalls.query_side_padding_mask(tokens, pad))),
        KnownBug("queries_also_masked", "the mask hides padded queries as well as padded keys: a pad's row "
                 "has no key left, which a plain softmax turns into NaN",
                 "mask keys only: (B, 1, 1, L); the outputs at pads are never used",
                 lambda: grid(keys & pitfalls.query_side_padding_mask(tokens, pad))),
        KnownBug("mask_polarity", "True marks the pads: the mask is the wrong way round",
                 "True means 'may attend' (as in F.scaled_dot_product_attention): tokens != pad_id",
                 lambda: grid(~keys)),
        KnownBug("pad_id_ignored", "the mask ignores pad_id (it looks for 0)", "compare with pad_id, not 0",
                 lambda: grid(padding_mask(tokens, 0)) if pad != 0 else None),
        KnownBug("mask_shape", "a (B, L) mask broadcasts against (B, H, L, L) scores by lining B up with the "
                 "queries: sentence i's padding is applied to query i of every sentence",
                 "add the head and query dimensions: (B, 1, 1, L)", lambda: grid(tokens != pad)),
        KnownBug("pad_compared_by_order", BY_ORDER_MESSAGE, BY_ORDER_HINT,
                 lambda: grid(pitfalls.padding_mask_by_order(tokens, pad))),
    ]


REFUSED_PADDING = (Refused("the library's padding_mask", (library.padding_mask,)),)
REFUSED_CAUSAL = (Refused("the library's causal_mask", (library.causal_mask,)),
                  Refused("nn.Transformer.generate_square_subsequent_mask",
                          (nn.Transformer.generate_square_subsequent_mask,)))
REFUSED_TARGET = (Refused("the library's target_mask", (library.target_mask,)),)


def grade_padding_mask(fn: Callable[[Tensor, int], Tensor], *, from_scratch: bool = True) -> GradeReport:
    """Grade the reader's padding mask.

    ``fn(tokens, pad_id)`` with ``tokens`` ``(B, L)`` must return a boolean mask that broadcasts to
    the scores ``(B, H, L, L)``, ``True`` where the *key* is a real token: ``(B, 1, 1, L)``. Checked:
    dtype and shape, equality with :func:`transformer_lib.masking.padding_mask` as attention sees it
    (pad ids 0 and 1, and fairseq's order, where ``<s> = 0`` comes before ``<pad> = 1``), the
    padding-invariance check of :mod:`transformer_lib.properties` through the library's attention,
    the tokens left unchanged, and (from scratch, the default) no call of the library's ``padding_mask``.

    Example:
        >>> grade_padding_mask(padding_mask, from_scratch=False).passed
        True
    """
    grading = Grading("Padding mask", refused=REFUSED_PADDING, from_scratch=from_scratch)
    cases = _TokenMaskCases(fn, PADDING_CASES, "your padding mask", padding_mask, _padding_bugs)

    def matches_reference() -> None:
        cases.matches_reference("as attention sees it (broadcast to (B, L, L), queries on rows, keys on columns), "
                                "the mask differs from padding_mask",
                                "True where the key is a real token, the same for every query")

    def padding_invariant() -> None:
        tokens, pad, mask, example = cases.case(3)
        x = inputs(*tokens.shape, 4, seed=3)
        property_check("padding_invariance",
                       lambda: assert_padding_invariant(_attention_through(mask), x, tokens != pad),
                       example=example + "\n" + fmt_inputs(x=x),
                       hint="with the mask, real tokens must not read anything from pads")

    with grading:
        grading.check("returns a boolean mask that broadcasts to the scores (B, H, L, L)", cases.dtype_and_shape,
                      gate=True)
        grading.check("equals padding_mask as attention sees it, for every pad_id and special ids on either side "
                      "of it", matches_reference)
        grading.check("attention under it ignores what the pads hold (padding invariance, transformer_lib.properties)",
                      padding_invariant)
    return grading.report


def _causal_bugs(n: int, shown: Callable[[Tensor], Tensor] = lambda m: m) -> list[KnownBug]:
    """Wrong causal masks, as ``shown`` turns an ``(n, n)`` mask into what is compared."""
    ones = torch.ones(n, n, dtype=torch.bool)
    return [
        KnownBug("mask_polarity", "True marks the future: the mask is the wrong way round",
                 "True means 'may attend': keys at or before the query, torch.ones(n, n).tril().bool()",
                 lambda: shown(~ones.tril())),
        KnownBug("causal_peeks_ahead", "each query also sees the key just after it (an off-by-one diagonal)",
                 "tril() with the default diagonal=0 keeps the diagonal and everything below it",
                 lambda: shown(ones.tril(1))),
        KnownBug("causal_hides_self", "each query is hidden from its own position (and the first sees nothing)",
                 "keep the diagonal: a token may attend to itself, tril(diagonal=0)", lambda: shown(ones.tril(-1))),
        KnownBug("mask_transposed", "each query sees itself and the future: the triangle is transposed",
                 "the allowed keys of query i are j <= i: the lower triangle, tril()", lambda: shown(ones.triu())),
        KnownBug("no_causal_mask", "nothing is hidden: every query sees the whole sequence, its future included",
                 "the decoder must not see the tokens it predicts: use the lower triangle", lambda: shown(ones)),
    ]


def grade_causal_mask(fn: Callable[[int], Tensor], *, from_scratch: bool = True) -> GradeReport:
    """Grade the reader's causal mask.

    ``fn(n)`` must return a boolean mask broadcastable to ``(..., n, n)``, ``True`` where key ``j``
    is at or before query ``i``. Checked: dtype and shape, equality with
    :func:`transformer_lib.masking.causal_mask` for ``n`` from 1, and the causality check of
    :mod:`transformer_lib.properties` through the library's attention.

    Example:
        >>> grade_causal_mask(causal_mask, from_scratch=False).passed
        True
    """
    grading = Grading("Causal mask", refused=REFUSED_CAUSAL, from_scratch=from_scratch)
    sizes = (1, 2, 3, 5)

    def mask_of(n: int) -> tuple[Tensor, str]:
        example = f"n = {n}"
        return _checked_mask(fn, (n,), f"your causal mask({n})", (2, 2, n, n), example), example

    def dtype_and_shape() -> None:
        for n in sizes:
            mask_of(n)

    def compared(n: int) -> Case:
        mask, example = mask_of(n)
        return _grid(mask, 1, n, n)[0], causal_mask(n)[0, 0], example, _causal_bugs(n)

    def matches_reference() -> None:
        expect_cases_close((lambda n=n: compared(n) for n in sizes), check="matches_reference",
                           message="the mask (queries on rows, keys on columns) differs from causal_mask",
                           hint="query i may see keys 0..i")

    def causal() -> None:
        mask, example = mask_of(5)
        x = inputs(2, 5, 4, seed=5)
        property_check("causality", lambda: assert_causal(_attention_through(mask), x),
                       example=example + "\n" + fmt_inputs(x=x),
                       hint="changing tokens after position t must not change outputs up to t")

    with grading:
        grading.check("returns a boolean mask that broadcasts to (..., n, n)", dtype_and_shape, gate=True)
        grading.check("equals causal_mask for n = 1, 2, 3, 5", matches_reference)
        grading.check("attention under it is causal (transformer_lib.properties)", causal)
    return grading.report


def _target_bugs(tgt: Tensor, pad: int, grid: Callable[[Tensor], Tensor]) -> list[KnownBug]:
    T = tgt.size(1)
    keys, future = padding_mask(tgt, pad), causal_mask(T)
    wrong_diagonals = {"causal_peeks_ahead", "causal_hides_self", "mask_transposed"}
    return [bug for bug in _causal_bugs(T, lambda m: grid(m & keys)) if bug.check in wrong_diagonals] + [
        KnownBug("mask_polarity", "True marks what must be hidden: the mask is the wrong way round",
                 "True means 'may attend': padding_mask(tgt, pad_id) & causal_mask(T)",
                 lambda: grid(~target_mask(tgt, pad))),
        KnownBug("no_causal_mask", "the mask has no causal part: every position sees the tokens it must predict",
                 "AND the padding mask with causal_mask(T): padding_mask(tgt) & causal_mask(T)",
                 lambda: grid(pitfalls.padding_only_target_mask(tgt, pad))),
        KnownBug("no_padding_mask", "the mask has no padding part. With right padding the causal part hides "
                 "every pad from every real query, so nothing leaks there; with left padding real tokens "
                 "attend to the pads before them",
                 "AND in padding_mask(tgt, pad_id)", lambda: grid(future)),
        KnownBug("keys_masked_not_queries", "the padding part hides padded queries instead of padded keys. With "
                 "right padding the causal part hides the pads anyway, so real tokens are right; with left "
                 "padding they attend to pads", "padding masks keys: (B, 1, 1, T), then AND causal_mask(T)",
                 lambda: grid(pitfalls.query_side_padding_mask(tgt, pad) & future)),
        KnownBug("pad_id_ignored", "the mask ignores pad_id (it looks for 0)", "compare with pad_id, not 0",
                 lambda: grid(target_mask(tgt, 0)) if pad != 0 else None),
        KnownBug("pad_compared_by_order", BY_ORDER_MESSAGE, BY_ORDER_HINT,
                 lambda: grid(pitfalls.padding_mask_by_order(tgt, pad) & future)),
    ]


def grade_target_mask(fn: Callable[[Tensor, int], Tensor], *, from_scratch: bool = True) -> GradeReport:
    """Grade the reader's decoder self-attention mask: padding AND causal.

    ``fn(tgt, pad_id)`` with decoder inputs ``tgt`` ``(B, T)`` must return a boolean mask
    broadcastable to ``(B, H, T, T)`` that lets query ``i`` see key ``j`` when ``j <= i`` and key
    ``j`` is not a pad: :func:`transformer_lib.masking.target_mask`. Checked: dtype and shape,
    equality (right- and left-padded batches, a pad id other than 0, fairseq's order with ``<s>``
    below the pad), causality and padding invariance (:mod:`transformer_lib.properties`). From
    scratch (the default) it may use ``padding_mask`` and ``causal_mask``, not ``target_mask``.

    Example:
        >>> grade_target_mask(target_mask, from_scratch=False).passed
        True
    """
    grading = Grading("Target (decoder self-attention) mask", refused=REFUSED_TARGET, from_scratch=from_scratch)
    cases = _TokenMaskCases(fn, TARGET_CASES, "your target mask", target_mask, _target_bugs)

    def matches_reference() -> None:
        cases.matches_reference("as attention sees it (broadcast to (B, T, T)), the mask differs from target_mask",
                                "padding_mask(tgt, pad_id) & causal_mask(T)")

    def causal_and_padding_invariant() -> None:
        for index in (1, len(TARGET_CASES) - 1):
            tgt, pad, mask, example = cases.case(index)
            x = inputs(*tgt.shape, 4, seed=index)
            example += "\n" + fmt_inputs(x=x)
            property_check("causality", lambda: assert_causal(_attention_through(mask), x), example=example,
                           hint="changing tokens after position t must not change outputs up to t")
            property_check("padding_invariance",
                           lambda: assert_padding_invariant(_attention_through(mask), x, tgt != pad), example=example,
                           hint="with the mask, real tokens must not read anything from pads")

    with grading:
        grading.check("returns a boolean mask that broadcasts to (B, H, T, T)", cases.dtype_and_shape, gate=True)
        grading.check("equals target_mask (padding AND causal), right- and left-padded, special ids on either side "
                      "of the pad", matches_reference)
        grading.check("attention under it is causal and ignores the pads (transformer_lib.properties)",
                      causal_and_padding_invariant)
    return grading.report


# --- Attention with a mask ------------------------------------------------------------------------


def _masked_cases() -> list[tuple[Tensor, Tensor, Tensor, Tensor | None]]:
    """(query, key, value, mask), smallest first; every row of every mask keeps a key and hides one
    (so a flipped mask is defined too), and the last has no mask."""
    tokens = torch.tensor([[5, 6, 0, 0], [5, 6, 7, 0]])
    return [
        (inputs(1, 1, seed=20), inputs(2, 1, seed=21), inputs(2, 1, seed=22), torch.tensor([[True, False]])),
        (inputs(2, 2, seed=23), inputs(3, 2, seed=24), inputs(3, 1, seed=25),
         torch.tensor([[True, False, True], [False, True, True]])),
        (inputs(2, 4, 4, seed=26), inputs(2, 4, 4, seed=27), inputs(2, 4, 4, seed=28), padding_mask(tokens, 0)[:, 0]),
        (inputs(2, 2, 4, 4, seed=29), inputs(2, 2, 4, 4, seed=30), inputs(2, 2, 4, 4, seed=31), padding_mask(tokens, 0)),
        (inputs(2, 3, 4, seed=32), inputs(2, 4, 4, seed=33), inputs(2, 4, 2, seed=34), None),
    ]


def _masked_bugs(q: Tensor, k: Tensor, v: Tensor, mask: Tensor) -> list[KnownBug]:
    def masked_after_softmax() -> Tensor:
        weights = torch.softmax(q @ k.transpose(-2, -1) / q.size(-1) ** 0.5, dim=-1)
        return (weights * mask) @ v

    return [
        KnownBug("mask_not_applied", "the mask changes nothing: the output is attention without a mask",
                 "masked_fill returns a new tensor: scores = scores.masked_fill(~mask, float('-inf')) "
                 "(or masked_fill_ with the underscore)",
                 lambda: pitfalls.attention_unassigned_masked_fill(q, k, v, mask)[0]),
        KnownBug("mask_polarity", "each query sees exactly the keys it must not: the mask's polarity is flipped",
                 "True means 'may attend': fill the scores where ~mask is True",
                 lambda: pitfalls.attention_flipped_mask(q, k, v, mask)[0]),
        KnownBug("mask_transposed", "the mask is applied with queries and keys swapped",
                 "the mask's last dimension is the keys: mask broadcasts to (..., T, L) as it is",
                 lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask.transpose(-2, -1))),
        KnownBug("masked_after_softmax", "the weights are masked after the softmax, so a row no longer sums to one",
                 "mask the scores before the softmax (fill with -inf), and the rest is renormalised",
                 masked_after_softmax),
        KnownBug("no_scaling", "the scores are not divided by √d_k", "divide by math.sqrt(query.size(-1))",
                 lambda: pitfalls.attention_without_scaling(q, k, v, mask)[0]),
        KnownBug("softmax_wrong_axis", "the softmax runs over the queries, not the keys", "torch.softmax(scores, dim=-1)",
                 lambda: pitfalls.attention_softmax_over_queries(q, k, v, mask)[0]),
    ]


def _masked_output(fn: Callable[..., Any], q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, example: str,
                   what: str = "your attention", finite: bool = False, grad: bool = False) -> Tensor:
    """The reader's masked attention on one input (called without ``mask`` when it is ``None``), shape-checked."""
    args = (q, k, v) if mask is None else (q, k, v, mask)
    out = as_output(call(fn, *args, what=what, example=example, names=QKV, grad=grad), what, example)[0]
    expect_shape(out, (*q.shape[:-1], v.size(-1)), what="the output", example=example,
                 hint="one row per query, as wide as the values: (..., T, Dv)")
    if finite:  # inside a property check: NaN would read as "not deterministic" (NaN != NaN)
        expect_finite(out, what="the output", example=example)
    return out


def _masked_runs(fn: Callable[..., Any]) -> None:
    q, k, v, mask = _masked_cases()[0]
    _masked_output(fn, q, k, v, mask, fmt_inputs(query=q, key=k, value=v, mask=mask))


def _masked_compared(fn: Callable[..., Any], q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None) -> Case:
    example = fmt_inputs(query=q, key=k, value=v, mask=mask if mask is not None else "(not given)")
    what = "your attention" + (" called without a mask" if mask is None else "")
    return (_masked_output(fn, q, k, v, mask, example, what), F.scaled_dot_product_attention(q, k, v, attn_mask=mask),
            example, [] if mask is None else _masked_bugs(q, k, v, mask))


def _masked_matches_reference(fn: Callable[..., Any]) -> None:
    expect_cases_close((lambda c=c: _masked_compared(fn, *c) for c in _masked_cases()), check="matches_reference",
                       message="the output differs from F.scaled_dot_product_attention with the same mask",
                       hint="fill the scores where the mask is False with -inf, then softmax over the keys")


def _half_precision(fn: Callable[..., Any], matched: bool) -> None:
    q, k, v, mask = _masked_cases()[3]
    example = fmt_inputs(mask=mask) + "\n(query, key and value: the case above, in float16)"
    try:
        got = _masked_output(fn, q.half(), k.half(), v.half(), mask, example, "your attention in float16")
    except Problem as problem:
        if problem.error is not None and "without overflow" in str(problem.error):
            raise Problem(
                "fill_overflows_float16",
                "in float16 your attention raises: the fill value does not fit float16, whose largest "
                "number is 65504 (mixed-precision training computes the scores in float16)",
                example=example,
                hint="fill with float('-inf'): exp(-inf) is exactly 0 in every dtype. (In bfloat16 "
                     "-1e9 fits, so the same code works there and fails only in float16)",
            ) from None
        raise
    expect_finite(got, what="the float16 output", example=example)
    expect_close(got.float(), _masked_output(fn, q, k, v, mask, example), check="half_precision",
                 message="in float16 your output differs from your float32 output by more than float16 rounding",
                 example=example, rtol=1e-2, atol=1e-2)
    q, k, v, example = half_inputs()
    mask = _LARGE_MASK
    example += "\n" + fmt_inputs(mask=mask)
    got = _masked_output(fn, q, k, v, mask, example, "your attention in float16")
    expect_stable(got, F.scaled_dot_product_attention(q.double(), k.double(), v.double(), attn_mask=mask),
                  _unstable_attention(q, k, v, mask), check="half_precision", situation="in float16 (mixed precision)",
                  example=example, matched=matched, atol=HALF_ATOL)


_LARGE_MASK = torch.tensor([[True, True, True, False, False], [True, True, True, True, False]])[:, None, :]  # (B, 1, L)


def _masked_large_scores(fn: Callable[..., Any], matched: bool) -> None:
    q, k, v, example = large_inputs()
    example += "\n" + fmt_inputs(mask=_LARGE_MASK)
    got = _masked_output(fn, q, k, v, _LARGE_MASK, example, "your attention on large scores")
    expected = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), attn_mask=_LARGE_MASK)
    expect_stable(got, expected, _unstable_attention(q, k, v, _LARGE_MASK), check="large_scores",
                  situation="at scores of realistic size", example=example, matched=matched, atol=LARGE_ATOL)


def _masked_gradients(fn: Callable[..., Any], matched: bool) -> None:
    q, k, v, mask = _masked_cases()[3]
    example = fmt_inputs(query=q, key=k, value=v, mask=mask)
    expect_gradients(lambda t: _masked_output(fn, t["query"], t["key"], t["value"], mask, example, grad=True),
                     lambda t: F.scaled_dot_product_attention(t["query"], t["key"], t["value"], attn_mask=mask),
                     {"query": q, "key": k, "value": v}, example=example, compare=matched,
                     blocked={frozenset({"query", "key"}): WEIGHTS_DETACHED})


def _extreme_scores(fn: Callable[..., Any]) -> None:
    T = 6
    x = 0.5 + torch.rand(1, T, 8, generator=torch.Generator().manual_seed(6))  # positive features
    scale = -5000.0  # a query projection that learned huge negative scores (minGPT#75)
    mask = causal_mask(T)[0]
    example = (f"query = {scale:g} · x, key = value = x, causal mask (T = {T}): the real scores are "
               f"about {scale * float((x[0] * x[0]).sum(-1).mean()) / 8 ** 0.5:,.0f}\n" + fmt_inputs(x=x))
    got = _masked_output(fn, scale * x, x, x, mask, example)
    unstable = _unstable_attention(scale * x, x, x, mask)
    if not bool(torch.isfinite(got).all()) and unstable is not None and close(got, unstable):
        raise Problem("unstable_softmax", "at scores far below zero your attention returns NaN: a softmax written "
                      "as exp(s) / sum(exp(s)) underflows to 0 / 0", example=example,
                      hint="subtract each row's maximum first: exp(s - max) / sum(exp(s - max)) is the same "
                           "softmax and neither overflows nor underflows (torch.softmax does it for you)")
    property_check("finite_fill_leaks",
                   lambda: assert_causal(lambda x: _masked_output(fn, scale * x, x, x, mask, example, finite=True), x),
                   example=example,
                   hint="a finite fill is only 'very negative' relative to the real scores: when they drift "
                        "below it, the masked future gets the most weight. Fill with float('-inf')")


def _masked_causal(fn: Callable[..., Any]) -> None:
    x = inputs(2, 5, 4, seed=8)
    mask = causal_mask(5)[0]
    property_check("causality", lambda: assert_causal(lambda x: _masked_output(fn, x, x, x, mask, "", finite=True), x),
                   example=fmt_inputs(x=x, mask=mask) + "\n(self-attention: query = key = value = x)")


def _masked_padding_invariant(fn: Callable[..., Any]) -> None:
    tokens = torch.tensor([[5, 6, 0, 0, 0], [5, 6, 7, 8, 0]])
    x, mask = inputs(2, 5, 4, seed=9), padding_mask(tokens, 0)
    attend = lambda x: _masked_output(fn, x[:, None], x[:, None], x[:, None], mask, "", finite=True)[:, 0]  # noqa: E731
    property_check("padding_invariance", lambda: assert_padding_invariant(attend, x, tokens != 0),
                   example=fmt_inputs(x=x, mask=mask) + "\n(self-attention with a head dimension: x[:, None])")


def grade_masked_attention(fn: Callable[..., Any], *, from_scratch: bool = True) -> GradeReport:
    """Grade the reader's attention with a mask.

    ``fn(query, key, value, mask=None)``, ``mask`` boolean with ``True`` = may attend, broadcastable
    to ``(..., T, L)``, must return the masked attention ``(..., T, Dv)`` (or ``(output, weights)``).
    Checked: equality with ``F.scaled_dot_product_attention`` for ``(T, L)``, causal and padding
    masks and none; causality and padding invariance (:mod:`transformer_lib.properties`); float16 inputs
    (where a ``-1e9`` fill overflows, and a softmax that does not subtract the maximum); real scores
    far below zero (where a finite fill lets the future leak, minGPT#75) and of realistic size;
    gradients (the library's); the arguments left unchanged. From scratch (the default), calling
    ``F.scaled_dot_product_attention`` or the library's attention fails.

    Example:
        >>> grade_masked_attention(lambda q, k, v, mask=None: scaled_dot_product_attention(q, k, v, mask),
        ...                        from_scratch=False).passed
        True
    """
    grading = Grading("Attention with a mask", refused=REFUSED_ATTENTION, from_scratch=from_scratch)
    with grading:
        grading.check("runs with a mask", partial(_masked_runs, fn), gate=True)
        matched = grading.check("equals F.scaled_dot_product_attention with (T, L), causal and padding masks, "
                                "and without a mask", partial(_masked_matches_reference, fn))
        grading.check("causal under causal_mask (transformer_lib.properties)", partial(_masked_causal, fn))
        grading.check("ignores what the pads hold under padding_mask (transformer_lib.properties)",
                      partial(_masked_padding_invariant, fn))
        grading.check("works in float16 (mixed precision): no overflow, same answer",
                      partial(_half_precision, fn, matched))
        grading.check("stays causal when the real scores are near -14,000 (no finite fill to leak past)",
                      partial(_extreme_scores, fn))
        grading.check("stays finite and exact at scores of realistic size (entries of scale 30, d_k = 64)",
                      partial(_masked_large_scores, fn, matched))
        grading.check("gradients reach the query, the key and the value, and equal the library's",
                      partial(_masked_gradients, fn, matched))
    return grading.report
