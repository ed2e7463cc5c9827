"""Cheaper attention (chapter 7): sliding-window masks and linear attention.

Each checked against a direct computation; linear attention's cost counted (not timed).
"""

from __future__ import annotations

import pytest
import torch
from errors import raises
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from transformer_lib.attention import MultiHeadAttention, scaled_dot_product_attention
from transformer_lib.efficient_attention import linear_attention
from transformer_lib.properties import assert_causal
from transformer_lib.masking import causal_mask, sliding_window_mask

ATOL = 1e-5


# --- Sliding-window masks ---------------------------------------------------------------------


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("n_queries, n_keys, window", [(6, None, 1), (6, None, 3), (7, None, 7), (2, 9, 4), (1, 5, 2)])
def test_sliding_window_mask_matches_a_direct_loop(causal: bool, n_queries: int, n_keys: int | None, window: int) -> None:
    mask = sliding_window_mask(n_queries, n_keys, window=window, causal=causal)
    L = n_queries if n_keys is None else n_keys
    assert mask.shape == (1, 1, n_queries, L) and mask.dtype == torch.bool
    offset = L - n_queries  # queries are the last positions
    for i in range(n_queries):
        for j in range(L):
            position = offset + i
            allowed = position - window < j <= position if causal else abs(position - j) < window
            assert bool(mask[0, 0, i, j]) == allowed, (i, j)


def test_sliding_window_mask_limits() -> None:
    # A window covering the whole sequence is the causal mask (or no mask at all); a window of 1
    # sees only the query's own position.
    assert torch.equal(sliding_window_mask(6, window=6), causal_mask(6))
    assert sliding_window_mask(6, window=6, causal=False).all()
    assert torch.equal(sliding_window_mask(5, window=1, causal=False)[0, 0], torch.eye(5, dtype=torch.bool))
    # rows never empty: each query sees at least itself
    assert sliding_window_mask(4, 11, window=2).any(dim=-1).all()
    # a step of incremental decoding is the last row of the full mask
    assert torch.equal(sliding_window_mask(1, 8, window=3), sliding_window_mask(8, window=3)[..., -1:, :])


@pytest.mark.parametrize("window, n_queries, n_keys, named", [(0, 3, None, ["window", 0]), (2.5, 3, None, ["window", 2.5]),
                                                             (2, 4, 3, ["n_queries=4", "n_keys=3"]),
                                                             (2, 0, 3, ["n_queries=0", "n_keys=3"])])
def test_sliding_window_mask_rejects_bad_sizes(window, n_queries: int, n_keys: int | None, named: list) -> None:
    with raises(ValueError, *named):
        sliding_window_mask(n_queries, n_keys, window=window)


@pytest.mark.parametrize("causal", [True, False])
def test_local_attention_agrees_on_every_path_and_sees_only_its_window(causal: bool) -> None:
    T, window = 10, 3
    mask = sliding_window_mask(T, window=window, causal=causal)
    mha = MultiHeadAttention(16, 4).eval()
    x = torch.randn(2, T, 16)
    fused, _ = mha(x, x, x, mask=mask)
    explicit, weights = mha(x, x, x, mask=mask, need_weights=True)
    torch.testing.assert_close(fused, explicit, atol=ATOL, rtol=0)
    q, k, v = torch.randn(3, 2, T, 8), torch.randn(3, 2, T, 8), torch.randn(3, 2, T, 8)
    torch.testing.assert_close(
        scaled_dot_product_attention(q, k, v, mask)[0], F.scaled_dot_product_attention(q, k, v, attn_mask=mask), atol=ATOL, rtol=0
    )
    assert (weights.masked_select(~mask.expand_as(weights)) == 0).all()
    # Changing a token outside query 7's window leaves its output alone; one inside changes it.
    far, near = 7 - window, 7 - window + 1
    for position, should_change in ((far, False), (near, True)):
        y = x.clone()
        y[:, position] += 1.0
        changed, _ = mha(y, y, y, mask=mask)
        assert torch.allclose(changed[:, 7], fused[:, 7], atol=ATOL) != should_change, position
    if causal:
        assert_causal(lambda x: mha(x, x, x, mask=mask)[0], x)


