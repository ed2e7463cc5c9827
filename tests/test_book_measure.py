"""book.measure: the largest tensor a call holds, counted exactly on every machine."""

from __future__ import annotations

import torch

from transformer_lib.attention import MultiHeadAttention
from transformer_lib.book.measure import largest_tensor_bytes
from transformer_lib.masking import causal_mask


def test_largest_tensor_bytes_sees_inputs_and_outputs_of_every_operation() -> None:
    x = torch.zeros(10, 10)  # 400 bytes
    assert largest_tensor_bytes(lambda: x.sum()) == 400  # an input
    assert largest_tensor_bytes(lambda: x.repeat(3, 1)) == 1200  # an output
    assert largest_tensor_bytes(lambda: None) == 0


def test_explicit_attention_holds_every_weight_and_the_fused_path_without_a_mask_does_not() -> None:
    B, T, D, H = 2, 64, 32, 4
    layer = MultiHeadAttention(D, H).eval()
    x = torch.randn(B, T, D)
    with torch.no_grad():
        explicit = largest_tensor_bytes(lambda: layer(x, x, x, need_weights=True))
        fused = largest_tensor_bytes(lambda: layer(x, x, x))
        masked = largest_tensor_bytes(lambda: layer(x, x, x, causal_mask(T)))
    assert explicit >= B * H * T * T * 4  # the (B, H, T, T) float32 weights
    assert fused < B * T * D * 4 * 4  # a few (B, T, D)-sized tensors, nothing of T x T
    assert masked >= T * T  # the (1, 1, T, T) boolean mask goes in
