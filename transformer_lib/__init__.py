"""transformer_lib: the code of "The Tested Transformer".

One subject per module, in the order the book introduces them, with the chapters that use it (the
README's table says what each holds and names its tests):

    attention             (multi-head) attention      chapter 1 (linear: 7)
    masking               masks (True = may attend)   chapter 2 (window: 7)
    token_ids             token-id checks             chapter 2, 3
    vocab                 word tokenizers, Vocab      chapter 3
    subword               BPE subwords                chapter 3
    embeddings            embeddings and positions    chapter 3 (RoPE...: 7)
    dropout               dropout, faster on CPU      chapter 4
    blocks                layers and stacks           chapter 4
    model                 the configured models       chapter 3, 4 (decoder-only: 7)
    reference             torch.nn twins for checks   chapter 1, 4
    checks                property checks             chapter 1, 2
    multi30k              the corpus files            chapter 3, 5
    prepared              the corpus as ids           chapter 5
    batching              batches and bucketing       chapter 5
    toy_tasks             copy and reverse            chapter 5, 6, 7
    training              loss, schedules, loop       chapter 5
    checkpoint            checkpoint files            chapter 5
    distributed           several processes           chapter 5
    device                CPU or GPU                  every chapter
    train                 training CLI                chapter 5
    kv_cache              key/value cache             chapter 6
    decoding              greedy, beam, sampling      chapter 6 (prompts: 7)
    evaluation            BLEU, chrF, WER, CER        chapter 6
    translate             translation and its CLI     chapter 6
    positional_attention  positions inside attention  chapter 7
    language_models       next-token LM, perplexity   chapter 7
    masked_lm             masked tokens, encoder-only chapter 7

Later chapters add to earlier code without changing it: chapter 6's cache wraps chapter 1's
attention (``kv_cache``), chapter 7's positions subclass it (``positional_attention``).

Import from the modules (``from transformer_lib.attention import MultiHeadAttention``) or from here.

What exists for the book and not for the model (figures, the chart renderer, ``show_source``, the
experiment-size switch, committed results, the memory probe) is in :mod:`transformer_lib.book`,
which nothing here imports (``tests/test_layout.py``).
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
