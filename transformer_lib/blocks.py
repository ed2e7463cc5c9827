"""The building blocks: feed-forward, residual sublayers, encoder and decoder layers, and stacks.

Shapes::

    B  batch size    S  source length    T  target length    D  model width (d_model)    H  heads

Each layer receives its sublayers (attention, feed-forward) ready-made; :mod:`transformer_lib.model`
assembles them from a configuration. Both layer-norm placements are supported:

- **Post-LN** (``norm_first=False``, the 2017 paper): ``x = LayerNorm(x + Dropout(f(x)))``.
- **Pre-LN** (``norm_first=True``, what most current code does): ``x = x + Dropout(f(LayerNorm(x)))``,
  plus one final LayerNorm after the stack. The residual path is then an identity from input to
  output, which keeps gradients well scaled and lets the model train without warm-up
  (Xiong et al. 2020, "On Layer Normalization in the Transformer Architecture").
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType

from torch import Tensor, nn

from .dropout import Dropout
from .validation import check_bool, check_choice, check_int

__all__ = [
    "ACTIVATIONS",
    "GATED_ACTIVATIONS",
    "FeedForward",
    "GatedFeedForward",
    "Residual",
    "EncoderLayer",
    "DecoderLayer",
    "Encoder",
    "Decoder",
]

# The feed-forward's activations by name (TransformerConfig.activation takes its names from here).
ACTIVATIONS: Mapping[str, type[nn.Module]] = MappingProxyType({"relu": nn.ReLU, "gelu": nn.GELU})
# The gates of a gated feed-forward by name: "swiglu" gates with SiLU (Swish, beta = 1), Shazeer 2020.
GATED_ACTIVATIONS: Mapping[str, type[nn.Module]] = MappingProxyType({"swiglu": nn.SiLU})


def _positions_as_rows(x: Tensor) -> Tensor:
    """``(..., D)`` -> ``(N, D)``, every position a row (a view when ``x`` is contiguous; 2-D and 1-D
    inputs as they are). ``nn.Linear`` reshapes a ``(B, T, D)`` input to these rows and back at each
    call; a position-wise network that works on the rows reshapes twice in all, not twice per linear map."""
    return x.flatten(0, -2) if x.dim() > 2 else x


class FeedForward(nn.Module):
    r"""Position-wise feed-forward network: :math:`\mathrm{FFN}(x) = W_2\,\phi(W_1 x + b_1) + b_2`.

    The same two linear maps are applied to every position separately (a 1x1 convolution).

    Args:
        d_model: input and output width ``D``.
        d_ff: hidden width (2048 in the base model, 4x ``d_model``).
        dropout: dropout after the activation, as in ``nn.TransformerEncoderLayer``.
        activation: ``"relu"`` (paper) or ``"gelu"``.

    Shape:
        ``(..., D)`` -> ``(..., D)``.
    """

    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.0, activation: str = "relu") -> None:
        super().__init__()
        check_int("d_model", d_model)
        check_int("d_ff", d_ff)
        self.linear1 = nn.Linear(d_model, d_ff)
        check_choice("activation", activation, ACTIVATIONS)
        self.activation = ACTIVATIONS[activation]()
        self.dropout = Dropout(dropout)
        self.linear2 = nn.Linear(d_ff, d_model)

    def forward(self, x: Tensor) -> Tensor:
        rows = _positions_as_rows(x)  # (N, D): one row per position, each transformed alike
        out = self.linear2(self.dropout(self.activation(self.linear1(rows))))  # (N, D)
        return out.view(x.shape)  # (..., D)


class GatedFeedForward(nn.Module):
    r"""Gated feed-forward network (GLU variants, Shazeer 2020):
    :math:`\mathrm{FFN}(x) = W_2\,(\phi(W_g x) \odot W_1 x)`.

    One projection of ``x`` gates another, element by element; with :math:`\phi` = SiLU this is
    SwiGLU (PaLM, LLaMA). It has three matrices where :class:`FeedForward` has two, so at equal
    parameter count ``d_ff`` is about 2/3 of the ungated width (Shazeer 2020 compares them so). No
    biases, as in the paper.

    Args:
        d_model: input and output width ``D``.
        d_ff: hidden width.
        dropout: dropout on the gated hidden layer (where :class:`FeedForward` has it).
        activation: the gate's name in :data:`GATED_ACTIVATIONS`: ``"swiglu"``.

    Shape:
        ``(..., D)`` -> ``(..., D)``.
    """

    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.0, activation: str = "swiglu") -> None:
        super().__init__()
        check_choice("activation", activation, GATED_ACTIVATIONS)
        self.linear1 = nn.Linear(d_model, d_ff, bias=False)  # W_1: what passes
        self.linear_gate = nn.Linear(d_model, d_ff, bias=False)  # W_g: how much of it passes
        self.activation = GATED_ACTIVATIONS[activation]()
        self.dropout = Dropout(dropout)
        self.linear2 = nn.Linear(d_ff, d_model, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        rows = _positions_as_rows(x)  # (N, D)
        hidden = self.activation(self.linear_gate(rows)) * self.linear1(rows)  # (N, d_ff)
        return self.linear2(self.dropout(hidden)).view(x.shape)  # (..., D)


class Residual(nn.Module):
    """A residual connection around a sublayer, with its LayerNorm before (Pre-LN) or after (Post-LN).

    Use it in one call, ``residual(x, sublayer)``, or in two steps when the sublayer returns more
    than a tensor (attention also returns its weights)::

        h = residual.sublayer_input(x)           # LayerNorm(x) in Pre-LN, x in Post-LN
        out, attn_weights = attention(h, h, h)
        x = residual.add(x, out)                 # x + Dropout(out), then LayerNorm in Post-LN

    Args:
        d_model: width ``D``.
        dropout: dropout on the sublayer's output before it is added (paper section 5.4).
        norm_first: ``True`` for Pre-LN, ``False`` for Post-LN.
        eps: the norm's epsilon.
        norm: the normalisation, called as ``norm(d_model, eps=eps)``: ``nn.LayerNorm`` (the paper)
            or another entry of :data:`transformer_lib.normalization.NORMS` (RMSNorm, chapter 7).
    """

    def __init__(self, d_model: int, dropout: float = 0.0, norm_first: bool = False, eps: float = 1e-5,
                 norm: Callable[..., nn.Module] = nn.LayerNorm) -> None:
        super().__init__()
        check_bool("norm_first", norm_first)
        self.norm_first = norm_first
        self.norm = norm(d_model, eps=eps)
        self.dropout = Dropout(dropout)

    def sublayer_input(self, x: Tensor) -> Tensor:
        return self.norm(x) if self.norm_first else x

    def add(self, x: Tensor, sublayer_output: Tensor) -> Tensor:
        x = x + self.dropout(sublayer_output)
        return x if self.norm_first else self.norm(x)

    def forward(self, x: Tensor, sublayer: Callable[[Tensor], Tensor]) -> Tensor:
        return self.add(x, sublayer(self.sublayer_input(x)))


class EncoderLayer(nn.Module):
    """Self-attention, then feed-forward, each inside a :class:`Residual`.

    The layer receives its sublayers (as the Annotated Transformer's ``make_model`` passes them):
    any self-attention with :class:`~transformer_lib.attention.MultiHeadAttention`'s call, so
    positions inside attention (chapter 7) or grouped-query attention need no change here.

    Args:
        d_model: width ``D``.
        self_attn: the self-attention, e.g. ``MultiHeadAttention(d_model, n_heads, attn_dropout)``.
        feed_forward: e.g. ``FeedForward(d_model, d_ff, dropout)``.
        dropout: residual dropout (on each sublayer's output).
        norm_first: Pre-LN (``True``) or Post-LN (``False``).
        eps: the norm's epsilon.
        norm: the normalisation of each :class:`Residual` (default ``nn.LayerNorm``).

    Shape:
        x ``(B, S, D)``, src_mask broadcastable to ``(B, H, S, S)`` -> ``(B, S, D)``, and the
        attention weights ``(B, H, S, S)`` if ``need_weights`` else ``None``.

    Example:
        >>> from transformer_lib.attention import MultiHeadAttention
        >>> layer = EncoderLayer(8, MultiHeadAttention(8, n_heads=2), FeedForward(8, d_ff=32))
        >>> layer(torch.randn(2, 5, 8))[0].shape
        torch.Size([2, 5, 8])
    """

    def __init__(
        self,
        d_model: int,
        self_attn: nn.Module,
        feed_forward: nn.Module,
        dropout: float = 0.1,
        norm_first: bool = False,
        eps: float = 1e-5,
        norm: Callable[..., nn.Module] = nn.LayerNorm,
    ) -> None:
        super().__init__()
        self.self_attn = self_attn
        self.feed_forward = feed_forward
        self.attn_residual = Residual(d_model, dropout, norm_first, eps, norm)
        self.ff_residual = Residual(d_model, dropout, norm_first, eps, norm)

    def forward(self, x: Tensor, src_mask: Tensor | None = None, need_weights: bool = False) -> tuple[Tensor, Tensor | None]:
        h = self.attn_residual.sublayer_input(x)
        h, attn_weights = self.self_attn(h, h, h, mask=src_mask, need_weights=need_weights)
        x = self.attn_residual.add(x, h)  # (B, S, D)
        x = self.ff_residual(x, self.feed_forward)  # (B, S, D)
        return x, attn_weights


class DecoderLayer(nn.Module):
    """Masked self-attention, cross-attention over the encoder memory, then feed-forward.

    Args: as :class:`EncoderLayer`, and ``cross_attn``, the attention from the target positions
    to the encoder's memory.

    Shape:
        x ``(B, T, D)``; memory ``(B, S, D)``; tgt_mask broadcastable to ``(B, H, T, T)``;
        src_mask broadcastable to ``(B, H, T, S)``. Returns ``(x, self_weights, cross_weights)``
        with ``x`` ``(B, T, D)`` and the weights ``(B, H, T, T)``/``(B, H, T, S)`` or ``None``.
    """

    def __init__(
        self,
        d_model: int,
        self_attn: nn.Module,
        cross_attn: nn.Module,
        feed_forward: nn.Module,
        dropout: float = 0.1,
        norm_first: bool = False,
        eps: float = 1e-5,
        norm: Callable[..., nn.Module] = nn.LayerNorm,
    ) -> None:
        super().__init__()
        self.self_attn = self_attn
        self.cross_attn = cross_attn
        self.feed_forward = feed_forward
        self.self_attn_residual = Residual(d_model, dropout, norm_first, eps, norm)
        self.cross_attn_residual = Residual(d_model, dropout, norm_first, eps, norm)
        self.ff_residual = Residual(d_model, dropout, norm_first, eps, norm)

    def forward(
        self,
        x: Tensor,
        memory: Tensor,
        src_mask: Tensor | None = None,
        tgt_mask: Tensor | None = None,
        need_weights: bool = False,
    ) -> tuple[Tensor, Tensor | None, Tensor | None]:
        h = self.self_attn_residual.sublayer_input(x)
        h, self_weights = self.self_attn(h, h, h, mask=tgt_mask, need_weights=need_weights)
        x = self.self_attn_residual.add(x, h)  # (B, T, D)
        h = self.cross_attn_residual.sublayer_input(x)
        h, cross_weights = self.cross_attn(h, memory, memory, mask=src_mask, need_weights=need_weights)
        x = self.cross_attn_residual.add(x, h)  # (B, T, D)
        x = self.ff_residual(x, self.feed_forward)  # (B, T, D)
        return x, self_weights, cross_weights


class Encoder(nn.Module):
    """A stack of encoder layers, with the final LayerNorm that Pre-LN needs (``final_norm``).

    In Pre-LN the residual stream is never normalised inside the layers, so the stack's output
    must be; in Post-LN each layer already ends with a LayerNorm and ``final_norm`` is ``None``.

    Shape:
        x ``(B, S, D)`` -> ``(B, S, D)`` and a list with one weight tensor (or ``None``) per layer.
    """

    def __init__(self, layers: Iterable[EncoderLayer], final_norm: nn.Module | None = None) -> None:
        super().__init__()
        self.layers = nn.ModuleList(layers)
        self.final_norm = final_norm

    def forward(self, x: Tensor, src_mask: Tensor | None = None, need_weights: bool = False) -> tuple[Tensor, list[Tensor | None]]:
        weights = []
        for layer in self.layers:
            x, attn_weights = layer(x, src_mask, need_weights)
            weights.append(attn_weights)
        if self.final_norm is not None:
            x = self.final_norm(x)
        return x, weights


class Decoder(nn.Module):
    """A stack of decoder layers, with the final LayerNorm that Pre-LN needs (``final_norm``).

    Shape:
        x ``(B, T, D)``, memory ``(B, S, D)`` -> ``(B, T, D)`` and two lists (self- and
        cross-attention weights per layer, or ``None`` entries).
    """

    def __init__(self, layers: Iterable[DecoderLayer], final_norm: nn.Module | None = None) -> None:
        super().__init__()
        self.layers = nn.ModuleList(layers)
        self.final_norm = final_norm

    def forward(
        self,
        x: Tensor,
        memory: Tensor,
        src_mask: Tensor | None = None,
        tgt_mask: Tensor | None = None,
        need_weights: bool = False,
    ) -> tuple[Tensor, list[Tensor | None], list[Tensor | None]]:
        self_weights, cross_weights = [], []
        for layer in self.layers:
            x, w_self, w_cross = layer(x, memory, src_mask, tgt_mask, need_weights)
            self_weights.append(w_self)
            cross_weights.append(w_cross)
        if self.final_norm is not None:
            x = self.final_norm(x)
        return x, self_weights, cross_weights
