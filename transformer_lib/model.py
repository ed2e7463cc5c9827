"""The encoder-decoder Transformer (Vaswani et al. 2017), its configuration, and initialisation.

Shapes:

    B  batch size    S  source length    T  target length    D  model width (d_model)
    H  heads         V  vocabulary size (V_src, V_tgt)
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from types import MappingProxyType
from typing import Any

from torch import Tensor, nn

from .blocks import Decoder, DecoderCache, DecoderLayer, Encoder, EncoderLayer
from .embeddings import LearnedPositionalEmbedding, SinusoidalPositionalEncoding, TokenEmbedding
from .masking import padding_mask, target_mask

__all__ = [
    "TransformerConfig",
    "PRESETS",
    "Transformer",
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
        positional: ``"sinusoidal"`` (paper) or ``"learned"``.
        max_len: longest sequence the positional table covers.
        share_embeddings: one embedding matrix for source and target (needs equal vocab sizes,
            i.e. a joint vocabulary).
        tie_output: the output projection reuses the target embedding matrix (one Parameter).
        pad_id: the padding token id, for :meth:`Transformer.make_masks`.

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
            if not 0.0 <= value < 1.0:
                raise ValueError(f"{name} must be in [0, 1), got {value}")
        if self.activation not in ("relu", "gelu"):
            raise ValueError(f"activation must be 'relu' or 'gelu', got {self.activation!r}")
        if self.positional not in ("sinusoidal", "learned"):
            raise ValueError(f"positional must be 'sinusoidal' or 'learned', got {self.positional!r}")
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

    def to_dict(self) -> dict[str, Any]:
        """Plain types only, so it can be stored in a JSON file or a ``weights_only`` checkpoint."""
        return asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> TransformerConfig:
        return cls(**values)


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
        self.config = config
        c = config
        self.src_embed = TokenEmbedding(c.src_vocab_size, c.d_model)
        self.tgt_embed = self.src_embed if c.share_embeddings else TokenEmbedding(c.tgt_vocab_size, c.d_model)
        positional = SinusoidalPositionalEncoding if c.positional == "sinusoidal" else LearnedPositionalEmbedding
        self.src_positions = positional(c.d_model, c.max_len)
        self.tgt_positions = positional(c.d_model, c.max_len)
        # Paper, section 5.4: dropout on the sums of the embeddings and the positional encodings.
        self.embed_dropout = nn.Dropout(c.dropout)
        layer_args = dict(
            d_model=c.d_model, n_heads=c.n_heads, d_ff=c.d_ff, dropout=c.dropout, attn_dropout=c.attn_dropout,
            activation=c.activation, norm_first=c.norm_first, eps=c.layer_norm_eps,
        )
        self.encoder = Encoder(
            [EncoderLayer(**layer_args) for _ in range(c.n_encoder_layers)],
            final_norm=nn.LayerNorm(c.d_model, eps=c.layer_norm_eps) if c.norm_first else None,
        )
        self.decoder = Decoder(
            [DecoderLayer(**layer_args) for _ in range(c.n_decoder_layers)],
            final_norm=nn.LayerNorm(c.d_model, eps=c.layer_norm_eps) if c.norm_first else None,
        )
        # The paper's "pre-softmax linear transformation"; the Annotated Transformer calls it the
        # generator. It returns logits; softmax belongs to the loss or the decoder.
        self.generator = nn.Linear(c.d_model, c.tgt_vocab_size, bias=False)
        init_parameters(self)
        if c.tie_output:
            # Tie after initialising, so the shared matrix keeps the embedding's N(0, 1/D) init.
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
        cache: DecoderCache | None = None,
    ) -> Tensor:
        """Target ids ``(B, T)`` and memory ``(B, S, D)`` -> decoder states ``(B, T, D)``.

        With a ``cache`` (from :meth:`new_cache`), ``tgt`` holds only the tokens not yet decoded;
        their positions continue from ``cache.length``, and keys/values of earlier positions come
        from the cache. ``tgt_mask`` then covers ``(new, cached + new)`` positions; ``None`` is right
        for a single new token.
        """
        if memory.dim() != 3 or memory.size(0) != tgt.size(0):
            raise ValueError(
                f"memory must be (B, S, D) with the same B as tgt {tuple(tgt.shape)}, got {tuple(memory.shape)}"
            )
        start = cache.length if cache is not None else 0
        x = self._embed_target(tgt, start)
        h, _, _ = self.decoder(x, memory, src_mask, tgt_mask, cache=cache)
        return h

    def forward(self, src: Tensor, tgt: Tensor, src_mask: Tensor | None = None, tgt_mask: Tensor | None = None) -> Tensor:
        memory = self.encode(src, src_mask)
        return self.generator(self.decode(tgt, memory, src_mask, tgt_mask))  # (B, T, V_tgt)

    def attention_maps(self, src: Tensor, tgt: Tensor, src_mask: Tensor | None = None, tgt_mask: Tensor | None = None) -> AttentionMaps:
        """All attention weights for one teacher-forced pass (for figures; use ``eval()`` mode)."""
        memory, enc_weights = self.encoder(self._embed_source(src), src_mask, need_weights=True)
        _, dec_self, dec_cross = self.decoder(self._embed_target(tgt, 0), memory, src_mask, tgt_mask, need_weights=True)
        return AttentionMaps(encoder_self=enc_weights, decoder_self=dec_self, decoder_cross=dec_cross)

    def new_cache(self) -> DecoderCache:
        """An empty key/value cache for incremental decoding with :meth:`decode`."""
        return DecoderCache(len(self.decoder.layers))

    def _embed_source(self, src: Tensor) -> Tensor:
        self._check_ids(src, "src")
        return self.embed_dropout(self.src_positions(self.src_embed(src)))  # (B, S, D)

    def _embed_target(self, tgt: Tensor, start: int) -> Tensor:
        self._check_ids(tgt, "tgt")
        return self.embed_dropout(self.tgt_positions(self.tgt_embed(tgt), start=start))  # (B, T, D)

    @staticmethod
    def _check_ids(ids: Tensor, name: str) -> None:
        if not isinstance(ids, Tensor) or ids.dim() != 2:
            shape = tuple(ids.shape) if isinstance(ids, Tensor) else type(ids).__name__
            raise ValueError(f"{name} must be a (B, length) tensor of token ids, got {shape}")