def test_stacked_windows_reach_further_than_one() -> None:
    # Two layers of window 3 let position 9 hear from position 9 - 2 * (3 - 1) = 5, but not from 4.
    T, window = 10, 3
    mask = sliding_window_mask(T, window=window)
    layers = [MultiHeadAttention(8, 2).eval() for _ in range(2)]

    def two_layers(x: torch.Tensor) -> torch.Tensor:
        for layer in layers:
            x = x + layer(x, x, x, mask=mask)[0]
        return x

    x = torch.randn(1, T, 8)
    base = two_layers(x)
    for position, should_change in ((4, False), (5, True)):
        y = x.clone()
        y[:, position] += 1.0
        assert torch.allclose(two_layers(y)[:, 9], base[:, 9], atol=ATOL) != should_change, position


# --- Linear attention -------------------------------------------------------------------------


def _quadratic_linear_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> torch.Tensor:
    """The direct definition: the full (T, L) matrix phi(Q) phi(K)^T, normalised per row."""
    similarity = (F.elu(q) + 1) @ (F.elu(k) + 1).transpose(-2, -1)  # (..., T, L)
    if causal:
        similarity = similarity.masked_fill(~causal_mask(q.size(-2))[0, 0], 0.0)
    weights = similarity / similarity.sum(dim=-1, keepdim=True)
    return weights @ v


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("shape, L, Dv", [((2, 3), 16, 5), ((4,), 1, 8), ((1, 2), 130, 16)])
@pytest.mark.parametrize("chunk_size", [1, 7, 64])
def test_linear_attention_matches_the_quadratic_computation(causal: bool, shape: tuple, L: int, Dv: int, chunk_size: int) -> None:
    T = L if causal else max(1, L - 3)
    q, k, v = torch.randn(*shape, T, 8), torch.randn(*shape, L, 8), torch.randn(*shape, L, Dv)
    out = linear_attention(q, k, v, causal=causal, chunk_size=chunk_size)
    assert out.shape == (*shape, T, Dv)
    torch.testing.assert_close(out, _quadratic_linear_attention(q, k, v, causal), atol=1e-5, rtol=0)


def test_causal_linear_attention_is_causal_and_differentiable() -> None:
    x = torch.randn(2, 12, 8)
    assert_causal(lambda x: linear_attention(x, x, x, causal=True, chunk_size=5), x)
    q = torch.randn(2, 12, 8, requires_grad=True)
    linear_attention(q, x, x, causal=True, chunk_size=5).sum().backward()
    reference = q.detach().clone().requires_grad_(True)
    _quadratic_linear_attention(reference, x, x, causal=True).sum().backward()
    torch.testing.assert_close(q.grad, reference.grad, atol=1e-5, rtol=0)


def test_linear_attention_weights_are_a_distribution_like_softmax() -> None:
    # One-hot values read the weights back: each row is positive and sums to one.
    T = 6
    q, k = torch.randn(T, 4), torch.randn(T, 4)
    for causal in (False, True):
        weights = linear_attention(q, k, torch.eye(T), causal=causal)
        torch.testing.assert_close(weights.sum(-1), torch.ones(T), atol=1e-5, rtol=0)
        assert (weights >= 0).all()
        if causal:
            assert torch.equal(weights.triu(1), torch.zeros(T, T))


def _matmul_flops(fn, T: int) -> int:
    q = torch.empty(1, 4, T, 32, device="meta")  # shapes only, no memory
    with FlopCounterMode(display=False) as counter:
        fn(q, q, q)
    return counter.get_total_flops()


@pytest.mark.parametrize(
    "name, fn, growth",
    [
        ("softmax attention", lambda q, k, v: scaled_dot_product_attention(q, k, v), 4.0),
        ("linear attention", lambda q, k, v: linear_attention(q, k, v), 2.0),
        ("causal linear attention", lambda q, k, v: linear_attention(q, k, v, causal=True), 2.0),
    ],
)
def test_doubling_the_length_quadruples_softmax_work_and_doubles_linear_work(name: str, fn, growth: float) -> None:
    ratio = _matmul_flops(fn, 4096) / _matmul_flops(fn, 2048)
    assert abs(ratio - growth) < 1e-9, f"{name}: doubling T multiplied the operations by {ratio:.3f}"


def test_linear_attention_rejects_bad_input() -> None:
    x = torch.randn(2, 5, 4)
    with raises(ValueError, '3', '4'):
        linear_attention(torch.randn(2, 5, 3), x, x)
    with raises(ValueError, '5', '4'):
        linear_attention(x, x, x[:, :4])
    with raises(ValueError, '3', '5'):
        linear_attention(x[:, :3], x, x, causal=True)
    with raises(ValueError, 'chunk_size', '0'):
        linear_attention(x, x, x, causal=True, chunk_size=0)
