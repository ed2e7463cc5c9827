"""Scaled dot-product attention and multi-head attention (chapter 1).

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
import weakref
from collections.abc import Callable, Collection
from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .validation import check_bias, check_bool, check_floats, check_int, check_mask, check_number

__all__ = [
    "CausalMask", "CAUSAL", "scaled_dot_product_attention", "softmax_attention", "fused_attention",
    "share_key_value_heads", "Projection", "MultiHeadAttention", "upgrade_projection_names",
]


class CausalMask:
    """Causal masking and nothing else, not made into a tensor: :data:`CAUSAL` (chapter 2's causal mask).

    Attention passes it to ``F.scaled_dot_product_attention`` as ``is_causal=True``, whose kernels
    skip the future without reading a ``T x T`` mask (the flash kernel: memory linear in ``T``), and
    makes the tensor (:meth:`materialise`) where one is needed: for the attention weights, a score
    bias, or fewer queries than keys. (On a CPU with attention dropout, which no CPU kernel fuses,
    it passes a ``T x T`` mask it keeps, which PyTorch would otherwise build at every call.)
    :class:`~transformer_lib.model.Transformer` uses it for the decoder's self-attention when no
    target mask is given: with *right*-padded targets (as
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
    queries are the keys' positions (``T == L``) and there is no bias (on a CPU with dropout, which
    its fused kernel does not take, a causal mask kept per size instead); otherwise it becomes
    :func:`~transformer_lib.masking.causal_mask`. A boolean mask reaches the kernel as the float it
    adds to the scores, made once for all the calls that pass the same mask (``_additive_mask``)."""
    B, H, T, L = query.size(0), query.size(1), query.size(2), key.size(2)
    if isinstance(mask, CausalMask):
        if bias is None and T == L:
            if query.device.type == "cpu" and dropout_p > 0 and not torch.compiler.is_compiling():
                # The CPU's fused kernel takes no dropout: the computation sdpa falls back to would build
                # this T x T mask at every call (is_causal=True); the library builds it once per size.
                return _sdpa(query, key, value, attn_mask=_additive_causal_mask(T, query.device, query.dtype), dropout_p=dropout_p)
            return _sdpa(query, key, value, dropout_p=dropout_p, is_causal=True)  # (B, H, T, Dv)
        mask = mask.materialise(T, L, query.device)  # (1, 1, T, L)
    if mask is not None:
        check_mask(mask, (B, H, T, L))
    attn_mask = None if mask is None else _additive_mask(mask, query.dtype)
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


# id(mask) -> (a weak reference to the mask, its version counter, its additive form): see _additive_mask.
_ADDITIVE_MASKS: dict[int, tuple[weakref.ref[Tensor], int, Tensor]] = {}


def _additive_mask(mask: Tensor, dtype: torch.dtype) -> Tensor:
    """A boolean mask (``True`` = may attend) as ``F.scaled_dot_product_attention`` applies it: a float
    added to the scores, 0 or -inf, which the function would otherwise make from the boolean at every
    call. A model passes one padding mask to each of its layers (six attentions in the translation
    model), so the form made at the first is kept for the others while the mask lives unchanged (its
    version counter); the four used last are kept. Masks of a traced, compiled or transformed computation,
    and of inference mode (no version counter), are returned as they are, for the function to convert."""
    if (torch.compiler.is_compiling() or torch.jit.is_tracing() or _functorch_active() or type(mask) is not Tensor
            or torch.is_inference_mode_enabled() or mask.is_inference()):
        return mask
    entry = _ADDITIVE_MASKS.pop(id(mask), None)
    if entry is None or entry[0]() is not mask or entry[1] != mask._version or entry[2].dtype != dtype:
        entry = (weakref.ref(mask), mask._version, _to_additive(mask, dtype))
    for gone in [key for key, (ref, _, _) in _ADDITIVE_MASKS.items() if ref() is None]:
        del _ADDITIVE_MASKS[gone]
    while len(_ADDITIVE_MASKS) >= 4:
        del _ADDITIVE_MASKS[next(iter(_ADDITIVE_MASKS))]  # the least recently used
    _ADDITIVE_MASKS[id(mask)] = entry  # the most recently used, last
    return entry[2]


def _functorch_active() -> bool:
    """Whether a ``torch.func`` transform (``vmap``, ``grad``) is running (then nothing is remembered)."""
    active = getattr(torch._C, "_are_functorch_transforms_active", None)
    return True if active is None else bool(active())


def _to_additive(mask: Tensor, dtype: torch.dtype) -> Tensor:
    """A boolean mask (``True`` = may attend) as a float added to the scores: 0 where ``True``, -inf where not."""
    return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill_(~mask, float("-inf"))


@functools.lru_cache(maxsize=16)
def _additive_causal_mask(size: int, device: torch.device, dtype: torch.dtype) -> Tensor:
    """:data:`CAUSAL` of ``size`` positions as a float added to the scores, ``(1, 1, size, size)``.
    Never handed out: only ``F.scaled_dot_product_attention`` reads it."""
    return _to_additive(CAUSAL.materialise(size, size, device), dtype)


def _sdpa(query: Tensor, key: Tensor, value: Tensor, **options: Any) -> Tensor:
    """``F.scaled_dot_product_attention`` with ``Hkv`` key/value heads shared by the ``H`` query heads."""
    if key.size(1) != query.size(1) and not _SDPA_SHARES_HEADS:  # grouped-query attention on an older PyTorch
        key, value = share_key_value_heads(query, key, value)
    grouped: dict[str, Any] = {"enable_gqa": True} if key.size(1) != query.size(1) else {}  # K/V heads shared in the kernel, not copied
    return F.scaled_dot_product_attention(query, key, value, **grouped, **options)  # (B, H, T, Dv)


def _project_heads(x: Tensor, weight: Tensor, bias: Tensor | None, width: int) -> Tensor:
    """``MultiHeadAttention.split_heads(F.linear(x, weight, bias), width)`` with one reshape fewer each
    way: ``F.linear`` on ``(B, L, in)`` reshapes to rows ``(B L, in)`` and back around its product; here
    the product's rows become heads by a single view. ``(B, L, in)`` -> ``(B, H', L, width)``."""
    B, L, _ = x.shape
    rows = F.linear(x.flatten(0, 1), weight, bias)  # (B L, H' width)
    return rows.view(B, L, rows.size(-1) // width, width).transpose(1, 2)  # (B, H', L, width)


# F.scaled_dot_product_attention shares key/value heads itself (enable_gqa) from PyTorch 2.5 on.
_SDPA_SHARES_HEADS = tuple(int(part) for part in torch.__version__.split(".")[:2]) >= (2, 5)


class Projection:
    """One of a :class:`MultiHeadAttention`'s input projections, read from the weights it stores
    stacked: ``layer.q_proj(x)`` is ``x @ W_Q^T + b_Q`` as an ``nn.Linear`` would compute it, and
    ``weight`` (``(out_features, in_features)``) and ``bias`` are views of the stored parameters, so
    writing into them (under ``torch.no_grad()``) changes the layer. They are not parameters: the
    layer's parameters, and their gradients, are ``in_proj_weight`` and ``in_proj_bias``."""

    def __init__(self, weight: Tensor, bias: Tensor | None) -> None:
        self.weight, self.bias = weight, bias
        self.out_features, self.in_features = weight.shape

    def __call__(self, x: Tensor) -> Tensor:
        """``(..., in_features)`` -> ``(..., out_features)``."""
        return F.linear(x, self.weight, self.bias)

    def __repr__(self) -> str:
        return f"Projection(in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None})"


