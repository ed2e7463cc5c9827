"""From token ids to vectors: token embeddings and positional information.

Positions added to the input (chapter 3): :class:`SinusoidalPositionalEncoding` (the paper's) and
:class:`LearnedPositionalEmbedding`. Positions *inside* attention (chapter 7), used by the
self-attention subclasses of :mod:`transformer_lib.positional_attention`:
:class:`RotaryEmbedding` (RoPE) rotates queries and keys; :class:`ALiBiBias` and
:class:`RelativePositionBias` add a bias to the scores that depends on the distance ``j - i``.

Shapes::

    B  batch size    L  sequence length    D  model width (d_model)    V  vocabulary size
    H  heads         Dh head width (d_model / H)    T  queries    (keys: L)
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from .validation import check_int


__all__ = [
    "TokenEmbedding",
    "sinusoidal_table",
    "SinusoidalPositionalEncoding",
    "LearnedPositionalEmbedding",
    "NoPositionalEncoding",
    "RotaryEmbedding",
    "alibi_slopes",
    "ALiBiBias",
    "RelativePositionBias",
]


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
        tokens ``(B, L)`` integer ids in ``[0, V)`` -> ``(B, L, D)``. The ids are not checked here
        (reading them would stall a GPU at every step): the data pipeline and the decoding
        functions check them where they enter.
    """

    def __init__(self, vocab_size: int, d_model: int) -> None:
        super().__init__()
        check_int("vocab_size", vocab_size)
        check_int("d_model", d_model)
        self.vocab_size = vocab_size
        self.d_model = d_model
        self.embedding = nn.Embedding(vocab_size, d_model)
        self.scale = math.sqrt(d_model)

    @property
    def weight(self) -> nn.Parameter:
        """The ``(V, D)`` table; tying makes this the very same Parameter as the output projection's."""
        return self.embedding.weight  # type: ignore[return-value]  # nn.Embedding.weight is a Parameter

    def forward(self, tokens: Tensor) -> Tensor:
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

    pe: Tensor  # (max_len, D), a buffer

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


# --- Positions inside attention (chapter 7) -------------------------------------------------------


class NoPositionalEncoding(nn.Module):
    """Adds nothing to the input: for models whose positions enter inside attention instead
    (RoPE, ALiBi, relative position bias). Same call as the other positional modules.

    Shape:
        x ``(B, L, D)`` -> ``x`` unchanged; ``start`` is accepted and unused.
    """

    def forward(self, x: Tensor, start: int = 0) -> Tensor:
        return x


