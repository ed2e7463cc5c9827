"""The one check of token-id tensors, shared by the masks, the embeddings and the model."""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["check_token_ids"]


def check_token_ids(tokens: Tensor, name: str = "token ids", vocab_size: int | None = None, *, batched: bool = False) -> None:
    """Raise a clear error unless ``tokens`` is an integer tensor (``torch.long`` or ``int32``, the
    dtypes ``nn.Embedding`` indexes with), of shape ``(B, L)`` when ``batched``, with every id in
    ``[0, vocab_size)`` when ``vocab_size`` is given."""
    if not isinstance(tokens, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of token ids, got {type(tokens).__name__}")
    if tokens.is_floating_point() or tokens.is_complex() or tokens.dtype == torch.bool:
        raise TypeError(
            f"{name} must hold integer token ids (torch.long), got dtype {tokens.dtype}; "
            "an embedding looks rows up by index: convert with .long() if the values are whole numbers"
        )
    if tokens.dtype not in (torch.long, torch.int32):
        # uint8 ids would also wrap at 256.
        raise TypeError(f"{name} must hold token ids as torch.long (or int32), got dtype {tokens.dtype}; convert with .long()")
    if batched and tokens.dim() != 2:
        raise ValueError(f"{name} must have shape (B, L), got {tuple(tokens.shape)}")
    if vocab_size is not None and tokens.numel() and not torch.compiler.is_compiling():
        low, high = int(tokens.min()), int(tokens.max())
        if low < 0 or high >= vocab_size:
            bad = low if low < 0 else high
            raise ValueError(f"token id {bad} is outside the vocabulary [0, {vocab_size - 1}] (vocab_size={vocab_size})")
