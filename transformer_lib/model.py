"""The models assembled from the blocks (chapters 3, 4, 7): the encoder-decoder Transformer (Vaswani et
al. 2017) and the decoder-only language model, their initialisation, and the one assembly they share.

The assembly takes a :class:`~transformer_lib.config.TransformerConfig` and builds each layer from
its parts, handing each layer the attention it uses (:func:`build_encoder`, :func:`build_decoder`);
where positions come from is looked up in :data:`transformer_lib.positions.POSITIONAL`. The
encoder-only model of chapter 7 (:mod:`transformer_lib.masked_lm`) is built by the same functions.

Shapes::

    B  batch size    S  source length    T  target length    D  model width (d_model)
    H  heads         V  vocabulary size (V_src, V_tgt)
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from torch import Tensor, nn

from .attention import MultiHeadAttention, upgrade_projection_names
from .blocks import GATED_ACTIVATIONS, Decoder, DecoderLayer, Encoder, EncoderLayer, FeedForward, GatedFeedForward
from .config import TransformerConfig
from .dropout import Dropout
from .embeddings import TokenEmbedding
from .masking import CAUSAL, CausalMask, padding_mask, target_mask
from .normalization import NORMS
from .positions import POSITIONAL, attention_options
from .validation import check_token_ids

__all__ = [
    "AttentionMaps",
    "init_parameters",
    "count_parameters",
    "check_sequences",
    "feed_forward",
    "final_norm",
    "build_encoder",
    "build_decoder",
    "RENAMED_PARAMETERS",
    "upgrade_state_dict",
    "Transformer",
    "DecoderOnlyTransformer",
]


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
    :math:`\\sqrt{d_\\text{model}}` scale turns into unit variance. Norms start at identity
    (an RMSNorm's gain is made as ones).
    """
    for module in model.modules():
        if isinstance(module, nn.Linear):
            nn.init.xavier_uniform_(module.weight)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, MultiHeadAttention):  # W_Q, W_K, W_V stored stacked: each drawn as one nn.Linear
            for projection in module.projections():
                nn.init.xavier_uniform_(projection.weight)
                if projection.bias is not None:
                    nn.init.zeros_(projection.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=module.embedding_dim**-0.5)
        elif isinstance(module, nn.LayerNorm):
            nn.init.ones_(module.weight)
            if module.bias is not None:
                nn.init.zeros_(module.bias)


def count_parameters(module: nn.Module, trainable_only: bool = True) -> int:
    """Number of distinct parameters (a tied or shared matrix counts once)."""
    return sum(p.numel() for p in module.parameters() if p.requires_grad or not trainable_only)


def feed_forward(c: TransformerConfig) -> FeedForward | GatedFeedForward:
    """One layer's feed-forward network: gated for a gated activation (``"swiglu"``, chapter 7)."""
    kind = GatedFeedForward if c.activation in GATED_ACTIVATIONS else FeedForward
    return kind(c.d_model, c.d_ff, c.dropout, c.activation)


def final_norm(c: TransformerConfig) -> nn.Module | None:
    """Pre-LN ends each stack with a norm (chapter 4); Post-LN layers already end with one."""
    return NORMS[c.norm](c.d_model, eps=c.layer_norm_eps) if c.norm_first else None


def build_encoder(c: TransformerConfig, n_layers: int, causal: bool = False) -> tuple[nn.Module, Encoder]:
    """A stack of ``n_layers`` self-attention layers and the module that adds its input positions.

    ``causal`` says whether the stack will run under a causal mask (a decoder-only model's): a
    relative position bias then learns no future distances.
    """
    positions = POSITIONAL[c.positional](c, causal)
    layers = [EncoderLayer(c.d_model, positions.self_attention(), feed_forward(c), c.dropout, c.norm_first,
                           c.layer_norm_eps, NORMS[c.norm]) for _ in range(n_layers)]
    return positions.input, Encoder(layers, final_norm(c))


def build_decoder(c: TransformerConfig) -> tuple[nn.Module, Decoder]:
    """The decoder stack (masked self-attention, cross-attention, feed-forward) and its input positions."""
    positions = POSITIONAL[c.positional](c, True)
    layers = [DecoderLayer(c.d_model, positions.self_attention(), MultiHeadAttention(**attention_options(c)),
                           feed_forward(c), c.dropout, c.norm_first, c.layer_norm_eps, NORMS[c.norm])
              for _ in range(c.n_decoder_layers)]
    return positions.input, Decoder(layers, final_norm(c))


# Parameters renamed since the first checkpoints (issue 26): an old name's prefix -> the new one.
RENAMED_PARAMETERS: Mapping[str, str] = MappingProxyType({"generator.": "output_layer."})


