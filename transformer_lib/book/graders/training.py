"""Chapter 5's graders: the label-smoothed loss, the target shift of teacher forcing, and batches of
similar length.

Shapes: ``B`` batch, ``T`` target positions, ``V`` vocabulary.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from transformer_lib.batching import BucketBatchSampler, TokenBatchSampler, padding_waste
from transformer_lib.losses import (
    TranslationLoss, annotated_smoothed_targets, label_smoothed_cross_entropy, smoothed_target_distribution,
)

from .. import pitfalls
from .report import (
    Case, GradeReport, Grading, KnownBug, Problem, Refused, call, expect_cases_close, expect_close, fmt, fmt_inputs,
    inputs,
)

__all__ = ["grade_label_smoothed_loss", "grade_target_shift", "grade_length_batches", "length_batching_sentences"]


# --- The label-smoothed loss ----------------------------------------------------------------------

# (logits shape (B, T, V), target, label_smoothing, ignore_index), smallest first. Then a pad id
# that is not 0, and one with real ids below it (<unk> = 0, <s> = 1, </s> = 2, <pad> = 3, as
# SentencePiece numbers them when a pad is added).
LOSS_CASES = [
    ((1, 1, 3), [[2]], 0.1, 0),
    ((2, 4, 5), [[4, 2, 3, 0], [1, 4, 0, 0]], 0.1, 0),
    ((2, 4, 5), [[4, 2, 3, 0], [1, 4, 0, 0]], 0.0, 0),
    ((2, 3, 6), [[4, 0, 5], [3, 1, 1]], 0.3, 1),
    ((2, 4, 6), [[0, 4, 2, 3], [5, 2, 3, 3]], 0.1, 3),
]
LOSS_ARGUMENTS = ("logits", "target", "label_smoothing", "ignore_index")
REFUSED_LOSS = (
    Refused("F.cross_entropy(label_smoothing=...)", (F.cross_entropy,),
            when=lambda arguments: float(arguments.get("label_smoothing", 0.0)) != 0.0),
    Refused("the library's label_smoothed_cross_entropy", (label_smoothed_cross_entropy, TranslationLoss.__init__)),
)


def _cross_entropy_against(q: Tensor, logits: Tensor, keep: Tensor, divide_by: int | None = None) -> Tensor:
    """Mean over kept positions of ``-sum_v q_v log p_v`` (``q`` one row per kept position)."""
    per_position = -(q * logits[keep].log_softmax(-1)).sum(-1)  # (N_kept,)
    return per_position.sum() / (divide_by or keep.sum())


def _loss_bugs(logits: Tensor, target: Tensor, eps: float, pad: int) -> list[KnownBug]:
    V = logits.size(-1)
    flat_logits, flat_target = logits.reshape(-1, V), target.reshape(-1)
    keep = target != pad
    kept = target[keep]

    def entropy(q: Tensor) -> Tensor:
        return -(q * q.clamp_min(1e-30).log()).sum(-1).sum() / keep.sum()

    def other_tokens() -> Tensor:
        q = torch.full((kept.numel(), V), eps / (V - 1))
        q[torch.arange(kept.numel()), kept] = 1 - eps
        return _cross_entropy_against(q, logits, keep)

    annotated = lambda: annotated_smoothed_targets(kept, V, eps, pad)  # noqa: E731
    ours = lambda: smoothed_target_distribution(kept, V, eps)  # noqa: E731
    return [
        KnownBug("padding_not_ignored", "pad positions count as targets: the model is trained to predict <pad>, "
                 "and a sentence's loss depends on how much padding its batch has",
                 "skip the positions where target == ignore_index (ignore_index= in F.cross_entropy)",
                 lambda: F.cross_entropy(flat_logits, flat_target, label_smoothing=eps)),
        KnownBug("smoothing_ignored", "the loss is the plain cross-entropy: label_smoothing has no effect",
                 "mix (1 - ε)·(-log p_target) with ε·mean over all V tokens of (-log p_v)",
                 lambda: F.cross_entropy(flat_logits, flat_target, ignore_index=pad)),
        KnownBug("smoothing_over_other_tokens", "ε is spread over the V - 1 other tokens and the target gets "
                 "exactly 1 - ε: a valid convention, but not PyTorch's", "PyTorch spreads ε over all V tokens, "
                 "the target included: 1 - ε + ε/V on the target, ε/V on each other token", other_tokens),
        KnownBug("annotated_convention", "these are the Annotated Transformer's smoothed targets (ε over the "
                 "V - 2 tokens that are neither the target nor the pad): a valid convention, but not PyTorch's",
                 "spread ε over all V tokens, the pad included (chapter 5 compares the two)",
                 lambda: _cross_entropy_against(annotated(), logits, keep)),
        KnownBug("annotated_convention", "this is the Annotated Transformer's loss (KL divergence to its smoothed "
                 "targets): a valid convention, but not PyTorch's", "cross-entropy against PyTorch's smoothed "
                 "target (chapter 5 compares the two)",
                 lambda: _cross_entropy_against(annotated(), logits, keep) - entropy(annotated())),
        KnownBug("kl_divergence_not_cross_entropy", "this is the KL divergence to the smoothed target: the same "
                 "gradients, but smaller than the cross-entropy by the target's entropy",
                 "report the cross-entropy -Σ q log p (what F.cross_entropy returns)",
                 lambda: _cross_entropy_against(ours(), logits, keep) - entropy(ours())),
        KnownBug("divides_by_all_positions", "the sum over real tokens is divided by every position, pads included",
                 "average over the positions that count: divide by (target != ignore_index).sum()",
                 lambda: _cross_entropy_against(ours(), logits, keep, divide_by=target.numel())),
        KnownBug("sum_not_mean", "the loss is summed over the positions, not averaged",
                 "divide by the number of non-pad positions",
                 lambda: _cross_entropy_against(ours(), logits, keep, divide_by=1)),
        KnownBug("pad_compared_by_order", "the positions kept are target > ignore_index, not target != "
                 "ignore_index: every real token whose id is below the pad's is dropped (here <unk> = 0, <s> = 1, "
                 "</s> = 2 below <pad> = 3)", "keep = target != ignore_index: a special id can sit anywhere "
                 "in a vocabulary", lambda: _cross_entropy_against(
                     smoothed_target_distribution(target[target > pad], V, eps), logits, target > pad)),
    ]


def _loss_case(index: int) -> tuple[Tensor, Tensor, float, int, str]:
    """``(logits, target, label_smoothing, ignore_index, the input printed)`` of ``LOSS_CASES[index]``."""
    shape, ids, eps, pad = LOSS_CASES[index]
    logits, target = inputs(*shape, seed=50 + index), torch.tensor(ids)
    return logits, target, eps, pad, fmt_inputs(logits=logits, target=target, label_smoothing=eps, ignore_index=pad)


def _loss(fn: Callable[..., Any], logits: Tensor, target: Tensor, eps: float, pad: int, example: str,
          grad: bool = False) -> Tensor:
    """The reader's loss on one input; a :class:`Problem` unless it is a 0-dimensional tensor."""
    value = call(fn, logits, target, eps, pad, what="your loss", example=example, grad=grad, names=LOSS_ARGUMENTS)
    if not isinstance(value, Tensor):
        raise Problem("returns_tensor", f"your loss returned {type(value).__name__}, not a tensor", example=example,
                      hint="return the tensor itself: .item() or float() cut it off from autograd")
    if value.dim() != 0:
        hint = ("that is one loss per position (reduction='none'): average over the non-pad positions"
                if value.shape == target.shape else "return a single number, a 0-dimensional tensor")
        raise Problem("loss_shape", f"your loss has shape {tuple(value.shape)}, expected a scalar ()",
                      example=example, hint=hint)
    return value


