"""Scaled dot-product attention and multi-head attention (chapter 1); linear attention (chapter 7).

Shapes::

    B   batch size              H   number of (query) heads    Hkv  key/value heads (grouped-query)
    T   number of queries       L   number of keys/values (L = T in self-attention, S in cross-attention)
    Dk  query/key width         Dv  value width (per head inside MultiHeadAttention)

Masks are boolean with ``True`` = "may attend" (see :mod:`transformer_lib.masking`) and must
broadcast to the scores ``(..., T, L)``.

:class:`MultiHeadAttention` is the layer of chapter 1 and nothing more. Later chapters add to it
without changing it: the key/value cache of chapter 6 (:mod:`transformer_lib.kv_cache`) wraps it,
and positions inside attention (chapter 7, :mod:`transformer_lib.positional_attention`) are
subclasses that override its one seam, :meth:`MultiHeadAttention.attend`.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .validation import check_bias, check_bool, check_floats, check_int, check_mask, check_number

__all__ = [
    "CausalMask", "CAUSAL", "scaled_dot_product_attention", "softmax_attention", "fused_attention",
    "share_key_value_heads", "stacked_linear", "MultiHeadAttention", "linear_attention", "causal_linear_attention",
]


class CausalMask:
    """Causal masking and nothing else, not made into a tensor: :data:`CAUSAL` (chapter 2's causal mask).

    Attention passes it to ``F.scaled_dot_product_attention`` as ``is_causal=True``, whose kernels
    skip the future without reading a ``T x T`` mask (the flash kernel: memory linear in ``T``), and
    makes the tensor (:meth:`materialise`) where one is needed: for the attention weights, a score
    bias, or fewer queries than keys. :class:`~transformer_lib.model.Transformer` uses it for the
    decoder's self-attention when no target mask is given: with *right*-padded targets (as
    :func:`~transformer_lib.batching.collate` makes them) the causal mask alone gives every real
    position the output :func:`~transformer_lib.masking.target_mask` gives it, since a real position
    sees no later position, pads included, and what pad positions compute is never read.
    Left-padded targets need :func:`~transformer_lib.masking.target_mask`.
    """

    def materialise(self, n_queries: int, n_keys: int, device: torch.device | str | None = None) -> Tensor:
        """The mask as a tensor, :func:`~transformer_lib.masking.causal_mask` ``(n_queries, n_keys)``:
        ``(1, 1, T, n_keys)``, the queries the last ``T`` positions."""
        return torch.ones(n_queries, n_keys, dtype=torch.bool, device=device).tril(n_keys - n_queries)[None, None]

    def __repr__(self) -> str:
        return "CAUSAL"


CAUSAL = CausalMask()


def scaled_dot_product_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    mask: Tensor | None = None,
    dropout_p: float = 0.0,
    bias: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    r"""Attention written out: :math:`\mathrm{softmax}(QK^\top/\sqrt{d_k})\,V`.

    Args:
        query: ``(..., T, Dk)``.
        key: ``(..., L, Dk)``.
        value: ``(..., L, Dv)``.
        mask: optional boolean mask, ``True`` = may attend, broadcastable to ``(..., T, L)``.
        dropout_p: dropout probability applied to the attention weights. Pass ``0.0`` outside
            training (``MultiHeadAttention`` does this for you).
        bias: optional float tensor added to the scores, broadcastable to ``(..., T, L)``
            (positions inside attention, chapter 7).

    Returns:
        ``(output, attn_weights)`` with shapes ``(..., T, Dv)`` and ``(..., T, L)``. The weights are
        the ones actually used, i.e. after dropout (so in training their rows need not sum to 1).
        A query whose keys are *all* masked gets all-zero weights and a zero output, not NaN.
    """
    if query.size(-1) != key.size(-1):
        raise ValueError(
            f"query width {query.size(-1)} must equal key width {key.size(-1)} (both are Dk)"
        )
    if key.size(-2) != value.size(-2):
        raise ValueError(f"key has {key.size(-2)} positions but value has {value.size(-2)}; they must match")
    key, value = share_key_value_heads(query, key, value)  # grouped-query attention (chapter 7)
    d_k = query.size(-1)
    scores = query @ key.transpose(-2, -1) / math.sqrt(d_k)  # (..., T, L)
    if bias is not None:
        scores = scores + bias.to(scores.dtype)  # (..., T, L)
    return softmax_attention(scores, value, mask, dropout_p)


def softmax_attention(
    scores: Tensor, value: Tensor, mask: Tensor | None = None, dropout_p: float = 0.0
) -> tuple[Tensor, Tensor]:
    """From scores ``(..., T, L)`` to ``(output (..., T, Dv), attn_weights (..., T, L))``: mask,
    softmax over the keys, dropout, and the weighted sum of the values."""
    if mask is not None:
        check_mask(mask, scores.shape)
        # -inf, not a large finite number: exp(-inf) is exactly 0 in every dtype, so a masked key
        # gets exactly zero weight (-1e9 overflows fp16, and a finite fill can leak; see chapter 2).
        scores = scores.masked_fill(~mask, float("-inf"))
    attn_weights = torch.softmax(scores, dim=-1)  # (..., T, L)
    if mask is not None:
        # A row with every key masked is softmax(-inf, ..., -inf) = NaN; define it as all zeros.
        attn_weights = attn_weights.masked_fill(~mask, 0.0)
    if dropout_p > 0.0:
        attn_weights = F.dropout(attn_weights, p=dropout_p, training=True)
    return attn_weights @ value, attn_weights  # (..., T, Dv), (..., T, L)


def fused_attention(
    query: Tensor, key: Tensor, value: Tensor, mask: Tensor | CausalMask | None = None, dropout_p: float = 0.0,
    bias: Tensor | None = None,
) -> Tensor:
    """The same attention through PyTorch's fused ``F.scaled_dot_product_attention`` (less memory,
    no weights returned), on ``(B, H, T, Dk)`` queries and ``(B, Hkv, L, ...)`` keys and values.
    ``bias``: a float tensor added to the scores (positions inside attention, chapter 7).
    ``mask``: a boolean tensor, or :data:`~transformer_lib.masking.CAUSAL`, which reaches the kernel as
    ``is_causal=True`` (no ``T x L`` mask is made: the flash kernel, memory linear in ``T``) when the
    queries are the keys' positions (``T == L``) and there is no bias; otherwise it becomes
    :func:`~transformer_lib.masking.causal_mask`."""
    B, H, T, L = query.size(0), query.size(1), query.size(2), key.size(2)
    if isinstance(mask, CausalMask):
        if bias is None and T == L:
            return _sdpa(query, key, value, dropout_p=dropout_p, is_causal=True)  # (B, H, T, Dv)
        mask = mask.materialise(T, L, query.device)  # (1, 1, T, L)
    if mask is not None:
        check_mask(mask, (B, H, T, L))
    attn_mask = mask
    if bias is not None:
        check_bias(bias, (B, H, T, L))
        bias = bias.to(query.dtype)
        attn_mask = bias if mask is None else torch.where(mask, bias, float("-inf"))  # (B, H, T, L)
    out = _sdpa(query, key, value, attn_mask=attn_mask, dropout_p=dropout_p)  # (B, H, T, Dv)
    # (Compiled graphs keep the guard: the probe below cannot run inside one.)
    if mask is not None and (torch.compiler.is_compiling() or not _fused_attention_zeroes_empty_rows(query.device, query.dtype)):
        # Older PyTorch releases return NaN for a query with no visible key; make it 0, as the
        # explicit path does.
        out = out.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)
    return out


def _sdpa(query: Tensor, key: Tensor, value: Tensor, **options: Any) -> Tensor:
    """``F.scaled_dot_product_attention`` with ``Hkv`` key/value heads shared by the ``H`` query heads."""
    if key.size(1) != query.size(1) and not _SDPA_SHARES_HEADS:  # grouped-query attention on an older PyTorch
        key, value = share_key_value_heads(query, key, value)
    grouped: dict[str, Any] = {"enable_gqa": True} if key.size(1) != query.size(1) else {}  # K/V heads shared in the kernel, not copied
    return F.scaled_dot_product_attention(query, key, value, **grouped, **options)  # (B, H, T, Dv)


# F.scaled_dot_product_attention shares key/value heads itself (enable_gqa) from PyTorch 2.5 on.
_SDPA_SHARES_HEADS = tuple(int(part) for part in torch.__version__.split(".")[:2]) >= (2, 5)


def stacked_linear(x: Tensor, *layers: nn.Linear) -> Tensor:
    """``torch.cat([layer(x) for layer in layers], dim=-1)`` in one matrix product: the layers' weights
    stacked (and their biases), as ``nn.MultiheadAttention``'s ``in_proj_weight`` stacks its three
    projections. One kernel (and one in the backward pass) instead of one per layer and no copy of
    the outputs; the same numbers up to the rounding of a differently blocked product.

    Shape:
        ``(..., D_in)`` -> ``(..., sum of the layers' out_features)``.
    """
    weight = torch.cat(tuple(layer.weight for layer in layers))  # (sum of out_features, D_in)
    biases = [layer.bias for layer in layers]
    return F.linear(x, weight, None if any(b is None for b in biases) else torch.cat(tuple(biases)))


def share_key_value_heads(query: Tensor, key: Tensor, value: Tensor) -> tuple[Tensor, Tensor]:
    """Grouped-query attention: each key/value head ``(..., Hkv, L, D)`` repeated for its group of
    ``H / Hkv`` query heads, ``(..., H, L, D)``, as ``F.scaled_dot_product_attention(enable_gqa=True)``
    groups them (query head ``h`` uses key/value head ``h // (H / Hkv)``). Unchanged when the head
    counts agree (ordinary multi-head attention, or inputs without a head dimension)."""
    if query.dim() < 4 or key.size(-3) == query.size(-3):
        return key, value
    group = query.size(-3) // key.size(-3)
    return key.repeat_interleave(group, dim=-3), value.repeat_interleave(group, dim=-3)  # (..., H, L, D)


class MultiHeadAttention(nn.Module):
    r"""Multi-head attention for self- and cross-attention.

    Each of the ``H`` heads projects the inputs to its own queries/keys (width ``Dk``) and values
    (width ``Dv``), attends, and the heads' outputs are concatenated and projected to ``d_out``:

    .. math:: \mathrm{MHA}(Q, K, V) = \mathrm{Concat}(\mathrm{head}_1, \dots, \mathrm{head}_H)\,W^O,
              \quad \mathrm{head}_i = \mathrm{Attention}(Q W_i^Q, K W_i^K, V W_i^V)

    Args:
        d_model: width of the query input (and the default for everything else).
        n_heads: number of heads ``H``.
        dropout: dropout on the attention weights, active only in training mode.
        d_k: per-head query/key width ``Dk`` (default ``d_model // n_heads``).
        d_v: per-head value width ``Dv`` (default ``d_k``).
        d_out: output width (default ``d_model``).
        kdim: width of the key input (default ``d_model``); differs in cross-attention between
            models of different widths.
        vdim: width of the value input (default ``kdim``).
        bias: whether the four projections have biases.
        n_kv_heads: key/value heads ``Hkv`` (default ``n_heads``). Fewer makes grouped-query
            attention (Ainslie et al. 2023): each group of ``n_heads / n_kv_heads`` query heads
            shares one key/value head, and the key/value cache holds ``Hkv`` heads instead of
            ``H``; ``n_kv_heads=1`` is multi-query attention (Shazeer 2019).
        qk_norm: makes a norm of width ``Dk`` (called as ``qk_norm(d_k)``, e.g.
            ``transformer_lib.normalization.RMSNorm``), or ``None``. With one, each head's queries
            and keys are normalised before their dot product (QK-norm, Dehghani et al. 2023), which
            keeps the scores bounded however large the projections grow; without, they pass as
            they are (``nn.Identity``).

    Shape:
        - query: ``(B, T, d_model)``; key: ``(B, L, kdim)``; value: ``(B, L, vdim)``
        - mask: boolean, broadcastable to ``(B, H, T, L)``, ``True`` = may attend
        - output: ``(B, T, d_out)``; attention weights (if requested): ``(B, H, T, L)``

    Without ``need_weights`` the computation goes through the fused
    ``F.scaled_dot_product_attention`` (same numbers, less memory); with it, through the explicit
    :func:`scaled_dot_product_attention`, which can return the weights. Both happen in
    :meth:`attend`, the seam later chapters override; the key/value cache of chapter 6 calls
    :meth:`project_query`, :meth:`project_key_value` and :meth:`attend` one by one.

    Example:
        >>> mha = MultiHeadAttention(d_model=6, n_heads=2, d_k=4, d_v=4)
        >>> x = torch.randn(64, 3, 6)
        >>> out, weights = mha(x, x, x, need_weights=True)
        >>> out.shape, weights.shape
        (torch.Size([64, 3, 6]), torch.Size([64, 2, 3, 3]))
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        dropout: float = 0.0,
        *,
        d_k: int | None = None,
        d_v: int | None = None,
        d_out: int | None = None,
        kdim: int | None = None,
        vdim: int | None = None,
        bias: bool = True,
        n_kv_heads: int | None = None,
        qk_norm: Callable[[int], nn.Module] | None = None,
    ) -> None:
        super().__init__()
        _check_sizes(d_model, n_heads, dropout, d_k, n_kv_heads, dict(d_v=d_v, d_out=d_out, kdim=kdim, vdim=vdim))
        check_bool("bias", bias)
        self.d_model, self.n_heads, self.dropout = d_model, n_heads, dropout
        self.n_kv_heads = n_heads if n_kv_heads is None else n_kv_heads
        self.d_k = d_model // n_heads if d_k is None else d_k
        self.d_v = self.d_k if d_v is None else d_v
        self.d_out = d_model if d_out is None else d_out
        self.kdim = d_model if kdim is None else kdim
        self.vdim = self.kdim if vdim is None else vdim
        self.q_proj = nn.Linear(d_model, n_heads * self.d_k, bias=bias)
        self.k_proj = nn.Linear(self.kdim, self.n_kv_heads * self.d_k, bias=bias)
        self.v_proj = nn.Linear(self.vdim, self.n_kv_heads * self.d_v, bias=bias)
        self.out_proj = nn.Linear(n_heads * self.d_v, self.d_out, bias=bias)
        self.query_norm = nn.Identity() if qk_norm is None else qk_norm(self.d_k)
        self.key_norm = nn.Identity() if qk_norm is None else qk_norm(self.d_k)

    def split_heads(self, x: Tensor, width: int) -> Tensor:
        """``(B, L, H * width)`` -> ``(B, H, L, width)`` (as many heads as ``width`` fits)."""
        B, L, HW = x.shape
        return x.view(B, L, HW // width, width).transpose(1, 2)  # (B, H, L, width); not -1: B or L may be 0

    def merge_heads(self, x: Tensor) -> Tensor:
        """``(B, H, T, Dv)`` -> ``(B, T, H * Dv)``."""
        B, H, T, Dv = x.shape
        return x.transpose(1, 2).reshape(B, T, H * Dv)  # (B, T, H*Dv)

    def forward(
        self,
        query: Tensor,
        key: Tensor,
        value: Tensor,
        mask: Tensor | None = None,
        need_weights: bool = False,
    ) -> tuple[Tensor, Tensor | None]:
        """Attend from ``query`` to ``key``/``value``; returns ``(output, attn_weights)``, the weights
        ``(B, H, T, L)`` per head (not averaged as ``nn.MultiheadAttention`` does by default) or
        ``None`` unless ``need_weights``. The inputs' dtypes and widths are checked (no value is read)."""
        weights_dtype = self.q_proj.weight.dtype
        for name, x, width in (("query", query, self.d_model), ("key", key, self.kdim), ("value", value, self.vdim)):
            check_floats(name, x, weights_dtype, width)
        q, k, v = self.project(query, key, value)  # (B, H, T, Dk), (B, H, L, Dk), (B, H, L, Dv)
        out, attn_weights = self.attend(q, k, v, mask, need_weights)  # (B, H, T, Dv)
        return self.out_proj(self.merge_heads(out)), attn_weights  # (B, T, d_out)

    def project(self, query: Tensor, key: Tensor, value: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Queries, keys and values, one per head: ``(B, H, T, Dk)``, ``(B, Hkv, L, Dk)``, ``(B, Hkv, L, Dv)``.

        The three projections of :meth:`project_query` and :meth:`project_key_value`; in
        self-attention (one tensor is query, key and value) made by one matrix product with the
        three weights stacked (:func:`stacked_linear`), as ``nn.MultiheadAttention`` does.
        """
        if not (query is key and key is value and self._stacks_projections()):
            return self.project_query(query), *self.project_key_value(key, value)
        qkv = stacked_linear(query, self.q_proj, self.k_proj, self.v_proj)  # (B, T, (H + 2 Hkv) Dk)
        heads = self.split_heads(qkv, self.d_k)  # (B, H + 2 Hkv, T, Dk)
        q, k, v = heads.split([self.n_heads, self.n_kv_heads, self.n_kv_heads], dim=1)  # (B, H or Hkv, T, Dk)
        return self.query_norm(q), self.key_norm(k), v

    def project_query(self, query: Tensor) -> Tensor:
        """Queries ``(B, T, d_model)`` -> one per head, ``(B, H, T, Dk)`` (normalised with QK-norm)."""
        return self.query_norm(self.split_heads(self.q_proj(query), self.d_k))  # (B, H, T, Dk)

    def project_key_value(self, key: Tensor, value: Tensor) -> tuple[Tensor, Tensor]:
        """Keys ``(B, L, kdim)`` and values ``(B, L, vdim)`` -> one per key/value head, ``(B, Hkv, L, Dk)``
        and ``(B, Hkv, L, Dv)`` (``Hkv = H`` unless grouped-query; the keys normalised with QK-norm).
        Keys and values of one tensor (the encoder's memory) come from one matrix product."""
        if key is value and self._stacks_projections():
            kv = stacked_linear(key, self.k_proj, self.v_proj)  # (B, L, 2 Hkv Dk)
            k, v = self.split_heads(kv, self.d_k).chunk(2, dim=1)  # (B, Hkv, L, Dk) each
        else:
            k, v = self.split_heads(self.k_proj(key), self.d_k), self.split_heads(self.v_proj(value), self.d_v)
        return self.key_norm(k), v  # (B, Hkv, L, Dk), (B, Hkv, L, Dv)

    def _stacks_projections(self) -> bool:
        """Whether projections of one input are made by one product: when the heads of queries, keys
        and values are equally wide, so that :meth:`split_heads` splits them all at once, and only
        with this class's :meth:`split_heads` (one redefined, e.g. a pitfall of chapter 1, may assume
        ``H`` heads: it gets the projections one by one)."""
        return self.d_k == self.d_v and type(self).split_heads is MultiHeadAttention.split_heads

    def attend(
        self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | CausalMask | None, need_weights: bool,
        bias: Tensor | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        """Every head at once: ``(B, H, T, Dk)`` queries over ``(B, H, L, ...)`` keys and values
        (``bias``: added to the scores, chapter 7; ``mask`` may be ``CAUSAL``, chapter 2)."""
        dropout_p = self.dropout if self.training else 0.0
        if need_weights:  # the explicit formula, which has the weights to return
            if isinstance(mask, CausalMask):
                mask = mask.materialise(q.size(2), k.size(2), q.device)  # (1, 1, T, L)
            return scaled_dot_product_attention(q, k, v, mask, dropout_p, bias)
        return fused_attention(q, k, v, mask, dropout_p, bias), None  # same numbers, less memory


def _check_sizes(d_model: int, n_heads: int, dropout: float, d_k: int | None, n_kv_heads: int | None,
                 widths: dict[str, int | None]) -> None:
    check_int("d_model", d_model)
    check_int("n_heads", n_heads)
    for name, value in {"d_k": d_k, "n_kv_heads": n_kv_heads, **widths}.items():
        check_int(name, value, optional=True)
    if n_kv_heads is not None and n_heads % n_kv_heads != 0:
        raise ValueError(f"n_kv_heads={n_kv_heads} must divide n_heads={n_heads}: each key/value head serves a group of query heads")
    if d_k is None and d_model % n_heads != 0:
        raise ValueError(
            f"d_model={d_model} is not divisible by n_heads={n_heads}; choose a d_model that is a "
            f"multiple of {n_heads}, or pass d_k explicitly"
        )
    check_number("dropout", dropout, 0, 1)


@functools.cache
def _fused_attention_zeroes_empty_rows(device: torch.device, dtype: torch.dtype) -> bool:
    """Does ``F.scaled_dot_product_attention`` give 0, not NaN, for a query that sees no key?

    PyTorch 2.5 and later do; older releases return NaN, which :func:`fused_attention` then replaces
    with 0. Asked once per device and dtype, with a boolean and a float (``-inf``) mask, so that on a
    current PyTorch the guard costs nothing (it was ~6% of a small model's training step).
    """
    q = torch.ones(1, 1, 2, 8, device=device, dtype=dtype)  # (B, H, T, Dk): query 1 sees no key
    allowed = torch.tensor([[True, True], [False, False]], device=device).view(1, 1, 2, 2)
    additive = torch.zeros(1, 1, 2, 2, device=device, dtype=dtype).masked_fill(~allowed, float("-inf"))
    with torch.no_grad():
        return all(
            bool((F.scaled_dot_product_attention(q, q, q, attn_mask=m)[0, 0, 1] == 0).all()) for m in (allowed, additive)
        )


def linear_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    causal: bool = False,
    eps: float = 1e-6,
    chunk_size: int = 64,
) -> Tensor:
    r"""Linear attention (Katharopoulos et al. 2020): the softmax replaced by a kernel feature map.

    .. math:: \mathrm{out}_i = \frac{\phi(q_i)^\top \sum_j \phi(k_j)\, v_j^\top}
                                    {\phi(q_i)^\top \sum_j \phi(k_j)},
              \qquad \phi(x) = \mathrm{elu}(x) + 1 > 0

    The weights :math:`\phi(q_i)^\top\phi(k_j) / \sum_{j'} \phi(q_i)^\top\phi(k_{j'})` are positive
    and sum to one, like softmax's, but the similarity factorises. So the sums over the keys,
    :math:`S = \sum_j \phi(k_j) v_j^\top` (``Dk x Dv``) and :math:`z = \sum_j \phi(k_j)` (``Dk``),
    are computed once and shared by every query: time ``O((T + L) Dk Dv)``, and no ``T x L``
    matrix is ever formed. (There is no :math:`1/\sqrt{d_k}`: the feature map replaces the
    exponential, as in the paper.)

    Causal: query ``i`` sums over ``j <= i`` only, i.e. the running sums :math:`S_i, z_i`: an RNN
    with a ``Dk x Dv`` state ("Transformers are RNNs"). They are computed ``chunk_size`` positions
    at a time: inside a chunk the small masked ``C x C`` product, across chunks the running state,
    so memory stays linear in ``T`` (``chunk_size=1`` is the plain recurrence).

    Args:
        query: ``(..., T, Dk)``.
        key: ``(..., L, Dk)``.
        value: ``(..., L, Dv)``.
        causal: query ``i`` sees keys ``0..i`` only (needs ``T == L``).
        eps: added to the denominator, which is positive, to guard against underflow.
        chunk_size: positions per chunk in the causal case.

    Returns:
        ``(..., T, Dv)``. No weights: returning them would need the ``T x L`` matrix this avoids.

    Example:
        >>> q, k, v = torch.randn(2, 5, 4), torch.randn(2, 5, 4), torch.randn(2, 5, 3)
        >>> linear_attention(q, k, v, causal=True).shape
        torch.Size([2, 5, 3])
    """
    if query.size(-1) != key.size(-1):
        raise ValueError(f"query width {query.size(-1)} must equal key width {key.size(-1)} (both are Dk)")
    if key.size(-2) != value.size(-2):
        raise ValueError(f"key has {key.size(-2)} positions but value has {value.size(-2)}; they must match")
    if causal and query.size(-2) != key.size(-2):
        raise ValueError(
            f"causal linear attention needs as many queries as keys, got {query.size(-2)} and {key.size(-2)}"
        )
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
        raise ValueError(f"chunk_size must be a positive integer, got {chunk_size!r}")
    phi_q = F.elu(query) + 1  # (..., T, Dk)
    phi_k = F.elu(key) + 1  # (..., L, Dk)
    if causal:
        return causal_linear_attention(phi_q, phi_k, value, eps, chunk_size)
    state = phi_k.transpose(-2, -1) @ value  # (..., Dk, Dv)
    normaliser = phi_k.sum(dim=-2)[..., None]  # (..., Dk, 1)
    return (phi_q @ state) / (phi_q @ normaliser + eps)  # (..., T, Dv)


def causal_linear_attention(phi_q: Tensor, phi_k: Tensor, value: Tensor, eps: float = 1e-6, chunk_size: int = 64) -> Tensor:
    """The causal case of :func:`linear_attention`, on features ``phi_q (..., T, Dk)``,
    ``phi_k (..., T, Dk)``: running sums over the keys, ``chunk_size`` positions at a time."""
    state = phi_k.new_zeros(*phi_k.shape[:-2], phi_k.size(-1), value.size(-1))  # (..., Dk, Dv)
    normaliser = phi_k.new_zeros(*phi_k.shape[:-2], phi_k.size(-1), 1)  # (..., Dk, 1)
    outputs = []
    for start in range(0, phi_q.size(-2), chunk_size):
        q = phi_q[..., start : start + chunk_size, :]  # (..., C, Dk)
        k = phi_k[..., start : start + chunk_size, :]  # (..., C, Dk)
        v = value[..., start : start + chunk_size, :]  # (..., C, Dv)
        within = (q @ k.transpose(-2, -1)).tril()  # (..., C, C): keys of this chunk up to the query
        numerator = q @ state + within @ v  # (..., C, Dv)
        denominator = q @ normaliser + within.sum(dim=-1, keepdim=True)  # (..., C, 1)
        outputs.append(numerator / (denominator + eps))
        state = state + k.transpose(-2, -1) @ v  # (..., Dk, Dv)
        normaliser = normaliser + k.sum(dim=-2)[..., None]  # (..., Dk, 1)
    return torch.cat(outputs, dim=-2)  # (..., T, Dv)
