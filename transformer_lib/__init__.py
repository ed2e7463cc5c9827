"""transformer_lib: the code of "The Tested Transformer", one module per chapter.

    masking     the one mask convention (True = may attend)          chapter 2
    attention   scaled dot-product and multi-head attention          chapter 1
    embeddings  token embeddings and positional encodings            chapter 3
    subword     one joint BPE vocabulary: rare words spelled in pieces chapter 3
    blocks      feed-forward, residual, encoder/decoder layers       chapter 4
    model       the configured encoder-decoder Transformer           chapter 4

Beyond the 2017 model (chapter 7): RoPE, ALiBi and relative position biases (embeddings), a
decoder-only model (model), sliding-window masks (masking) and linear attention (attention).

Import from the modules (``from transformer_lib.attention import MultiHeadAttention``) or from here.

What exists for the book and not for the model (figures, the chart renderer, ``show_source``, the
experiment-size switch, committed results) is in :mod:`transformer_lib.book`, which nothing here imports.
"""

from .attention import MultiHeadAttention, linear_attention, scaled_dot_product_attention
from .blocks import Decoder, DecoderLayer, Encoder, EncoderLayer, FeedForward, Residual
from .embeddings import (
    ALiBiBias,
    LearnedPositionalEmbedding,
    RelativePositionBias,
    RotaryEmbedding,
    SinusoidalPositionalEncoding,
    TokenEmbedding,
    alibi_slopes,
    sinusoidal_table,
)
from .masking import causal_mask, combine_masks, padding_mask, sliding_window_mask, target_mask, to_torch_blocked
from .model import PRESETS, DecoderOnlyTransformer, Transformer, TransformerConfig, count_parameters, init_parameters

__version__ = "0.1.0"

__all__ = [
    "MultiHeadAttention", "linear_attention", "scaled_dot_product_attention",
    "Decoder", "DecoderLayer", "Encoder", "EncoderLayer", "FeedForward", "Residual",
    "ALiBiBias", "LearnedPositionalEmbedding", "RelativePositionBias", "RotaryEmbedding",
    "SinusoidalPositionalEncoding", "TokenEmbedding", "alibi_slopes", "sinusoidal_table",
    "causal_mask", "combine_masks", "padding_mask", "sliding_window_mask", "target_mask", "to_torch_blocked",
    "PRESETS", "DecoderOnlyTransformer", "Transformer", "TransformerConfig", "count_parameters", "init_parameters",
]
