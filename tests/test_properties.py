"""The property checks catch the bugs they are meant to catch, and pass correct code."""

from __future__ import annotations

import math

import pytest
import torch
from errors import raises
from torch import Tensor, nn

from transformer_lib.attention import MultiHeadAttention, scaled_dot_product_attention
from transformer_lib.properties import (
    assert_causal, assert_deterministic, assert_padding_invariant,
    assert_permutation_equivariant
)
from transformer_lib.masking import causal_mask, padding_mask


def attend(mask: Tensor | None):
    return lambda x: scaled_dot_product_attention(x, x, x, mask)[0]


def test_causal_attention_passes() -> None:
    assert_causal(attend(causal_mask(6)[0]), torch.randn(2, 6, 4))


def test_unmasked_attention_is_caught() -> None:
    with raises(AssertionError, '0'):
        assert_causal(attend(None), torch.randn(2, 6, 4))


def test_off_by_one_mask_is_caught() -> None:
    # tril(1) lets every query see one key into the future; only the last position is spared
    peeking = torch.ones(6, 6, dtype=torch.bool).tril(diagonal=1)
    with raises(AssertionError, "position"):
        assert_causal(attend(peeking), torch.randn(1, 6, 4))


def test_thrown_away_masked_fill_is_caught() -> None:
    def forgets_mask(x: Tensor) -> Tensor:
        scores = x @ x.transpose(-2, -1) / math.sqrt(x.size(-1))
        scores.masked_fill(~causal_mask(x.size(1))[0], float("-inf"))  # result discarded
        return torch.softmax(scores, dim=-1) @ x

    with raises(AssertionError, "position"):
        assert_causal(forgets_mask, torch.randn(2, 5, 4))


def test_sequence_dim_other_than_one() -> None:
    x = torch.randn(2, 3, 5, 4)  # (B, H, L, Dk)
    assert_causal(attend(causal_mask(5)), x, dim=2)
    with pytest.raises(AssertionError):
        assert_causal(attend(None), x, dim=2)


def test_integer_inputs_need_a_perturbation() -> None:
    ids = torch.randint(1, 10, (2, 5))
    cumulative = lambda x: x.float().cumsum(dim=1)  # noqa: E731 - causal by construction
    with raises(TypeError, "perturb"):
        assert_causal(cumulative, ids)
    assert_causal(cumulative, ids, perturb=lambda x, g: torch.randint(1, 10, x.shape, generator=g))
    with pytest.raises(AssertionError):
        assert_causal(lambda x: x.float().flip(1).cumsum(dim=1), ids,
                     perturb=lambda x, g: torch.randint(10, 20, x.shape, generator=g))


def test_dropout_in_eval_is_reported_as_nondeterminism() -> None:
    class DropoutInForward(nn.Module):
        def forward(self, x: Tensor) -> Tensor:
            return nn.Dropout(0.5)(x)  # a fresh module is in training mode

    module = DropoutInForward().eval()
    with raises(AssertionError, "deterministic"):
        assert_causal(module, torch.randn(2, 5, 4))
    with raises(AssertionError, "deterministic"):
        assert_deterministic(module, torch.randn(2, 5, 4))


def test_check_leaves_global_random_state_alone() -> None:
    x = torch.randn(1, 4, 2)
    torch.manual_seed(1)
    expected = torch.rand(3)
    torch.manual_seed(1)
    assert_causal(attend(causal_mask(4)[0]), x)
    assert torch.equal(torch.rand(3), expected)


@pytest.fixture
def padded_batch() -> tuple[Tensor, Tensor]:
    ids = torch.tensor([[5, 6, 7, 0, 0], [4, 3, 8, 9, 0]])
    return ids, ids != 0


def test_padding_mask_passes(padded_batch: tuple[Tensor, Tensor]) -> None:
    ids, is_real = padded_batch
    mha = MultiHeadAttention(8, 2).eval()
    mask = padding_mask(ids, 0)  # (B, 1, 1, L)
    assert_padding_invariant(lambda x: mha(x, x, x, mask)[0], torch.randn(2, 5, 8), is_real)


def test_missing_padding_mask_is_caught(padded_batch: tuple[Tensor, Tensor]) -> None:
    _, is_real = padded_batch
    mha = MultiHeadAttention(8, 2).eval()
    with raises(AssertionError, '0'):
        assert_padding_invariant(lambda x: mha(x, x, x)[0], torch.randn(2, 5, 8), is_real)


def test_padding_check_validates_is_real(padded_batch: tuple[Tensor, Tensor]) -> None:
    ids, is_real = padded_batch
    with raises(ValueError, 'is_real'):
        assert_padding_invariant(lambda x: x, torch.randn(2, 5, 8), is_real.long())
    with raises(ValueError, 'is_real'):
        assert_padding_invariant(lambda x: x, torch.randn(2, 6, 8), is_real)


def test_attention_without_positions_is_permutation_equivariant() -> None:
    mha = MultiHeadAttention(8, 2).eval()
    assert_permutation_equivariant(lambda x: mha(x, x, x)[0], torch.randn(2, 6, 8))


def test_reshape_that_mixes_positions_into_heads_is_caught() -> None:
    class SplitWithoutTranspose(MultiHeadAttention):
        def split_heads(self, x: Tensor, width: int) -> Tensor:
            B, L, _ = x.shape
            return x.view(B, self.n_heads, L, width)  # wrong: mixes positions and heads

    mha = SplitWithoutTranspose(8, 2).eval()
    with raises(AssertionError, "permut"):
        assert_permutation_equivariant(lambda x: mha(x, x, x)[0], torch.randn(2, 6, 8))


def test_positions_break_permutation_equivariance() -> None:
    positions = torch.arange(6.0)[None, :, None]
    with raises(AssertionError, "permut"):
        assert_permutation_equivariant(lambda x: x + positions, torch.randn(2, 6, 1))