def _reference_loss(logits: Tensor, target: Tensor, eps: float, pad: int) -> Tensor:
    V = logits.size(-1)
    return F.cross_entropy(logits.reshape(-1, V), target.reshape(-1), label_smoothing=eps, ignore_index=pad)


def _loss_runs(fn: Callable[..., Any]) -> None:
    _loss(fn, *_loss_case(0))


def _loss_compared(fn: Callable[..., Any], index: int) -> Case:
    logits, target, eps, pad, example = _loss_case(index)
    return (_loss(fn, logits, target, eps, pad, example).detach(), _reference_loss(logits, target, eps, pad), example,
            _loss_bugs(logits, target, eps, pad))


def _loss_matches_reference(fn: Callable[..., Any]) -> None:
    expect_cases_close((lambda i=i: _loss_compared(fn, i) for i in range(len(LOSS_CASES))), check="matches_reference",
                       message="the loss differs from F.cross_entropy(label_smoothing=ε, ignore_index=pad)",
                       hint="per position (1 - ε)(-log p_target) + ε · mean over the V tokens of -log p_v, "
                            "averaged over non-pad positions")


def _loss_stable(fn: Callable[..., Any], matched: bool) -> None:
    logits = torch.tensor([[[1000.0, 0.0, -1000.0], [0.0, 500.0, 0.0]]])  # (1, 2, 3)
    target = torch.tensor([[2, 1]])
    example = fmt_inputs(logits=logits, target=target, label_smoothing=0.1, ignore_index=0)
    got = _loss(fn, logits, target, 0.1, 0, example)
    hint = ("softmax(...).log() underflows to log(0) = -inf (or, with a small number added, to a wrong "
            "finite value): use F.log_softmax, which subtracts the row's maximum first")
    if not bool(torch.isfinite(got)):
        raise Problem("numerically_unstable", f"with large logits your loss is {float(got)}", example=example,
                      expected=fmt(_reference_loss(logits, target, 0.1, 0)), got=fmt(got.detach()), hint=hint)
    if matched:  # right on ordinary logits: a difference here is the numerics
        expect_close(got.detach(), _reference_loss(logits, target, 0.1, 0), check="numerically_unstable",
                     example=example, message="with large logits your loss differs from F.cross_entropy", hint=hint)