class RotaryEmbedding(nn.Module):
    r"""Rotary position embedding (RoPE, Su et al. 2021): rotate queries and keys by their position.

    Coordinates ``(2i, 2i+1)`` of a query or key at position :math:`p` form a pair that is rotated
    by the angle :math:`p\,\theta_i`, with :math:`\theta_i = \text{base}^{-2i/D_h}`: the frequencies
    of the sinusoidal table (chapter 3). Rotations keep lengths, and rotating the query by
    :math:`m\theta` and the key by :math:`n\theta` changes their dot product only through the
    difference:

    .. math:: \langle R_{m} q, R_{n} k \rangle = \langle q, R_{n - m}\, k \rangle

    so the score depends on the *relative* position while each vector is rotated by its absolute
    one, and nothing is added to the token embeddings. This is the paper's pairing of neighbouring
    coordinates (also Meta's LLaMA code); GPT-NeoX and Hugging Face pair ``i`` with ``i + Dh/2``
    ("rotate half"), the same method up to a fixed permutation of each head's coordinates.

    The angles are registered buffers ``cos`` and ``sin`` ``(max_len, Dh/2)``, not saved in
    checkpoints.

    Args:
        head_dim: width ``Dh`` of the vectors rotated (each head's ``d_k``); must be even.
        max_len: the most positions the tables cover.
        base: the wavelength scale (10,000 as in the paper and in the sinusoidal table).

    Shape:
        x ``(..., L, Dh)``, e.g. queries ``(B, H, T, Dh)`` -> the same shape; ``start`` is the
        position of the first of the ``L`` vectors (incremental decoding).

    Example:
        >>> rope = RotaryEmbedding(head_dim=4, max_len=16)
        >>> q = torch.randn(1, 1, 3, 4)
        >>> torch.allclose(rope(q).norm(dim=-1), q.norm(dim=-1))  # a rotation keeps lengths
        True
    """

    cos: Tensor  # (max_len, Dh/2), a buffer
    sin: Tensor  # (max_len, Dh/2), a buffer

    def __init__(self, head_dim: int, max_len: int = 512, base: float = 10000.0) -> None:
        super().__init__()
        check_int("head_dim", head_dim, minimum=2)
        if head_dim % 2:
            raise ValueError(
                f"RoPE rotates pairs of coordinates, so head_dim must be a positive even number, got {head_dim!r}; "
                "with d_model / n_heads odd, change d_model or n_heads"
            )
        if max_len < 1 or base <= 0:
            raise ValueError(f"max_len and base must be positive, got max_len={max_len}, base={base}")
        self.head_dim = head_dim
        self.max_len = max_len
        self.base = base
        inv_freq = base ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)  # (Dh/2,)
        angles = torch.arange(max_len, dtype=torch.float64)[:, None] * inv_freq  # (max_len, Dh/2)
        self.register_buffer("cos", angles.cos().float(), persistent=False)
        self.register_buffer("sin", angles.sin().float(), persistent=False)

    def forward(self, x: Tensor, start: int = 0) -> Tensor:
        L = x.size(-2)
        if x.size(-1) != self.head_dim:
            raise ValueError(f"expected vectors of width head_dim={self.head_dim}, got shape {tuple(x.shape)}")
        if start < 0 or start + L > self.max_len:
            raise ValueError(
                f"positions {start}..{start + L - 1} do not fit the rotary tables of max_len={self.max_len}: "
                "the sequence is too long; shorten it or raise max_len in the config"
            )
        cos = self.cos[start : start + L].to(x.dtype)  # (L, Dh/2)
        sin = self.sin[start : start + L].to(x.dtype)  # (L, Dh/2)
        x_even, x_odd = x[..., 0::2], x[..., 1::2]  # (..., L, Dh/2): the two coordinates of each pair
        rotated = torch.stack([x_even * cos - x_odd * sin, x_even * sin + x_odd * cos], dim=-1)  # (..., L, Dh/2, 2)
        return rotated.flatten(-2)  # (..., L, Dh), each pair back in its place


def _check_heads(n_heads: int) -> None:
    check_int("n_heads", n_heads)


def _relative_distance(n_queries: int, n_keys: int, query_start: int, device: torch.device) -> Tensor:
    """``j - i`` for query ``i`` at absolute position ``query_start + i`` and key ``j``: ``(T, L)``."""
    if n_queries < 1 or n_keys < 1 or query_start < 0:
        raise ValueError(
            f"need n_queries >= 1, n_keys >= 1 and query_start >= 0, got {n_queries}, {n_keys}, {query_start}"
        )
    query_position = torch.arange(query_start, query_start + n_queries, device=device)[:, None]  # (T, 1)
    key_position = torch.arange(n_keys, device=device)[None, :]  # (1, L)
    return key_position - query_position  # (T, L), negative for keys in the past


def alibi_slopes(n_heads: int) -> Tensor:
    r"""ALiBi's per-head slopes (Press et al. 2022): a geometric sequence.

    For ``n_heads`` a power of two, :math:`m_h = 2^{-8h/H}` for :math:`h = 1 .. H`
    (8 heads: 1/2, 1/4, ..., 1/256). Otherwise, as the paper's code does: the slopes for the power of
    two just below ``H``, then every other slope of the sequence for twice that many heads (the
    ones that fall in between), until there are ``H``.

    Example:
        >>> alibi_slopes(4)
        tensor([0.2500, 0.0625, 0.0156, 0.0039])
    """
    _check_heads(n_heads)

    def power_of_two(n: int) -> list[float]:
        return [2.0 ** (-8.0 * h / n) for h in range(1, n + 1)]

    below = 2 ** math.floor(math.log2(n_heads))
    slopes = power_of_two(below) + power_of_two(2 * below)[0::2][: n_heads - below]
    return torch.tensor(slopes, dtype=torch.float32)  # (H,)


