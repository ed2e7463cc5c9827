"""transformer_lib: the code of "The Tested Transformer".

Three layers, each importing only the ones below it: the core (the modules directly in this
package), the applications (:mod:`transformer_lib.cli`: the train and translate command lines and
everything about runs), and the book's support (:mod:`transformer_lib.book`). The core holds one
subject per module, in the order the book introduces them, with the chapters that use it (the
site's library page, book/api.md, says what each holds and names its tests):

    validation            checks where input enters   every chapter
    device                CPU or GPU, autocast        every chapter
    attention             (multi-head) attention      chapter 1 (grouped-query: 7)
    efficient_attention   attention in linear time    chapter 7
    masking               masks (True = may attend)   chapter 2 (window: 7)
    properties            causality, padding, ...     chapter 1, 2
    vocab                 Vocab, the Tokenizer API    chapter 3
    subword               BPE subwords                chapter 3
    tokenizers            words, symbols, all kinds   chapter 3
    embeddings            embeddings and positions    chapter 3 (RoPE...: 7)
    normalization         LayerNorm, RMSNorm          chapter 4 (RMSNorm, QK-norm: 7)
    positional_attention  positions inside attention  chapter 7
    positions             the positional schemes      chapter 3, 7
    dropout               dropout, faster on CPU      chapter 4
    blocks                layers and stacks           chapter 4
    config                TransformerConfig, presets  chapter 3, 4
    model                 assembly and the models     chapter 3, 4 (decoder-only: 7)
    reference             torch.nn twins for checks   chapter 1, 4
    multi30k              the corpus files            chapter 3, 5
    batching              batches and bucketing       chapter 5
    prepared              the corpus as ids           chapter 5
    toy_tasks             copy and reverse            chapter 5, 6, 7
    distributed           several processes           chapter 5
    losses                label-smoothed loss         chapter 5
    schedules             AdamW and its lr schedules  chapter 5
    metrics               accuracy, evaluation        chapter 5
    checkpoint            checkpoint files            chapter 5
    train_config          TrainConfig                 chapter 5
    train_state           TrainState                  chapter 5
    trainer               the training loop           chapter 5, 7
    kv_cache              key/value cache             chapter 6
    decoding              greedy, sampling, prompts   chapter 6 (prompts: 7)
    beam_search           beam search                 chapter 6
    evaluation            BLEU, chrF, WER, CER        chapter 6
    translator            Translator, BLEU of a model chapter 6
    pretrained            the model the book ships    every chapter
    language_models       next-token LM, perplexity   chapter 7
    masked_lm             masked tokens, encoder-only chapter 7

Later chapters add to earlier code without changing it: chapter 6's cache wraps chapter 1's
attention (``kv_cache``), chapter 7's positions subclass it (``positional_attention``) and register
in one table (``positions``).

Import from the modules (``from transformer_lib.attention import MultiHeadAttention``) or from here.
Installing the package brings what the model, training and translation need; the book's plotting
and building stack is the ``[book]`` extra (``pip install "tested-transformer[book]"``: the distribution's name, as
``transformer-lib`` on PyPI is another project).
"""

from .attention import MultiHeadAttention, scaled_dot_product_attention
from .efficient_attention import linear_attention
from .blocks import Decoder, DecoderLayer, Encoder, EncoderLayer, FeedForward, Residual
from .config import PRESETS, TransformerConfig
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
from .model import DecoderOnlyTransformer, Transformer, count_parameters, init_parameters
from .positions import POSITIONAL

# The one place the version is written: pyproject.toml reads it (dynamic version), both command lines
# print it (--version), CHANGELOG.md says what each version changed. Between releases the main branch
# carries the next version's development release, X.Y.Z.devN (PEP 440), so an install from it is never
# taken for the release before it; `make release VERSION=X.Y.Z` (tools/release.py) sets X.Y.Z, tags it,
# and moves on to the next .dev0.
__version__ = "0.3.0.dev0"
# The distribution this package comes from. Another PyPI project installs a package of the same import
# name (`transformer-lib`); `transformer_lib.__project__ == "tested-transformer"` tells them apart.
__project__ = "tested-transformer"

__all__ = [
    "MultiHeadAttention", "linear_attention", "scaled_dot_product_attention",
    "Decoder", "DecoderLayer", "Encoder", "EncoderLayer", "FeedForward", "Residual",
    "PRESETS", "TransformerConfig",
    "ALiBiBias", "LearnedPositionalEmbedding", "RelativePositionBias", "RotaryEmbedding",
    "SinusoidalPositionalEncoding", "TokenEmbedding", "alibi_slopes", "sinusoidal_table",
    "causal_mask", "combine_masks", "padding_mask", "sliding_window_mask", "target_mask", "to_torch_blocked",
    "DecoderOnlyTransformer", "Transformer", "count_parameters", "init_parameters",
    "POSITIONAL",
]
