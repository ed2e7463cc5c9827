"""Where a model's positions come from, by name: one table, :data:`POSITIONAL`.

A scheme gives one stack of layers its positions: a module that adds them to the token
embeddings (chapter 3: ``"sinusoidal"``, ``"learned"``), or, for positions inside self-attention
(chapter 7: ``"rope"``, ``"alibi"``, ``"relative"``), a module the stack's self-attentions share and
the attention class that uses it. :mod:`transformer_lib.model` looks the scheme up by
``TransformerConfig.positional`` and asks it for each layer's self-attention, so a new scheme is one
class (its position module) and one line in the table.

Shapes: ``D`` model width, ``H`` heads, ``Dh`` head width (``D / H``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from types import MappingProxyType
from typing import Any

from torch import nn

from .attention import MultiHeadAttention
from .embeddings import (
    ALiBiBias,
    LearnedPositionalEmbedding,
    NoPositionalEncoding,
    RelativePositionBias,
    RotaryEmbedding,
    SinusoidalPositionalEncoding,
)
from .normalization import NORMS
from .positional_attention import BiasedAttention, RotaryAttention

__all__ = ["StackPositions", "attention_options", "added_to_input", "inside_attention", "POSITIONAL"]


@dataclass(frozen=True)
class StackPositions:
    """One stack's positions: ``input`` adds them to the embeddings (or adds nothing), and
    ``self_attention()`` makes one layer's self-attention (all of a stack's share one position module)."""

    input: nn.Module
    self_attention: Callable[[], nn.Module]


def attention_options(config: Any) -> dict[str, Any]:
    """The keyword arguments every attention of a model gets from its config (``qk_norm``: the
    config's kind of norm, made for each head's width, when ``config.qk_norm``)."""
    qk_norm = partial(NORMS[config.norm], eps=config.layer_norm_eps) if config.qk_norm else None
    return dict(d_model=config.d_model, n_heads=config.n_heads, dropout=config.attn_dropout, n_kv_heads=config.n_kv_heads,
                qk_norm=qk_norm)


def added_to_input(table: type[nn.Module]) -> Callable[[Any, bool], StackPositions]:
    """A scheme whose positions are added to the token embeddings by ``table(d_model, max_len)``;
    the self-attention is chapter 1's :class:`MultiHeadAttention`."""

    def scheme(config: Any, causal: bool) -> StackPositions:
        options = attention_options(config)
        return StackPositions(table(config.d_model, config.max_len), partial(MultiHeadAttention, **options))

    return scheme


def inside_attention(attention: type[MultiHeadAttention], keyword: str,
                     positions: Callable[[Any, bool], nn.Module]) -> Callable[[Any, bool], StackPositions]:
    """A scheme whose positions enter inside self-attention: ``positions(config, causal)`` makes
    one module for the whole stack (T5 shares its relative biases so), and every layer gets
    ``attention(..., keyword=that module)``; nothing is added to the embeddings."""

    def scheme(config: Any, causal: bool) -> StackPositions:
        options = {**attention_options(config), keyword: positions(config, causal)}
        return StackPositions(NoPositionalEncoding(), partial(attention, **options))

    return scheme


def _rotary(config: Any, causal: bool) -> RotaryEmbedding:
    return RotaryEmbedding(config.d_model // config.n_heads, config.max_len)


def _alibi(config: Any, causal: bool) -> ALiBiBias:
    return ALiBiBias(config.n_heads)


def _relative(config: Any, causal: bool) -> RelativePositionBias:
    # A causal stack learns no biases for future distances (its mask blocks them anyway).
    return RelativePositionBias(config.n_heads, config.relative_max_distance, bidirectional=not causal)


# Added to the input embeddings (chapter 3): "sinusoidal" (the paper), "learned". Inside
# self-attention (chapter 7): "rope" (rotated queries and keys, Su et al. 2021), "alibi" (a
# distance penalty on the scores, Press et al. 2022), "relative" (a learned score bias per
# clipped distance, Shaw et al. 2018 / T5).
POSITIONAL: Mapping[str, Callable[[Any, bool], StackPositions]] = MappingProxyType({
    "sinusoidal": added_to_input(SinusoidalPositionalEncoding),
    "learned": added_to_input(LearnedPositionalEmbedding),
    "rope": inside_attention(RotaryAttention, "rotary", _rotary),
    "alibi": inside_attention(BiasedAttention, "position_bias", _alibi),
    "relative": inside_attention(BiasedAttention, "position_bias", _relative),
})