def upgrade_state_dict(state: Mapping[str, Tensor], expected: Collection[str] | None = None) -> dict[str, Tensor]:
    """A :class:`Transformer` ``state_dict`` saved before the renames, under today's names.

    The output layer was called ``generator`` (the Annotated Transformer's name, which clashed with
    the random generators of sampling); its weight is now ``output_layer.weight``. Attention's
    input projections, once ``q_proj``, ``k_proj`` and ``v_proj``, are stored stacked as
    ``in_proj_weight`` and ``in_proj_bias`` (:func:`~transformer_lib.attention.upgrade_projection_names`).
    Every other name is unchanged. A current ``state_dict`` comes back as it is. ``expected``: the
    names of the model's own ``state_dict``, if known (see ``upgrade_projection_names``).

    Example:
        >>> upgrade_state_dict({"generator.weight": 1, "encoder.final_norm.weight": 2})
        {'output_layer.weight': 1, 'encoder.final_norm.weight': 2}
    """
    upgraded = {}
    for name, value in state.items():
        old = next((prefix for prefix in RENAMED_PARAMETERS if name.startswith(prefix)), None)
        upgraded[RENAMED_PARAMETERS[old] + name[len(old):] if old else name] = value
    upgrade_projection_names(upgraded, expected=expected)
    return upgraded


def check_sequences(tokens: Tensor, name: str) -> None:
    """``tokens`` is a ``(B, L)`` integer tensor with ``L >= 1``: a sequence of no tokens has nothing
    to attend to (its attention rows would be empty). Reads the shape and dtype only."""
    check_token_ids(tokens, name, batched=True)
    if tokens.size(1) == 0:
        raise ValueError(f"{name} has shape {tuple(tokens.shape)}: every sequence needs at least 1 token")


class Transformer(nn.Module):
    """The encoder-decoder Transformer.

    ``forward(src, tgt)`` returns next-token logits for every target position (teacher forcing);
    ``encode`` / ``decode`` / ``output_layer`` are the three steps, used separately when decoding.

    Args:
        config: a :class:`~transformer_lib.config.TransformerConfig`.

    Shape:
        - src: ``(B, S)`` token ids; tgt: ``(B, T)`` token ids (the *shifted* target, starting with BOS)
        - src_mask: broadcastable to ``(B, H, T, S)``, e.g. ``padding_mask(src)`` ``(B, 1, 1, S)``
        - tgt_mask: broadcastable to ``(B, H, T, T)``, e.g. ``target_mask(tgt)`` ``(B, 1, T, T)``
        - output: logits ``(B, T, V_tgt)``

    Example:
        >>> cfg = TransformerConfig.from_preset("tiny", src_vocab_size=11, tgt_vocab_size=11)
        >>> model = Transformer(cfg)
        >>> src, tgt = torch.randint(1, 11, (2, 5)), torch.randint(1, 11, (2, 4))
        >>> model(src, tgt).shape
        torch.Size([2, 4, 11])
    """

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        self.config = c = config
        self.src_embed = TokenEmbedding(c.src_vocab_size, c.d_model)
        # One matrix for both languages when they share a vocabulary (paper, section 3.4).
        self.tgt_embed = self.src_embed if c.share_embeddings else TokenEmbedding(c.tgt_vocab_size, c.d_model)
        (self.src_positions, encoder), (self.tgt_positions, decoder) = build_encoder(c, c.n_encoder_layers), build_decoder(c)
        self.embed_dropout = Dropout(c.dropout)  # paper, section 5.4: on embeddings + positions
        self.encoder, self.decoder = encoder, decoder
        # The "pre-softmax linear transformation": it returns logits; softmax belongs to the loss
        # or the decoding.
        self.output_layer = nn.Linear(c.d_model, c.tgt_vocab_size, bias=False)
        init_parameters(self)
        if c.tie_output:  # after initialising, so the shared matrix keeps the embedding's N(0, 1/D) start
            self.output_layer.weight = self.tgt_embed.weight

    @property
    def decoder_layers(self) -> nn.ModuleList:
        """The layers that run at every decoding step (the key/value cache wraps their attention)."""
        return self.decoder.layers

    def masks_for(self, src: Tensor, tgt: Tensor | None = None) -> tuple[Tensor, Tensor | None]:
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
        tgt_mask: Tensor | CausalMask | None = None,
        start: int = 0,
    ) -> Tensor:
        """Target ids ``(B, T)`` and memory ``(B, S, D)`` -> decoder states ``(B, T, D)``.

        ``start`` is the position of the first of the ``T`` tokens: 0, except when a key/value cache
        (chapter 6, :func:`transformer_lib.kv_cache.kv_cache`) holds the earlier ones.
        """
        h, _, _ = self.decoder(self._embed_target(tgt, start), memory, src_mask, tgt_mask)
        return h

    def forward(self, src: Tensor, tgt: Tensor, src_mask: Tensor | None = None, tgt_mask: Tensor | None = None) -> Tensor:
        """Teacher forcing: logits ``(B, T, V_tgt)``. Masks left out are never "attend to everything"
        (a teacher-forced pass without a causal mask would read the answer): ``src_mask`` is
        :func:`padding_mask`'s, ``tgt_mask`` is :data:`~transformer_lib.masking.CAUSAL`, the fused
        causal kernel, which is right for *right*-padded targets (every real position's logits are
        :func:`target_mask`'s; see :class:`~transformer_lib.masking.CausalMask`). Pass
        ``target_mask(tgt, pad_id)`` for left-padded targets.
        The ids' dtypes and shapes are checked, not their values (that would wait for a GPU)."""
        check_sequences(src, "src")
        check_sequences(tgt, "tgt")
        src_mask = padding_mask(src, self.config.pad_id) if src_mask is None else src_mask
        causal = CAUSAL if tgt_mask is None else tgt_mask
        memory = self.encode(src, src_mask)
        return self.output_layer(self.decode(tgt, memory, src_mask, causal))  # (B, T, V_tgt)

    def attention_maps(self, src: Tensor, tgt: Tensor, src_mask: Tensor | None = None, tgt_mask: Tensor | None = None) -> AttentionMaps:
        """All attention weights for one teacher-forced pass (for figures; use ``eval()`` mode).

        Masks left out default to :meth:`masks_for`, as in :meth:`forward`.
        """
        src_mask = padding_mask(src, self.config.pad_id) if src_mask is None else src_mask
        tgt_mask = target_mask(tgt, self.config.pad_id) if tgt_mask is None else tgt_mask
        memory, enc_weights = self.encoder(self._embed_source(src), src_mask, need_weights=True)
        _, dec_self, dec_cross = self.decoder(self._embed_target(tgt, 0), memory, src_mask, tgt_mask, need_weights=True)
        return AttentionMaps(encoder_self=enc_weights, decoder_self=dec_self, decoder_cross=dec_cross)

    def _embed_source(self, src: Tensor) -> Tensor:
        return self.embed_dropout(self.src_positions(self.src_embed(src)))  # (B, S, D)

    def _embed_target(self, tgt: Tensor, start: int) -> Tensor:
        return self.embed_dropout(self.tgt_positions(self.tgt_embed(tgt), start=start))  # (B, T, D)


