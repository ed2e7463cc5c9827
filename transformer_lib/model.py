"""The encoder-decoder Transformer (Vaswani et al. 2017), its configuration, and initialisation;
and the decoder-only language model built from the same blocks (chapter 7).

Shapes:

    B  batch size    S  source length    T  target length    D  model width (d_model)
    H  heads         V  vocabulary size (V_src, V_tgt)
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from types import MappingProxyType
from typing import Any

from torch import Tensor, nn

from .blocks import Decoder, DecoderLayer, Encoder, EncoderLayer
from .dropout import Dropout
from .embeddings import (
    ALiBiBias,
    LearnedPositionalEmbedding,
    NoPositionalEncoding,
    RelativePositionBias,
    RotaryEmbedding,
    SinusoidalPositionalEncoding,
    TokenEmbedding,
)
from .masking import padding_mask, target_mask
from .positional_attention import with_attention_positions
from .token_ids import check_token_ids

__all__ = [
    "TransformerConfig",
    "PRESETS",
    "FILE_CONFIG_LIMITS",
    "POSITIONAL",
    "input_positions",
    "attention_positions",
    "build_stacks",
    "Transformer",
    "DecoderOnlyTransformer",
    "AttentionMaps",
    "init_parameters",
    "count_parameters",
]

# Named sizes. "base" and "big" are the paper's Table 3 (with its shared 37,000-token BPE vocabulary,
# shared source/target embeddings tied to the output projection). "tiny" trains toy tasks on a
# laptop CPU in seconds; "multi30k" is sized for the 29k-sentence Multi30k corpus.
PRESETS: MappingProxyType[str, MappingProxyType[str, Any]] = MappingProxyType({
    "tiny": MappingProxyType(dict(
        d_model=64, n_heads=4, n_encoder_layers=2, n_decoder_layers=2, d_ff=256,
        dropout=0.1, attn_dropout=0.0, norm_first=True, max_len=128,
    )),
    "multi30k": MappingProxyType(dict(
        d_model=256, n_heads=8, n_encoder_layers=3, n_decoder_layers=3, d_ff=1024,
        dropout=0.1, attn_dropout=0.1, norm_first=True, max_len=256,
    )),
    "base": MappingProxyType(dict(
        src_vocab_size=37000, tgt_vocab_size=37000, share_embeddings=True, tie_output=True,
        d_model=512, n_heads=8, n_encoder_layers=6, n_decoder_layers=6, d_ff=2048,
        dropout=0.1, attn_dropout=0.0, norm_first=False,
    )),
    "big": MappingProxyType(dict(
        src_vocab_size=37000, tgt_vocab_size=37000, share_embeddings=True, tie_output=True,
        d_model=1024, n_heads=16, n_encoder_layers=6, n_decoder_layers=6, d_ff=4096,
        dropout=0.3, attn_dropout=0.0, norm_first=False,
    )),
})

# Where positions come from. Added to the input embeddings (chapter 3): "sinusoidal" (the paper),
# "learned". Inside self-attention (chapter 7): "rope" (rotated queries and keys, Su et al. 2021),
# "alibi" (a distance penalty on the scores, Press et al. 2022), "relative" (a learned score bias
# per clipped distance, Shaw et al. 2018 / T5).
POSITIONAL = ("sinusoidal", "learned", "rope", "alibi", "relative")


@dataclass
class TransformerConfig:
    """Every size and choice of the model, checked when created.

    Args:
        src_vocab_size, tgt_vocab_size: ``V_src``, ``V_tgt``.
        d_model: model width ``D``; must be divisible by ``n_heads``.
        n_heads: attention heads ``H``.
        n_encoder_layers, n_decoder_layers: stack depths.
        d_ff: feed-forward hidden width.
        dropout: on embeddings + positions, on each sublayer output, inside the feed-forward.
        attn_dropout: on attention weights (the paper does not use it; many implementations do).
        activation: ``"relu"`` (paper) or ``"gelu"``.
        norm_first: Pre-LN (``True``) or the paper's Post-LN (``False``).
        layer_norm_eps: LayerNorm epsilon.
        positional: where positions come from, one of :data:`POSITIONAL`: ``"sinusoidal"``
            (paper) or ``"learned"``, added to the embeddings; ``"rope"``, ``"alibi"`` or
            ``"relative"``, inside self-attention (chapter 7).
        max_len: longest sequence the positional table covers (sinusoidal, learned, rope; ALiBi
            and relative biases have no table and no limit).
        share_embeddings: one embedding matrix for source and target (needs equal vocab sizes,
            i.e. a joint vocabulary).
        tie_output: the output projection reuses the target embedding matrix (one Parameter).
        pad_id: the padding token id, for :meth:`Transformer.make_masks`.
        relative_max_distance: with ``positional="relative"``, the distance beyond which all
            distances share one learned bias.

    With ``n_encoder_layers=0`` and one vocabulary the config describes a decoder-only model, for
    :class:`DecoderOnlyTransformer`; :meth:`decoder_only` builds such a config.

    Example:
        >>> cfg = TransformerConfig.from_preset("tiny", src_vocab_size=20, tgt_vocab_size=20)
        >>> cfg.d_model, cfg.n_heads
        (64, 4)
    """

    src_vocab_size: int
    tgt_vocab_size: int
    d_model: int = 512
    n_heads: int = 8
    n_encoder_layers: int = 6
    n_decoder_layers: int = 6
    d_ff: int = 2048
    dropout: float = 0.1
    attn_dropout: float = 0.0
    activation: str = "relu"
    norm_first: bool = False
    layer_norm_eps: float = 1e-5
    positional: str = "sinusoidal"
    max_len: int = 512
    share_embeddings: bool = False
    tie_output: bool = True
    pad_id: int = 0
    relative_max_distance: int = 16

    def __post_init__(self) -> None:
        for name in ("src_vocab_size", "tgt_vocab_size", "d_model", "n_heads", "d_ff", "max_len"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        for name in ("n_encoder_layers", "n_decoder_layers"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{name} must be a non-negative integer, got {value!r}")
        if self.d_model % self.n_heads != 0:
            lower = self.d_model - self.d_model % self.n_heads
            raise ValueError(
                f"d_model={self.d_model} is not divisible by n_heads={self.n_heads}: each head gets "
                f"d_model / n_heads dimensions. Use d_model={lower} or {lower + self.n_heads}, or a "
                f"number of heads that divides {self.d_model}"
            )
        for name in ("dropout", "attn_dropout"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value < 1.0:
                raise ValueError(f"{name} must be in [0, 1) (a number), got {value!r}")
        value = self.layer_norm_eps
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 < value < 1.0:
            raise ValueError(f"layer_norm_eps must be a small positive number (e.g. 1e-5), got {value!r}")
        if self.activation not in ("relu", "gelu"):
            raise ValueError(f"activation must be 'relu' or 'gelu', got {self.activation!r}")
        if self.positional not in POSITIONAL:
            raise ValueError(f"positional must be one of {POSITIONAL}, got {self.positional!r}")
        head_width = self.d_model // self.n_heads
        if self.positional == "rope" and head_width % 2 != 0:
            raise ValueError(
                f"positional='rope' rotates pairs of coordinates in each head, so the head width "
                f"d_model / n_heads = {self.d_model} / {self.n_heads} = {head_width} must be even; "
                "change d_model or n_heads"
            )
        value = self.relative_max_distance
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"relative_max_distance must be a positive integer, got {value!r}")
        if self.share_embeddings and self.src_vocab_size != self.tgt_vocab_size:
            raise ValueError(
                f"share_embeddings needs one joint vocabulary, but src_vocab_size={self.src_vocab_size} "
                f"!= tgt_vocab_size={self.tgt_vocab_size}; build a joint vocabulary or set share_embeddings=False"
            )
        if not 0 <= self.pad_id < min(self.src_vocab_size, self.tgt_vocab_size):
            raise ValueError(f"pad_id={self.pad_id} must be a valid id in both vocabularies")

    @classmethod
    def from_preset(cls, name: str, **overrides: Any) -> TransformerConfig:
        """A named size from :data:`PRESETS`, with any field overridden by keyword."""
        if name not in PRESETS:
            raise ValueError(f"unknown preset {name!r}; choose one of {sorted(PRESETS)}")
        known = {f.name for f in fields(cls)}
        unknown = set(overrides) - known
        if unknown:
            raise TypeError(f"unknown config field(s) {sorted(unknown)}; valid fields are {sorted(known)}")
        return cls(**{**PRESETS[name], **overrides})

    @classmethod
    def decoder_only(cls, preset: str, vocab_size: int, **overrides: Any) -> TransformerConfig:
        """A preset's sizes for a :class:`DecoderOnlyTransformer`: no encoder, one vocabulary.

        Example:
            >>> cfg = TransformerConfig.decoder_only("tiny", vocab_size=20, positional="rope")
            >>> cfg.n_encoder_layers, cfg.n_decoder_layers, cfg.tgt_vocab_size
            (0, 2, 20)
        """
        return cls.from_preset(
            preset, src_vocab_size=vocab_size, tgt_vocab_size=vocab_size, n_encoder_layers=0,
            share_embeddings=True, **overrides,
        )

    def to_dict(self) -> dict[str, Any]:
        """Plain types only, so it can be stored in a JSON file or a ``weights_only`` checkpoint."""
        return asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> TransformerConfig:
        """A config read from a file (a checkpoint's ``model_config``), checked before anything is built.

        Besides :meth:`__post_init__`'s checks, sizes must stay within :data:`FILE_CONFIG_LIMITS`: a
        file that passes ``torch.load(weights_only=True)`` can still ask for a billion positions or
        a million layers, which would fill the memory or run for hours before failing.
        """
        if not isinstance(values, dict):
            raise ValueError(f"a model config is a dict, got {type(values).__name__}")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"unknown model config field(s) {unknown}; valid fields are {sorted(known)}")
        for name, limit in FILE_CONFIG_LIMITS.items():
            value = values.get(name)
            if isinstance(value, int) and not isinstance(value, bool) and value > limit:
                raise ValueError(f"model config {name}={value} is more than this library accepts from a file ({limit})")
        return cls(**values)


# Upper bounds on sizes read from a file (TransformerConfig.from_dict), far above every preset
# ("big": d_model 1024, 6 layers, d_ff 4096, 37,000 tokens): a corrupt or hostile file is refused
# before it allocates gigabytes or builds layers for minutes.
FILE_CONFIG_LIMITS: MappingProxyType[str, int] = MappingProxyType({
    "src_vocab_size": 1_000_000, "tgt_vocab_size": 1_000_000, "d_model": 16_384, "n_heads": 1_024,
    "n_encoder_layers": 128, "n_decoder_layers": 128, "d_ff": 65_536, "max_len": 65_536,
    "relative_max_distance": 65_536,
})


@dataclass
class AttentionMaps:
    """Attention weights of every layer, one ``(B, H, queries, keys)`` tensor per layer."""

    encoder_self: list[Tensor]
    decoder_self: list[Tensor]
    decoder_cross: list[Tensor]


def init_parameters(model: nn.Module) -> None:
    """Initialise as the paper's reference code (tensor2tensor) does.

    The paper does not state its initialisation. Its reference implementation draws linear weights
    from Xavier/Glorot uniform with zero biases, and embedding weights from
    :math:`\\mathcal{N}(0, d_\\text{model}^{-1/2})` (std), which the embedding's
    :math:`\\sqrt{d_\\text{model}}` scale turns into unit variance. LayerNorms start at identity.
    """
    for module in model.modules():
        if isinstance(module, nn.Linear):
            nn.init.xavier_uniform_(module.weight)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=module.embedding_dim**-0.5)
        elif isinstance(module, nn.LayerNorm):
            nn.init.ones_(module.weight)
            if module.bias is not None:
                nn.init.zeros_(module.bias)


def count_parameters(module: nn.Module, trainable_only: bool = True) -> int:
    """Number of distinct parameters (a tied or shared matrix counts once)."""
    return sum(p.numel() for p in module.parameters() if p.requires_grad or not trainable_only)


def input_positions(config: TransformerConfig) -> nn.Module:
    """The module that adds positions to the token embeddings (chapter 3); for positions inside
    attention (``rope``, ``alibi``, ``relative``) one that adds nothing."""
    if config.positional == "sinusoidal":
        return SinusoidalPositionalEncoding(config.d_model, config.max_len)
    if config.positional == "learned":
        return LearnedPositionalEmbedding(config.d_model, config.max_len)
    return NoPositionalEncoding()


def attention_positions(config: TransformerConfig, bidirectional: bool) -> nn.Module | None:
    """Positions inside self-attention (chapter 7) for the layers of one stack: a
    ``RotaryEmbedding`` for ``rope``, an ``ALiBiBias`` or ``RelativePositionBias`` for
    ``alibi``/``relative``, ``None`` for positions added to the input.

    Call it once per stack: its layers share the module (T5 shares its relative biases so).
    ``bidirectional`` is ``False`` for a causal stack (a relative bias then learns no future distances).
    """
    if config.positional == "rope":
        return RotaryEmbedding(config.d_model // config.n_heads, config.max_len)
    if config.positional == "alibi":
        return ALiBiBias(config.n_heads)
    if config.positional == "relative":
        return RelativePositionBias(config.n_heads, config.relative_max_distance, bidirectional)
    return None


def _layer_args(c: TransformerConfig) -> dict[str, Any]:
    return dict(d_model=c.d_model, n_heads=c.n_heads, d_ff=c.d_ff, dropout=c.dropout, attn_dropout=c.attn_dropout,
                activation=c.activation, norm_first=c.norm_first, eps=c.layer_norm_eps)


def _final_norm(c: TransformerConfig) -> nn.LayerNorm | None:
    """Pre-LN ends each stack with a LayerNorm (chapter 4); Post-LN layers already end with one."""
    return nn.LayerNorm(c.d_model, eps=c.layer_norm_eps) if c.norm_first else None


def build_stacks(c: TransformerConfig) -> tuple[Encoder, Decoder]:
    """The encoder and decoder stacks the config describes, positions inside attention included."""
    encoder = Encoder([EncoderLayer(**_layer_args(c)) for _ in range(c.n_encoder_layers)], _final_norm(c))
    decoder = Decoder([DecoderLayer(**_layer_args(c)) for _ in range(c.n_decoder_layers)], _final_norm(c))
    with_attention_positions(encoder.layers, attention_positions(c, bidirectional=True))  # chapter 7
    with_attention_positions(decoder.layers, attention_positions(c, bidirectional=False))
    return encoder, decoder


class Transformer(nn.Module):
    """The encoder-decoder Transformer.

    ``forward(src, tgt)`` returns next-token logits for every target position (teacher forcing);
    ``encode`` / ``decode`` / ``generator`` are the three steps, used separately when decoding.

    Args:
        config: a :class:`TransformerConfig`.

    Shape:
        - src: ``(B, S)`` token ids; tgt: ``(B, T)`` token ids (the *shifted* target, starting with BOS)
        - src_mask: broadcastable to ``(B, H, T, S)``, e.g. ``padding_mask(src)`` ``(B, 1, 1, S)``
        - tgt_mask: broadcastable to ``(B, H, T, T)``, e.g. ``target_mask(tgt)`` ``(B, 1, T, T)``
        - output: logits ``(B, T, V_tgt)``

    Example:
        >>> cfg = TransformerConfig.from_preset("tiny", src_vocab_size=11, tgt_vocab_size=11)
        >>> model = Transformer(cfg)
        >>> src, tgt = torch.randint(1, 11, (2, 5)), torch.randint(1, 11, (2, 4))
        >>> model(src, tgt, *model.make_masks(src, tgt)).shape
        torch.Size([2, 4, 11])
    """

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        self.config = c = config
        self.src_embed = TokenEmbedding(c.src_vocab_size, c.d_model)
        # One matrix for both languages when they share a vocabulary (paper, section 3.4).
        self.tgt_embed = self.src_embed if c.share_embeddings else TokenEmbedding(c.tgt_vocab_size, c.d_model)
        self.src_positions, self.tgt_positions = input_positions(c), input_positions(c)
        self.embed_dropout = Dropout(c.dropout)  # paper, section 5.4: on embeddings + positions
        self.encoder, self.decoder = build_stacks(c)
        # The "pre-softmax linear transformation" (the Annotated Transformer's "generator"): it
        # returns logits; softmax belongs to the loss or the decoder.
        self.generator = nn.Linear(c.d_model, c.tgt_vocab_size, bias=False)
        init_parameters(self)
        if c.tie_output:  # after initialising, so the shared matrix keeps the embedding's N(0, 1/D) start
            self.generator.weight = self.tgt_embed.weight

    def make_masks(self, src: Tensor, tgt: Tensor | None = None) -> tuple[Tensor, Tensor | None]:
        """``(padding_mask(src), target_mask(tgt))`` using ``config.pad_id``: ``(B,1,1,S)``, ``(B,1,T,T)``."""
        src_mask = padding_mask(src, self.config.pad_id)
        tgt_mask = target_mask(tgt, self.config.pad_id) if tgt is not None else None
        return src_mask, tgt_mask

    def encode(self, src: Tensor, src_mask: Tensor | None = None) -> Tensor:
        """Source ids ``(B, S)`` -> memory ``(B, S, D)``."""
        memory, _ = self.encoder(self._embed_source(src), src_mask)
        return memory

    def decode(
        self,
        tgt: Tensor,
        memory: Tensor,
        src_mask: Tensor | None = None,
        tgt_mask: Tensor | None = None,
        start: int = 0,
    ) -> Tensor:
        """Target ids ``(B, T)`` and memory ``(B, S, D)`` -> decoder states ``(B, T, D)``.

        ``start`` is the position of the first of the ``T`` tokens: 0, except when a key/value cache
        (chapter 6, :func:`transformer_lib.kv_cache.kv_cache`) holds the earlier ones.
        """
        if memory.dim() != 3 or memory.size(0) != tgt.size(0):
            raise ValueError(
                f"memory must be (B, S, D) with the same B as tgt {tuple(tgt.shape)}, got {tuple(memory.shape)}"
            )
        h, _, _ = self.decoder(self._embed_target(tgt, start), memory, src_mask, tgt_mask)
        return h

    def _default_masks(
        self, src: Tensor, tgt: Tensor, src_mask: Tensor | None, tgt_mask: Tensor | None
    ) -> tuple[Tensor, Tensor]:
        # A teacher-forced pass without a causal mask would let every position read the answer:
        # masks left out are the ones make_masks builds, never "attend to everything".
        if src_mask is not None and tgt_mask is not None:
            return src_mask, tgt_mask  # the training loop's case: nothing to build, the ids are checked when embedded
        self._check_ids(src, "src")  # before the masks, so bad input hears about itself, not a mask
        self._check_ids(tgt, "tgt")
        default_src, default_tgt = self.make_masks(src, tgt)
        return (default_src if src_mask is None else src_mask, default_tgt if tgt_mask is None else tgt_mask)

    def forward(self, src: Tensor, tgt: Tensor, src_mask: Tensor | None = None, tgt_mask: Tensor | None = None) -> Tensor:
        """Teacher forcing: logits ``(B, T, V_tgt)``; masks left out default to :meth:`make_masks`."""
        src_mask, tgt_mask = self._default_masks(src, tgt, src_mask, tgt_mask)
        memory = self.encode(src, src_mask)
        return self.generator(self.decode(tgt, memory, src_mask, tgt_mask))  # (B, T, V_tgt)

    def attention_maps(self, src: Tensor, tgt: Tensor, src_mask: Tensor | None = None, tgt_mask: Tensor | None = None) -> AttentionMaps:
        """All attention weights for one teacher-forced pass (for figures; use ``eval()`` mode).

        Masks left out default to :meth:`make_masks`, as in :meth:`forward`.
        """
        src_mask, tgt_mask = self._default_masks(src, tgt, src_mask, tgt_mask)
        memory, enc_weights = self.encoder(self._embed_source(src), src_mask, need_weights=True)
        _, dec_self, dec_cross = self.decoder(self._embed_target(tgt, 0), memory, src_mask, tgt_mask, need_weights=True)
        return AttentionMaps(encoder_self=enc_weights, decoder_self=dec_self, decoder_cross=dec_cross)

    def _embed_source(self, src: Tensor) -> Tensor:
        self._check_ids(src, "src")
        return self.embed_dropout(self.src_positions(self.src_embed(src)))  # (B, S, D)

    def _embed_target(self, tgt: Tensor, start: int) -> Tensor:
        self._check_ids(tgt, "tgt")
        return self.embed_dropout(self.tgt_positions(self.tgt_embed(tgt), start=start))  # (B, T, D)

    @staticmethod
    def _check_ids(ids: Tensor, name: str) -> None:
        check_token_ids(ids, name, batched=True)



class DecoderOnlyTransformer(nn.Module):
    """A decoder-only language model (GPT, Radford et al. 2018) from the same blocks.

    The decoder stack without cross-attention: token embedding, positions, causal self-attention
    and feed-forward layers, output projection. It reads one sequence and predicts each next token;
    a task with an input and an output writes both in one sequence (input, separator, output).
    ``forward`` gives logits for every position (teacher forcing); ``decode`` / ``generator`` are
    the steps decoding uses, with the same meaning as :class:`Transformer`'s, so decoding and the
    key/value cache work unchanged (``decode`` takes ``memory`` only to keep that call signature:
    there is no encoder, and it must be ``None``).

    Its layers are chapter 4's *encoder* layers (self-attention and feed-forward: GPT's block)
    under a causal mask; the stack is still called ``decoder``, its role.

    Args:
        config: a :class:`TransformerConfig` with ``n_encoder_layers=0`` and one vocabulary
            (:meth:`TransformerConfig.decoder_only` makes one); ``tgt_vocab_size`` is ``V``.

    Shape:
        tokens ``(B, T)``; mask broadcastable to ``(B, H, T, T)`` (default: :meth:`make_mask`,
        causal and padding) -> logits ``(B, T, V)``.

    Example:
        >>> model = DecoderOnlyTransformer(TransformerConfig.decoder_only("tiny", vocab_size=11))
        >>> model(torch.randint(1, 11, (2, 5))).shape
        torch.Size([2, 5, 11])
    """

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        c = config
        if c.n_encoder_layers != 0 or c.src_vocab_size != c.tgt_vocab_size:
            raise ValueError(
                "a decoder-only model has no encoder and one vocabulary, got n_encoder_layers="
                f"{c.n_encoder_layers}, src_vocab_size={c.src_vocab_size}, tgt_vocab_size={c.tgt_vocab_size}; "
                "make the config with TransformerConfig.decoder_only(preset, vocab_size, ...)"
            )
        self.config = c
        self.embed = TokenEmbedding(c.tgt_vocab_size, c.d_model)
        self.positions = input_positions(c)
        self.embed_dropout = Dropout(c.dropout)
        self.decoder = Encoder([EncoderLayer(**_layer_args(c)) for _ in range(c.n_decoder_layers)], _final_norm(c))
        with_attention_positions(self.decoder.layers, attention_positions(c, bidirectional=False))
        self.generator = nn.Linear(c.d_model, c.tgt_vocab_size, bias=False)
        init_parameters(self)
        if c.tie_output:
            self.generator.weight = self.embed.weight

    def make_mask(self, tokens: Tensor) -> Tensor:
        """``target_mask(tokens)`` with ``config.pad_id``: causal and padding, ``(B, 1, T, T)``."""
        return target_mask(tokens, self.config.pad_id)

    def decode(
        self,
        tokens: Tensor,
        memory: None = None,
        src_mask: None = None,
        tgt_mask: Tensor | None = None,
        start: int = 0,
    ) -> Tensor:
        """Token ids ``(B, T)`` -> states ``(B, T, D)``, under ``tgt_mask`` (as given: pass a causal one).

        ``start`` is the position of the first token (not 0 when a key/value cache holds the earlier
        ones). ``memory`` and ``src_mask`` must be ``None``.
        """
        if memory is not None or src_mask is not None:
            raise ValueError("a decoder-only model has no encoder memory: pass memory=None and src_mask=None")
        Transformer._check_ids(tokens, "tokens")
        x = self.embed_dropout(self.positions(self.embed(tokens), start=start))  # (B, T, D)
        h, _ = self.decoder(x, tgt_mask)
        return h  # (B, T, D)

    def forward(self, tokens: Tensor, mask: Tensor | None = None) -> Tensor:
        mask = self.make_mask(tokens) if mask is None else mask
        return self.generator(self.decode(tokens, tgt_mask=mask))  # (B, T, V)

    def attention_maps(self, tokens: Tensor, mask: Tensor | None = None) -> list[Tensor]:
        """Self-attention weights of every layer, ``(B, H, T, T)`` each (for figures; use ``eval()``)."""
        mask = self.make_mask(tokens) if mask is None else mask
        Transformer._check_ids(tokens, "tokens")
        x = self.embed_dropout(self.positions(self.embed(tokens)))
        _, weights = self.decoder(x, mask, need_weights=True)
        return weights