def _loss_gradient(fn: Callable[..., Any], matched: bool) -> None:
    logits, target, eps, pad, example = _loss_case(1)
    logits.requires_grad_(True)
    got = _loss(fn, logits, target, eps, pad, example, grad=True)
    if not got.requires_grad:
        raise Problem("not_differentiable", "the loss is cut off from the logits: no gradient can flow back",
                      example=example, hint="compute it with torch operations on logits; .item(), .numpy(), "
                                            "torch.tensor(...) or .detach() end the graph")
    (mine,) = torch.autograd.grad(got, logits)
    (expected,) = torch.autograd.grad(_reference_loss(logits, target, eps, pad), logits)
    if not matched:  # a wrong loss has a wrong gradient: reported above already
        return
    expect_close(mine, expected, check="gradient", example=example,
                 message="the gradient with respect to the logits differs from F.cross_entropy's",
                 hint="the gradient at a position is softmax(logits) - q, q the smoothed target")


def _loss_padding_invariant(fn: Callable[..., Any]) -> None:
    logits, target, eps, pad, example = _loss_case(1)
    extra = inputs(2, 3, logits.size(-1), seed=59)  # three more positions: a longer sentence joined
    longer_logits = torch.cat([logits, extra], dim=1)
    longer_target = F.pad(target, (0, 3), value=pad)
    longer = fmt_inputs(logits=longer_logits, target=longer_target, label_smoothing=eps, ignore_index=pad)
    expect_close(_loss(fn, longer_logits, longer_target, eps, pad, longer).detach(),
                 _loss(fn, logits, target, eps, pad, example).detach(), check="padding_invariance",
                 example=longer, message="three more pad positions per sentence change the loss",
                 hint="positions where target == ignore_index must contribute nothing, to the sum or the count")


