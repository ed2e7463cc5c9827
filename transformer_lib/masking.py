"""Attention masks, with one convention throughout the book: ``True`` means "may attend".

This is the convention of :func:`torch.nn.functional.scaled_dot_product_attention` for boolean
masks. ``nn.MultiheadAttention`` and ``nn.Transformer`` use the *opposite* polarity for their
boolean masks (``True`` means "blocked"); :func:`to_torch_blocked` is the single place where we
convert.

Shapes (legend used in every module of the library):

    B  batch size           S  source length (keys of cross-attention)
    T  target length        H  number of heads
    L  any sequence length (keys of self-attention: L = S in the encoder, L = T in the decoder)

Masks are built so that they broadcast against attention scores of shape ``(B, H, T, L)``:

    padding_mask(tokens)   (B, 1, 1, L)   per key: is this key a real token?
    causal_mask(T)         (1, 1, T, T)   per query/key pair: is the key not in the future?
    target_mask(tgt)       (B, 1, T, T)   both of the above, combined with logical AND
    CAUSAL                 (not a tensor) causal_mask's meaning, for the fused causal kernel
    sliding_window_mask(T, window=W)  (1, 1, T, T)   is the key among the W nearest? (chapter 7)
"""

from __future__ import annotations

import torch
from torch import Tensor

from .attention import CAUSAL, CausalMask  # defined with the attention that reads it (chapter 1)


__all__ = [
    "padding_mask",
    "causal_mask",
    "sliding_window_mask",
    "combine_masks",
    "target_mask",
    "CausalMask",
    "CAUSAL",
    "to_torch_blocked",
]


def padding_mask(tokens: Tensor, pad_id: int) -> Tensor:
    """Which keys are real tokens rather than padding.

    Args:
        tokens: token ids, ``(B, L)``.
        pad_id: the id of the padding token.

    Returns:
        Boolean mask ``(B, 1, 1, L)``: ``True`` where ``tokens != pad_id``. The two singleton
        dimensions broadcast over heads and queries: padding is a property of *keys*. Queries at
        padded positions still attend normally; their outputs are simply never used.

    Example:
        >>> padding_mask(torch.tensor([[5, 7, 0]]), pad_id=0).squeeze()
        tensor([ True,  True, False])
    """
    return (tokens != pad_id)[:, None, None, :]  # (B, 1, 1, L)


def causal_mask(n_queries: int, n_keys: int | None = None, device: torch.device | str | None = None) -> Tensor:
    """Which keys each query may see when it must not look into the future.

    Query ``i`` may attend key ``j`` when ``j <= i``. When there are more keys than queries
    (incremental decoding: the last ``n_queries`` positions attend to a cache of earlier keys),
    queries are aligned with the *last* keys, so query ``i`` sits at absolute position
    ``n_keys - n_queries + i``.

    Args:
        n_queries: number of query positions ``T``.
        n_keys: number of key positions (default ``n_queries``); must be ``>= n_queries``.
        device: where to create the mask.

    Returns:
        Boolean mask ``(1, 1, T, n_keys)``, lower-triangular when square.

    Example:
        >>> causal_mask(3).int().squeeze()
        tensor([[1, 0, 0],
                [1, 1, 0],
                [1, 1, 1]], dtype=torch.int32)
    """
    n_keys = n_queries if n_keys is None else n_keys
    if n_queries < 1 or n_keys < n_queries:
        raise ValueError(
            f"causal_mask needs 1 <= n_queries <= n_keys, got n_queries={n_queries}, n_keys={n_keys}"
        )
    offset = n_keys - n_queries
    mask = torch.ones(n_queries, n_keys, dtype=torch.bool, device=device).tril(diagonal=offset)
    return mask[None, None, :, :]  # (1, 1, T, n_keys)


