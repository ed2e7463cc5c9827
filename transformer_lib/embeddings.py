"""From token ids to vectors: token embeddings and positional information.

Shapes:

    B  batch size    L  sequence length    D  model width (d_model)    V  vocabulary size
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

__all__ = [
    "TokenEmbedding",
    "sinusoidal_table",
    "SinusoidalPositionalEncoding",
    "LearnedPositionalEmbedding",
]


def _check_tokens(tokens: Tensor, vocab_size: int) -> None:
    if not isinstance(tokens, Tensor):
        raise TypeError(f"token ids must be a torch.Tensor, got {type(tokens).__name__}")
    if tokens.is_floating_point() or tokens.is_complex() or tokens.dtype == torch.bool:
        raise TypeError(
            f"token ids must be integers (torch.long), got dtype {tokens.dtype}; "
            "an embedding looks rows up by index, so a float id has no meaning"
        )
    if tokens.numel() and not torch.compiler.is_compiling():
        low, high = int(tokens.min()), int(tokens.max())
        if low < 0 or high >= vocab_size:
            bad = low if low < 0 else high
            raise ValueError(f"token id {bad} is outside the vocabulary [0, {vocab_size - 1}] (vocab_size={vocab_size})")


class TokenEmbedding(nn.Module):
    r"""A learned lookup table from token id to vector, scaled by :math:`\sqrt{d_\text{model}}`.

    The paper multiplies embeddings by :math:`\sqrt{d_\text{model}}` (section 3.4). With weights
    drawn from :math:`\mathcal{N}(0, 1/d_\text{model})`, as the reference implementation does and
    :func:`transformer_lib.model.init_parameters` does, each scaled coordinate has variance 1, the
    same scale as the sinusoidal positions added next; and when the matrix is tied to the output
    projection, the unscaled weights keep the logits small at initialisation.

    Args:
        vocab_size: ``V``.
        d_model: ``D``.

    Shape:
        tokens ``(B, L)`` integer ids in ``[0, V)`` -> ``(B, L, D)``.
    """

    def __init__(self, vocab_size: int, d_model: int) -> None:
        super().__init__()
        self.vocab_size = vocab_size
        self.d_model = d_model
        self.embedding = nn.Embedding(vocab_size, d_model)
        self.scale = math.sqrt(d_model)

    @property
    def weight(self) -> nn.Parameter:
        """The ``(V, D)`` table; tying makes this the very same Parameter as the output projection's."""
        return self.embedding.weight

    def forward(self, tokens: Tensor) -> Tensor:
        _check_tokens(tokens, self.vocab_size)
        return self.embedding(tokens) * self.scale  # (B, L, D)


def sinusoidal_table(max_len: int, d_model: int) -> Tensor:
    r"""The paper's positional encodings (section 3.5) as a ``(max_len, d_model)`` table.

    .. math:: PE_{(p, 2i)} = \sin(p / 10000^{2i/d}), \qquad PE_{(p, 2i+1)} = \cos(p / 10000^{2i/d})

    Works for odd ``d_model``: the last column is then a sine without its cosine partner.
    """
    if max_len < 1 or d_model < 1:
        raise ValueError(f"max_len and d_model must be positive, got max_len={max_len}, d_model={d_model}")
    position = torch.arange(max_len, dtype=torch.float64)[:, None]  # (max_len, 1)
    # 1 / 10000^(2i/d) for i = 0 .. ceil(d/2) - 1, computed in float64 and stored as float32
    inv_freq = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float64) * (-math.log(10000.0) / d_model))
    angles = position * inv_freq  # (max_len, ceil(D/2))
    table = torch.zeros(max_len, d_model, dtype=torch.float64)
    table[:, 0::2] = torch.sin(angles)  # ceil(D/2) columns
    table[:, 1::2] = torch.cos(angles[:, : d_model // 2])  # floor(D/2) columns
    return table.float()  # (max_len, D)


class _PositionalBase(nn.Module):
    """Shared argument checking: positions ``start .. start + L - 1`` must exist in the table."""

    max_len: int
    d_model: int

    def _check(self, x: Tensor, start: int) -> None:
        if x.dim() != 3 or x.size(-1) != self.d_model:
            raise ValueError(f"expected input of shape (B, L, {self.d_model}), got {tuple(x.shape)}")
        end = start + x.size(1)
        if start < 0 or end > self.max_len:
            raise ValueError(
                f"positions {start}..{end - 1} do not fit the positional table of max_len={self.max_len}: "
                f"the sequence (length {x.size(1)}) is too long; shorten it or raise max_len in the config"
            )


class SinusoidalPositionalEncoding(_PositionalBase):
    """Adds the fixed sinusoidal table to its input. No parameters.

    The table is a registered buffer named ``pe`` (it moves with ``.to(device)``) and is not saved in
    checkpoints, since it is a pure function of ``max_len`` and ``d_model``.

    Shape:
        x ``(B, L, D)`` -> ``(B, L, D)``; ``start`` offsets positions (incremental decoding).
    """

    def __init__(self, d_model: int, max_len: int = 512) -> None:
        super().__init__()
        self.d_model = d_model
        self.max_len = max_len
        self.register_buffer("pe", sinusoidal_table(max_len, d_model), persistent=False)

    def forward(self, x: Tensor, start: int = 0) -> Tensor:
        self._check(x, start)
        return x + self.pe[start : start + x.size(1)].to(x.dtype)  # (B, L, D)


class LearnedPositionalEmbedding(_PositionalBase):
    """Adds a learned vector per position (as BERT and GPT-2 do). ``max_len * d_model`` parameters,
    and no meaningful vector for positions beyond those seen in training.

    Shape:
        x ``(B, L, D)`` -> ``(B, L, D)``; ``start`` offsets positions (incremental decoding).
    """

    def __init__(self, d_model: int, max_len: int = 512) -> None:
        super().__init__()
        self.d_model = d_model
        self.max_len = max_len
        self.embedding = nn.Embedding(max_len, d_model)

    def forward(self, x: Tensor, start: int = 0) -> Tensor:
        self._check(x, start)
        positions = torch.arange(start, start + x.size(1), device=x.device)  # (L,)
        return x + self.embedding(positions)  # (B, L, D)
