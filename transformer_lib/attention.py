"""Scaled dot-product attention and multi-head attention.

Shapes:

    B   batch size              H   number of heads
    T   number of queries       L   number of keys/values (L = T in self-attention, S in cross-attention)
    Dk  query/key width         Dv  value width (per head inside MultiHeadAttention)

Masks are boolean with ``True`` = "may attend" (see :mod:`transformer_lib.masking`) and must
broadcast to the scores ``(..., T, L)``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .masking import check_mask

__all__ = ["scaled_dot_product_attention", "MultiHeadAttention", "KVCache"]


def scaled_dot_product_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    mask: Tensor | None = None,
    dropout_p: float = 0.0,
) -> tuple[Tensor, Tensor]:
    r"""Attention written out: :math:`\mathrm{softmax}(QK^\top/\sqrt{d_k})\,V`.

    Args:
        query: ``(..., T, Dk)``.
        key: ``(..., L, Dk)``.
        value: ``(..., L, Dv)``.
        mask: optional boolean mask, ``True`` = may attend, broadcastable to ``(..., T, L)``.
        dropout_p: dropout probability applied to the attention weights. Pass ``0.0`` outside
            training (``MultiHeadAttention`` does this for you).

    Returns:
        ``(output, attn_weights)`` with shapes ``(..., T, Dv)`` and ``(..., T, L)``. The weights are
        the ones actually used, i.e. after dropout (so in training their rows need not sum to 1).
        A query whose keys are *all* masked gets all-zero weights and a zero output, not NaN.
    """
    if query.size(-1) != key.size(-1):
        raise ValueError(
            f"query width {query.size(-1)} must equal key width {key.size(-1)} (both are Dk)"
        )
    if key.size(-2) != value.size(-2):
        raise ValueError(f"key has {key.size(-2)} positions but value has {value.size(-2)}; they must match")
    d_k = query.size(-1)
    scores = query @ key.transpose(-2, -1) / math.sqrt(d_k)  # (..., T, L)
    if mask is not None:
        check_mask(mask, scores.shape)
        # -inf, not a large finite number: exp(-inf) is exactly 0 in every dtype, so a masked key
        # gets exactly zero weight (-1e9 overflows fp16, and a finite fill can leak; see chapter 2).
        scores = scores.masked_fill(~mask, float("-inf"))
    attn_weights = torch.softmax(scores, dim=-1)  # (..., T, L)
    if mask is not None:
        # A row with every key masked is softmax(-inf, ..., -inf) = NaN; define it as all zeros.
        attn_weights = attn_weights.masked_fill(~mask, 0.0)
    if dropout_p > 0.0:
        attn_weights = F.dropout(attn_weights, p=dropout_p, training=True)
    return attn_weights @ value, attn_weights  # (..., T, Dv), (..., T, L)


@dataclass
class KVCache:
    """Keys and values one attention module has already computed, for incremental decoding.

    ``growing=True`` is for decoder self-attention: each call appends the new positions' keys and
    values, so a step only projects the newest token. ``growing=False`` is for cross-attention:
    keys and values come from the encoder memory, which does not change, so they are computed on
    the first call and reused afterwards.

    Shapes: ``key`` ``(B, H, L, Dk)``, ``value`` ``(B, H, L, Dv)``.
    """

    growing: bool
    key: Tensor | None = None
    value: Tensor | None = None

    @property
    def length(self) -> int:
        """Number of cached positions ``L`` (0 when empty)."""
        return 0 if self.key is None else self.key.size(2)

    def update(self, key: Tensor, value: Tensor) -> tuple[Tensor, Tensor]:
        """Store new keys/values and return everything the queries may attend to."""
        if self.growing and self.key is not None:
            key = torch.cat([self.key, key], dim=2)  # (B, H, L_old + L_new, Dk)
            value = torch.cat([self.value, value], dim=2)  # (B, H, L_old + L_new, Dv)
        self.key, self.value = key, value
        return key, value

    def reorder(self, batch_indices: Tensor) -> None:
        """Keep rows ``batch_indices`` of the batch (beam search reorders hypotheses each step)."""
        if self.key is not None:
            self.key = self.key.index_select(0, batch_indices)
            self.value = self.value.index_select(0, batch_indices)


class MultiHeadAttention(nn.Module):
    r"""Multi-head attention for self- and cross-attention.

    Each of the ``H`` heads projects the inputs to its own queries/keys (width ``Dk``) and values
    (width ``Dv``), attends, and the heads' outputs are concatenated and projected to ``d_out``:

    .. math:: \mathrm{MHA}(Q, K, V) = \mathrm{Concat}(\mathrm{head}_1, \dots, \mathrm{head}_H)\,W^O,
              \quad \mathrm{head}_i = \mathrm{Attention}(Q W_i^Q, K W_i^K, V W_i^V)

    Args:
        d_model: width of the query input (and the default for everything else).
        n_heads: number of heads ``H``.
        dropout: dropout on the attention weights, active only in training mode.
        d_k: per-head query/key width ``Dk`` (default ``d_model // n_heads``).
        d_v: per-head value width ``Dv`` (default ``d_k``).
        d_out: output width (default ``d_model``).
        kdim: width of the key input (default ``d_model``); differs in cross-attention between
            models of different widths.
        vdim: width of the value input (default ``kdim``).
        bias: whether the four projections have biases.

    Shape:
        - query: ``(B, T, d_model)``; key: ``(B, L, kdim)``; value: ``(B, L, vdim)``
        - mask: boolean, broadcastable to ``(B, H, T, L)``, ``True`` = may attend
        - output: ``(B, T, d_out)``; attention weights (if requested): ``(B, H, T, L)``

    Without ``need_weights`` the computation goes through the fused
    ``F.scaled_dot_product_attention`` (same numbers, less memory); with it, through the explicit
    :func:`scaled_dot_product_attention`, which can return the weights.

    Example:
        >>> mha = MultiHeadAttention(d_model=6, n_heads=2, d_k=4, d_v=4)
        >>> x = torch.randn(64, 3, 6)
        >>> out, weights = mha(x, x, x, need_weights=True)
        >>> out.shape, weights.shape
        (torch.Size([64, 3, 6]), torch.Size([64, 2, 3, 3]))
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        dropout: float = 0.0,
        *,
        d_k: int | None = None,
        d_v: int | None = None,
        d_out: int | None = None,
        kdim: int | None = None,
        vdim: int | None = None,
        bias: bool = True,
    ) -> None:
        super().__init__()
        if n_heads < 1:
            raise ValueError(f"n_heads must be at least 1, got {n_heads}")
        if d_k is None and d_model % n_heads != 0:
            raise ValueError(
                f"d_model={d_model} is not divisible by n_heads={n_heads}; choose a d_model that is a "
                f"multiple of {n_heads}, or pass d_k explicitly"
            )
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {dropout}")
        self.d_model = d_model
        self.n_heads = n_heads
        self.d_k = d_model // n_heads if d_k is None else d_k
        self.d_v = self.d_k if d_v is None else d_v
        self.d_out = d_model if d_out is None else d_out
        self.kdim = d_model if kdim is None else kdim
        self.vdim = self.kdim if vdim is None else vdim
        self.dropout = dropout
        self.q_proj = nn.Linear(d_model, n_heads * self.d_k, bias=bias)
        self.k_proj = nn.Linear(self.kdim, n_heads * self.d_k, bias=bias)
        self.v_proj = nn.Linear(self.vdim, n_heads * self.d_v, bias=bias)
        self.out_proj = nn.Linear(n_heads * self.d_v, self.d_out, bias=bias)

    def split_heads(self, x: Tensor, width: int) -> Tensor:
        """``(B, L, H * width)`` -> ``(B, H, L, width)``."""
        B, L, _ = x.shape
        return x.view(B, L, self.n_heads, width).transpose(1, 2)  # (B, H, L, width)

    def merge_heads(self, x: Tensor) -> Tensor:
        """``(B, H, T, Dv)`` -> ``(B, T, H * Dv)``."""
        B, H, T, Dv = x.shape
        return x.transpose(1, 2).reshape(B, T, H * Dv)  # (B, T, H*Dv)

    def _check_inputs(self, query: Tensor, key: Tensor, value: Tensor) -> None:
        for name, x, width in (("query", query, self.d_model), ("key", key, self.kdim), ("value", value, self.vdim)):
            if x.dim() != 3:
                raise ValueError(f"{name} must have shape (B, length, width), got {tuple(x.shape)}")
            if x.size(-1) != width:
                raise ValueError(f"{name} has width {x.size(-1)} but this layer expects {width}")
        if key.shape[:2] != value.shape[:2]:
            raise ValueError(f"key {tuple(key.shape)} and value {tuple(value.shape)} differ in batch or length")
        if query.size(0) != key.size(0):
            raise ValueError(f"query batch {query.size(0)} differs from key batch {key.size(0)}")

    def forward(
        self,
        query: Tensor,
        key: Tensor,
        value: Tensor,
        mask: Tensor | None = None,
        need_weights: bool = False,
        cache: KVCache | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        """Attend from ``query`` to ``key``/``value``.

        Args:
            query, key, value: see the class docstring for shapes.
            mask: boolean mask broadcastable to ``(B, H, T, L)``; ``True`` = may attend.
            need_weights: also return the attention weights ``(B, H, T, L)`` (per head, not
                averaged as ``nn.MultiheadAttention`` does by default).
            cache: for incremental decoding; see :class:`KVCache`. With a non-growing cache that is
                already filled, ``key`` and ``value`` are not used.

        Returns:
            ``(output, attn_weights)``; ``attn_weights`` is ``None`` unless ``need_weights``.
        """
        reuse_cached = cache is not None and not cache.growing and cache.key is not None
        if not reuse_cached:
            self._check_inputs(query, key, value)
        elif query.size(-1) != self.d_model:
            raise ValueError(f"query has width {query.size(-1)} but this layer expects {self.d_model}")
        B, T, _ = query.shape
        q = self.split_heads(self.q_proj(query), self.d_k)  # (B, H, T, Dk)
        if reuse_cached:
            k, v = cache.key, cache.value  # (B, H, L, Dk), (B, H, L, Dv)
        else:
            k = self.split_heads(self.k_proj(key), self.d_k)  # (B, H, L, Dk)
            v = self.split_heads(self.v_proj(value), self.d_v)  # (B, H, L, Dv)
            if cache is not None:
                k, v = cache.update(k, v)  # (B, H, L_cached + L, ...)
        dropout_p = self.dropout if self.training else 0.0

        if need_weights:
            out, attn_weights = scaled_dot_product_attention(q, k, v, mask, dropout_p)  # (B, H, T, Dv)
        else:
            attn_weights = None
            if mask is not None:
                check_mask(mask, (B, self.n_heads, T, k.size(2)))
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p)  # (B, H, T, Dv)
            if mask is not None:
                # Older PyTorch releases return NaN for a query with no visible key; make it 0,
                # as the explicit path does.
                out = out.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)
        return self.out_proj(self.merge_heads(out)), attn_weights  # (B, T, d_out)