def _loss_half_precision(fn: Callable[..., Any], matched: bool) -> None:
    logits = (8 * torch.randn(2, 4, 6, generator=torch.Generator().manual_seed(57))).half()  # up to about ±25
    target = torch.tensor([[4, 2, 3, 0], [1, 5, 0, 0]])
    example = (fmt_inputs(target=target, label_smoothing=0.1, ignore_index=0) + "\nlogits: float16 (2, 4, 6), "
               f"random of scale 8 (up to {float(logits.abs().max()):.0f}; float16 holds exp(11.1) at most)")
    got = _loss(fn, logits, target, 0.1, 0, example).detach()
    expected = _reference_loss(logits.double(), target, 0.1, 0)
    if not bool(torch.isfinite(got)):
        raise Problem("half_precision", f"in float16 (mixed precision) your loss is {float(got)}", example=example,
                      expected=fmt(expected), got=fmt(got),
                      hint="an exp of the logits overflows float16 beyond 11.1: use F.log_softmax, which "
                           "subtracts the maximum first (or compute the loss in float32: logits.float())")
    if matched:  # float16 rounds logits of 25 by about 0.01: the loss moves by about that
        expect_close(got, expected, check="half_precision", example=example, rtol=1e-2, atol=1e-2,
                     message="in float16 your loss differs from the float64 one by more than float16 rounding",
                     hint="use F.log_softmax (or compute the loss in float32: logits.float())")


def grade_label_smoothed_loss(fn: Callable[..., Any], *, from_scratch: bool = True) -> GradeReport:
    """Grade the reader's label-smoothed cross-entropy.

    ``fn(logits, target, label_smoothing, ignore_index)`` with ``logits`` ``(B, T, V)`` and
    ``target`` ``(B, T)`` must return the mean over non-pad positions of
    ``(1 - ε)(-log p_target) + ε · mean_v(-log p_v)``, a 0-dimensional tensor: exactly
    ``F.cross_entropy(..., label_smoothing=ε, ignore_index=pad)``. Checked on cases from one position,
    for ε = 0, 0.1, 0.3, a pad id other than 0 and real ids below the pad's; for extreme logits
    (numerical stability) and float16 logits; that its gradient is PyTorch's; that extra padding
    changes nothing; that the caller's logits and targets are left unchanged. From scratch (the
    default), an answer that calls ``F.cross_entropy(label_smoothing=...)`` or the library's loss
    fails (``from_scratch=False`` allows it, and the report says so).

    Example:
        >>> grade_label_smoothed_loss(label_smoothed_cross_entropy, from_scratch=False).passed
        True
    """
    grading = Grading("Label-smoothed cross-entropy", refused=REFUSED_LOSS, from_scratch=from_scratch)
    with grading:
        grading.check("returns a scalar tensor", partial(_loss_runs, fn), gate=True)
        matched = grading.check("equals F.cross_entropy(label_smoothing=ε, ignore_index=pad) for ε = 0.1, 0, "
                                "0.3, a pad id other than 0, and real ids below the pad's",
                                partial(_loss_matches_reference, fn))
        grading.check("stays finite and exact for logits of ±1000", partial(_loss_stable, fn, matched))
        grading.check("works in float16 (mixed precision): finite, within rounding of float64",
                      partial(_loss_half_precision, fn, matched))
        grading.check("has F.cross_entropy's gradient (autograd)", partial(_loss_gradient, fn, matched))
        grading.check("ignores padding: more pad positions, the same loss", partial(_loss_padding_invariant, fn))
    return grading.report


# --- The target shift -----------------------------------------------------------------------------

# Targets <bos> y1 .. yn <eos>, right-padded: (targets, pad id, the special ids). The last in
# fairseq's order, where <s> = 0 comes before <pad> = 1.
SHIFT_CASES = [
    ([[2, 5, 3]], None, "<bos> = 2, <eos> = 3, <pad> = 0"),
    ([[2, 5, 6, 7, 3], [2, 8, 3, 0, 0]], None, "<bos> = 2, <eos> = 3, <pad> = 0"),
    ([[0, 5, 6, 7, 2], [0, 8, 2, 1, 1]], 1, "fairseq's order: <s> = 0, <pad> = 1, </s> = 2"),
]


