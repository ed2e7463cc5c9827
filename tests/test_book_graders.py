"""The exercise graders: right answers pass, every tutorial bug and common slip is caught and named,
and no answer, however broken, makes a grader raise.

Each grader is fed the library's own implementation (with ``from_scratch=False``) and a second,
independent one written here (so a grader cannot pass only what equals the library line for line),
then the bugs of ``transformer_lib.book.pitfalls`` and slips written here, then wrong answers of
each class the graders check (numerics, gradient flow, side effects, special ids), the ready-made
answers (refused by default) and hostile ones (exit, endless loop, output flood). Assertions are on
the stable identifiers (``report.failures[0].check``), never on the prose.
"""

from __future__ import annotations

import contextlib
import functools
import math
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from transformer_lib.attention import MultiHeadAttention, scaled_dot_product_attention
from transformer_lib.blocks import Residual
from transformer_lib.book import pitfalls
from transformer_lib.book.graders import report as grader_machinery
from transformer_lib.book.graders import (
    GradeReport,
    grade_attention,
    grade_causal_mask,
    grade_alibi_bias,
    grade_greedy_continue,
    grade_greedy_decode,
    grade_label_smoothed_loss,
    grade_length_batches,
    grade_masked_attention,
    grade_multi_head_attention,
    grade_padding_mask,
    grade_post_ln_residual,
    grade_pre_ln_residual,
    grade_rms_norm,
    grade_rotary,
    grade_sinusoidal_table,
    grade_sliding_window_mask,
    grade_target_mask,
    grade_target_shift,
)
from transformer_lib.decoding import greedy_continue, greedy_decode, next_token_logits
from transformer_lib.embeddings import ALiBiBias, RotaryEmbedding, sinusoidal_table
from transformer_lib.kv_cache import kv_cache
from transformer_lib.masking import causal_mask, padding_mask, sliding_window_mask, target_mask
from transformer_lib.normalization import RMSNorm
from transformer_lib.losses import label_smoothed_cross_entropy

# --- Second, independent implementations (written without the library) -----------------------------


def einsum_attention(query: Tensor, key: Tensor, value: Tensor) -> Tensor:
    scores = torch.einsum("...td,...ld->...tl", query, key) * query.size(-1) ** -0.5
    exp = (scores - scores.amax(-1, keepdim=True)).exp()  # the softmax by hand, stable
    return torch.einsum("...tl,...lv->...tv", exp / exp.sum(-1, keepdim=True), value)


class LoopedHeadsAttention(nn.Module):
    """Multi-head attention with one head at a time, in a Python loop."""

    def __init__(self, d_model: int, n_heads: int) -> None:
        super().__init__()
        self.n_heads, self.width = n_heads, d_model // n_heads
        self.q_proj, self.k_proj = nn.Linear(d_model, d_model), nn.Linear(d_model, d_model)
        self.v_proj, self.out_proj = nn.Linear(d_model, d_model), nn.Linear(d_model, d_model)

    def forward(self, query: Tensor, key: Tensor, value: Tensor) -> Tensor:
        q, k, v = self.q_proj(query), self.k_proj(key), self.v_proj(value)
        heads = []
        for h in range(self.n_heads):
            part = slice(h * self.width, (h + 1) * self.width)
            heads.append(einsum_attention(q[..., part], k[..., part], v[..., part]))
        return self.out_proj(torch.cat(heads, dim=-1))


def where_attention(query: Tensor, key: Tensor, value: Tensor, mask: Tensor | None = None) -> Tensor:
    scores = torch.einsum("...td,...ld->...tl", query, key) / math.sqrt(query.size(-1))
    if mask is not None:
        scores = torch.where(mask, scores, torch.finfo(scores.dtype).min)
    return torch.softmax(scores, dim=-1) @ value


def numpy_table(max_len: int, d_model: int) -> Tensor:
    table = np.zeros((max_len, d_model))
    for p in range(max_len):
        for j in range(d_model):
            angle = p / 10000 ** ((j - j % 2) / d_model)
            table[p, j] = math.sin(angle) if j % 2 == 0 else math.cos(angle)
    return torch.from_numpy(table).float()


