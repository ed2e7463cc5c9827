"""PyTorch's own modules carrying our weights, to check our code against a reference.

Each function builds the ``torch.nn`` counterpart of one of our modules and copies the weights
across, so both compute the same function if (and only if) our implementation is right:

    ours                         reference
    MultiHeadAttention           nn.MultiheadAttention
    EncoderLayer / DecoderLayer  nn.TransformerEncoderLayer / nn.TransformerDecoderLayer
    Transformer                  TorchTransformer: our embeddings + nn.Transformer + our output layer

The reference modules use ``batch_first=True`` and PyTorch's mask polarity (``True`` = blocked),
converted with :func:`transformer_lib.masking.to_torch_blocked`. Compare in ``eval()`` mode
(dropout off) and in fp32. ``nn.Transformer``'s inference fast path (nested tensors) zeroes padded
positions; disable it with ``torch.backends.mha.set_fastpath_enabled(False)`` for exact comparisons.

Shapes: B batch, S source length, T target length, D model width, V vocabulary.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import torch
from torch import Tensor, nn

from .attention import MultiHeadAttention
from .blocks import Decoder, DecoderLayer, Encoder, EncoderLayer, FeedForward
from .masking import causal_mask, padding_mask, to_torch_blocked
from .model import Transformer

__all__ = [
    "torch_multihead_attention",
    "torch_encoder_layer",
    "torch_decoder_layer",
    "TorchTransformer",
]


def _check_plain_heads(ours: MultiHeadAttention) -> None:
    """nn.MultiheadAttention has one key/value head per query head and nothing between the projections
    and the scores (chapter 7's grouped-query attention and QK-norm have no counterpart)."""
    if not isinstance(ours.query_norm, nn.Identity):
        raise ValueError("nn.MultiheadAttention does not normalise queries and keys; this layer uses QK-norm")
    if ours.n_kv_heads != ours.n_heads:
        raise ValueError(f"nn.MultiheadAttention has no shared key/value heads; this layer has n_kv_heads={ours.n_kv_heads}")


@torch.no_grad()
def _copy_attention(ours: MultiHeadAttention, theirs: nn.MultiheadAttention) -> None:
    _check_plain_heads(ours)
    # Both store W_Q, W_K, W_V stacked in in_proj_weight when the inputs are equally wide (else one
    # matrix each, under the same names), and their biases stacked in in_proj_bias.
    for name in ("in_proj_weight", "q_proj_weight", "k_proj_weight", "v_proj_weight", "in_proj_bias"):
        if getattr(theirs, name) is not None:
            getattr(theirs, name).copy_(getattr(ours, name))
    theirs.out_proj.weight.copy_(ours.out_proj.weight)
    if theirs.out_proj.bias is not None:
        theirs.out_proj.bias.copy_(ours.out_proj.bias)


def torch_multihead_attention(ours: MultiHeadAttention) -> nn.MultiheadAttention:
    """An ``nn.MultiheadAttention`` with our weights.

    PyTorch's module projects queries, keys and values to ``d_model`` in total and back, so it
    exists only for ``n_heads * d_k == n_heads * d_v == d_out == d_model``.
    """
    H = ours.n_heads
    if type(ours) is not MultiHeadAttention:  # a subclass puts positions inside (chapter 7)
        raise ValueError("nn.MultiheadAttention has no rotary or score-bias positions (chapter 7); this layer uses them")
    _check_plain_heads(ours)
    if not (H * ours.d_k == H * ours.d_v == ours.d_out == ours.d_model):
        raise ValueError(
            f"nn.MultiheadAttention needs n_heads*d_k == n_heads*d_v == d_out == d_model, got "
            f"{H}*{ours.d_k}, {H}*{ours.d_v}, {ours.d_out}, {ours.d_model}"
        )
    theirs = nn.MultiheadAttention(
        ours.d_model, H, dropout=ours.dropout, bias=ours.in_proj_bias is not None,
        kdim=ours.kdim, vdim=ours.vdim, batch_first=True,
    )
    _copy_attention(ours, theirs)
    return theirs


def _layer_options(layer: EncoderLayer | DecoderLayer) -> dict:
    ff = layer.feed_forward
    residual = layer.ff_residual
    # nn.TransformerEncoderLayer has LayerNorm and a two-matrix ReLU/GELU feed-forward only.
    if type(ff) is not FeedForward or not isinstance(ff.activation, (nn.ReLU, nn.GELU)):
        raise ValueError(f"nn.Transformer layers have a ReLU or GELU feed-forward, not {ff!r}")
    if type(residual.norm) is not nn.LayerNorm:
        raise ValueError(f"nn.Transformer layers use LayerNorm, not {type(residual.norm).__name__}")
    return dict(
        d_model=layer.self_attn.d_model,
        nhead=layer.self_attn.n_heads,
        dim_feedforward=ff.linear1.out_features,
        dropout=residual.dropout.p,
        activation="gelu" if isinstance(ff.activation, nn.GELU) else "relu",
        layer_norm_eps=residual.norm.eps,
        batch_first=True,
        norm_first=residual.norm_first,
    )


@torch.no_grad()
def _copy_feed_forward_and_norms(ours: Any, theirs: Any, norms: Sequence[nn.Module]) -> None:
    theirs.linear1.load_state_dict(ours.feed_forward.linear1.state_dict())
    theirs.linear2.load_state_dict(ours.feed_forward.linear2.state_dict())
    for target, source in zip((theirs.norm1, theirs.norm2, getattr(theirs, "norm3", None)), norms):
        target.load_state_dict(source.state_dict())


def torch_encoder_layer(ours: EncoderLayer) -> nn.TransformerEncoderLayer:
    """An ``nn.TransformerEncoderLayer`` (batch_first) with our weights and our LN placement."""
    theirs = nn.TransformerEncoderLayer(**_layer_options(ours))
    _copy_attention(cast(MultiHeadAttention, ours.self_attn), theirs.self_attn)
    _copy_feed_forward_and_norms(ours, theirs, [ours.attn_residual.norm, ours.ff_residual.norm])
    return theirs


def torch_decoder_layer(ours: DecoderLayer) -> nn.TransformerDecoderLayer:
    """An ``nn.TransformerDecoderLayer`` (batch_first) with our weights and our LN placement."""
    theirs = nn.TransformerDecoderLayer(**_layer_options(ours))
    _copy_attention(cast(MultiHeadAttention, ours.self_attn), theirs.self_attn)
    _copy_attention(cast(MultiHeadAttention, ours.cross_attn), theirs.multihead_attn)
    norms = [ours.self_attn_residual.norm, ours.cross_attn_residual.norm, ours.ff_residual.norm]
    _copy_feed_forward_and_norms(ours, theirs, norms)
    return theirs


def _copied_norm(norm: Any) -> nn.LayerNorm | None:
    if norm is None:
        return None
    copy = nn.LayerNorm(norm.normalized_shape, eps=norm.eps)
    copy.load_state_dict(norm.state_dict())
    return copy


def _torch_encoder(ours: Encoder) -> nn.TransformerEncoder:
    """Our encoder stack as ``nn.TransformerEncoder``, layer by layer, with our final norm (if any)."""
    layers = [torch_encoder_layer(cast(EncoderLayer, layer)) for layer in ours.layers]
    encoder = nn.TransformerEncoder(layers[0], num_layers=1, enable_nested_tensor=False)
    encoder.layers, encoder.num_layers = nn.ModuleList(layers), len(layers)
    # nn.Transformer would add final LayerNorms unconditionally; the Post-LN model has none.
    encoder.norm = _copied_norm(ours.final_norm)
    return encoder


def _torch_decoder(ours: Decoder) -> nn.TransformerDecoder:
    """Our decoder stack as ``nn.TransformerDecoder``, layer by layer, with our final norm (if any)."""
    layers = [torch_decoder_layer(cast(DecoderLayer, layer)) for layer in ours.layers]
    decoder = nn.TransformerDecoder(layers[0], num_layers=1)
    decoder.layers, decoder.num_layers = nn.ModuleList(layers), len(layers)
    decoder.norm = _copied_norm(ours.final_norm)
    return decoder


class TorchTransformer(nn.Module):
    """``nn.Transformer`` between our embeddings and our output layer, with our weights.

    The embeddings, positional encodings and output projection are *our* modules (PyTorch has no
    counterpart); everything between them is PyTorch's. ``nn.Transformer`` always ends its encoder
    and decoder with a LayerNorm; for a Post-LN model (the paper's), which has none, they are removed.

    Shape:
        src ``(B, S)``, tgt ``(B, T)`` token ids -> logits ``(B, T, V_tgt)``. Masks are built from
        ``pad_id`` (padding) and causality, as :meth:`Transformer.masks_for` does.
    """

    def __init__(self, ours: Transformer) -> None:
        super().__init__()
        if not isinstance(ours, Transformer):
            raise TypeError(f"TorchTransformer mirrors an encoder-decoder Transformer, got {type(ours).__name__}")
        c = ours.config
        if c.positional not in ("sinusoidal", "learned"):
            # nn.Transformer's attention has no hook for rotations or score biases.
            raise ValueError(
                f"nn.Transformer cannot represent positional={c.positional!r} (positions inside attention); "
                "only models with 'sinusoidal' or 'learned' input positions have a PyTorch counterpart"
            )
        self.pad_id = c.pad_id
        self.src_embed, self.tgt_embed = ours.src_embed, ours.tgt_embed
        self.src_positions, self.tgt_positions = ours.src_positions, ours.tgt_positions
        self.output_layer = ours.output_layer
        encoder, decoder = _torch_encoder(ours.encoder), _torch_decoder(ours.decoder)
        # nn.Transformer re-initialises every matrix it holds when it is constructed (custom stacks
        # included), so it is built empty and our converted stacks are put in afterwards.
        self.transformer = nn.Transformer(
            d_model=c.d_model, nhead=c.n_heads, num_encoder_layers=0, num_decoder_layers=0,
            dim_feedforward=1, batch_first=True,
        )
        self.transformer.encoder, self.transformer.decoder = encoder, decoder

    def forward(self, src: Tensor, tgt: Tensor) -> Tensor:
        src_blocked = to_torch_blocked(padding_mask(src, self.pad_id)[:, 0, 0])  # (B, S), True = pad
        tgt_blocked = to_torch_blocked(padding_mask(tgt, self.pad_id)[:, 0, 0])  # (B, T)
        future_blocked = to_torch_blocked(causal_mask(tgt.size(1), device=tgt.device)[0, 0])  # (T, T)
        hidden = self.transformer(
            self.src_positions(self.src_embed(src)),
            self.tgt_positions(self.tgt_embed(tgt)),
            tgt_mask=future_blocked,
            src_key_padding_mask=src_blocked,
            tgt_key_padding_mask=tgt_blocked,
            memory_key_padding_mask=src_blocked,
        )  # (B, T, D)
        return self.output_layer(hidden)  # (B, T, V_tgt)