def _offset(tgt_in: Tensor, tgt_out: Tensor, keep: Tensor) -> int | None:
    """The ``k`` with ``tgt_out[:, t] == tgt_in[:, t + k]`` at every kept position where ``t + k`` exists."""
    T = tgt_in.size(1)
    for k in (0, -1, 2, -2, 3):
        positions = [t for t in range(T) if 0 <= t + k < T]
        if positions and all(bool((tgt_out[:, t] == tgt_in[:, t + k])[keep[:, t]].all()) for t in positions):
            return k
    return None


def _split(fn: Callable[[Tensor], tuple[Tensor, Tensor]], index: int) -> tuple[Tensor, Tensor, Tensor, str]:
    """``(tgt, tgt_in, tgt_out, the input printed)`` for ``SHIFT_CASES[index]``, the reader's pair checked for shape."""
    cases, _, ids = SHIFT_CASES[index]
    tgt = torch.tensor(cases)
    example = fmt_inputs(tgt=tgt) + f"\n({ids})"
    result = call(fn, tgt, what="your shift", example=example, names=("tgt",))
    if not (isinstance(result, (tuple, list)) and len(result) == 2 and all(isinstance(t, Tensor) for t in result)):
        raise Problem("returns_pair", f"your shift returned {type(result).__name__}, not a pair of tensors",
                      example=example, hint="return tgt_in, tgt_out")
    tgt_in, tgt_out = result
    for name, t in (("tgt_in", tgt_in), ("tgt_out", tgt_out)):
        if tuple(t.shape) != (tgt.size(0), tgt.size(1) - 1):
            raise Problem("output_shape", f"{name} has shape {tuple(t.shape)}, expected {(tgt.size(0), tgt.size(1) - 1)}",
                          example=example, hint="each drops one end of the target: tgt[:, :-1] and tgt[:, 1:]")
    return tgt, tgt_in, tgt_out, example


def _shift_runs(fn: Callable[[Tensor], tuple[Tensor, Tensor]]) -> None:
    for index in range(len(SHIFT_CASES)):
        _split(fn, index)


def _shifted(fn: Callable[[Tensor], tuple[Tensor, Tensor]], pad_id: int) -> None:
    for index, (_, case_pad, _) in enumerate(SHIFT_CASES):
        tgt, tgt_in, tgt_out, example = _split(fn, index)
        expected_in, expected_out = tgt[:, :-1], tgt[:, 1:]
        keep = expected_out != (pad_id if case_pad is None else case_pad)  # the labels the loss counts
        if torch.equal(tgt_out, expected_out) and torch.equal(tgt_in[keep], expected_in[keep]):
            continue
        shown = f"tgt_in:\n{fmt(expected_in)}\ntgt_out:\n{fmt(expected_out)}"
        got = f"tgt_in:\n{fmt(tgt_in)}\ntgt_out:\n{fmt(tgt_out)}"
        k = _offset(tgt_in, tgt_out, keep)
        if k is not None and k != 1:
            copy = pitfalls.copy_accuracy(tgt_in, tgt_out, pad_id if case_pad is None else case_pad)
            says = {0: "the token it reads at the same position: a decoder that copies its input "
                       f"scores {copy:.0%}, so the loss falls and nothing is learned",
                    -1: "the token it read one step earlier: the decoder is trained to repeat the past"}
            raise Problem("off_by_one_shift", "the label at position t is " + says.get(
                k, f"the decoder input at position t + {k}, not t + 1"), example=example, expected=shown, got=got,
                hint="the decoder at t reads tgt[:, t] and predicts tgt[:, t + 1]: tgt_in = tgt[:, :-1], "
                     "tgt_out = tgt[:, 1:]")
        raise Problem("matches_reference", "tgt_in or tgt_out differs from (tgt[:, :-1], tgt[:, 1:])",
                      example=example, expected=shown, got=got,
                      hint="tgt_in starts with <bos>; tgt_out ends with <eos>; pads stay pads")


