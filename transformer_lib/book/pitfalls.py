"""Bugs from the tutorials this book was written from, and common slips, as small pieces of code.

Each pitfall reproduces a bug's *logic* (written anew here, not copied) in the shape of an answer
to one of the book's exercises, so the exercise's grader (:mod:`transformer_lib.book.graders`) can
be run on it, and names it. Where the effect is worth a number, a helper measures it: computed,
never typed. Issue 29 of this project reviewed five tutorials (pi-tau's "An even more annotated
Transformer", AiEdge's code examples, uriyeobi's annotated Transformer, hkproj-style annotated
implementations, a blog walk-through); the docstrings say which bug was seen where.

    chapter 1   attention_without_scaling, attention_softmax_over_queries,
                attention_unstable_softmax, attention_detached_weights,
                attention_dividing_query_in_place,
                FullWidthHeadsAttention (attention_parameter_ratio),
                DropoutInForwardAttention (eval_mode_variation)
    chapter 2   query_side_padding_mask (self_attention_weights, weight_on_blocked_keys),
                padding_mask_by_order, padding_only_target_mask,
                attention_unassigned_masked_fill, attention_flipped_mask,
                attention_with_finite_fill (finite_fill_in_low_precision)
    chapter 3   sinusoidal_table_in_halves
    chapter 4   NormalisedInputResidual (identity_path_change)
    chapter 5   loss_overwriting_targets, targets_without_shift (copy_accuracy),
                batches_sorted_by_characters (padding_waste_by_sort_key)
    chapter 6   greedy_decode_recomputing_prefix
    chapter 7   rotary_in_halves, alibi_bias_with_formula_slopes (power_of_two_alibi_slopes),
                greedy_continue_without_cache, sliding_window_one_too_wide, RMSNormSubtractingMean

The attention functions take ``query (..., T, Dk)``, ``key (..., L, Dk)``, ``value (..., L, Dv)``
and a boolean ``mask`` (``True`` = may attend) broadcastable to ``(..., T, L)``, and return
``(output (..., T, Dv), attn_weights (..., T, L))``, like
:func:`transformer_lib.attention.scaled_dot_product_attention`.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from transformer_lib.attention import MultiHeadAttention, softmax_attention
from transformer_lib.batching import padding_waste
from transformer_lib.decoding import next_token_logits
from transformer_lib.masking import padding_mask
from transformer_lib.model import Transformer

__all__ = [
    "attention_without_scaling",
    "attention_softmax_over_queries",
    "attention_unstable_softmax",
    "attention_detached_weights",
    "attention_dividing_query_in_place",
    "FullWidthHeadsAttention",
    "attention_parameter_ratio",
    "DropoutInForwardAttention",
    "eval_mode_variation",
    "query_side_padding_mask",
    "padding_mask_by_order",
    "padding_only_target_mask",
    "attention_unassigned_masked_fill",
    "attention_flipped_mask",
    "attention_with_finite_fill",
    "weight_on_blocked_keys",
    "self_attention_weights",
    "finite_fill_in_low_precision",
    "sinusoidal_table_in_halves",
    "NormalisedInputResidual",
    "identity_path_change",
    "loss_overwriting_targets",
    "targets_without_shift",
    "copy_accuracy",
    "batches_sorted_by_characters",
    "padding_waste_by_sort_key",
    "greedy_decode_recomputing_prefix",
    "rotary_in_halves",
    "power_of_two_alibi_slopes",
    "alibi_bias_with_formula_slopes",
    "greedy_continue_without_cache",
    "sliding_window_one_too_wide",
    "RMSNormSubtractingMean",
]


def _scores(query: Tensor, key: Tensor) -> Tensor:
    return query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))  # (..., T, L)


# --- Chapter 1: attention -------------------------------------------------------------------------


def attention_without_scaling(query: Tensor, key: Tensor, value: Tensor, mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """A common slip: the scores are not divided by ``sqrt(d_k)``. Wide heads then saturate the
    softmax (chapter 1 measures it); with ``d_k = 1`` nothing changes, so a grader needs ``d_k > 1``
    to see it."""
    scores = query @ key.transpose(-2, -1)  # BUG: not divided by sqrt(d_k)
    return softmax_attention(scores, value, mask)


def attention_softmax_over_queries(query: Tensor, key: Tensor, value: Tensor, mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """A common slip: the softmax runs over the queries (``dim=-2``), so each *column* of the
    weights sums to one and a query's weights do not; the output is no longer an average of values."""
    scores = _scores(query, key)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    attn_weights = torch.softmax(scores, dim=-2)  # BUG: over the queries, not the keys
    return attn_weights @ value, attn_weights