def sliding_window_mask(
    n_queries: int,
    n_keys: int | None = None,
    *,
    window: int,
    causal: bool = True,
    device: torch.device | str | None = None,
) -> Tensor:
    """Local attention: each query sees only the keys less than ``window`` positions away.

    Causal (Mistral's sliding window, Jiang et al. 2023): query ``i`` sees keys
    ``i - window + 1 .. i``, its ``window`` most recent positions, itself included. Bidirectional
    (Longformer's local attention, Beltagy et al. 2020): keys ``i - window + 1 .. i + window - 1``.
    Queries are aligned with the *last* keys, as in :func:`causal_mask`, so the mask also serves a
    step of incremental decoding.

    As a mask this only restricts *which* keys count: the scores are still computed for all
    ``T x L`` pairs, so it saves no time or memory by itself. Kernels that skip the blocked tiles
    (or a cache that drops keys older than the window) are what make it cheap; with a window, the
    information of a token still reaches ``layers x (window - 1)`` positions through the stack.

    Args:
        n_queries: number of query positions ``T``.
        n_keys: number of key positions (default ``n_queries``); must be ``>= n_queries``.
        window: how many positions a query sees on each allowed side, itself included (``>= 1``).
        causal: also block the future (as :func:`causal_mask`).
        device: where to create the mask.

    Returns:
        Boolean mask ``(1, 1, T, n_keys)``, ``True`` = may attend.

    Example:
        >>> sliding_window_mask(4, window=2).int().squeeze()
        tensor([[1, 0, 0, 0],
                [1, 1, 0, 0],
                [0, 1, 1, 0],
                [0, 0, 1, 1]], dtype=torch.int32)
    """
    n_keys = n_queries if n_keys is None else n_keys
    if n_queries < 1 or n_keys < n_queries:
        raise ValueError(
            f"sliding_window_mask needs 1 <= n_queries <= n_keys, got n_queries={n_queries}, n_keys={n_keys}"
        )
    if isinstance(window, bool) or not isinstance(window, int) or window < 1:
        raise ValueError(f"window must be a positive integer (positions a query sees, itself included), got {window!r}")
    query_position = torch.arange(n_keys - n_queries, n_keys, device=device)[:, None]  # (T, 1) absolute
    key_position = torch.arange(n_keys, device=device)[None, :]  # (1, n_keys)
    distance = query_position - key_position  # (T, n_keys), > 0 for keys in the past
    mask = distance < window
    mask &= distance >= 0 if causal else distance > -window
    return mask[None, None, :, :]  # (1, 1, T, n_keys)


def combine_masks(*masks: Tensor | None) -> Tensor | None:
    """Logical AND of boolean masks that broadcast together; ``None`` entries are skipped.

    A key is visible only if *every* mask allows it, e.g. ``(B, 1, 1, T) & (1, 1, T, T)`` gives
    ``(B, 1, T, T)``. Returns ``None`` when no mask is given.
    """
    result: Tensor | None = None
    for mask in masks:
        if mask is None:
            continue
        if mask.dtype != torch.bool:
            raise TypeError(f"masks must be boolean (True = may attend), got dtype {mask.dtype}")
        if result is None:
            result = mask
            continue
        try:
            result = result & mask
        except RuntimeError as error:
            raise ValueError(
                f"masks of shapes {tuple(result.shape)} and {tuple(mask.shape)} do not broadcast"
            ) from error
    return result


def target_mask(tgt: Tensor, pad_id: int) -> Tensor:
    """The decoder self-attention mask: no padding keys and no future keys.

    Args:
        tgt: target token ids ``(B, T)``.
        pad_id: the id of the padding token.

    Returns:
        Boolean mask ``(B, 1, T, T)``.
    """
    pad = padding_mask(tgt, pad_id)  # (B, 1, 1, T)
    future = causal_mask(tgt.size(1), device=tgt.device)  # (1, 1, T, T)
    return pad & future  # (B, 1, T, T)


def to_torch_blocked(mask: Tensor) -> Tensor:
    """Convert our mask (``True`` = may attend) to PyTorch's module polarity (``True`` = blocked).

    ``nn.MultiheadAttention``'s ``attn_mask``/``key_padding_mask`` and ``nn.Transformer``'s masks
    treat ``True`` as "not allowed to attend", the opposite of
    ``F.scaled_dot_product_attention``. This is the one place in the library that flips polarity.
    """
    if mask.dtype != torch.bool:
        raise TypeError(f"expected a boolean mask, got dtype {mask.dtype}")
    return ~mask
