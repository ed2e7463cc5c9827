"""The model's configuration (chapters 3, 4, 7): every size and choice, checked when created, and the
paper's sizes as named presets.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from types import MappingProxyType
from typing import Any

import torch

from .blocks import ACTIVATIONS, GATED_ACTIVATIONS
from .normalization import NORMS
from .positions import POSITIONAL
from .validation import check_bool, check_choice, check_int, check_number

__all__ = ["TransformerConfig", "PRESETS", "FILE_CONFIG_LIMITS", "FILE_PARAMETER_LIMIT"]

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
        activation: ``"relu"`` (paper) or ``"gelu"``; ``"swiglu"`` makes the feed-forward gated
            (:class:`~transformer_lib.blocks.GatedFeedForward`, chapter 7).
        norm_first: Pre-LN (``True``) or the paper's Post-LN (``False``).
        layer_norm_eps: the norms' epsilon.
        positional: where positions come from, a name in
            :data:`transformer_lib.positions.POSITIONAL`: ``"sinusoidal"``
            (paper) or ``"learned"``, added to the embeddings; ``"rope"``, ``"alibi"`` or
            ``"relative"``, inside self-attention (chapter 7).
        max_len: longest sequence the positional table covers (sinusoidal, learned, rope; ALiBi
            and relative biases have no table and no limit).
        share_embeddings: one embedding matrix for source and target (needs equal vocab sizes,
            i.e. a joint vocabulary).
        tie_output: the output projection reuses the target embedding matrix (one Parameter).
        pad_id: the padding token id, for :meth:`Transformer.masks_for`.
        relative_max_distance: with ``positional="relative"``, the distance beyond which all
            distances share one learned bias.
        n_kv_heads: key/value heads of every attention (default ``n_heads``); fewer is
            grouped-query attention, 1 multi-query attention (chapter 7); must divide ``n_heads``.
        norm: the normalisation of every residual sublayer (and of the stacks' ends in Pre-LN), a
            name in :data:`transformer_lib.normalization.NORMS`: ``"layernorm"`` (paper) or
            ``"rmsnorm"`` (chapter 7).
        qk_norm: normalise each head's queries and keys (with ``norm``'s kind) before their dot
            product, in every attention (QK-norm, Dehghani et al. 2023; chapter 7).

    With ``n_encoder_layers=0`` and one vocabulary the config describes a decoder-only model
    (:meth:`decoder_only` builds one), with ``n_decoder_layers=0`` an encoder-only one
    (:meth:`encoder_only`).

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
    n_kv_heads: int | None = None
    norm: str = "layernorm"
    qk_norm: bool = False

    def __post_init__(self) -> None:
        for name in ("src_vocab_size", "tgt_vocab_size", "d_model", "n_heads", "d_ff", "max_len", "relative_max_distance"):
            check_int(name, getattr(self, name))
        for name in ("n_encoder_layers", "n_decoder_layers"):
            check_int(name, getattr(self, name), minimum=0)
        if self.d_model % self.n_heads != 0:
            lower = self.d_model - self.d_model % self.n_heads
            raise ValueError(
                f"d_model={self.d_model} is not divisible by n_heads={self.n_heads}: each head gets "
                f"d_model / n_heads dimensions. Use d_model={lower} or {lower + self.n_heads}, or a "
                f"number of heads that divides {self.d_model}"
            )
        for name in ("dropout", "attn_dropout"):
            check_number(name, getattr(self, name), 0, 1)
        check_number("layer_norm_eps", self.layer_norm_eps, 0, 1, low_open=True)
        check_choice("activation", self.activation, [*ACTIVATIONS, *GATED_ACTIVATIONS])
        check_choice("norm", self.norm, NORMS)
        for name in ("norm_first", "share_embeddings", "tie_output", "qk_norm"):
            check_bool(name, getattr(self, name))
        check_choice("positional", self.positional, POSITIONAL)
        self._check_positions()
        if self.share_embeddings and self.src_vocab_size != self.tgt_vocab_size:
            raise ValueError(
                f"share_embeddings needs one joint vocabulary, but src_vocab_size={self.src_vocab_size} "
                f"!= tgt_vocab_size={self.tgt_vocab_size}; build a joint vocabulary or set share_embeddings=False"
            )
        check_int("n_kv_heads", self.n_kv_heads, optional=True)
        if self.n_kv_heads is not None and self.n_heads % self.n_kv_heads != 0:
            raise ValueError(f"n_kv_heads={self.n_kv_heads} must divide n_heads={self.n_heads}: each key/value head serves "
                             "a group of query heads")
        check_int("pad_id", self.pad_id, minimum=0)
        if self.pad_id >= min(self.src_vocab_size, self.tgt_vocab_size):
            raise ValueError(f"pad_id={self.pad_id} must be a valid id in both vocabularies")

    def _check_positions(self) -> None:
        """The positional scheme's own checks (RoPE: an even head width), made by building its modules on
        the ``meta`` device (shapes only, nothing allocated): the table entry carries them, not this config."""
        try:
            with torch.device("meta"):
                POSITIONAL[self.positional](self, False)
        except ValueError as error:
            raise ValueError(f"positional={self.positional!r} with d_model={self.d_model}, n_heads={self.n_heads}: "
                             f"{error}") from None

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

    @classmethod
    def encoder_only(cls, preset: str, vocab_size: int, **overrides: Any) -> TransformerConfig:
        """A preset's sizes for an encoder-only model (:class:`~transformer_lib.masked_lm.EncoderOnlyTransformer`):
        no decoder, one vocabulary.

        Example:
            >>> cfg = TransformerConfig.encoder_only("tiny", vocab_size=20)
            >>> cfg.n_encoder_layers, cfg.n_decoder_layers
            (2, 0)
        """
        return cls.from_preset(
            preset, src_vocab_size=vocab_size, tgt_vocab_size=vocab_size, n_decoder_layers=0,
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
        a million layers, which would fill the memory or run for hours before failing. (The model as a
        whole: :func:`transformer_lib.checkpoint.model_config_from_file`.)
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
# Upper bound on a file's model as a whole (checkpoint.model_config_from_file): 1e9 float32 parameters
# are 4 GB, 16 GB with Adam's state. "big" has 213 million; sizes each within FILE_CONFIG_LIMITS can
# still describe 1e12.
FILE_PARAMETER_LIMIT = 1_000_000_000