_PROJECTIONS = ("q_proj", "k_proj", "v_proj")


def upgrade_projection_names(state: dict[str, Any], prefix: str = "", expected: Collection[str] | None = None) -> None:
    """Rewrites, in place, a :class:`MultiHeadAttention` ``state_dict`` saved before its input projections
    were stacked (``q_proj.weight``, ``k_proj.weight``, ``v_proj.weight`` and their biases) under
    today's names, those of ``nn.MultiheadAttention``: ``in_proj_weight`` (the three weights stacked,
    queries on top) when the three inputs are equally wide, else ``q_proj_weight``, ``k_proj_weight``,
    ``v_proj_weight``; and ``in_proj_bias``. The same numbers, so the same outputs; names of today's
    layout, and other layers' names, are left as they are. ``prefix``: the layer's place in a model
    (``"encoder.layers.0.self_attn."``); every layer under it is rewritten. ``expected``: the names
    of the model's ``state_dict``, if known; its layers are stacked as it stacks them.

    Raises:
        ValueError: ``expected`` stacks a layer whose three weights are not equally wide.

    Example:
        >>> old = {f"attn.{p}.weight": torch.ones(2, 3) for p in ("q_proj", "k_proj", "v_proj")}
        >>> upgrade_projection_names(old)
        >>> {name: tuple(t.shape) for name, t in old.items()}
        {'attn.in_proj_weight': (6, 3)}
    """
    layers = sorted({layer for layer, found, tail in (name.rpartition("q_proj.weight") for name in state)
                     if found and not tail and layer.startswith(prefix) and layer[-1:] in ("", ".")})
    for layer in layers:
        names = [f"{layer}{p}.weight" for p in _PROJECTIONS]
        if not all(name in state for name in names):
            continue
        shapes = [tuple(state[name].shape) for name in names]
        stacked = len({shape[-1:] for shape in shapes}) == 1 if expected is None else f"{layer}in_proj_weight" in expected
        if stacked and len({shape[-1:] for shape in shapes}) != 1:
            raise ValueError(f"weights {', '.join(repr(n) for n in names)} have shapes {', '.join(map(str, shapes))}: "
                             f"{layer}in_proj_weight stacks them, so their input widths (the last of each shape) must agree")
        weights = [state.pop(name) for name in names]
        if stacked:
            state[f"{layer}in_proj_weight"] = torch.cat(weights)
        else:
            state.update({f"{layer}{p}_weight": w for p, w in zip(_PROJECTIONS, weights)})
        biases = [f"{layer}{p}.bias" for p in _PROJECTIONS]
        if all(name in state for name in biases):
            state[f"{layer}in_proj_bias"] = torch.cat([state.pop(name) for name in biases])


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

    # Registered with register_parameter, so that an unused layout's names are None as in nn.MultiheadAttention.
    in_proj_weight: Tensor | None
    in_proj_bias: Tensor | None
    q_proj_weight: Tensor | None
    k_proj_weight: Tensor | None
    v_proj_weight: Tensor | None

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
        # The three input projections in one stored matrix, W_Q on top of W_K on top of W_V, as in
        # nn.MultiheadAttention (and under its names): self-attention makes queries, keys and values
        # with one matrix product, and one gradient is accumulated instead of three.
        widths = (n_heads * self.d_k, self.n_kv_heads * self.d_k, self.n_kv_heads * self.d_v)
        self.widths = widths  # (H Dk, Hkv Dk, Hkv Dv): the output widths of W_Q, W_K, W_V
        self.packed = self.kdim == self.vdim == d_model  # the three inputs equally wide: one matrix
        for name, width, inputs in zip(_PROJECTIONS, widths, (d_model, self.kdim, self.vdim)):
            # cross-attention between widths: one matrix each (None, as in nn.MultiheadAttention, if stacked)
            self.register_parameter(f"{name}_weight", None if self.packed else nn.Parameter(torch.empty(width, inputs)))
        # (H Dk + Hkv Dk + Hkv Dv, D), or None
        self.register_parameter("in_proj_weight", nn.Parameter(torch.empty(sum(widths), d_model)) if self.packed else None)
        self.in_proj_bias = nn.Parameter(torch.empty(sum(widths))) if bias else None
        self.reset_projections()
        self._register_load_state_dict_pre_hook(_upgrade_on_load, with_module=True)
        self.out_proj = nn.Linear(n_heads * self.d_v, self.d_out, bias=bias)
        self.query_norm = nn.Identity() if qk_norm is None else qk_norm(self.d_k)
        self.key_norm = nn.Identity() if qk_norm is None else qk_norm(self.d_k)

    def reset_projections(self) -> None:
        """Each of W_Q, W_K, W_V (and its bias) drawn as ``nn.Linear`` draws its own, in that order:
        a layer made with a seed holds the numbers three separate ``nn.Linear`` would."""
        with torch.no_grad():
            for projection in self.projections():
                nn.init.kaiming_uniform_(projection.weight, a=math.sqrt(5))
                if projection.bias is not None:
                    bound = 1 / math.sqrt(projection.in_features) if projection.in_features > 0 else 0.0
                    nn.init.uniform_(projection.bias, -bound, bound)

    def projections(self) -> tuple[Projection, Projection, Projection]:
        """The query, key and value projections, views of the stored weights (:class:`Projection`)."""
        if self.in_proj_weight is not None:
            weights: tuple[Tensor, ...] = self.in_proj_weight.split(self.widths)
        else:
            weights = tuple(cast(Tensor, w) for w in (self.q_proj_weight, self.k_proj_weight, self.v_proj_weight))
        biases = (None,) * 3 if self.in_proj_bias is None else self.in_proj_bias.split(self.widths)
        q, k, v = (Projection(w, b) for w, b in zip(weights, biases))
        return q, k, v

    @property
    def q_proj(self) -> Projection:
        """The query projection W_Q: ``(B, T, d_model)`` -> ``(B, T, H Dk)``."""
        return self.projections()[0]

    @property
    def k_proj(self) -> Projection:
        """The key projection W_K: ``(B, L, kdim)`` -> ``(B, L, Hkv Dk)``."""
        return self.projections()[1]

    @property
    def v_proj(self) -> Projection:
        """The value projection W_V: ``(B, L, vdim)`` -> ``(B, L, Hkv Dv)``."""
        return self.projections()[2]

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
        weights_dtype = self.out_proj.weight.dtype
        for name, x, width in (("query", query, self.d_model), ("key", key, self.kdim), ("value", value, self.vdim)):
            check_floats(name, x, weights_dtype, width)
        q, k, v = self.project(query, key, value)  # (B, H, T, Dk), (B, H, L, Dk), (B, H, L, Dv)
        out, attn_weights = self.attend(q, k, v, mask, need_weights)  # (B, H, T, Dv)
        return self.out_proj(self.merge_heads(out)), attn_weights  # (B, T, d_out)

    def project(self, query: Tensor, key: Tensor, value: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Queries, keys and values, one per head: ``(B, H, T, Dk)``, ``(B, Hkv, L, Dk)``, ``(B, Hkv, L, Dv)``.

        The three projections of :meth:`project_query` and :meth:`project_key_value`, by as few
        matrix products as the inputs allow: in self-attention (one tensor is query, key and value)
        one, with the stored ``in_proj_weight``, as ``nn.MultiheadAttention`` does; in
        cross-attention (keys and values of one tensor, the encoder's memory) two.
        """
        if not (key is value and self.packed and self._own_split_heads()):
            return self.project_query(query), *self.project_key_value(key, value)
        stacked = cast(Tensor, self.in_proj_weight)  # self.packed
        if query is not key:  # one split of the stored weights, for the queries' product and the keys' and values'
            (w_q, w_kv), (b_q, b_kv) = self._query_and_key_value(stacked), self._query_and_key_value(self.in_proj_bias)
            q = _project_heads(query, cast(Tensor, w_q), b_q, self.d_k)  # (B, H, T, Dk)
            return self.query_norm(q), *self._key_value_heads(key, cast(Tensor, w_kv), b_kv)
        if self._splits_at_once():
            heads = _project_heads(query, stacked, self.in_proj_bias, self.d_k)  # (B, H + 2 Hkv, T, Dk)
            q, k, v = heads.split([self.n_heads, self.n_kv_heads, self.n_kv_heads], dim=1)  # (B, H or Hkv, T, Dk)
            return self.query_norm(q), self.key_norm(k), v
        qkv = F.linear(query, stacked, self.in_proj_bias)  # (B, T, H Dk + Hkv Dk + Hkv Dv)
        q, k, v = qkv.split(self.widths, dim=-1)
        return self.query_norm(self.split_heads(q, self.d_k)), self.key_norm(self.split_heads(k, self.d_k)), self.split_heads(v, self.d_v)

    def project_query(self, query: Tensor) -> Tensor:
        """Queries ``(B, T, d_model)`` -> one per head, ``(B, H, T, Dk)`` (normalised with QK-norm)."""
        return self.query_norm(self.split_heads(self.q_proj(query), self.d_k))  # (B, H, T, Dk)

    def project_key_value(self, key: Tensor, value: Tensor) -> tuple[Tensor, Tensor]:
        """Keys ``(B, L, kdim)`` and values ``(B, L, vdim)`` -> one per key/value head, ``(B, Hkv, L, Dk)``
        and ``(B, Hkv, L, Dv)`` (``Hkv = H`` unless grouped-query; the keys normalised with QK-norm).
        Keys and values of one tensor (the encoder's memory) come from one matrix product."""
        if key is value and self.packed and self._own_split_heads():
            _, weight = self._query_and_key_value(self.in_proj_weight)
            _, bias = self._query_and_key_value(self.in_proj_bias)
            return self._key_value_heads(key, cast(Tensor, weight), bias)
        _, k_proj, v_proj = self.projections()
        return self.key_norm(self.split_heads(k_proj(key), self.d_k)), self.split_heads(v_proj(value), self.d_v)

    def _query_and_key_value(self, stacked: Tensor | None) -> tuple[Tensor | None, Tensor | None]:
        """``in_proj_weight`` (or ``in_proj_bias``) split in two: the queries' rows, and the keys' and
        values' (``(None, None)`` for no bias)."""
        if stacked is None:
            return None, None
        q, kv = stacked.split([self.widths[0], self.widths[1] + self.widths[2]])
        return q, kv

    def _key_value_heads(self, key: Tensor, weight: Tensor, bias: Tensor | None) -> tuple[Tensor, Tensor]:
        """Keys and values by one product with W_K stacked on W_V (``weight``), ``(B, L, kdim)`` ->
        ``(B, Hkv, L, Dk)`` (through QK-norm) and ``(B, Hkv, L, Dv)``."""
        if self._splits_at_once():
            k, v = _project_heads(key, weight, bias, self.d_k).chunk(2, dim=1)  # (B, Hkv, L, Dk) each
        else:
            kv = F.linear(key, weight, bias)  # (B, L, Hkv Dk + Hkv Dv)
            k, v = (self.split_heads(x, width) for x, width in zip(kv.split(self.widths[1:], dim=-1), (self.d_k, self.d_v)))
        return self.key_norm(k), v

    def _own_split_heads(self) -> bool:
        """Whether :meth:`split_heads` is this class's, which splits a slice of stacked projections too.
        One redefined (a pitfall of chapter 1, a reader's exercise) may assume ``H`` heads or a
        contiguous input: it gets each projection made by its own product."""
        return type(self).split_heads is MultiHeadAttention.split_heads

    def _splits_at_once(self) -> bool:
        """Whether stacked projections are split into heads by one :meth:`split_heads`: when the heads of
        queries, keys and values are equally wide."""
        return self.d_k == self.d_v and self._own_split_heads()

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


def _upgrade_on_load(module: MultiHeadAttention, state: dict[str, Any], prefix: str, *_: Any) -> None:
    """``load_state_dict`` reads files saved before the projections were stacked (their old names)."""
    upgrade_projection_names(state, prefix, expected=[prefix + name for name in module.state_dict()])


@functools.cache
def _fused_attention_zeroes_empty_rows(device: torch.device, dtype: torch.dtype) -> bool:
    """Does ``F.scaled_dot_product_attention`` give 0, not NaN, for a query that sees no key?

    PyTorch 2.5 and later do; older releases return NaN, which :func:`fused_attention` then replaces
    with 0. Asked once per device and dtype, with a boolean and a float (``-inf``) mask, so that on a
    current PyTorch the guard costs nothing (it was ~6% of a small model's training step).
    """
    q = torch.ones(1, 1, 2, 8, device=device, dtype=dtype)  # (B, H, T, Dk): query 1 sees no key
    allowed = torch.tensor([[True, True], [False, False]], device=device).view(1, 1, 2, 2)
    additive = _to_additive(allowed, dtype)
    with torch.no_grad():
        return all(
            bool((F.scaled_dot_product_attention(q, q, q, attn_mask=m)[0, 0, 1] == 0).all()) for m in (allowed, additive)
        )