def attention_unstable_softmax(query: Tensor, key: Tensor, value: Tensor,
                               mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """A softmax written out as ``exp(s) / sum(exp(s))``, without subtracting the row's maximum first.

    Right on small scores, so every comparison on small inputs passes. At scores of realistic size
    (entries of scale 30 with ``d_k = 64`` give scores near ±900) ``exp`` overflows to ``inf``
    (beyond 88.7 in float32, already beyond 11.1 in float16), and ``inf / inf`` is NaN.
    ``torch.softmax`` subtracts the maximum, which leaves the softmax unchanged.
    """
    scores = _scores(query, key)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    exp = scores.exp()  # BUG: inf for scores above 88.7 (float32), 11.1 (float16)
    attn_weights = exp / exp.sum(dim=-1, keepdim=True)
    return attn_weights @ value, attn_weights


def attention_detached_weights(query: Tensor, key: Tensor, value: Tensor,
                               mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """Attention whose weights are ``.detach()``-ed (to save memory, or to plot them).

    The output is exact; but no gradient reaches the queries and keys, so the projections that make
    them never learn: the model cannot learn where to look. Only a gradient check sees it.
    """
    scores = _scores(query, key)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    attn_weights = torch.softmax(scores, dim=-1).detach()  # BUG: cut off from the graph
    return attn_weights @ value, attn_weights


def attention_dividing_query_in_place(query: Tensor, key: Tensor, value: Tensor,
                                      mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """Attention that scales the query in place (``query /= math.sqrt(d_k)``).

    Its output is exact; but the caller's query is divided too, so a caller that uses it again (a
    second call, the residual connection) gets a query √d_k times smaller each time.
    """
    query /= math.sqrt(query.size(-1))  # BUG: changes the caller's tensor
    scores = query @ key.transpose(-2, -1)  # (..., T, L)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    attn_weights = torch.softmax(scores, dim=-1)
    return attn_weights @ value, attn_weights


class _HeadsWrittenOut(nn.Module):
    """Multi-head attention as an answer to chapter 1's exercise writes it: four projections, heads of
    width ``d_k``, every head at once. The two layers below each get one step wrong."""

    def __init__(self, d_model: int, n_heads: int, dropout: float = 0.0, d_k: int | None = None) -> None:
        super().__init__()
        self.n_heads, self.dropout = n_heads, dropout
        self.d_k = d_model // n_heads if d_k is None else d_k
        width = n_heads * self.d_k
        self.q_proj, self.k_proj = nn.Linear(d_model, width), nn.Linear(d_model, width)
        self.v_proj = nn.Linear(d_model, width)
        self.out_proj = nn.Linear(width, d_model)

    def forward(self, query: Tensor, key: Tensor, value: Tensor, mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
        B, T, _ = query.shape

        def heads(x: Tensor) -> Tensor:
            return x.view(B, x.size(1), self.n_heads, self.d_k).transpose(1, 2)  # (B, H, L, Dk)

        out, attn_weights = self.attend(heads(self.q_proj(query)), heads(self.k_proj(key)), heads(self.v_proj(value)),
                                        mask)  # (B, H, T, Dk)
        return self.out_proj(out.transpose(1, 2).reshape(B, T, -1)), attn_weights  # (B, T, D)

    def attend(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None) -> tuple[Tensor, Tensor]:
        scores = _scores(q, k)  # (B, H, T, L)
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        attn_weights = F.dropout(torch.softmax(scores, dim=-1), self.dropout, training=self.training)
        return attn_weights @ v, attn_weights


class FullWidthHeadsAttention(_HeadsWrittenOut):
    """Multi-head attention whose every head projects to the full width ``D`` instead of ``D / H``.

    Issue 29 found this in one of the tutorials the book was written from: ``H`` heads of width
    ``D`` make the four projections ``H`` times larger (8x the attention parameters with the
    paper's 8 heads) and cost ``H`` times the compute, for a layer that the paper sizes so that
    "the total computational cost is similar to that of single-head attention with full
    dimensionality" (section 3.2.2). It trains and gives outputs of the right shape.
    """

    def __init__(self, d_model: int, n_heads: int, dropout: float = 0.0) -> None:
        super().__init__(d_model, n_heads, dropout, d_k=d_model)  # BUG: each head as wide as the model


def attention_parameter_ratio(d_model: int = 512, n_heads: int = 8) -> float:
    """Parameters of :class:`FullWidthHeadsAttention` over those of ``MultiHeadAttention(d_model,
    n_heads)``, counted on the "meta" device (no memory). About ``n_heads``."""
    with torch.device("meta"):
        wide, right = FullWidthHeadsAttention(d_model, n_heads), MultiHeadAttention(d_model, n_heads)
    return sum(p.numel() for p in wide.parameters()) / sum(p.numel() for p in right.parameters())


class DropoutInForwardAttention(_HeadsWrittenOut):
    """Multi-head attention that builds its dropout inside the forward pass.

    uriyeobi's annotated Transformer writes its attention function this way: the weights go
    through ``nn.Dropout(p)`` created on every call. A new module is in training mode, and
    ``model.eval()`` only reaches the modules the model *owns*, so the dropout stays on in
    evaluation: outputs are random, and every score or translation measured with it is noisier
    than the model. (``F.dropout(x, p)`` without ``training=self.training`` does the same.)
    """

    def __init__(self, d_model: int, n_heads: int, dropout: float = 0.1) -> None:
        super().__init__(d_model, n_heads, dropout)

    def attend(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None) -> tuple[Tensor, Tensor]:
        scores = _scores(q, k)  # (B, H, T, L)
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        attn_weights = nn.Dropout(self.dropout)(torch.softmax(scores, dim=-1))  # BUG: a new, training-mode module
        return attn_weights @ v, attn_weights  # (B, H, T, Dk)


def eval_mode_variation(module: nn.Module, x: Tensor, calls: int = 10) -> float:
    """The largest difference between the self-attention outputs of ``calls`` calls on the same
    input ``x`` ``(B, T, D)`` in ``eval()`` mode: 0 for a correct layer."""
    module.eval()
    with torch.no_grad():
        outputs = [module(x, x, x)[0] for _ in range(calls)]
    return max(float((out - outputs[0]).abs().max()) for out in outputs)


# --- Chapter 2: masking ---------------------------------------------------------------------------


def query_side_padding_mask(tokens: Tensor, pad_id: int) -> Tensor:
    """The encoder's padding mask with one entry per *query* instead of per key: ``(B, 1, L, 1)``.

    pi-tau's "An even more annotated Transformer" builds its encoder mask this way (a ``(B, L)``
    mask unsqueezed at the last dimension, then at the head dimension), as does the target mask of
    bentrevett/pytorch-seq2seq (chapter 2). Broadcast to the scores it blanks the rows of the pad
    queries and leaves every pad *key* visible, so real tokens attend to pads (see
    :func:`weight_on_blocked_keys`); no error, no NaN.
    """
    return (tokens != pad_id)[:, None, :, None]  # (B, 1, L, 1)  BUG: per query, not per key


def padding_mask_by_order(tokens: Tensor, pad_id: int) -> Tensor:
    """A padding mask written ``tokens > pad_id``: right while the pad has the smallest id.

    With ``<pad> = 0`` (this book's vocabularies) it equals ``tokens != pad_id``. In fairseq's order
    (``<s> = 0, <pad> = 1, </s> = 2, <unk> = 3``) it also hides every ``<s>``, and with a pad id
    after the words (``pad_id = len(vocab)``, as some tokenizers add it) it hides every token.
    """
    return (tokens > pad_id)[:, None, None, :]  # BUG: compares by order, not equality (B, 1, 1, L)


def padding_only_target_mask(tgt: Tensor, pad_id: int) -> Tensor:
    """A decoder self-attention mask without its causal part, ``(B, 1, 1, T)``.

    AiEdge's basic Transformer code calls its decoder's self-attention with no mask at all; passing
    the padding mask alone is the same bug with the padding handled. Every position sees the
    tokens it must predict, so the training loss collapses and generation fails (minGPT#75's
    failure in its purest form).
    """
    return padding_mask(tgt, pad_id)  # BUG: no causal mask: every position sees the future


def attention_unassigned_masked_fill(query: Tensor, key: Tensor, value: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
    """A ``masked_fill`` whose result is thrown away, so nothing is masked.

    ``masked_fill`` returns a new tensor; ``masked_fill_`` (one character more) changes its input.
    Issue 29 found the call without assignment in one of the reviewed tutorials; the AKT model of
    EduKTM had the same line (bigdata-ustc/EduKTM#53, chapter 2).
    """
    scores = _scores(query, key)
    scores.masked_fill(~mask, float("-inf"))  # BUG: returns a new tensor, which is dropped
    attn_weights = torch.softmax(scores, dim=-1)
    return attn_weights @ value, attn_weights


def attention_flipped_mask(query: Tensor, key: Tensor, value: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
    """A common slip: the mask's polarity read backwards (``nn.MultiheadAttention``'s convention,
    ``True`` = blocked, applied to this book's masks): each query sees exactly the keys it must not."""
    scores = _scores(query, key)
    scores = scores.masked_fill(mask, float("-inf"))  # BUG: blocks the keys marked "may attend"
    attn_weights = torch.softmax(scores, dim=-1)
    return attn_weights @ value, attn_weights


def attention_with_finite_fill(query: Tensor, key: Tensor, value: Tensor, mask: Tensor | None = None,
                               fill: float = -1e9) -> tuple[Tensor, Tensor]:
    """Masked scores filled with a large finite number (the Annotated Transformer's ``-1e9``).

    In float32 it works as long as the real scores stay far above the fill. In float16 (mixed
    precision) ``masked_fill`` with ``-1e9`` raises: the value does not fit (float16 reaches
    ±65504). In bfloat16 it fits, and masked keys get exactly zero weight. A smaller fill such as
    ``-1e4`` fits float16 but lets the future leak once scores drift below it (minGPT#75). See
    :func:`finite_fill_in_low_precision`.
    """
    scores = _scores(query, key)
    if mask is not None:
        scores = scores.masked_fill(~mask, fill)  # BUG: a finite "minus infinity"
    attn_weights = torch.softmax(scores, dim=-1)
    return attn_weights @ value, attn_weights


def weight_on_blocked_keys(attn_weights: Tensor, allowed: Tensor, queries: Tensor | None = None) -> float:
    """The mean share of a query's attention weight that lands on keys the right mask blocks.

    Args:
        attn_weights: ``(B, H, T, L)`` (or any ``(..., T, L)``).
        allowed: the right mask, ``True`` = may attend, broadcastable to ``attn_weights``.
        queries: optional boolean ``(B, T)``: average over these queries only (the real tokens,
            whose outputs matter); default all.

    Returns:
        A number in ``[0, 1]``: 0 for a correct mask.

    Example:
        >>> from transformer_lib.attention import scaled_dot_product_attention
        >>> tokens = torch.tensor([[5, 6, 0, 0]])
        >>> x = torch.randn(1, 1, 4, 8)  # (B, H, L, D)
        >>> _, w = scaled_dot_product_attention(x, x, x, query_side_padding_mask(tokens, 0))
        >>> weight_on_blocked_keys(w, padding_mask(tokens, 0), queries=tokens != 0) > 0
        True
    """
    blocked = (attn_weights * ~allowed).sum(dim=-1)  # (B, ..., T): weight on blocked keys, per query
    if queries is None:
        return float(blocked.float().mean())
    B, T = queries.shape
    chosen = queries.view(B, *[1] * (blocked.dim() - 2), T).expand_as(blocked)  # (B, ..., T)
    return float(blocked[chosen].float().mean())


def self_attention_weights(tokens: Tensor, mask: Tensor, d_model: int = 16, n_heads: int = 2, seed: int = 0) -> Tensor:
    """The weights ``(B, H, L, L)`` of an untrained ``MultiHeadAttention`` over random embeddings of
    ``tokens`` ``(B, L)`` under ``mask``: the setting of chapter 2's padding figures, seeded. With
    :func:`weight_on_blocked_keys` it measures where a mask lets the weight go."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(*tokens.shape, d_model, generator=generator)  # (B, L, D)
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        layer = MultiHeadAttention(d_model, n_heads).eval()
    with torch.no_grad():
        return layer(x, x, x, mask=mask, need_weights=True)[1]  # (B, H, L, L)


def finite_fill_in_low_precision(fill: float = -1e9) -> dict[str, dict[str, object]]:
    """What a finite mask fill does in float16 and bfloat16, measured on this PyTorch.

    For each dtype: the fill as the dtype stores it (``None`` where ``masked_fill`` refuses it), the
    error ``masked_fill`` raises (or ``None``), the weight a masked key gets, and what a row whose
    keys are *all* masked becomes (``"uniform"``, ``"NaN"`` or ``"zeros"``); next to the same for
    ``-inf``.
    """
    scores = torch.tensor([[0.5, 1.0, 2.0], [1.0, 0.0, -1.0]])
    blocked = torch.tensor([[False, True, True], [True, True, True]])  # row 1: every key masked
    report: dict[str, dict[str, object]] = {}
    for dtype in (torch.float16, torch.bfloat16):
        row: dict[str, object] = {"stored as": float(torch.tensor(fill, dtype=dtype)), "error": None}
        for name, value in (("fill", fill), ("-inf", float("-inf"))):
            try:
                weights = scores.to(dtype).masked_fill(blocked, value).softmax(dim=-1)
            except RuntimeError as error:
                row["error" if name == "fill" else "-inf error"] = str(error)
                continue
            full = weights[1]
            kind = "NaN" if bool(full.isnan().any()) else "zeros" if bool((full == 0).all()) else "uniform"
            row[f"masked weight ({name})"] = float(weights[0, 1:].max())
            row[f"fully masked row ({name})"] = kind
        report[str(dtype).replace("torch.", "")] = row
    return report


# --- Chapter 3: embeddings ----------------------------------------------------------------------


def sinusoidal_table_in_halves(max_len: int, d_model: int) -> Tensor:
    """Positional encodings with all sines first and all cosines after them: ``(max_len, d_model)``.

    tensor2tensor's ``get_timing_signal_1d`` concatenates the two halves, and tutorials that follow
    it do too. It is as good an encoding (the same columns in another order), but it is not the
    paper's table, ``PE(p, 2i) = sin``, ``PE(p, 2i + 1) = cos``: weights or checks written for one
    do not fit the other.
    """
    position = torch.arange(max_len, dtype=torch.float64)[:, None]  # (max_len, 1)
    angles = position / 10000.0 ** (torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    # BUG: side by side, not interleaved; an odd width drops the last cosine
    return torch.cat([angles.sin(), angles.cos()], dim=1)[:, :d_model].float()


# --- Chapter 4: blocks ----------------------------------------------------------------------------


class NormalisedInputResidual(nn.Module):
    """A "Pre-LN" residual connection that adds the *normalised* input: ``LN(x) + f(LN(x))``.

    pi-tau's "An even more annotated Transformer" writes its Pre-LN layers as ``x = norm(x)``
    followed by ``x + dropout(sublayer(x))``: the name ``x`` is reused, so the residual adds
    ``LayerNorm(x)``. The identity path from input to output, the reason for Pre-LN (Xiong et al.
    2020), is gone: every layer renormalises the residual stream, as Post-LN does, and what a
    layer adds is measured against unit-scale vectors again. Interface of
    :class:`transformer_lib.blocks.Residual`: ``forward(x, sublayer)``.
    """

    def __init__(self, d_model: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor, sublayer: Callable[[Tensor], Tensor]) -> Tensor:
        x = self.norm(x)  # BUG: overwrites x, so the residual below adds LayerNorm(x), not x
        return x + self.dropout(sublayer(x))


def identity_path_change(residual: nn.Module, x: Tensor) -> float:
    """How much a residual block changes its input when the sublayer adds nothing: ``|out - x| / |x|``
    with ``sublayer = zeros``. A Pre-LN block must return ``x`` itself (0); a Post-LN block returns
    ``LayerNorm(x)``."""
    residual.eval()
    with torch.no_grad():
        out = residual(x, torch.zeros_like)
    return float((out - x).norm() / x.norm())


# --- Chapter 5: training --------------------------------------------------------------------------


def loss_overwriting_targets(logits: Tensor, target: Tensor, label_smoothing: float, ignore_index: int) -> Tensor:
    """A label-smoothed loss that overwrites the pads of the caller's targets in place.

    ``target[target == ignore_index] = 0`` makes every target a valid index for ``one_hot`` or
    ``gather``; the loss is exact, but the caller's batch now has token 0 where its pads were, so an
    accuracy or a second loss computed from it afterwards counts the pads as tokens.
    """
    keep = target != ignore_index
    target[~keep] = 0  # BUG: writes into the caller's tensor
    log_p = logits.log_softmax(dim=-1)  # (B, T, V)
    nll = -log_p.gather(-1, target[..., None]).squeeze(-1)  # (B, T)
    loss = (1 - label_smoothing) * nll - label_smoothing * log_p.mean(dim=-1)
    return loss[keep].mean()


def targets_without_shift(tgt: Tensor) -> tuple[Tensor, Tensor]:
    """A common slip in teacher forcing: input and label are the same positions of the target.

    For ``tgt = <bos> y1 .. yn <eos>`` (padded) the decoder must read ``tgt[:, :-1]`` and be scored
    on ``tgt[:, 1:]``. Here it is scored on the token it reads: copying its input is a perfect
    answer (:func:`copy_accuracy`), the loss falls towards zero and nothing is learned.
    """
    return tgt[:, :-1], tgt[:, :-1]  # BUG: the label at t is the input at t


def copy_accuracy(tgt_in: Tensor, tgt_out: Tensor, pad_id: int) -> float:
    """The share of labels (non-pad positions of ``tgt_out``) equal to the decoder's input at the same
    position: what a decoder that copies its input would score. Near chance with a correct shift."""
    keep = tgt_out != pad_id
    return float((tgt_in == tgt_out)[keep].float().mean())


def batches_sorted_by_characters(sentences: Sequence[str], tokenize: Callable[[str], list[str]],
                                 batch_size: int) -> list[list[int]]:
    """Length-sorted batches whose "length" is the number of *characters*.

    Issue 29 found a walk-through that measured padding after sorting sentences by their length in
    characters: sentences of equal character length can differ a lot in tokens, and tokens are what
    a batch is padded in (:func:`padding_waste_by_sort_key`).
    """
    order = sorted(range(len(sentences)), key=lambda i: len(sentences[i]))  # BUG: characters, not tokens
    return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]


def padding_waste_by_sort_key(sentences: Sequence[str], tokenize: Callable[[str], list[str]],
                              batch_size: int, seed: int = 0) -> dict[str, float]:
    """Pad tokens per sentence (:func:`transformer_lib.batching.padding_waste`) for batches made in
    random order, sorted by characters, and sorted by tokens."""
    lengths = [len(tokenize(s)) for s in sentences]
    shuffled = list(range(len(sentences)))
    random.Random(seed).shuffle(shuffled)
    by_tokens = sorted(range(len(sentences)), key=lengths.__getitem__)
    cut = lambda order: [order[i : i + batch_size] for i in range(0, len(order), batch_size)]  # noqa: E731
    return {
        "random": padding_waste(cut(shuffled), lengths),
        "characters": padding_waste(batches_sorted_by_characters(sentences, tokenize, batch_size), lengths),
        "tokens": padding_waste(cut(by_tokens), lengths),
    }


# --- Chapter 6: decoding --------------------------------------------------------------------------


def greedy_decode_recomputing_prefix(model: Transformer, src: Tensor, src_mask: Tensor, max_new_tokens: int,
                                     bos_id: int, eos_id: int, pad_id: int) -> Tensor:
    """Greedy decoding that feeds the decoder the whole prefix at every step, without the cache.

    The Annotated Transformer's ``greedy_decode`` loops this way. Its tokens are right (``(B, T)``,
    no ``<bos>``, pads after each row's ``<eos>``), but step ``t`` recomputes the ``t - 1``
    positions before it, ``T(T+1)/2`` position-computations per layer where ``T`` would do.
    """
    model.eval()
    tokens = torch.full((src.size(0), 1), bos_id, device=src.device)  # (B, 1): <bos>
    finished = torch.zeros(src.size(0), dtype=torch.bool, device=src.device)
    with torch.no_grad():
        memory = model.encode(src, src_mask)  # (B, S, D)
        for _ in range(max_new_tokens):
            logits = next_token_logits(model, tokens, memory, src_mask)  # BUG: the whole prefix, every step
            next_token = logits.argmax(dim=-1).masked_fill(finished, pad_id)  # (B,)
            tokens = torch.cat([tokens, next_token[:, None]], dim=1)
            finished |= next_token == eos_id
            if bool(finished.all()):
                break
    return tokens[:, 1:]


# --- Chapter 7: beyond ----------------------------------------------------------------------------


def rotary_in_halves(x: Tensor, start: int = 0) -> Tensor:
    """RoPE with coordinate ``i`` paired with ``i + Dh/2`` ("rotate half"), not with its neighbour.

    GPT-NeoX and Hugging Face's LLaMA code rotate this way; the paper and Meta's LLaMA code pair
    neighbours ``(2i, 2i+1)``. Both are RoPE, up to a fixed permutation of each head's coordinates,
    but weights trained under one layout give wrong scores under the other (section 7.1's pitfall),
    and a rotation written in one is not the other's. ``x (..., L, Dh)`` at positions ``start ..``.
    """
    Dh = x.size(-1)
    inverse_frequency = 10000.0 ** (-torch.arange(0, Dh, 2, dtype=torch.float64) / Dh)  # (Dh/2,)
    position = torch.arange(start, start + x.size(-2), dtype=torch.float64)[:, None]  # (L, 1)
    angles = position * inverse_frequency  # (L, Dh/2)
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    first, second = x[..., : Dh // 2], x[..., Dh // 2 :]  # BUG: pairs (i, i + Dh/2)
    return torch.cat([first * cos - second * sin, first * sin + second * cos], dim=-1)  # (..., L, Dh)


def power_of_two_alibi_slopes(n_heads: int) -> Tensor:
    """ALiBi's slopes as ``2^(-8h/H)`` for every ``H``: the paper's formula, which it states for ``H`` a
    power of two. For other ``H`` the paper's code takes the slopes of the power of two below ``H`` and
    fills in from twice as many heads (:func:`transformer_lib.embeddings.alibi_slopes`); this gives
    other slopes (6 heads: 2^(-4/3) ... instead of 1/2, 1/8, ...)."""
    return torch.tensor([2.0 ** (-8.0 * h / n_heads) for h in range(1, n_heads + 1)])  # (H,)


def alibi_bias_with_formula_slopes(n_heads: int, n_queries: int, n_keys: int, query_start: int = 0) -> Tensor:
    """ALiBi's bias ``-m_h |i - j|`` ``(1, H, T, L)``, right but for the slopes of
    :func:`power_of_two_alibi_slopes`: wrong whenever ``n_heads`` is not a power of two."""
    slopes = power_of_two_alibi_slopes(n_heads)  # BUG: the formula for a power of two, for any H
    query = torch.arange(query_start, query_start + n_queries)[:, None]  # (T, 1)
    key = torch.arange(n_keys)[None, :]  # (1, L)
    return (-slopes[:, None, None] * (query - key).abs())[None]  # (1, H, T, L)


def sliding_window_one_too_wide(n_queries: int, n_keys: int, window: int) -> Tensor:
    """A causal sliding-window mask ``(1, 1, T, L)`` that lets each query see ``window + 1`` keys.

    ``window`` counts the query itself (Mistral: query ``i`` sees ``i - window + 1 .. i``); keeping
    the distances ``0 .. window`` instead is the usual off-by-one.
    """
    query = torch.arange(n_keys - n_queries, n_keys)[:, None]  # (T, 1): the last positions
    distance = query - torch.arange(n_keys)[None, :]  # (T, L)
    return ((distance >= 0) & (distance <= window))[None, None]  # BUG: <= window, not < window


class RMSNormSubtractingMean(nn.Module):
    """"RMSNorm" written from LayerNorm by deleting the bias only: ``(x - mean) / sqrt(var + eps) · g``.

    RMSNorm (Zhang and Sennrich 2019) drops the mean as well: ``x / sqrt(mean(x²) + eps) · g``. The
    two agree only for inputs of mean zero, so checks on centred random inputs miss it.
    """

    def __init__(self, d_model: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))

    def forward(self, x: Tensor) -> Tensor:
        centred = x - x.mean(dim=-1, keepdim=True)  # BUG: RMSNorm does not centre
        return centred * torch.rsqrt(centred.pow(2).mean(dim=-1, keepdim=True) + self.eps) * self.weight


def greedy_continue_without_cache(model: Any, prompt: Tensor, max_new_tokens: int, eos_id: int,
                                  pad_id: int) -> Tensor:
    """Greedy continuation of a prompt that feeds the model the whole sequence at every step.

    nanoGPT's ``generate`` loops this way (it has no key/value cache). Its tokens are right (the new
    ones only, pads after each row's ``<eos>``), but step ``t`` recomputes the prompt and the ``t - 1``
    tokens before it in every layer.
    """
    model.eval()
    tokens = prompt  # (B, P)
    finished = torch.zeros(prompt.size(0), dtype=torch.bool, device=prompt.device)
    with torch.no_grad():
        for _ in range(max_new_tokens):
            logits = next_token_logits(model, tokens, None)  # BUG: the whole sequence, every step
            logits[:, pad_id] = float("-inf")
            next_token = logits.argmax(dim=-1).masked_fill(finished, pad_id)  # (B,)
            tokens = torch.cat([tokens, next_token[:, None]], dim=1)
            finished |= next_token == eos_id
            if bool(finished.all()):
                break
    return tokens[:, prompt.size(1) :]