class PreLN(nn.Module):
    def __init__(self, d_model: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.layer_norm, self.drop = nn.LayerNorm(d_model), nn.Dropout(dropout)

    def forward(self, x: Tensor, sublayer: Callable[[Tensor], Tensor]) -> Tensor:
        return x + self.drop(sublayer(self.layer_norm(x)))


class PostLN(PreLN):
    def forward(self, x: Tensor, sublayer: Callable[[Tensor], Tensor]) -> Tensor:
        return self.layer_norm(x + self.drop(sublayer(x)))


def explicit_smoothed_loss(logits: Tensor, target: Tensor, label_smoothing: float, ignore_index: int) -> Tensor:
    V = logits.size(-1)
    log_p = F.log_softmax(logits, dim=-1)  # (B, T, V)
    q = F.one_hot(target, V).to(logits.dtype) * (1 - label_smoothing) + label_smoothing / V
    per_position = -(q * log_p).sum(-1)  # (B, T)
    keep = target != ignore_index
    return (per_position * keep).sum() / keep.sum()


def pieces_smoothed_loss(logits: Tensor, target: Tensor, label_smoothing: float, ignore_index: int) -> Tensor:
    """From PyTorch's pieces: the plain cross-entropy (no smoothing) and the mean of -log p."""
    keep = target != ignore_index
    nll = F.cross_entropy(logits[keep], target[keep])
    return (1 - label_smoothing) * nll - label_smoothing * F.log_softmax(logits[keep], dim=-1).mean()


def batches_by_tokens(sentences: list[str], tokenize: Callable[[str], list[str]], batch_size: int) -> list[list[int]]:
    order = np.argsort([len(tokenize(s)) for s in sentences], kind="stable").tolist()
    return [order[i : i + batch_size] for i in range(0, len(order), batch_size)][::-1]  # any batch order


def cached_greedy(model: Any, src: Tensor, src_mask: Tensor, max_new_tokens: int, bos_id: int, eos_id: int,
                  pad_id: int) -> Tensor:
    """Greedy decoding with the cache, one row list at a time, stopping when all rows ended."""
    rows: list[list[int]] = [[] for _ in range(src.size(0))]
    with torch.no_grad(), kv_cache(model) as cache:
        memory = model.encode(src, src_mask)
        last = torch.full((src.size(0), 1), bos_id)
        for _ in range(max_new_tokens):
            chosen = next_token_logits(model, last, memory, src_mask, cache).argmax(-1)
            for row, token in zip(rows, chosen.tolist()):
                row.append(pad_id if row and row[-1] in (eos_id, pad_id) else token)
            last = chosen[:, None]
            if all(eos_id in row for row in rows):
                break
    return torch.tensor(rows)


def library_greedy(model: Any, src: Tensor, src_mask: Tensor, max_new_tokens: int, bos_id: int, eos_id: int,
                   pad_id: int) -> Tensor:
    return greedy_decode(model, src, src_mask, max_new_tokens=max_new_tokens, bos_id=bos_id, eos_id=eos_id,
                         pad_id=pad_id)


def complex_rotary(x: Tensor, start: int) -> Tensor:
    """RoPE as Meta's LLaMA code writes it: each pair a complex number, multiplied by e^(i p θ)."""
    Dh, L = x.size(-1), x.size(-2)
    theta = 10000.0 ** (-torch.arange(0, Dh, 2, dtype=torch.float64) / Dh)
    turns = torch.polar(torch.ones(L, Dh // 2, dtype=torch.float64), torch.outer(torch.arange(start, start + L).double(),
                                                                                   theta))
    pairs = torch.view_as_complex(x.double().reshape(*x.shape[:-1], Dh // 2, 2).contiguous())
    return torch.view_as_real(pairs * turns).flatten(-2).to(x.dtype)


def looped_alibi(n_heads: int, n_queries: int, n_keys: int, query_start: int) -> Tensor:
    below = 2 ** int(math.log2(n_heads))
    slopes = [2 ** (-8 * h / below) for h in range(1, below + 1)]
    slopes += [2 ** (-8 * h / (2 * below)) for h in range(1, 2 * below + 1, 2)][: n_heads - below]
    bias = np.zeros((1, n_heads, n_queries, n_keys))
    for h in range(n_heads):
        for i in range(n_queries):
            bias[0, h, i] = [-slopes[h] * abs(query_start + i - j) for j in range(n_keys)]
    return torch.from_numpy(bias).float()


def banded_window(n_queries: int, n_keys: int, window: int) -> Tensor:
    ones = torch.ones(n_keys, n_keys, dtype=torch.bool)
    return (ones.tril() & ~ones.tril(-window))[n_keys - n_queries :]  # (T, L): the last rows


class SquaresRMSNorm(nn.Module):
    def __init__(self, d_model: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps, self.gain = eps, nn.Parameter(torch.ones(d_model))

    def forward(self, x: Tensor) -> Tensor:
        return x * (x.square().sum(-1, keepdim=True) / x.size(-1) + self.eps) ** -0.5 * self.gain


def continue_with_cache(model: Any, prompt: Tensor, max_new_tokens: int, eos_id: int, pad_id: int, *,
                        cache: bool = True, prefill: bool = True, position_zero: bool = False,
                        keep_finished: bool = True) -> Tensor:
    """A decoder-only model's greedy continuation, written here: the prompt in one pass (or token by token),
    then one token per step through the cache (or the whole sequence again)."""
    finished = torch.zeros(prompt.size(0), dtype=torch.bool)
    new: list[Tensor] = []
    with torch.no_grad(), kv_cache(model) if cache else contextlib.nullcontext() as kv:
        step_cache = ForgetfulCache(kv) if position_zero else kv
        if prefill or not cache:
            logits = next_token_logits(model, prompt, None, None, kv if cache else None)
        else:
            for i in range(prompt.size(1)):
                logits = next_token_logits(model, prompt[:, i : i + 1], None, None, kv)
        for _ in range(max_new_tokens):
            logits[:, pad_id] = float("-inf")
            chosen = logits.argmax(-1).masked_fill(finished, pad_id) if keep_finished else logits.argmax(-1)
            new.append(chosen)
            finished |= chosen == eos_id
            if bool(finished.all()):
                break
            everything = torch.cat([prompt, torch.stack(new, 1)], dim=1)
            logits = (next_token_logits(model, chosen[:, None], None, None, step_cache) if cache
                      else next_token_logits(model, everything, None))
    return torch.stack(new, 1)


# (grader, answer, ready-made): a ready-made answer is the library's own, graded with from_scratch=False
RIGHT_ANSWERS: list[tuple[Callable[..., GradeReport], Any, bool]] = [
    (grade_attention, lambda q, k, v: scaled_dot_product_attention(q, k, v), True),
    (grade_attention, einsum_attention, False),
    (grade_multi_head_attention, MultiHeadAttention, True),
    (grade_multi_head_attention, LoopedHeadsAttention, False),
    (grade_padding_mask, padding_mask, True),
    (grade_padding_mask, lambda tokens, pad_id: tokens.ne(pad_id).view(tokens.size(0), 1, 1, -1), False),
    (grade_causal_mask, causal_mask, True),
    (grade_causal_mask, lambda n: torch.arange(n)[None, :] <= torch.arange(n)[:, None], False),
    (grade_target_mask, target_mask, True),
    (grade_target_mask, lambda tgt, pad: (tgt != pad)[:, None, None, :]
     & (torch.arange(tgt.size(1))[None, :] <= torch.arange(tgt.size(1))[:, None]), False),
    (grade_target_mask, lambda tgt, pad: padding_mask(tgt, pad) & causal_mask(tgt.size(1)), False),  # the pieces
    (grade_masked_attention, lambda q, k, v, mask=None: scaled_dot_product_attention(q, k, v, mask), True),
    (grade_masked_attention, where_attention, False),
    (grade_sinusoidal_table, sinusoidal_table, True),
    (grade_sinusoidal_table, numpy_table, False),
    (grade_pre_ln_residual, lambda d_model, dropout=0.0: Residual(d_model, dropout, norm_first=True), True),
    (grade_pre_ln_residual, PreLN, False),
    (grade_post_ln_residual, lambda d_model, dropout=0.0: Residual(d_model, dropout, norm_first=False), True),
    (grade_post_ln_residual, PostLN, False),
    (grade_label_smoothed_loss, label_smoothed_cross_entropy, True),
    (grade_label_smoothed_loss, explicit_smoothed_loss, False),
    (grade_label_smoothed_loss, pieces_smoothed_loss, False),
    (grade_target_shift, lambda tgt: (tgt[:, :-1], tgt[:, 1:]), False),
    (grade_target_shift, lambda tgt: (tgt.narrow(1, 0, tgt.size(1) - 1), tgt.roll(-1, dims=1)[:, :-1]), False),
    (grade_length_batches, batches_by_tokens, False),
    (grade_greedy_decode, library_greedy, True),
    (grade_greedy_decode, cached_greedy, False),
    (grade_greedy_continue, lambda model, prompt, n, eos_id, pad_id: greedy_continue(
        model, prompt, max_new_tokens=n, eos_id=eos_id, pad_id=pad_id), True),
    (grade_greedy_continue, continue_with_cache, False),
    (grade_rotary, lambda x, start: RotaryEmbedding(x.size(-1), start + x.size(-2))(x, start), True),
    (grade_rotary, complex_rotary, False),
    (grade_alibi_bias, lambda H, T, L, start: ALiBiBias(H)(T, L, start), True),
    (grade_alibi_bias, looped_alibi, False),
    (grade_sliding_window_mask, lambda T, L, window: sliding_window_mask(T, L, window=window), True),
    (grade_sliding_window_mask, banded_window, False),
    (grade_rms_norm, RMSNorm, True),
    (grade_rms_norm, SquaresRMSNorm, False),
]


def _id(value: Any) -> str:
    return getattr(value, "__name__", type(value).__name__)


@pytest.mark.parametrize(("grader", "answer", "ready_made"), RIGHT_ANSWERS,
                         ids=[f"{_id(g)}-{i}" for i, (g, _, _) in enumerate(RIGHT_ANSWERS)])
def test_right_answers_pass_every_check(grader: Callable[..., GradeReport], answer: Any, ready_made: bool) -> None:
    report = grader(answer, from_scratch=not ready_made)
    assert report.passed, str(report)
    assert not report.skipped and len(report.passed_checks) >= 2
    assert str(report).count("✓") == len(report.passed_checks)
    assert ("not from scratch" in str(report).splitlines()[0]) == ready_made


READY_MADE = [(g, a) for g, a, ready_made in RIGHT_ANSWERS if ready_made] + [
    (grade_attention, lambda q, k, v: F.scaled_dot_product_attention(q, k, v)),
    (grade_attention, lambda q, k, v: nn.functional.scaled_dot_product_attention(q, k, v)),
    (grade_masked_attention, lambda q, k, v, mask=None: F.scaled_dot_product_attention(q, k, v, attn_mask=mask)),
    (grade_multi_head_attention, lambda d_model, n_heads: TorchLayer(d_model, n_heads)),
    (grade_label_smoothed_loss, lambda logits, target, eps, pad: F.cross_entropy(
        logits.flatten(0, 1), target.flatten(), label_smoothing=eps, ignore_index=pad)),
    (grade_label_smoothed_loss, lambda logits, target, eps, pad: nn.CrossEntropyLoss(
        ignore_index=pad, label_smoothing=eps)(logits.flatten(0, 1), target.flatten())),
] + ([(grade_rms_norm, lambda d_model, eps=1e-5: nn.RMSNorm(d_model, eps=eps))] if hasattr(nn, "RMSNorm") else [])


class TorchLayer(nn.Module):
    """PyTorch's multi-head attention (F.multi_head_attention_forward) behind the exercise's interface."""

    def __init__(self, d_model: int, n_heads: int) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.q_proj, self.k_proj = nn.Linear(d_model, d_model), nn.Linear(d_model, d_model)
        self.v_proj, self.out_proj = nn.Linear(d_model, d_model), nn.Linear(d_model, d_model)

    def forward(self, query: Tensor, key: Tensor, value: Tensor) -> Tensor:
        w = torch.cat([self.q_proj.weight, self.k_proj.weight, self.v_proj.weight])
        b = torch.cat([self.q_proj.bias, self.k_proj.bias, self.v_proj.bias])
        q, k, v = (x.transpose(0, 1) for x in (query, key, value))  # (T, B, D)
        out = F.multi_head_attention_forward(q, k, v, query.size(-1), self.n_heads, w, b, None, None, False, 0.0,
                                             self.out_proj.weight, self.out_proj.bias, need_weights=False)[0]
        return out.transpose(0, 1)  # (B, T, D)


@pytest.mark.parametrize(("grader", "answer"), READY_MADE, ids=[f"{_id(g)}-{i}" for i, (g, _) in enumerate(READY_MADE)])
def test_ready_made_answers_are_told_they_did_not_write_it(grader: Callable[..., GradeReport], answer: Any) -> None:
    report = grader(answer)
    assert not report.passed and report.failed_checks == ["ready_made"], str(report)
    assert "write it from the pieces" in report.failures[0].message and "from_scratch=False" in report.failures[0].hint
    opted_out = grader(answer, from_scratch=False)
    assert opted_out.passed and "not from scratch" in str(opted_out).splitlines()[0]


# --- Slips written here (the pitfalls module holds the tutorials' bugs) ---------------------------


def divided_by_d_k(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    return torch.softmax(q @ k.transpose(-2, -1) / q.size(-1), dim=-1) @ v


def transposed_with_T(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    return torch.softmax(q @ k.transpose(0, 1) / math.sqrt(q.size(-1)), dim=-1) @ v  # right for 2-D only


class SplitWithoutTransposeMHA(MultiHeadAttention):
    def split_heads(self, x: Tensor, width: int) -> Tensor:
        B, L, _ = x.shape
        return x.view(B, self.n_heads, L, width)  # the bug of chapter 1


class ScaledByModelWidth(LoopedHeadsAttention):
    def forward(self, query: Tensor, key: Tensor, value: Tensor) -> Tensor:
        q = self.q_proj(query) * math.sqrt(self.width / query.size(-1))  # the slip: 1/sqrt(D), not 1/sqrt(D/H)
        return self.out_proj(torch.cat([
            einsum_attention(q[..., h * self.width:(h + 1) * self.width], self.k_proj(key)[..., h * self.width:(h + 1) * self.width],
                             self.v_proj(value)[..., h * self.width:(h + 1) * self.width]) for h in range(self.n_heads)
        ], dim=-1))


def masked_after_softmax(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None) -> Tensor:
    weights = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.size(-1)), dim=-1)
    return (weights if mask is None else weights * mask) @ v


def annotated_table(max_len: int, d_model: int) -> Tensor:
    """The Annotated Transformer's positional table (condensed): fails for odd widths."""
    table = torch.zeros(max_len, d_model)
    position = torch.arange(max_len)[:, None]
    div_term = torch.exp(torch.arange(0, d_model, 2) * -(math.log(10000.0) / d_model))
    table[:, 0::2] = torch.sin(position * div_term)
    table[:, 1::2] = torch.cos(position * div_term)
    return table[None]


def cos_first_table(max_len: int, d_model: int) -> Tensor:
    swapped = numpy_table(max_len, d_model)
    pairs = d_model // 2 * 2
    swapped[:, 0:pairs:2], swapped[:, 1:pairs:2] = swapped[:, 1:pairs:2].clone(), swapped[:, 0:pairs:2].clone()
    return swapped


class DropoutBuiltInForward(PreLN):
    def forward(self, x: Tensor, sublayer: Callable[[Tensor], Tensor]) -> Tensor:
        return x + nn.Dropout(self.drop.p)(sublayer(self.layer_norm(x)))


def unstable_loss(logits: Tensor, target: Tensor, label_smoothing: float, ignore_index: int) -> Tensor:
    log_p = logits.softmax(-1).log()  # log(0) = -inf for a very unlikely token
    q = F.one_hot(target, logits.size(-1)) * (1 - label_smoothing) + label_smoothing / logits.size(-1)
    keep = target != ignore_index
    return -(q * log_p).sum(-1)[keep].mean()


def loss_with_padding(logits: Tensor, target: Tensor, label_smoothing: float, ignore_index: int) -> Tensor:
    return F.cross_entropy(logits.flatten(0, 1), target.flatten(), label_smoothing=label_smoothing)


class ForgetfulCache:
    """Reports an empty cache, so every new token is placed at position 0 (chapter 6's pitfall)."""

    def __init__(self, cache: Any) -> None:
        self.cache = cache

    length = 0


def greedy(model: Any, src: Tensor, src_mask: Tensor, max_new_tokens: int, bos_id: int, eos_id: int,
           pad_id: int, *, cache: bool = True, position_zero: bool = False, keep_finished: bool = True,
           stop: bool = True) -> Tensor:
    tokens = torch.full((src.size(0), 1), bos_id)
    finished = torch.zeros(src.size(0), dtype=torch.bool)
    with torch.no_grad(), kv_cache(model) if cache else contextlib.nullcontext() as kv:
        memory = model.encode(src, src_mask)
        for _ in range(max_new_tokens):
            if not cache:
                logits = next_token_logits(model, tokens, memory, src_mask)  # the whole prefix, every step
            else:
                logits = next_token_logits(model, tokens[:, -1:], memory, src_mask, ForgetfulCache(kv) if position_zero else kv)
            chosen = logits.argmax(-1)
            if keep_finished:
                chosen = chosen.masked_fill(finished, pad_id)
            tokens = torch.cat([tokens, chosen[:, None]], dim=1)
            finished |= chosen == eos_id
            if stop and bool(finished.all()):
                break
    return tokens[:, 1:]


def rope(x: Tensor, start: int, *, sign: float = 1.0, shift: int = 0, exponent: float = 2.0,
         dtype: torch.dtype | None = None, position_dtype: torch.dtype = torch.float64) -> Tensor:
    """RoPE with a slip chosen by the arguments (``dtype``: the angles computed in that dtype;
    ``position_dtype``: the positions counted in that dtype)."""
    Dh, L = x.size(-1), x.size(-2)
    kind = dtype or torch.float64
    theta = 10000.0 ** (-exponent * torch.arange(Dh // 2, dtype=kind) / Dh)
    position = torch.arange(start + shift, start + shift + L, dtype=position_dtype).to(kind)
    angles = sign * position[:, None] * theta  # (L, Dh/2)
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    even, odd = x[..., 0::2], x[..., 1::2]
    return torch.stack([even * cos - odd * sin, even * sin + odd * cos], dim=-1).flatten(-2)


def rope_from_zero(x: Tensor, start: int) -> Tensor:
    return rope(x, 0)


def slopes_of(n_heads: int) -> Tensor:
    """ALiBi's slopes, as the paper's code computes them (a power of two, then every other of twice as many)."""
    below = 2 ** int(math.log2(n_heads))
    slopes = [2 ** (-8 * h / below) for h in range(1, below + 1)]
    return torch.tensor(slopes + [2 ** (-8 * h / (2 * below)) for h in range(1, 2 * below + 1, 2)][: n_heads - below])


def alibi(n_heads: int, n_queries: int, n_keys: int, query_start: int, *, sign: float = -1.0,
          dtype: torch.dtype = torch.float32, reverse: bool = False, ignore_start: bool = False) -> Tensor:
    slopes = slopes_of(n_heads).flip(0) if reverse else slopes_of(n_heads)
    start = 0 if ignore_start else query_start
    query = torch.arange(start, start + n_queries, dtype=dtype)[:, None]
    distance = (query - torch.arange(n_keys, dtype=dtype)[None, :]).abs().float()  # counted in dtype
    return (sign * slopes[:, None, None] * distance)[None]


def window_mask(n_queries: int, n_keys: int, window: int, *, causal: bool = True, last: bool = True,
                dtype: torch.dtype = torch.long) -> Tensor:
    first = n_keys - n_queries if last else 0
    distance = torch.arange(first, first + n_queries, dtype=dtype)[:, None] - torch.arange(n_keys, dtype=dtype)
    return (distance >= 0 if causal else distance > -window) & (distance < window)


class RMSNormSlip(SquaresRMSNorm):
    def forward(self, x: Tensor) -> Tensor:
        return x / (x.pow(2).mean(-1, keepdim=True).sqrt() + self.eps) * self.gain  # eps outside the root


class RMSNormWithoutRoot(SquaresRMSNorm):
    def forward(self, x: Tensor) -> Tensor:
        return x / (x.pow(2).mean(-1, keepdim=True) + self.eps) * self.gain


class RMSNormOfLength(SquaresRMSNorm):
    def forward(self, x: Tensor) -> Tensor:
        return x / x.norm(dim=-1, keepdim=True) * math.sqrt(x.size(-1)) * self.gain  # 0 / 0 for a zero vector


class RMSNormWithBias(SquaresRMSNorm):
    def __init__(self, d_model: int, eps: float = 1e-5) -> None:
        super().__init__(d_model, eps)
        self.bias = nn.Parameter(torch.zeros(d_model))

    def forward(self, x: Tensor) -> Tensor:
        return super().forward(x) + self.bias


BUGS: list[tuple[Callable[[Any], GradeReport], Any, str]] = [
    # chapter 1
    (grade_attention, pitfalls.attention_without_scaling, "no_scaling"),
    (grade_attention, pitfalls.attention_softmax_over_queries, "softmax_wrong_axis"),
    (grade_attention, divided_by_d_k, "scaled_by_d_k"),
    (grade_attention, transposed_with_T, "batch_dims"),
    (grade_multi_head_attention, pitfalls.FullWidthHeadsAttention, "full_width_heads"),
    (grade_multi_head_attention, pitfalls.DropoutInForwardAttention, "dropout_in_eval"),
    (grade_multi_head_attention, SplitWithoutTransposeMHA, "split_heads_without_transpose"),
    (grade_multi_head_attention, ScaledByModelWidth, "scaled_by_d_model"),
    # chapter 2
    (grade_padding_mask, pitfalls.query_side_padding_mask, "keys_masked_not_queries"),
    (grade_padding_mask, lambda tokens, pad: (tokens == pad)[:, None, None, :], "mask_polarity"),
    (grade_padding_mask, lambda tokens, pad: tokens != pad, "mask_shape"),
    (grade_padding_mask, lambda tokens, pad: (tokens != 0)[:, None, None, :], "pad_id_ignored"),
    (grade_padding_mask, lambda tokens, pad: (tokens != pad).float()[:, None, None, :], "mask_dtype"),
    (grade_causal_mask, lambda n: torch.ones(n, n, dtype=torch.bool).triu(1), "mask_polarity"),
    (grade_causal_mask, lambda n: torch.ones(n, n, dtype=torch.bool).tril(1), "causal_peeks_ahead"),
    (grade_causal_mask, lambda n: torch.ones(n, n, dtype=torch.bool), "no_causal_mask"),
    (grade_causal_mask, nn.Transformer.generate_square_subsequent_mask, "mask_dtype"),
    (grade_target_mask, pitfalls.padding_only_target_mask, "no_causal_mask"),
    (grade_target_mask, lambda tgt, pad: causal_mask(tgt.size(1)), "no_padding_mask"),
    (grade_target_mask, lambda tgt, pad: pitfalls.query_side_padding_mask(tgt, pad) & causal_mask(tgt.size(1)),
     "keys_masked_not_queries"),
    (grade_masked_attention, pitfalls.attention_unassigned_masked_fill, "mask_not_applied"),
    (grade_masked_attention, pitfalls.attention_flipped_mask, "mask_polarity"),
    (grade_masked_attention, pitfalls.attention_with_finite_fill, "fill_overflows_float16"),
    (grade_masked_attention, functools.partial(pitfalls.attention_with_finite_fill, fill=-1e4), "finite_fill_leaks"),
    (grade_masked_attention, masked_after_softmax, "masked_after_softmax"),
    (grade_masked_attention, pitfalls.attention_without_scaling, "no_scaling"),
    # chapter 3
    (grade_sinusoidal_table, annotated_table, "odd_width"),
    (grade_sinusoidal_table, cos_first_table, "sin_cos_swapped"),
    (grade_sinusoidal_table, pitfalls.sinusoidal_table_in_halves, "halves_not_interleaved"),
    (grade_sinusoidal_table, lambda n, d: numpy_table(n + 1, d)[1:], "positions_start_at_one"),
    # chapter 4
    (grade_pre_ln_residual, pitfalls.NormalisedInputResidual, "residual_adds_normalised_input"),
    (grade_pre_ln_residual, PostLN, "post_ln_instead"),
    (grade_post_ln_residual, PreLN, "pre_ln_instead"),
    (grade_pre_ln_residual, DropoutBuiltInForward, "dropout_in_eval"),
    # chapter 5
    (grade_target_shift, pitfalls.targets_without_shift, "off_by_one_shift"),
    (grade_target_shift, lambda tgt: (tgt[:, 1:], tgt[:, :-1]), "off_by_one_shift"),
    (grade_label_smoothed_loss, loss_with_padding, "padding_not_ignored"),
    (grade_label_smoothed_loss, unstable_loss, "numerically_unstable"),
    (grade_label_smoothed_loss, lambda *a: torch.tensor(explicit_smoothed_loss(*a).item()), "not_differentiable"),
    (grade_length_batches, pitfalls.batches_sorted_by_characters, "sorted_by_characters"),
    # chapter 6
    (grade_greedy_decode, functools.partial(greedy, cache=False), "cache_not_used"),
    (grade_greedy_decode, pitfalls.greedy_decode_recomputing_prefix, "cache_not_used"),
    (grade_greedy_decode, functools.partial(greedy, position_zero=True), "positions_restart_at_zero"),
    (grade_greedy_decode, functools.partial(greedy, keep_finished=False), "no_padding_after_eos"),
    # chapter 7
    (grade_rotary, pitfalls.rotary_in_halves, "pairs_as_halves"),
    (grade_rotary, functools.partial(rope, sign=-1.0), "rotates_backwards"),
    (grade_rotary, rope_from_zero, "start_ignored"),
    (grade_rotary, functools.partial(rope, shift=1), "positions_start_at_one"),
    (grade_rotary, functools.partial(rope, exponent=1.0), "frequency_exponent"),
    (grade_greedy_continue, pitfalls.greedy_continue_without_cache, "cache_not_used"),
    (grade_greedy_continue, functools.partial(continue_with_cache, prefill=False), "prompt_not_prefilled"),
    (grade_greedy_continue, functools.partial(continue_with_cache, position_zero=True), "positions_restart_at_zero"),
    (grade_greedy_continue, functools.partial(continue_with_cache, keep_finished=False), "no_padding_after_eos"),
    (grade_greedy_continue, lambda model, prompt, *a: torch.cat([prompt, continue_with_cache(model, prompt, *a)], 1),
     "output_includes_prompt"),
    (grade_alibi_bias, pitfalls.alibi_bias_with_formula_slopes, "slopes_not_power_of_two"),
    (grade_alibi_bias, functools.partial(alibi, sign=1.0), "bias_sign"),
    (grade_alibi_bias, functools.partial(alibi, reverse=True), "slopes_reversed"),
    (grade_alibi_bias, functools.partial(alibi, ignore_start=True), "query_start_ignored"),
    (grade_alibi_bias, lambda H, T, L, start: slopes_of(H)[:, None, None] * (
        torch.arange(L)[None, :] - torch.arange(start, start + T)[:, None]), "signed_distance"),
    (grade_sliding_window_mask, pitfalls.sliding_window_one_too_wide, "window_off_by_one"),
    (grade_sliding_window_mask, lambda T, L, w: window_mask(T, L, w - 1), "window_short_by_one"),
    (grade_sliding_window_mask, functools.partial(window_mask, causal=False), "not_causal"),
    (grade_sliding_window_mask, functools.partial(window_mask, last=False), "queries_not_last"),
    (grade_sliding_window_mask, lambda T, L, w: ~window_mask(T, L, w), "mask_polarity"),
    (grade_sliding_window_mask, lambda T, L, w: window_mask(T, L, w).int(), "mask_dtype"),
    (grade_rms_norm, pitfalls.RMSNormSubtractingMean, "mean_subtracted"),
    (grade_rms_norm, RMSNormSlip, "eps_outside_root"),
    (grade_rms_norm, RMSNormWithoutRoot, "no_root"),
    (grade_rms_norm, RMSNormWithBias, "gain_shape"),
]


@pytest.mark.parametrize(("grader", "answer", "check"), BUGS, ids=[f"{_id(g)}-{c}" for g, _, c in BUGS])
def test_each_bug_is_caught_and_named(grader: Callable[[Any], GradeReport], answer: Any, check: str) -> None:
    report = grader(answer)
    assert not report.passed
    assert report.failures[0].check == check, str(report)
    assert f"✗ {check}:" in str(report) and f"`{check}`" in report._repr_markdown_()
    assert report.failures[0].hint, "a failure says what to do"


# --- Broken answers never break a grader -----------------------------------------------------------

GRADERS = [grade_attention, grade_multi_head_attention, grade_padding_mask, grade_causal_mask, grade_target_mask,
           grade_masked_attention, grade_sinusoidal_table, grade_pre_ln_residual, grade_post_ln_residual,
           grade_label_smoothed_loss, grade_target_shift, grade_length_batches, grade_greedy_decode, grade_rotary,
           grade_alibi_bias, grade_greedy_continue, grade_sliding_window_mask, grade_rms_norm]


def not_written(*args: Any, **kwargs: Any) -> Any:
    """The exercise's starter cell."""
    raise NotImplementedError


def _raises(*args: Any, **kwargs: Any) -> Any:
    raise ValueError("something inside went wrong")


def _nan(*args: Any, **kwargs: Any) -> Tensor:
    return torch.full((2, 3), float("nan"))


BROKEN = {
    "raises": _raises,
    "returns None": lambda *args, **kwargs: None,
    "returns a string": lambda *args, **kwargs: "attention",
    "returns NaN of a wrong shape": _nan,
    "returns a scalar": lambda *args, **kwargs: torch.tensor(1.0),
    "is not callable": 42,
}


@pytest.mark.parametrize("grader", GRADERS, ids=_id)
@pytest.mark.parametrize("answer", list(BROKEN.values()), ids=list(BROKEN))
def test_broken_answers_get_a_report_not_an_exception(grader: Callable[[Any], GradeReport], answer: Any) -> None:
    report = grader(answer)
    assert not report.passed and not report
    assert report.failures and all(f.check and f.message for f in report.failures)
    assert report.failed_checks == list(dict.fromkeys(report.failed_checks)), "one bug, reported once"


@pytest.mark.parametrize("grader", GRADERS, ids=_id)
def test_the_starter_cell_is_told_to_write_the_answer_first(grader: Callable[[Any], GradeReport]) -> None:
    report = grader(not_written)
    assert report.failed_checks == ["not_implemented"]
    assert not report.passed_checks


def test_a_failure_shows_the_smallest_input_the_right_output_and_the_readers() -> None:
    failure = grade_attention(pitfalls.attention_without_scaling).failures[0]
    # d_k = 1 cannot show a missing 1/sqrt(d_k): the first case that can is T = 2, L = 3, d_k = 2
    assert failure.example.startswith("query (2, 2):") and "key (3, 2):" in failure.example
    expected, got = (torch.tensor(eval(printed)) for printed in (failure.expected, failure.got))  # nested lists
    assert expected.shape == got.shape == (2, 1) and not torch.allclose(expected, got, atol=1e-3)
    peeks = grade_causal_mask(lambda n: torch.ones(n, n, dtype=torch.bool).tril(1)).failures[0]
    assert peeks.example == "n = 2", "n = 1 has no key after the query"
    assert peeks.expected == "[[1, 0],\n [1, 1]]" and peeks.got == "[[1, 1],\n [1, 1]]"


def test_reports_read_on_a_phone_and_as_markdown() -> None:
    report = grade_masked_attention(pitfalls.attention_unassigned_masked_fill)
    text = str(report)
    assert repr(report) == text and text.startswith("Attention with a mask: ")
    assert max(len(line) for line in text.splitlines()) <= 80, max(text.splitlines(), key=len)
    markdown = report._repr_markdown_()
    assert markdown.count("```") % 2 == 0 and "*Hint:*" in markdown
    passed = grade_masked_attention(where_attention)
    assert str(passed).splitlines()[0].endswith(f"all {len(passed.passed_checks)} checks passed")


@pytest.mark.parametrize("answer", [MultiHeadAttention, pitfalls.DropoutInForwardAttention], ids=_id)
def test_grading_leaves_the_global_random_state_alone(answer: Any) -> None:
    before = torch.get_rng_state()
    grade_multi_head_attention(answer)
    assert torch.equal(torch.get_rng_state(), before)


# --- Wrong answers of each class the graders check ------------------------------------------------


class DetachedWeightsMHA(LoopedHeadsAttention):
    def forward(self, query: Tensor, key: Tensor, value: Tensor) -> Tensor:
        q, k, v = self.q_proj(query), self.k_proj(key), self.v_proj(value)
        heads = []
        for h in range(self.n_heads):
            part = slice(h * self.width, (h + 1) * self.width)
            heads.append(pitfalls.attention_detached_weights(q[..., part], k[..., part], v[..., part])[0])
        return self.out_proj(torch.cat(heads, dim=-1))


class UnstableMHA(LoopedHeadsAttention):
    def forward(self, query: Tensor, key: Tensor, value: Tensor) -> Tensor:
        q, k, v = self.q_proj(query), self.k_proj(key), self.v_proj(value)
        return self.out_proj(torch.cat([pitfalls.attention_unstable_softmax(
            q[..., h * self.width:(h + 1) * self.width], k[..., h * self.width:(h + 1) * self.width],
            v[..., h * self.width:(h + 1) * self.width])[0] for h in range(self.n_heads)], dim=-1))


class ValuesFromKeysMHA(LoopedHeadsAttention):
    def forward(self, query: Tensor, key: Tensor, value: Tensor) -> Tensor:
        return super().forward(query, key, key)  # the slip: right while key is value


class AddsInPlace(PreLN):
    def forward(self, x: Tensor, sublayer: Callable[[Tensor], Tensor]) -> Tensor:
        x += self.drop(sublayer(self.layer_norm(x)))  # the caller's x changes
        return x


class DropoutOnSublayerInput(PreLN):
    def forward(self, x: Tensor, sublayer: Callable[[Tensor], Tensor]) -> Tensor:
        return x + sublayer(self.drop(self.layer_norm(x)))


class DetachedSublayer(PreLN):
    def forward(self, x: Tensor, sublayer: Callable[[Tensor], Tensor]) -> Tensor:
        return x + self.drop(sublayer(self.layer_norm(x))).detach()


def loss_by_order(logits: Tensor, target: Tensor, label_smoothing: float, ignore_index: int) -> Tensor:
    keep = target > ignore_index  # the slip: right while the pad has the smallest id
    log_p = F.log_softmax(logits, dim=-1)
    nll = -log_p.gather(-1, target[..., None]).squeeze(-1)
    return ((1 - label_smoothing) * nll - label_smoothing * log_p.mean(-1))[keep].mean()


def loss_by_exp(logits: Tensor, target: Tensor, label_smoothing: float, ignore_index: int) -> Tensor:
    log_p = (logits.exp() / logits.exp().sum(-1, keepdim=True)).log()  # exp overflows float16 at 11.1
    nll = -log_p.gather(-1, target[..., None]).squeeze(-1)
    return ((1 - label_smoothing) * nll - label_smoothing * log_p.mean(-1))[target != ignore_index].mean()


def batches_of_one(sentences: list[str], tokenize: Callable[[str], list[str]], batch_size: int) -> list[list[int]]:
    return [[i] for i in range(len(sentences))]  # no padding at all, and no batching either


def sorts_in_place(sentences: list[str], tokenize: Callable[[str], list[str]], batch_size: int) -> list[list[int]]:
    order = sorted(range(len(sentences)), key=lambda i: len(tokenize(sentences[i])))
    sentences.sort(key=lambda s: len(tokenize(s)))  # the caller's list, reordered
    return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]


class ShiftedCache(ForgetfulCache):
    """Reports one token more than the cache holds: every new token one position late."""

    @property
    def length(self) -> int:  # type: ignore[override]
        return self.cache.length + 1


def greedy_hard_coded_pad(model: Any, src: Tensor, src_mask: Tensor, max_new_tokens: int, bos_id: int, eos_id: int,
                          pad_id: int) -> Tensor:
    return greedy(model, src, src_mask, max_new_tokens, bos_id, eos_id, 0)  # pads with 0 whatever pad_id is


def greedy_one_late(model: Any, src: Tensor, src_mask: Tensor, max_new_tokens: int, bos_id: int, eos_id: int,
                    pad_id: int) -> Tensor:
    tokens = torch.full((src.size(0), 1), bos_id)
    with torch.no_grad(), kv_cache(model) as kv:
        memory = model.encode(src, src_mask)
        for _ in range(max_new_tokens):
            chosen = next_token_logits(model, tokens[:, -1:], memory, src_mask, ShiftedCache(kv)).argmax(-1)
            tokens = torch.cat([tokens, chosen[:, None]], dim=1)
            if bool((tokens == eos_id).any(1).all()):
                break
    return tokens[:, 1:]


def rope_in_place(x: Tensor, start: int) -> Tensor:
    turned = rope(x, start)
    x.copy_(turned)  # the caller's queries, overwritten
    return x


def rope_detached(x: Tensor, start: int) -> Tensor:
    return rope(x.detach(), start)


class RMSNormScalingInPlace(SquaresRMSNorm):
    def forward(self, x: Tensor) -> Tensor:
        return x.mul_((x.square().mean(-1, keepdim=True) + self.eps).rsqrt()) * self.gain


class RMSNormDetachedScale(SquaresRMSNorm):
    def forward(self, x: Tensor) -> Tensor:
        return x * (x.square().mean(-1, keepdim=True) + self.eps).rsqrt().detach() * self.gain


class RMSNormInFloat32(SquaresRMSNorm):
    def forward(self, x: Tensor) -> Tensor:
        return x * (x.square().mean(-1, keepdim=True) + self.eps).rsqrt() * torch.ones(x.size(-1)) * self.gain


CLASS_BUGS: list[tuple[Callable[..., GradeReport], Any, str]] = [
    # numerics: a softmax without the maximum subtracted
    (grade_attention, pitfalls.attention_unstable_softmax, "unstable_softmax"),
    (grade_masked_attention, pitfalls.attention_unstable_softmax, "unstable_softmax"),
    (grade_multi_head_attention, UnstableMHA, "large_scores"),
    (grade_multi_head_attention, UnstableMHA, "half_precision"),
    (grade_label_smoothed_loss, loss_by_exp, "half_precision"),
    (grade_rotary, lambda x, start: rope(x, start, dtype=x.dtype), "half_precision"),  # angles in float16
    (grade_rotary, functools.partial(rope, position_dtype=torch.float16), "large_positions"),
    (grade_rotary, lambda x, start: rope(x, start).float(), "dtype"),  # float16 comes back as float32
    (grade_alibi_bias, functools.partial(alibi, dtype=torch.float16), "large_positions"),
    (grade_sliding_window_mask, functools.partial(window_mask, dtype=torch.float16), "large_positions"),
    (grade_rms_norm, RMSNormOfLength, "zero_input"),
    (grade_rms_norm, RMSNormInFloat32, "dtype"),
    # gradient flow
    (grade_attention, pitfalls.attention_detached_weights, "weights_detached"),
    (grade_masked_attention, pitfalls.attention_detached_weights, "weights_detached"),
    (grade_multi_head_attention, DetachedWeightsMHA, "weights_detached"),
    (grade_pre_ln_residual, DetachedSublayer, "gradient"),
    (grade_rotary, rope_detached, "not_differentiable"),
    (grade_rms_norm, RMSNormDetachedScale, "gradient"),
    # side effects on the caller's arguments
    (grade_attention, pitfalls.attention_dividing_query_in_place, "modifies_input"),
    (grade_masked_attention, pitfalls.attention_dividing_query_in_place, "modifies_input"),
    (grade_label_smoothed_loss, pitfalls.loss_overwriting_targets, "modifies_input"),
    (grade_pre_ln_residual, AddsInPlace, "modifies_input"),
    (grade_length_batches, sorts_in_place, "modifies_input"),
    (grade_rotary, rope_in_place, "modifies_input"),
    (grade_greedy_continue, lambda model, prompt, *a: continue_with_cache(model, prompt.fill_(4), *a), "modifies_input"),
    (grade_rms_norm, RMSNormScalingInPlace, "modifies_input"),
    # special ids anywhere in the vocabulary
    (grade_padding_mask, pitfalls.padding_mask_by_order, "pad_compared_by_order"),
    (grade_target_mask, lambda tgt, pad: pitfalls.padding_mask_by_order(tgt, pad) & causal_mask(tgt.size(1)),
     "pad_compared_by_order"),
    (grade_label_smoothed_loss, loss_by_order, "pad_compared_by_order"),
    (grade_greedy_decode, greedy_hard_coded_pad, "pad_id_ignored"),
    (grade_greedy_continue, lambda *a: continue_with_cache(*a).masked_fill(continue_with_cache(*a) == a[-1], 0),
     "pad_id_ignored"),  # pads after <eos> written as 0, whatever pad_id is
    # answers that were graded right, and a report whose advice did not fit
    (grade_multi_head_attention, ValuesFromKeysMHA, "values_from_keys"),
    (grade_length_batches, batches_of_one, "batches_not_full"),
    (grade_pre_ln_residual, DropoutOnSublayerInput, "dropout_on_input"),
    (grade_post_ln_residual, DropoutOnSublayerInput, "dropout_on_input"),
    (grade_greedy_decode, greedy_one_late, "positions_wrong"),
    (grade_greedy_decode, functools.partial(greedy, stop=False), "no_early_stop"),
]


@pytest.mark.parametrize(("grader", "answer", "check"), CLASS_BUGS,
                         ids=[f"{_id(g)}-{c}-{i}" for i, (g, _, c) in enumerate(CLASS_BUGS)])
def test_each_class_of_wrong_answer_fails_with_its_check_named(grader: Callable[..., GradeReport], answer: Any,
                                                               check: str) -> None:
    report = grader(answer)
    assert not report.passed and check in report.failed_checks, str(report)
    failure = report.failures[report.failed_checks.index(check)]
    assert failure.message and failure.hint, "a failure says what is wrong and what to do"


def test_numerics_reports_name_the_softmax_and_show_the_input() -> None:
    report = grade_attention(pitfalls.attention_unstable_softmax)
    assert report.failed_checks == ["unstable_softmax"], str(report)
    failure = report.failures[0]
    assert "exp(s) / sum(exp(s))" in failure.message and "maximum" in failure.hint
    assert "scale 30" in failure.example and "nan" in failure.got


def test_side_effects_show_the_argument_before_and_after() -> None:
    failure = grade_label_smoothed_loss(pitfalls.loss_overwriting_targets).failures[0]
    assert failure.check == "modifies_input" and "`target`" in failure.message
    assert failure.expected.startswith("target unchanged") and failure.got.startswith("target after the call")


def test_positions_off_by_one_are_told_so() -> None:
    failure = grade_greedy_decode(greedy_one_late).failures[0]
    assert failure.check == "positions_wrong" and "+1" in failure.message and "cache.length" in failure.hint


# --- Hostile answers: exit, endless loop, output flood --------------------------------------------


def exits(*args: Any, **kwargs: Any) -> Any:
    sys.exit(3)


def loops(*args: Any, **kwargs: Any) -> Any:
    while True:
        pass


def swallows_and_loops(*args: Any, **kwargs: Any) -> Any:
    while True:
        try:
            time.sleep(10)
        except Exception:  # noqa: BLE001 (the answer's own except may not stop the time limit)
            pass


def floods(*args: Any, **kwargs: Any) -> Any:
    print("x" * 10_000_000)


def prints_forever(*args: Any, **kwargs: Any) -> Any:
    for i in range(10**9):
        print(i)


def interrupted(*args: Any, **kwargs: Any) -> Any:
    raise KeyboardInterrupt


# the answer and the checks that may cut it (a loop that prints meets whichever limit comes first)
HOSTILE = {"exits": (exits, ("exits",)), "loops": (loops, ("time_limit",)),
           "sleeps, swallowing exceptions": (swallows_and_loops, ("time_limit",)),
           "prints 10 MB": (floods, ("output_limit",)), "prints forever": (prints_forever, ("output_limit", "time_limit")),
           "raises KeyboardInterrupt": (interrupted, ("interrupted",))}


@pytest.fixture
def short_time_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(grader_machinery, "TIME_LIMIT_S", 0.3)


@pytest.mark.usefixtures("short_time_limit")
@pytest.mark.parametrize("grader", GRADERS, ids=_id)
@pytest.mark.parametrize(("answer", "checks"), list(HOSTILE.values()), ids=list(HOSTILE))
def test_hostile_answers_are_reported_and_the_grader_survives(grader: Callable[..., GradeReport], answer: Any,
                                                              checks: tuple[str, ...],
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    stdout, handler, started = sys.stdout, signal.getsignal(signal.SIGALRM), time.perf_counter()
    report = grader(answer)
    assert report.failed_checks[0] in checks and not report.passed, str(report)
    assert time.perf_counter() - started < 10, "cut by the time limit, once"
    assert sys.stdout is stdout and signal.getsignal(signal.SIGALRM) == handler and sys.getprofile() is None
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
    printed = capsys.readouterr().out
    assert len(printed) < grader_machinery.OUTPUT_LIMIT_CHARS + 200, "the flood is cut"


@pytest.mark.usefixtures("short_time_limit")
def test_the_time_limit_works_outside_the_main_thread_too() -> None:
    reports: list[GradeReport] = []
    thread = threading.Thread(target=lambda: reports.append(grade_attention(loops)))
    thread.start()
    thread.join(timeout=20)
    assert not thread.is_alive() and reports[0].failed_checks == ["time_limit"]


def test_an_outer_timer_is_given_back(monkeypatch: pytest.MonkeyPatch) -> None:
    fired: list[int] = []
    previous = signal.signal(signal.SIGALRM, lambda *_: fired.append(1))
    try:
        signal.setitimer(signal.ITIMER_REAL, 30.0)
        assert grade_attention(einsum_attention).passed
        left, _ = signal.getitimer(signal.ITIMER_REAL)
        assert 20.0 < left < 30.0 and signal.getsignal(signal.SIGALRM) is not previous and not fired
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def greedy_cache_not_passed(model: Any, src: Tensor, src_mask: Tensor, max_new_tokens: int, bos_id: int, eos_id: int,
                            pad_id: int) -> Tensor:
    """Inside kv_cache, but next_token_logits is not given the cache: every new token at position 0."""
    tokens = torch.full((src.size(0), 1), bos_id)
    finished = torch.zeros(src.size(0), dtype=torch.bool)
    with torch.no_grad(), kv_cache(model):
        memory = model.encode(src, src_mask)
        for _ in range(max_new_tokens):
            chosen = next_token_logits(model, tokens[:, -1:], memory, src_mask).argmax(-1).masked_fill(finished, pad_id)
            tokens = torch.cat([tokens, chosen[:, None]], dim=1)
            finished |= chosen == eos_id
            if bool(finished.all()):
                break
    return tokens[:, 1:]


def test_the_position_zero_advice_fits_an_answer_that_forgets_to_pass_the_cache() -> None:
    failure = grade_greedy_decode(greedy_cache_not_passed).failures[0]
    assert failure.check == "positions_restart_at_zero" and "cache as its last argument" in failure.hint


CHAPTER_7_PITFALLS = [
    (grade_rotary, pitfalls.rotary_in_halves, "pairs_as_halves", "x (3, 4):"),  # Dh = 2: halves are neighbours
    (grade_alibi_bias, pitfalls.alibi_bias_with_formula_slopes, "slopes_not_power_of_two", "n_heads = 6"),
    (grade_greedy_continue, pitfalls.greedy_continue_without_cache, "cache_not_used", "prompt (3, 4):"),
    (grade_sliding_window_mask, pitfalls.sliding_window_one_too_wide, "window_off_by_one", "n_queries = 2"),
    (grade_rms_norm, pitfalls.RMSNormSubtractingMean, "mean_subtracted", "x (1, 8):"),
]


@pytest.mark.parametrize(("grader", "answer", "check", "smallest"), CHAPTER_7_PITFALLS,
                         ids=[c for _, _, c, _ in CHAPTER_7_PITFALLS])
def test_chapter_7_pitfalls_fail_one_check_on_the_smallest_input_that_shows_it(
        grader: Callable[..., GradeReport], answer: Any, check: str, smallest: str) -> None:
    """The report each chapter-7 page shows: one failed check, on the first case where the bug differs from the
    right answer, printed at a phone's width."""
    report = grader(answer)
    assert report.failed_checks == [check], str(report)
    failure = report.failures[0]
    assert failure.example.startswith(smallest)
    assert failure.expected != failure.got or not failure.expected  # (how a loop ran has no expected output)
    assert max(len(line) for line in str(report).splitlines()) <= 80


# --- The capstone: the reader's pieces in one model -----------------------------------------------

from transformer_lib.batching import collate  # noqa: E402
from transformer_lib.book.graders import capstone  # noqa: E402
from transformer_lib.config import TransformerConfig  # noqa: E402
from transformer_lib.losses import TranslationLoss  # noqa: E402
from transformer_lib.model import Transformer  # noqa: E402
from transformer_lib.toy_tasks import toy_task, toy_vocab  # noqa: E402
from transformer_lib.vocab import SPECIALS  # noqa: E402

INDEPENDENT_PIECES = dict(attention=where_attention, padding_mask=lambda t, p: (t != p)[:, None, None, :],
                          positional_table=numpy_table, residual=PreLN, loss=explicit_smoothed_loss,
                          greedy_decode=cached_greedy)


def _capstone_config() -> TransformerConfig:
    vocab = toy_vocab(6)
    return TransformerConfig.from_preset("tiny", src_vocab_size=len(vocab), tgt_vocab_size=len(vocab), dropout=0.0,
                                         pad_id=vocab.pad_id)


def test_choose_pieces_keeps_the_answers_that_pass_and_says_whose_each_piece_is() -> None:
    mine = capstone.choose_pieces(**INDEPENDENT_PIECES)
    assert mine.yours == set(capstone.PIECES) and all(r.passed for r in mine.reports.values())
    assert all(used.startswith("yours: all") for used in mine.table()["used"])
    mixed = capstone.choose_pieces(attention=pitfalls.attention_without_scaling, padding_mask=not_written,
                                   positional_table=numpy_table)
    assert mixed.yours == {"positional_table"} and mixed.attention is capstone.PIECES["attention"].library
    used = dict(zip(mixed.table()["piece"], mixed.table()["used"]))
    assert used["attention, with a mask"] == "the library's: yours fails no_scaling"
    assert used["the padding mask"] == "the library's: yours is not written yet"
    assert used["the label-smoothed loss"] == "the library's: no answer given"
    with pytest.raises(ValueError, match="no piece called attn"):
        capstone.choose_pieces(attn=where_attention)


def test_with_the_librarys_pieces_the_capstone_model_is_the_librarys() -> None:
    config = _capstone_config()
    assembled = capstone.assemble(config, capstone.choose_pieces())
    torch.manual_seed(0)
    library = Transformer(config)
    assert assembled.state_dict().keys() == library.state_dict().keys()
    assert all(torch.equal(a, b) for a, b in zip(assembled.state_dict().values(), library.state_dict().values()))
    src, tgt = torch.randint(4, 10, (3, 5)), torch.randint(4, 10, (3, 4))
    pieces = capstone.choose_pieces()
    batch = collate([(s.tolist(), t.tolist()) for s, t in zip(src, tgt)], config.pad_id)
    summed, count = capstone.PiecesLoss(pieces, 0.1, config.pad_id)(assembled, batch)
    expected, n = TranslationLoss(0.1, config.pad_id)(library, batch)
    assert count == n and torch.allclose(summed, expected, rtol=1e-5)


def test_the_readers_pieces_compute_what_the_librarys_do() -> None:
    """Every seam: the reader's attention, residual and table in the library's model give its outputs."""
    config = _capstone_config()
    mine = capstone.assemble(config, capstone.choose_pieces(**INDEPENDENT_PIECES)).eval()
    library = capstone.assemble(config, capstone.choose_pieces()).eval()
    assert isinstance(mine.decoder.layers[0].cross_attn, capstone.PiecesAttention)
    assert isinstance(mine.encoder.layers[0].ff_residual, capstone.PiecesResidual)
    # (the reader's residuals are new modules; their LayerNorms start as the library's: ones and zeros)
    src, tgt = torch.randint(4, 10, (2, 6)), torch.randint(4, 10, (2, 5))
    src[1, 4:] = config.pad_id
    masks = (padding_mask(src, config.pad_id), target_mask(tgt, config.pad_id))
    with torch.no_grad():
        assert torch.allclose(mine(src, tgt, *masks), library(src, tgt, *masks), atol=1e-5)


def _graded(model: Transformer, pieces: Any) -> GradeReport:
    _, heldout = toy_task("reverse", 200, 60, n_symbols=6, longest=4)
    vocab = toy_vocab(6)
    return capstone.grade_transformer(model, pieces, heldout, pad_id=vocab.pad_id, bos_id=vocab.bos_id,
                                      eos_id=vocab.eos_id, symbols=(len(SPECIALS), len(vocab) - 1))


def test_an_untrained_model_passes_the_properties_and_falls_short_on_exact_match_with_an_example() -> None:
    # greedy decoding: the library's, which never writes <bos> (an untrained model would; a trained one does not)
    pieces = capstone.choose_pieces(**{**INDEPENDENT_PIECES, "greedy_decode": None})
    report = _graded(capstone.assemble(_capstone_config(), pieces), pieces)
    assert report.failed_checks == ["heldout_exact_match"] and len(report.passed_checks) == 3, str(report)
    failure = report.failures[0]
    assert failure.example.startswith("source [") and failure.expected != failure.got and "length 1:" in failure.message


def test_a_model_without_masks_fails_causality_and_padding_invariance() -> None:
    pieces = capstone.choose_pieces().replace(attention=pitfalls.attention_unassigned_masked_fill)
    report = _graded(capstone.assemble(_capstone_config(), pieces), pieces)
    assert {"causality", "padding_invariance"} <= set(report.failed_checks), str(report)
    assert "Your Transformer (1 of 6 pieces yours)" in str(report).splitlines()[0]


def test_assembling_leaves_the_global_random_state_alone() -> None:
    before = torch.get_rng_state()
    capstone.assemble(_capstone_config(), capstone.choose_pieces(**INDEPENDENT_PIECES))
    assert torch.equal(torch.get_rng_state(), before)
