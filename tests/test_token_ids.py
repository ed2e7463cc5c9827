"""Tests of transformer_lib.token_ids: one check of token-id tensors, with messages that name the
problem, used by the masks, the embeddings and the model alike."""

from __future__ import annotations

import pytest
import torch

from transformer_lib.embeddings import TokenEmbedding
from transformer_lib.masking import padding_mask
from transformer_lib.token_ids import check_token_ids


def test_good_ids_pass() -> None:
    check_token_ids(torch.tensor([[0, 4, 9]]), vocab_size=10, batched=True)
    check_token_ids(torch.tensor([1, 2], dtype=torch.int32))


@pytest.mark.parametrize(
    ("tokens", "kwargs", "error", "message"),
    [
        ([[1, 2]], {}, TypeError, "src must be a torch.Tensor of token ids, got list"),
        (torch.tensor([[1.0, 2.0]]), {}, TypeError, r"src must hold integer token ids \(torch.long\), got dtype torch.float32"),
        (torch.tensor([[True]]), {}, TypeError, "got dtype torch.bool"),
        (torch.tensor([[1, 2]], dtype=torch.uint8), {}, TypeError, "as torch.long \\(or int32\\), got dtype torch.uint8"),
        (torch.tensor([1, 2]), {"batched": True}, ValueError, r"src must have shape \(B, L\), got \(2,\)"),
        (torch.tensor([[3, 10]]), {"vocab_size": 10}, ValueError, r"token id 10 is outside the vocabulary \[0, 9\]"),
        (torch.tensor([[-1, 3]]), {"vocab_size": 10}, ValueError, "token id -1 is outside"),
    ],
)
def test_bad_ids_are_named(tokens, kwargs, error, message) -> None:
    with pytest.raises(error, match=message):
        check_token_ids(tokens, "src", **kwargs)


def test_the_masks_and_the_embeddings_use_the_same_check() -> None:
    floats = torch.tensor([[1.0, 2.0]])
    with pytest.raises(TypeError, match="tokens must hold integer token ids"):
        padding_mask(floats, pad_id=0)
    with pytest.raises(TypeError, match="token ids must hold integer token ids"):
        TokenEmbedding(10, 4)(floats)