def grade_target_shift(fn: Callable[[Tensor], tuple[Tensor, Tensor]], pad_id: int = 0, *,
                       from_scratch: bool = True) -> GradeReport:
    """Grade the reader's split of a target into decoder input and labels (teacher forcing).

    ``fn(tgt)``, with ``tgt`` ``(B, T)`` holding ``<bos> y1 .. yn <eos>`` right-padded, must return
    ``(tgt_in, tgt_out)``, both ``(B, T - 1)``: the decoder reads ``tgt_in = <bos> y1 .. yn`` and is
    scored on ``tgt_out = y1 .. yn <eos>``, the token *after* each input. Checked on a one-sentence
    and a padded batch, and on one in fairseq's order (``<s> = 0, <pad> = 1, </s> = 2``); at
    positions whose label is a pad, the input may be anything. ``tgt`` must be left unchanged.
    (``from_scratch`` is accepted as by every grader; the library has no ready-made shift to refuse.)

    Example:
        >>> grade_target_shift(lambda tgt: (tgt[:, :-1], tgt[:, 1:])).passed
        True
    """
    grading = Grading("Target shift for teacher forcing", from_scratch=from_scratch)
    with grading:
        grading.check("returns (tgt_in, tgt_out), each (B, T - 1)", partial(_shift_runs, fn), gate=True)
        grading.check("tgt_in = <bos> y1 .. yn and tgt_out = y1 .. yn <eos>: each label is the token after "
                      "the input at its position, whatever the special ids", partial(_shifted, fn, pad_id))
    return grading.report


# --- Batches of similar length --------------------------------------------------------------------

SHORT_WORDS = ["a", "an", "on", "in", "the", "dog", "red", "by", "is", "at"]
LONG_WORDS = ["photographer", "construction", "performance", "skateboarder", "neighbourhood", "instrument"]
TOKENIZE = str.split  # the tokenizer the reader's batching is given


def length_batching_sentences(n: int = 48, seed: int = 0) -> list[str]:
    """Sentences whose lengths in characters and in tokens disagree: some of many short words, some
    of few long ones (fixed by ``seed``)."""
    rng = random.Random(seed)
    sentences = []
    for _ in range(n):
        long_share = rng.choice([0.1, 0.8])
        words = [rng.choice(LONG_WORDS if rng.random() < long_share else SHORT_WORDS) for _ in range(rng.randint(3, 14))]
        sentences.append(" ".join(words))
    return sentences


def _shortened(sentence: str, width: int = 60) -> str:
    return repr(sentence if len(sentence) <= width else sentence[: width - 3] + "...")


def _batches_example(sentences: list[str], lengths: list[int], batch_size: int) -> str:
    return (f"{len(sentences)} sentences of {min(lengths)} to {max(lengths)} tokens, batch_size = {batch_size}, "
            f"tokenize = str.split; the first three:\n" + "\n".join(_shortened(s) for s in sentences[:3]))


def _batches_run(fn: Callable[..., Any], sentences: list[str], batch_size: int, example: str,
                 state: dict[str, list[list[int]]]) -> None:
    result = call(fn, list(sentences), TOKENIZE, batch_size, what="your batching", example=example,
                  names=("sentences", "tokenize", "batch_size"))
    try:
        batches = [[int(i) for i in batch] for batch in result]
    except (TypeError, ValueError):
        raise Problem("returns_batches", f"your batching returned {type(result).__name__}, not a list of "
                      "lists of sentence indices", example=example, hint="return e.g. [[3, 7, 1], [0, 5, 2]]") from None
    state["batches"] = batches


