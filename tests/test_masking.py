"""Masks: shapes, the True = may-attend convention, broadcasting, and the polarity helper."""

from __future__ import annotations

import pytest
import torch
from errors import raises

from transformer_lib.validation import check_mask
from transformer_lib.masking import (
    causal_mask,
    combine_masks,
    padding_mask,
    target_mask,
    to_torch_blocked,
)


def test_padding_mask_marks_real_tokens_per_key() -> None:
    tokens = torch.tensor([[5, 6, 0, 0], [7, 0, 0, 0]])
    mask = padding_mask(tokens, pad_id=0)
    assert mask.shape == (2, 1, 1, 4)
    assert mask.dtype == torch.bool
    assert mask[:, 0, 0].tolist() == [[True, True, False, False], [True, False, False, False]]


def test_padding_mask_respects_a_nonzero_pad_id() -> None:
    assert padding_mask(torch.tensor([[1, 3, 3]]), pad_id=3)[0, 0, 0].tolist() == [True, False, False]


@pytest.mark.parametrize("n", [1, 2, 5])
def test_causal_mask_is_lower_triangular(n: int) -> None:
    mask = causal_mask(n)
    assert mask.shape == (1, 1, n, n)
    expected = torch.tensor([[j <= i for j in range(n)] for i in range(n)])
    assert torch.equal(mask[0, 0], expected)


def test_causal_mask_with_cached_keys_aligns_queries_with_the_last_keys() -> None:
    # 2 new queries at absolute positions 3 and 4 over 5 keys.
    mask = causal_mask(2, 5)[0, 0]
    assert mask.tolist() == [[True, True, True, True, False], [True, True, True, True, True]]
    # one new query sees every cached key
    assert causal_mask(1, 7).all()


@pytest.mark.parametrize("n_queries, n_keys", [(0, 3), (4, 3)])
def test_causal_mask_rejects_impossible_sizes(n_queries: int, n_keys: int) -> None:
    with raises(ValueError, 'n_queries'):
        causal_mask(n_queries, n_keys)


def test_target_mask_combines_padding_and_causality() -> None:
    tgt = torch.tensor([[2, 8, 9, 0]])
    mask = target_mask(tgt, pad_id=0)
    assert mask.shape == (1, 1, 4, 4)
    for i in range(4):
        for j in range(4):
            assert bool(mask[0, 0, i, j]) == (j <= i and j < 3)


def test_combine_masks_broadcasts_and_skips_none() -> None:
    pad = padding_mask(torch.tensor([[1, 1, 0]]), 0)  # (1, 1, 1, 3)
    future = causal_mask(3)  # (1, 1, 3, 3)
    combined = combine_masks(pad, None, future)
    assert combined.shape == (1, 1, 3, 3)
    assert torch.equal(combined, pad & future)
    assert combine_masks(None, None) is None


def test_combine_masks_rejects_non_boolean_and_non_broadcasting_masks() -> None:
    with raises(TypeError, "torch.float32"):
        combine_masks(torch.ones(2, 2))
    with raises(ValueError, '(2, 3)', '(2, 4)'):
        combine_masks(torch.ones(2, 3, dtype=torch.bool), torch.ones(2, 4, dtype=torch.bool))


def test_check_mask_accepts_broadcastable_and_rejects_enlarging_masks() -> None:
    check_mask(torch.ones(2, 1, 1, 5, dtype=torch.bool), (2, 4, 3, 5))
    with raises(ValueError, '(2, 1, 1, 5)', '(2, 3, 5)'):
        # a 4-D padding mask against 3-D scores would silently grow them to (2, 2, 3, 5)
        check_mask(torch.ones(2, 1, 1, 5, dtype=torch.bool), (2, 3, 5))
    with raises(ValueError, "(2, 1, 1, 4)", "(2, 4, 3, 5)"):
        check_mask(torch.ones(2, 1, 1, 4, dtype=torch.bool), (2, 4, 3, 5))
    with raises(TypeError, "torch.float32"):
        check_mask(torch.zeros(1, 5), (2, 3, 5))


def test_to_torch_blocked_flips_polarity_to_nn_multiheadattention() -> None:
    # nn.MultiheadAttention: True = not allowed. Our True = allowed. The helper is the only flip.
    ours = causal_mask(3)[0, 0]
    theirs = torch.nn.Transformer.generate_square_subsequent_mask(3) != 0  # float -inf above diagonal
    assert torch.equal(to_torch_blocked(ours), theirs)
    with pytest.raises(TypeError):
        to_torch_blocked(torch.zeros(3, 3))


# --- Chapter 2's claims about which side padding masks ---------------------------------------


def _right_padded(generator: torch.Generator, batch: int = 4, length: int = 7) -> torch.Tensor:
    lengths = torch.randint(1, length + 1, (batch,), generator=generator)
    ids = torch.randint(1, 20, (batch, length), generator=generator)
    return ids.masked_fill(torch.arange(length) >= lengths[:, None], 0)  # (B, L), pads last


def test_padding_mask_masks_keys_where_a_query_side_mask_lets_pads_through() -> None:
    from transformer_lib.attention import scaled_dot_product_attention
    from transformer_lib.properties import assert_padding_invariant

    tokens = torch.tensor([[5, 6, 7, 0, 0], [8, 9, 4, 3, 2]])
    is_real = tokens != 0
    query_side = is_real[:, None, :, None]  # (B, 1, L, 1): the tutorial bug
    x = torch.randn(2, 5, 8, generator=torch.Generator().manual_seed(0))

    def attend(mask):
        return lambda x: scaled_dot_product_attention(x[:, None], x[:, None], x[:, None], mask)[0][:, 0]

    assert_padding_invariant(attend(padding_mask(tokens, 0)), x, is_real)
    with raises(AssertionError, "position"):
        assert_padding_invariant(attend(query_side), x, is_real)


def test_target_mask_equals_a_query_side_pad_mask_on_real_queries_when_right_padded() -> None:
    generator = torch.Generator().manual_seed(0)
    for _ in range(20):
        tgt = _right_padded(generator)
        query_side = (tgt != 0)[:, None, :, None] & causal_mask(tgt.size(1))  # (B, 1, T, T)
        real_rows = (tgt != 0)[:, None, :]  # (B, 1, T)
        assert torch.equal(query_side[real_rows], target_mask(tgt, 0)[real_rows])


def test_target_mask_differs_from_a_query_side_pad_mask_when_left_padded() -> None:
    tgt = torch.tensor([[0, 0, 5, 6]])  # pads first: real queries see pad keys under the bug
    query_side = (tgt != 0)[:, None, :, None] & causal_mask(4)
    real_rows = (tgt != 0)[:, None, :]
    assert not torch.equal(query_side[real_rows], target_mask(tgt, 0)[real_rows])