class ALiBiBias(nn.Module):
    r"""Attention with linear biases (ALiBi, Press et al. 2022): a penalty growing with distance.

    Head :math:`h` adds :math:`-m_h\,|i - j|` to the score of query :math:`i` and key :math:`j`
    (slopes :math:`m_h` from :func:`alibi_slopes`), and nothing is added to the token embeddings.
    Every head prefers near keys, each with its own reach; there are no parameters, and no
    largest position.

    The paper defines ALiBi for causal language models, where :math:`j \le i`; the symmetric
    distance used here is the usual extension to an encoder, and under a causal mask it is the
    paper's bias exactly. (Adding :math:`m_h j` instead gives the same softmax in a causal model:
    the two differ by :math:`m_h i`, a constant in each row, which is how the paper's code does it.)

    Args:
        n_heads: ``H``.

    Shape:
        ``forward(n_queries, n_keys, query_start=0)`` -> bias ``(1, H, T, L)``, for queries at
        absolute positions ``query_start .. query_start + T - 1`` and keys at ``0 .. L - 1``.

    Example:
        >>> ALiBiBias(n_heads=2)(3, 3)[0, 0]
        tensor([[ 0.0000, -0.0625, -0.1250],
                [-0.0625,  0.0000, -0.0625],
                [-0.1250, -0.0625,  0.0000]])
    """

    slopes: Tensor  # (H,), a buffer

    def __init__(self, n_heads: int) -> None:
        super().__init__()
        _check_heads(n_heads)
        self.n_heads = n_heads
        self.register_buffer("slopes", alibi_slopes(n_heads), persistent=False)

    def forward(self, n_queries: int, n_keys: int, query_start: int = 0) -> Tensor:
        distance = _relative_distance(n_queries, n_keys, query_start, self.slopes.device).abs()  # (T, L)
        return (self.slopes[:, None, None] * -distance)[None]  # (1, H, T, L)


class RelativePositionBias(nn.Module):
    r"""A learned score bias per head and relative distance, clipped at ``max_distance``.

    Query :math:`i` and key :math:`j` get the bias :math:`b_h[\mathrm{clip}(j - i, -k, k)]`: one
    learned number per head and distance, and one shared by all distances beyond :math:`k`. The
    clipping is Shaw et al. (2018)'s (they learn vectors, not scalars); scalar biases are T5's
    (Raffel et al. 2020), which buckets distances logarithmically instead, to reach far with few
    parameters. As in T5, one module serves every layer of a stack.

    The biases start at zero: at initialisation the model has no positional information at all.

    Args:
        n_heads: ``H``.
        max_distance: ``k``; distances beyond it share the bias of distance ``k`` (or ``-k``).
        bidirectional: learn separate biases for keys before and after the query (an encoder);
            with ``False`` all keys after the query share the bias of distance 0, the
            right choice under a causal mask, which blocks them anyway.

    Shape:
        ``forward(n_queries, n_keys, query_start=0)`` -> bias ``(1, H, T, L)``, as :class:`ALiBiBias`.
    """

    def __init__(self, n_heads: int, max_distance: int, bidirectional: bool = True) -> None:
        super().__init__()
        _check_heads(n_heads)
        check_int("max_distance", max_distance)
        self.n_heads = n_heads
        self.max_distance = max_distance
        self.bidirectional = bidirectional
        n_distances = 2 * max_distance + 1 if bidirectional else max_distance + 1
        self.bias_table = nn.Parameter(torch.zeros(n_heads, n_distances))  # (H, distances -k .. k or -k .. 0)

    def forward(self, n_queries: int, n_keys: int, query_start: int = 0) -> Tensor:
        distance = _relative_distance(n_queries, n_keys, query_start, self.bias_table.device)  # (T, L)
        k = self.max_distance
        index = distance.clamp(-k, k if self.bidirectional else 0) + k  # (T, L), column of bias_table
        return self.bias_table[:, index][None]  # (1, H, T, L)