def _batches_valid(batches: list[list[int]], n_sentences: int, batch_size: int, example: str) -> None:
    used = sorted(i for batch in batches for i in batch)
    if used != list(range(n_sentences)):
        missing = sorted(set(range(n_sentences)) - set(used))
        repeated = sorted({i for i in used if used.count(i) > 1})
        raise Problem("every_sentence_once", f"batches must use each of the {n_sentences} sentences once "
                      f"(missing: {missing[:5]}, repeated: {repeated[:5]})", example=example)
    if max(len(batch) for batch in batches) > batch_size:
        raise Problem("batch_size", f"a batch holds {max(len(b) for b in batches)} sentences, more than "
                      f"batch_size = {batch_size}", example=example)
    fewest = -(-n_sentences // batch_size)
    if len(batches) > fewest:
        raise Problem("batches_not_full", f"{len(batches)} batches, where {fewest} full ones (all but the last of "
                      f"batch_size = {batch_size}) hold the {n_sentences} sentences: smaller batches need less "
                      "padding, but make more, noisier steps", example=example,
                      hint="sort by token count, then cut the order into consecutive batches of batch_size")


def _little_padding(batches: list[list[int]], sentences: list[str], lengths: list[int], batch_size: int,
                    example: str) -> None:
    waste = pitfalls.padding_waste_by_sort_key(sentences, TOKENIZE, batch_size)
    mine = padding_waste(batches, lengths)
    if mine <= waste["tokens"] + 1e-9:
        return
    numbers = (f"{mine:.2f} pad tokens per sentence; sorting by tokens needs {waste['tokens']:.2f}, "
               f"random batches {waste['random']:.2f}")
    if abs(mine - waste["characters"]) < 1e-9:
        raise Problem("sorted_by_characters", f"the batches are sorted by characters, not tokens: {numbers}",
                      example=example, hint="a batch is padded in tokens: sort by len(tokenize(sentence))")
    raise Problem("padding_waste", f"the batches need more padding than sorting by length: {numbers}",
                  example=example, hint="sort the indices by token count, then cut the order into batches")


REFUSED_BATCHES = (Refused("the library's BucketBatchSampler or TokenBatchSampler",
                           (BucketBatchSampler.__init__, TokenBatchSampler.__init__)),)


def grade_length_batches(fn: Callable[[Sequence[str], Callable[[str], list[str]], int], Any],
                         batch_size: int = 8, *, from_scratch: bool = True) -> GradeReport:
    """Grade the reader's batching by length (chapter 5's padding section).

    ``fn(sentences, tokenize, batch_size)`` must return batches of sentence indices (lists of
    ints) that use every sentence once, hold at most ``batch_size`` each (all full but the last),
    leave the caller's list of sentences as it was, and need as little padding
    as sorting by the number of *tokens* and cutting into batches (padding is counted in tokens,
    :func:`transformer_lib.batching.padding_waste`). The sentences mix many short words with few
    long ones, so sorting by characters is not enough.

    Example:
        >>> def by_tokens(sentences, tokenize, batch_size):
        ...     order = sorted(range(len(sentences)), key=lambda i: len(tokenize(sentences[i])))
        ...     return [order[i:i + batch_size] for i in range(0, len(order), batch_size)]
        >>> grade_length_batches(by_tokens).passed
        True
    """
    grading = Grading("Batches of similar length", refused=REFUSED_BATCHES, from_scratch=from_scratch)
    sentences = length_batching_sentences()
    lengths = [len(TOKENIZE(s)) for s in sentences]
    example = _batches_example(sentences, lengths, batch_size)
    state: dict[str, list[list[int]]] = {}
    with grading:
        grading.check("returns batches of sentence indices",
                      partial(_batches_run, fn, sentences, batch_size, example, state), gate=True)
        grading.check(f"uses every sentence once, at most {batch_size} per batch, the batches full but the last",
                      lambda: _batches_valid(state["batches"], len(sentences), batch_size, example), gate=True)
        grading.check("pads no more than sorting by token count (padding counted in tokens)",
                      lambda: _little_padding(state["batches"], sentences, lengths, batch_size, example))
    return grading.report
