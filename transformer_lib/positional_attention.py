"""Positions inside self-attention (chapter 7): rotated queries and keys, or a bias on the scores.

Chapter 3 adds positions to the token embeddings. The methods here put them into self-attention
instead, and each is a subclass of chapter 1's :class:`~transformer_lib.attention.MultiHeadAttention`
that overrides only its seam, :meth:`~transformer_lib.attention.MultiHeadAttention.attend`:

- :class:`RotaryAttention` rotates queries and keys by their positions before the dot product
  (RoPE, with :class:`~transformer_lib.embeddings.RotaryEmbedding`);
- :class:`BiasedAttention` adds a bias that depends on the distance between query and key to the
  scores (ALiBi, or a learned relative bias: :class:`~transformer_lib.embeddings.ALiBiBias`,
  :class:`~transformer_lib.embeddings.RelativePositionBias`).

Positions come from the shapes alone: the ``L`` keys sit at positions ``0 .. L-1`` and the ``T``
queries are the last ``T`` of them. That holds in self-attention with or without chapter 6's
key/value cache (which hands ``attend`` every cached key and only the new queries), so neither
class needs to know whether a cache is in use. Which stack gets which is decided in one table,
:data:`transformer_lib.positions.POSITIONAL`.

Shapes: ``B`` batch, ``H`` heads, ``T`` queries, ``L`` keys, ``Dk``/``Dv`` head widths.
"""

from __future__ import annotations

from typing import Any

from torch import Tensor, nn

from .attention import CausalMask, MultiHeadAttention

__all__ = ["RotaryAttention", "BiasedAttention"]


def _query_start(q: Tensor, k: Tensor) -> int:
    """Position of the first query: the queries are the last ``T`` of the ``L`` positions."""
    start = k.size(2) - q.size(2)
    if start < 0:
        raise ValueError(
            f"positions inside attention are for self-attention: {q.size(2)} queries but only {k.size(2)} keys"
        )
    return start


class RotaryAttention(MultiHeadAttention):
    """Multi-head self-attention with rotary positions (RoPE, Su et al. 2021).

    Args: those of :class:`MultiHeadAttention`, and ``rotary``, a
    :class:`~transformer_lib.embeddings.RotaryEmbedding` for the heads' width ``d_k`` (one module
    can serve every layer: it holds only the angle tables).
    """

    def __init__(self, d_model: int, n_heads: int, dropout: float = 0.0, *, rotary: nn.Module, **kwargs: Any) -> None:
        super().__init__(d_model, n_heads, dropout, **kwargs)
        if getattr(rotary, "head_dim", self.d_k) != self.d_k:
            raise ValueError(f"rotary rotates vectors of width {rotary.head_dim}, but the heads have d_k={self.d_k}")
        self.rotary = rotary

    def attend(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | CausalMask | None, need_weights: bool,
               bias: Tensor | None = None) -> tuple[Tensor, Tensor | None]:
        start = _query_start(q, k)
        q = self.rotary(q, start)  # (B, H, T, Dk): query i turned by its position start + i
        k = self.rotary(k, 0)  # (B, H, L, Dk): key j turned by j
        return super().attend(q, k, v, mask, need_weights, bias=bias)


class BiasedAttention(MultiHeadAttention):
    """Multi-head self-attention with a position bias added to the scores (ALiBi, relative positions).

    Args: those of :class:`MultiHeadAttention`, and ``position_bias``, called as
    ``position_bias(n_queries, n_keys, query_start)``; it returns a float bias broadcastable to
    ``(B, H, T, L)``. One module can serve every layer (T5 shares its relative biases so).
    """

    def __init__(self, d_model: int, n_heads: int, dropout: float = 0.0, *, position_bias: nn.Module,
                 **kwargs: Any) -> None:
        super().__init__(d_model, n_heads, dropout, **kwargs)
        if getattr(position_bias, "n_heads", n_heads) != n_heads:
            raise ValueError(f"position_bias has {position_bias.n_heads} heads, but this layer has n_heads={n_heads}")
        self.position_bias = position_bias

    def attend(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | CausalMask | None, need_weights: bool,
               bias: Tensor | None = None) -> tuple[Tensor, Tensor | None]:
        position = self.position_bias(q.size(2), k.size(2), _query_start(q, k))  # (1, H, T, L)
        bias = position if bias is None else bias + position
        return super().attend(q, k, v, mask, need_weights, bias=bias)  # the bias joins the scores