class DecoderOnlyTransformer(nn.Module):
    """A decoder-only language model (GPT, Radford et al. 2018) from the same blocks.

    The decoder stack without cross-attention: token embedding, positions, causal self-attention
    and feed-forward layers, output layer. It reads one sequence and predicts each next token;
    a task with an input and an output writes both in one sequence (input, separator, output).
    ``forward`` gives logits for every position (teacher forcing); ``decode`` / ``output_layer`` are
    the steps decoding uses, with the same meaning as :class:`Transformer`'s, so decoding and the
    key/value cache work unchanged (``decode`` takes ``memory`` only to keep that call signature:
    there is no encoder, and it must be ``None``).

    Its ``blocks`` are chapter 4's *encoder* layers (self-attention and feed-forward: GPT's block)
    in an :class:`~transformer_lib.blocks.Encoder` stack; the causal mask is what makes it a
    decoder.

    Args:
        config: a :class:`~transformer_lib.config.TransformerConfig` with ``n_encoder_layers=0``
            and one vocabulary (:meth:`TransformerConfig.decoder_only` makes one); ``tgt_vocab_size``
            is ``V`` and ``n_decoder_layers`` the number of blocks.

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
        self.positions, blocks = build_encoder(c, c.n_decoder_layers, causal=True)
        self.embed_dropout = Dropout(c.dropout)
        self.blocks = blocks
        self.output_layer = nn.Linear(c.d_model, c.tgt_vocab_size, bias=False)
        init_parameters(self)
        if c.tie_output:
            self.output_layer.weight = self.embed.weight

    @property
    def decoder_layers(self) -> nn.ModuleList:
        """The layers that run at every decoding step (the key/value cache wraps their attention)."""
        return self.blocks.layers

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
        x = self.embed_dropout(self.positions(self.embed(tokens), start=start))  # (B, T, D)
        h, _ = self.blocks(x, tgt_mask)
        return h  # (B, T, D)

    def forward(self, tokens: Tensor, mask: Tensor | None = None) -> Tensor:
        check_sequences(tokens, "tokens")
        mask = self.make_mask(tokens) if mask is None else mask
        return self.output_layer(self.decode(tokens, tgt_mask=mask))  # (B, T, V)

    def attention_maps(self, tokens: Tensor, mask: Tensor | None = None) -> list[Tensor]:
        """Self-attention weights of every layer, ``(B, H, T, T)`` each (for figures; use ``eval()``)."""
        mask = self.make_mask(tokens) if mask is None else mask
        x = self.embed_dropout(self.positions(self.embed(tokens)))
        _, weights = self.blocks(x, mask, need_weights=True)
        return weights
