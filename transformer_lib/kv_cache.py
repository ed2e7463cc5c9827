"""The key/value cache (chapter 6): decode one new token per step without redoing the old ones.

Decoding step ``t`` needs the decoder's output at the newest position only. Under the causal mask
no position ever sees a later one, so the keys and values of positions ``0 .. t-1`` are the same
at every step: compute them once and keep them. In cross-attention the keys and values come from
the encoder memory, which does not change at all: compute them at the first step.

Chapter 1's :class:`~transformer_lib.attention.MultiHeadAttention` knows nothing of this. Inside
``with kv_cache(model) as cache:`` each decoder layer's attention is wrapped by a module that
keeps its keys and values (:class:`CachedSelfAttention`, :class:`CachedCrossAttention`); the
wrappers call the layer's own projections (``project_query``, ``project_key_value``) and its
``attend``, so they work for every attention of the book (positions inside attention included)
and hold no weights of their own.
On leaving the block the model has its own modules back.

Shapes: ``B`` batch, ``H`` heads, ``T_new`` new positions, ``L`` positions seen so far,
``Dk``/``Dv`` head widths.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, NamedTuple, cast

import torch
from torch import Tensor, nn

from .attention import MultiHeadAttention
from .config import TransformerConfig
from .masking import causal_mask
from .model import DecoderOnlyTransformer, Transformer

__all__ = ["CachedSelfAttention", "CachedCrossAttention", "KVCache", "kv_cache", "CacheBytes", "kv_cache_bytes_per_token"]


class CachedSelfAttention(nn.Module):
    """Self-attention that appends each call's keys and values to those of earlier calls.

    ``query``/``key``/``value`` hold only the new positions; the queries attend to every position
    seen so far, so ``mask`` (if any) covers ``(T_new, L)``.
    """

    def __init__(self, attention: MultiHeadAttention) -> None:
        super().__init__()
        self.attention = attention
        self.key: Tensor | None = None  # (B, H, L, Dk)
        self.value: Tensor | None = None  # (B, H, L, Dv)

    @property
    def length(self) -> int:
        """How many positions are cached (0 before the first call)."""
        return 0 if self.key is None else self.key.size(2)

    def forward(self, query: Tensor, key: Tensor, value: Tensor, mask: Tensor | None = None,
                need_weights: bool = False) -> tuple[Tensor, Tensor | None]:
        a = self.attention
        q = a.project_query(query)  # (B, H, T_new, Dk)
        k, v = a.project_key_value(key, value)  # (B, H, T_new, Dk), (B, H, T_new, Dv)
        if self.key is not None and self.value is not None:
            k = torch.cat([self.key, k], dim=2)  # (B, H, L, Dk): the old positions' keys, then the new
            v = torch.cat([self.value, v], dim=2)  # (B, H, L, Dv)
        self.key, self.value = k, v
        out, attn_weights = a.attend(q, k, v, mask, need_weights)  # (B, H, T_new, Dv)
        return a.out_proj(a.merge_heads(out)), attn_weights  # (B, T_new, d_out)

    def reorder(self, rows: Tensor) -> None:
        """Keep batch rows ``rows`` (beam search continues each hypothesis from its parent's)."""
        if self.key is not None and self.value is not None:
            self.key, self.value = self.key.index_select(0, rows), self.value.index_select(0, rows)


class CachedCrossAttention(CachedSelfAttention):
    """Cross-attention that projects the encoder memory to keys and values once, at the first call;
    later calls read them from the cache (their ``key``/``value`` arguments are not used)."""

    def forward(self, query: Tensor, key: Tensor, value: Tensor, mask: Tensor | None = None,
                need_weights: bool = False) -> tuple[Tensor, Tensor | None]:
        a = self.attention
        if self.key is None or self.value is None:
            self.key, self.value = a.project_key_value(key, value)  # (B, H, S, Dk), (B, H, S, Dv)
        q = a.project_query(query)  # (B, H, T_new, Dk)
        out, attn_weights = a.attend(q, self.key, self.value, mask, need_weights)  # (B, H, T_new, Dv)
        return a.out_proj(a.merge_heads(out)), attn_weights  # (B, T_new, d_out)


class KVCache:
    """The cached attentions of one model's decoder, as :func:`kv_cache` yields them."""

    def __init__(self, attentions: list[CachedSelfAttention]) -> None:
        self.attentions = attentions

    @property
    def length(self) -> int:
        """How many target positions have been decoded so far (the next position's index)."""
        growing = [a for a in self.attentions if not isinstance(a, CachedCrossAttention)]
        return growing[0].length if growing else 0

    def reorder(self, rows: Tensor) -> None:
        """Keep batch rows ``rows`` in every layer (beam search)."""
        for attention in self.attentions:
            attention.reorder(rows)

    def nbytes(self, cross: bool = False) -> int:
        """Bytes the cached keys and values hold now: of the self-attentions (growing with every
        decoded token), or with ``cross=True`` of the cross-attentions (the encoder memory's)."""
        held = [a for a in self.attentions if isinstance(a, CachedCrossAttention) == cross and a.key is not None]
        return sum(t.numel() * t.element_size() for a in held for t in (a.key, a.value) if t is not None)


@contextmanager
def kv_cache(model: nn.Module) -> Iterator[KVCache]:
    """Within the block, the layers of ``model.decoder_layers`` keep keys and values between calls.

    Feed the model only the positions it has not seen (``model.decode(new_tokens, ..., start=
    cache.length)``); the model's own attention modules are back when the block ends, even on an
    error. ``model`` is a :class:`~transformer_lib.model.Transformer` or
    :class:`~transformer_lib.model.DecoderOnlyTransformer` (anything whose ``decoder_layers`` have
    ``self_attn`` and perhaps ``cross_attn``).
    """
    layers = cast(nn.ModuleList, model.decoder_layers)
    if any(isinstance(getattr(layer, "self_attn", None), CachedSelfAttention) for layer in layers):
        raise RuntimeError("this model is already inside kv_cache(); one cache per model at a time")
    originals = [(layer.self_attn, getattr(layer, "cross_attn", None)) for layer in layers]
    attentions: list[CachedSelfAttention] = []
    for layer, (self_attn, cross_attn) in zip(layers, originals):
        layer.self_attn = CachedSelfAttention(cast(MultiHeadAttention, self_attn))
        attentions.append(layer.self_attn)
        if cross_attn is not None:
            layer.cross_attn = CachedCrossAttention(cross_attn)
            attentions.append(layer.cross_attn)
    try:
        yield KVCache(attentions)
    finally:
        for layer, (self_attn, cross_attn) in zip(layers, originals):
            layer.self_attn = self_attn
            if cross_attn is not None:
                layer.cross_attn = cross_attn


class CacheBytes(NamedTuple):
    """What a key/value cache holds per token of one sequence, in bytes."""

    per_target_token: int  # the self-attentions' keys and values: grows with every generated token
    per_source_token: int  # the cross-attentions' (the encoder memory's); 0 for a decoder-only model


def kv_cache_bytes_per_token(config: TransformerConfig, dtype: torch.dtype = torch.float32) -> CacheBytes:
    """Measure the key/value cache of the model ``config`` describes, per token, in ``dtype``.

    A model of this config (with a two-token vocabulary, which the cache does not depend on) decodes
    2 target tokens over 3 source tokens inside :func:`kv_cache`, and the cached tensors' bytes are
    divided by those counts. That is ``2 * n_decoder_layers * n_kv_heads * Dh * bytes`` (keys and
    values, each layer, each key/value head): grouped-query attention divides it by
    ``n_heads / n_kv_heads``, multi-query attention (``n_kv_heads=1``) by ``n_heads`` (chapter 7).

    Example:
        >>> tiny = TransformerConfig.from_preset("tiny", src_vocab_size=9, tgt_vocab_size=9)
        >>> kv_cache_bytes_per_token(tiny), kv_cache_bytes_per_token(dataclasses.replace(tiny, n_kv_heads=1))
        (CacheBytes(per_target_token=1024, per_source_token=1024), CacheBytes(per_target_token=256, per_source_token=256))
    """
    n_target, n_source, vocab = 2, 3, config.pad_id + 2
    small = dataclasses.replace(config, src_vocab_size=vocab, tgt_vocab_size=vocab, dropout=0.0, attn_dropout=0.0)
    decoder_only = config.n_encoder_layers == 0
    model: Any = (DecoderOnlyTransformer(small) if decoder_only else Transformer(small)).to(dtype).eval()
    target = torch.full((1, n_target), vocab - 1)  # (1, T)
    with torch.no_grad(), kv_cache(model) as cache:
        if decoder_only:
            model.decode(target, tgt_mask=causal_mask(n_target))
        else:
            memory = model.encode(torch.full((1, n_source), vocab - 1))  # (1, S, D)
            model.decode(target, memory, tgt_mask=causal_mask(n_target))
        return CacheBytes(cache.nbytes() // n_target, cache.nbytes(cross=True) // n_source)
