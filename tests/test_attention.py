"""Attention: reference equivalence with PyTorch, properties, the KV cache hook, and bad input."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
import torch
from torch import Tensor, nn
from errors import raises
import torch.nn.functional as F

from transformer_lib import attention
from transformer_lib.attention import MultiHeadAttention, fused_attention, scaled_dot_product_attention, upgrade_projection_names
from transformer_lib.masking import CAUSAL, causal_mask, padding_mask, to_torch_blocked
from transformer_lib.normalization import NORMS
from transformer_lib.reference import torch_multihead_attention

# Two float32 evaluations that differ only in the order of additions (ours vs PyTorch's kernels)
# differ by at most about 2 * n * u * scale (Higham 2002, section 4.2): sums of n <= 16 terms (Dk,
# d_model), u = 2**-24, outputs of scale <= 4 (a convex combination of randn values). 1e-6 was
# under this bound: the worst of 900 seeded cases measured 6.6e-7 on an AMD EPYC, a margin of 1.5.
ATOL = 2 * 16 * 2.0**-24 * 4  # 7.6e-6


def _mask(kind: str, batch: tuple[int, ...], T: int, L: int) -> torch.Tensor | None:
    if kind == "none":
        return None
    if kind == "causal":
        return torch.ones(T, L, dtype=torch.bool).tril(L - T)
    if kind == "padding":
        lengths = torch.randint(1, L + 1, batch)
        return (torch.arange(L) < lengths[..., None])[..., None, :]  # (*batch, 1, L)
    if kind == "random":  # arbitrary pattern, every row keeps at least one key
        mask = torch.rand(*batch, T, L) > 0.5
        mask[..., 0] = True
        return mask
    raise AssertionError(kind)


@pytest.mark.parametrize("mask_kind", ["none", "causal", "padding", "random"])
@pytest.mark.parametrize("batch, T, L, Dk, Dv", [((2,), 5, 5, 8, 8), ((3, 2), 4, 7, 16, 5), ((1, 4), 1, 9, 4, 12)])
def test_attention_function_matches_torch_sdpa(mask_kind: str, batch: tuple[int, ...], T: int, L: int, Dk: int, Dv: int) -> None:
    q, k, v = torch.randn(*batch, T, Dk), torch.randn(*batch, L, Dk), torch.randn(*batch, L, Dv)
    mask = _mask(mask_kind, batch, T, L)
    out, weights = scaled_dot_product_attention(q, k, v, mask)
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    torch.testing.assert_close(out, expected, atol=ATOL, rtol=0)
    torch.testing.assert_close(weights.sum(-1), torch.ones(*batch, T), atol=ATOL, rtol=0)
    if mask is not None:
        assert (weights.masked_select(~mask.expand_as(weights)) == 0).all(), "masked keys must get exactly zero weight"


def test_fully_masked_rows_give_zeros_not_nan_in_both_paths() -> None:
    q, k, v = torch.randn(2, 3, 4), torch.randn(2, 5, 4), torch.randn(2, 5, 4)
    mask = torch.ones(2, 3, 5, dtype=torch.bool)
    mask[0, 1] = False  # query 1 of item 0 sees nothing
    out, weights = scaled_dot_product_attention(q, k, v, mask)
    assert not out.isnan().any() and not weights.isnan().any()
    assert torch.equal(out[0, 1], torch.zeros(4)) and torch.equal(weights[0, 1], torch.zeros(5))

    mha = MultiHeadAttention(8, 2).eval()
    x = torch.randn(2, 5, 8)
    all_blocked = torch.zeros(2, 1, 5, 5, dtype=torch.bool)
    all_blocked[1] = True
    fast, _ = mha(x, x, x, mask=all_blocked)
    explicit, w = mha(x, x, x, mask=all_blocked, need_weights=True)
    assert not fast.isnan().any() and not explicit.isnan().any()
    torch.testing.assert_close(fast, explicit, atol=ATOL, rtol=0)
    assert torch.equal(w[0], torch.zeros_like(w[0]))


@pytest.mark.parametrize("need_weights", [False, True])
@pytest.mark.parametrize("kdim, vdim", [(None, None), (6, 10)])
def test_multi_head_attention_matches_nn_multiheadattention(need_weights: bool, kdim: int | None, vdim: int | None) -> None:
    D, H, B, T, S = 16, 4, 3, 5, 7
    ours = MultiHeadAttention(D, H, kdim=kdim, vdim=vdim).eval()
    theirs = torch_multihead_attention(ours).eval()
    query = torch.randn(B, T, D)
    key = torch.randn(B, S, kdim or D)
    value = torch.randn(B, S, vdim or D)
    src = torch.tensor([[4, 4, 4, 4, 4, 0, 0], [4, 4, 4, 4, 4, 4, 4], [4, 4, 0, 0, 0, 0, 0]])
    key_mask = padding_mask(src, pad_id=0)  # (B, 1, 1, S)

    out, weights = ours(query, key, value, mask=key_mask, need_weights=need_weights)
    expected, expected_weights = theirs(
        query, key, value, key_padding_mask=to_torch_blocked(key_mask[:, 0, 0]), need_weights=True
    )
    torch.testing.assert_close(out, expected, atol=ATOL, rtol=0)
    if need_weights:
        # nn.MultiheadAttention averages over heads by default; ours returns every head.
        torch.testing.assert_close(weights.mean(dim=1), expected_weights, atol=ATOL, rtol=0)


def test_self_attention_with_causal_mask_matches_nn_multiheadattention() -> None:
    D, H, B, T = 12, 3, 2, 6
    ours = MultiHeadAttention(D, H).eval()
    theirs = torch_multihead_attention(ours).eval()
    x = torch.randn(B, T, D)
    out, _ = ours(x, x, x, mask=causal_mask(T))
    expected, _ = theirs(x, x, x, attn_mask=to_torch_blocked(causal_mask(T)[0, 0]), need_weights=False)
    torch.testing.assert_close(out, expected, atol=ATOL, rtol=0)


def test_fused_and_explicit_paths_agree_with_general_widths() -> None:
    # The shapes of chapter 1's trace: batch 64, sequence 3, 2 heads, input 6, per-head 4, output 6.
    mha = MultiHeadAttention(d_model=6, n_heads=2, d_k=4, d_v=4, d_out=6).eval()
    x = torch.randn(64, 3, 6)
    fast, none = mha(x, x, x, mask=causal_mask(3))
    explicit, weights = mha(x, x, x, mask=causal_mask(3), need_weights=True)
    assert none is None
    assert fast.shape == (64, 3, 6) and weights.shape == (64, 2, 3, 3)
    assert mha.q_proj.weight.shape == (2 * 4, 6) and mha.out_proj.weight.shape == (6, 2 * 4)
    torch.testing.assert_close(fast, explicit, atol=ATOL, rtol=0)


def test_value_and_output_widths_can_differ_from_query_width() -> None:
    mha = MultiHeadAttention(d_model=6, n_heads=3, d_k=2, d_v=5, d_out=7, kdim=4, vdim=9).eval()
    out, weights = mha(torch.randn(2, 3, 6), torch.randn(2, 8, 4), torch.randn(2, 8, 9), need_weights=True)
    assert out.shape == (2, 3, 7) and weights.shape == (2, 3, 3, 8)
    assert mha.v_proj.weight.shape == (15, 9)


def test_dropout_on_weights_only_in_training() -> None:
    torch.manual_seed(0)
    mha = MultiHeadAttention(16, 4, dropout=0.5)
    x = torch.randn(2, 10, 16)
    mha.eval()
    a, w_eval = mha(x, x, x, need_weights=True)
    b, _ = mha(x, x, x)
    torch.testing.assert_close(a, b, atol=ATOL, rtol=0)
    torch.testing.assert_close(w_eval.sum(-1), torch.ones(2, 4, 10), atol=ATOL, rtol=0)
    mha.train()
    _, w_train = mha(x, x, x, need_weights=True)
    row_sums = w_train.sum(-1)
    assert not torch.allclose(row_sums, torch.ones_like(row_sums)), "dropout must perturb the rows in training"
    # inverted dropout keeps the expectation: surviving weights are scaled by 1 / (1 - p)
    kept = w_train != 0
    torch.testing.assert_close(w_train[kept], (w_eval / 0.5)[kept], atol=1e-5, rtol=0)
    c, _ = mha(x, x, x)
    assert not torch.allclose(c, b), "the fused path must apply dropout in training too"


@pytest.mark.parametrize("seed", range(3))
def test_self_attention_without_positions_is_permutation_equivariant(seed: int) -> None:
    torch.manual_seed(seed)
    mha = MultiHeadAttention(8, 2).eval()
    x = torch.randn(1, 6, 8)
    perm = torch.randperm(6)
    out, _ = mha(x, x, x)
    out_perm, _ = mha(x[:, perm], x[:, perm], x[:, perm])
    torch.testing.assert_close(out_perm, out[:, perm], atol=ATOL, rtol=0)


def test_clear_errors_for_bad_input() -> None:
    with raises(ValueError, "d_model=10", "n_heads=4"):
        MultiHeadAttention(10, 4)
    mha = MultiHeadAttention(8, 2)
    x = torch.randn(2, 5, 8)
    with raises(ValueError, "(2, 1, 1, 4)", "(2, 2, 5, 5)"):  # a mask that would broadcast the scores wrong
        mha(x, x, x, mask=torch.ones(2, 1, 1, 4, dtype=torch.bool))
    with raises(TypeError, "torch.float32"):
        mha(x, x, x, mask=torch.zeros(1, 1, 5, 5))
    with raises(ValueError, 3, 4):
        scaled_dot_product_attention(torch.randn(2, 3), torch.randn(5, 4), torch.randn(5, 4))
    with raises(ValueError, "dropout", 1.0):
        MultiHeadAttention(8, 2, dropout=1.0)


@settings(max_examples=40, deadline=None)
@given(
    B=st.integers(1, 3),
    T=st.integers(1, 6),
    L=st.integers(1, 8),
    extra=st.integers(0, 5),
    data=st.data(),
)
def test_padding_mask_equals_dropping_the_padded_keys(B: int, T: int, L: int, extra: int, data: st.DataObject) -> None:
    # Property: attending over L real keys plus `extra` masked pads equals attending over the L keys alone.
    seed = data.draw(st.integers(0, 2**16))
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(B, T, 4, generator=g), torch.randn(B, L + extra, 4, generator=g), torch.randn(B, L + extra, 3, generator=g))
    mask = torch.arange(L + extra) < L  # (L + extra,) True for real keys
    out, weights = scaled_dot_product_attention(q, k, v, mask)
    expected, _ = scaled_dot_product_attention(q, k[:, :L], v[:, :L])
    torch.testing.assert_close(out, expected, atol=ATOL, rtol=0)
    assert torch.all(weights[..., L:] == 0)


def test_torch_reference_refuses_attention_with_positions_inside() -> None:
    from transformer_lib.embeddings import RotaryEmbedding
    from transformer_lib.positional_attention import RotaryAttention

    with raises(ValueError, "rotary"):
        torch_multihead_attention(RotaryAttention(8, 2, rotary=RotaryEmbedding(4, max_len=16)))


def test_fused_path_zeroes_empty_rows_where_pytorch_returns_nan(monkeypatch: pytest.MonkeyPatch) -> None:
    # PyTorch < 2.5 returns NaN for a query with no visible key. Simulate such a release: the probe
    # must notice, and the guard must then turn those rows into zeros.
    from transformer_lib import attention

    real_sdpa = F.scaled_dot_product_attention

    def old_sdpa(q, k, v, attn_mask=None, **kwargs):
        out = real_sdpa(q, k, v, attn_mask=attn_mask, **kwargs)
        if attn_mask is not None:
            empty = ~attn_mask.any(-1, keepdim=True) if attn_mask.dtype == torch.bool else (attn_mask == float("-inf")).all(-1, keepdim=True)
            out = out.masked_fill(empty, float("nan"))
        return out

    monkeypatch.setattr(attention.F, "scaled_dot_product_attention", old_sdpa)
    attention._fused_attention_zeroes_empty_rows.cache_clear()
    try:
        assert attention._fused_attention_zeroes_empty_rows(torch.device("cpu"), torch.float32) is False
        mha = MultiHeadAttention(8, 2).eval()
        x = torch.randn(2, 5, 8)
        mask = torch.ones(2, 1, 5, 5, dtype=torch.bool)
        mask[1, 0, 2] = False  # query 2 of item 1 sees nothing
        out, _ = mha(x, x, x, mask=mask)
        assert torch.isfinite(out).all()
        expected, _ = mha(x, x, x, mask=mask, need_weights=True)
        torch.testing.assert_close(out, expected, atol=ATOL, rtol=0)
    finally:
        monkeypatch.undo()
        attention._fused_attention_zeroes_empty_rows.cache_clear()
    if torch.torch_version.TorchVersion(torch.__version__) >= "2.5":  # CI's PyTorch needs no guard
        assert attention._fused_attention_zeroes_empty_rows(torch.device("cpu"), torch.float32) is True


# --- grouped-query and multi-query attention (chapter 7) -------------------------------------------

NEEDS_ENABLE_GQA = pytest.mark.skipif(
    tuple(int(p) for p in torch.__version__.split(".")[:2]) < (2, 5), reason="F.scaled_dot_product_attention(enable_gqa=) is PyTorch 2.5+"
)


@NEEDS_ENABLE_GQA
@pytest.mark.parametrize("n_kv_heads", [1, 2, 4])
def test_grouped_query_attention_matches_pytorchs_enable_gqa(n_kv_heads: int) -> None:
    """n_kv_heads key/value heads, each shared by n_heads / n_kv_heads query heads: PyTorch's fused
    kernel with enable_gqa=True on our projections gives our output, explicit and fused paths alike."""
    mha = MultiHeadAttention(16, 4, n_kv_heads=n_kv_heads).eval()
    x, memory = torch.randn(3, 5, 16), torch.randn(3, 7, 16)
    mask = torch.rand(3, 1, 5, 7) > 0.3
    q = mha.project_query(x)  # (B, 4, T, Dk)
    k, v = mha.project_key_value(memory, memory)  # (B, n_kv_heads, L, Dk)
    assert k.shape == (3, n_kv_heads, 7, 4) and v.shape == (3, n_kv_heads, 7, 4)
    reference = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)  # (B, 4, T, Dk)
    expected = mha.out_proj(mha.merge_heads(reference.nan_to_num(0.0)))
    fused, _ = mha(x, memory, memory, mask=mask)
    explicit, weights = mha(x, memory, memory, mask=mask, need_weights=True)
    torch.testing.assert_close(fused, expected, atol=ATOL, rtol=0)
    torch.testing.assert_close(explicit, expected, atol=ATOL, rtol=0)
    assert weights.shape == (3, 4, 5, 7)


def test_multi_query_attention_shares_one_key_and_value_across_heads() -> None:
    mqa = MultiHeadAttention(16, 4, n_kv_heads=1).eval()
    x = torch.randn(2, 6, 16)
    _, weights = mqa(x, x, x, need_weights=True)
    q, (k, _) = mqa.project_query(x), mqa.project_key_value(x, x)
    by_hand = (q @ k.transpose(-2, -1) / 2.0).softmax(-1)  # k (B, 1, L, Dk) broadcast over the 4 heads
    torch.testing.assert_close(weights, by_hand, atol=ATOL, rtol=0)
    full = MultiHeadAttention(16, 4)
    assert mqa.k_proj.out_features == 4 and full.k_proj.out_features == 16  # one head's width, not four


def test_grouped_heads_must_divide_the_query_heads() -> None:
    with raises(ValueError, "n_kv_heads=3", "n_heads=4"):
        MultiHeadAttention(16, 4, n_kv_heads=3)
    with raises(ValueError, "n_kv_heads", 0):
        MultiHeadAttention(16, 4, n_kv_heads=0)
    with raises(ValueError, "n_kv_heads=2"):
        torch_multihead_attention(MultiHeadAttention(16, 4, n_kv_heads=2))


@pytest.mark.parametrize("norm", sorted(NORMS))
@pytest.mark.parametrize("n_kv_heads", [4, 2])
@pytest.mark.parametrize("need_weights", [False, True])
def test_qk_norm_normalises_queries_and_keys_before_attention(norm: str, n_kv_heads: int, need_weights: bool) -> None:
    """QK-norm = each head's queries and keys normalised over Dk (with their own learned gains), then
    F.scaled_dot_product_attention as usual; written out here from the projections' weights."""
    torch.manual_seed(0)
    B, T, L, D, H = 2, 5, 6, 16, 4
    mha = MultiHeadAttention(D, H, n_kv_heads=n_kv_heads, qk_norm=NORMS[norm]).eval()
    assert mha.query_norm is not mha.key_norm
    with torch.no_grad():
        for p in [*mha.query_norm.parameters(), *mha.key_norm.parameters()]:
            p.normal_(1.0, 0.5)
    x, memory = torch.randn(B, T, D), torch.randn(B, L, D)
    mask = torch.rand(B, 1, T, L) < 0.8
    mask[..., 0] = True  # every query sees a key

    def normalised(h: torch.Tensor, module: torch.nn.Module) -> torch.Tensor:
        # The norm's own module over each head's Dk features (its formula is tests/test_normalization.py's):
        # what is checked here is where QK-norm applies, for any entry of the NORMS table.
        return module(h)

    q = normalised(mha.q_proj(x).view(B, T, H, -1).transpose(1, 2), mha.query_norm)  # (B, H, T, Dk)
    k = normalised(mha.k_proj(memory).view(B, L, n_kv_heads, -1).transpose(1, 2), mha.key_norm)  # (B, Hkv, L, Dk)
    v = mha.v_proj(memory).view(B, L, n_kv_heads, -1).transpose(1, 2)  # (B, Hkv, L, Dv)
    group = H // n_kv_heads
    k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)  # (B, H, L, ...)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)  # (B, H, T, Dv)
    expected = mha.out_proj(out.transpose(1, 2).reshape(B, T, D))  # (B, T, D)
    ours, _ = mha(x, memory, memory, mask=mask, need_weights=need_weights)
    torch.testing.assert_close(ours, expected, atol=ATOL, rtol=0)
    plain = MultiHeadAttention(D, H, n_kv_heads=n_kv_heads).eval()
    plain.load_state_dict({k: v for k, v in mha.state_dict().items() if "_norm." not in k})
    assert not torch.allclose(plain(x, memory, memory, mask=mask)[0], ours, atol=1e-3), "the norm changes the output"


def test_qk_norm_bounds_the_scores_however_large_the_projections_grow() -> None:
    """The point of QK-norm (Dehghani et al. 2023): a query/key projection scaled up does not change the
    attention, so its logits cannot grow without bound; without it the softmax saturates."""
    torch.manual_seed(1)
    x = torch.randn(2, 5, 16)
    for qk_norm, changes in [(NORMS["rmsnorm"], False), (None, True)]:
        mha = MultiHeadAttention(16, 4, qk_norm=qk_norm, bias=False).eval()
        before = mha(x, x, x)[0]
        with torch.no_grad():
            mha.q_proj.weight.mul_(64.0)  # a power of two: exact
            mha.k_proj.weight.mul_(64.0)
        after = mha(x, x, x)[0]
        assert (not torch.allclose(before, after, atol=1e-3)) == changes


def test_torch_reference_refuses_qk_norm() -> None:
    with raises(ValueError, "QK-norm"):
        torch_multihead_attention(MultiHeadAttention(8, 2, qk_norm=NORMS["layernorm"]))


@pytest.mark.parametrize("n_kv_heads, d_v, bias", [(None, None, True), (2, None, True), (None, 3, False)])
def test_self_and_cross_attention_project_with_fewer_products_as_the_three_projections_do(
        n_kv_heads: int | None, d_v: int | None, bias: bool) -> None:
    torch.manual_seed(0)
    mha = MultiHeadAttention(16, 4, n_kv_heads=n_kv_heads, d_v=d_v, bias=bias)
    x, y = torch.randn(2, 5, 16), torch.randn(2, 3, 16)
    q_proj, k_proj, v_proj = mha.projections()

    def heads(projected: Tensor, width: int) -> Tensor:
        return projected.view(*projected.shape[:2], -1, width).transpose(1, 2)  # (B, heads, L, width)

    d_v = mha.d_v
    for query, key in ((x, x), (y, x)):  # self-attention (one product), cross-attention (two)
        expected = heads(q_proj(query), 4), heads(k_proj(key), 4), heads(v_proj(key), d_v)  # three
        got = mha.project(query, key, key)
        # same products of the same operands, up to the kernels' blocking of sums of 16 terms
        for a, b in zip(got, expected):
            assert a.shape == b.shape
            torch.testing.assert_close(a, b, atol=2 * 16 * 2.0**-24 * float(b.detach().abs().max()), rtol=0)
        # the gradient reaches the one stored matrix, in the rows of each projection
        mha.zero_grad()
        sum(t.sum() for t in got).backward()
        grads = mha.in_proj_weight.grad.split(mha.widths)
        for grad, inputs in zip(grads, (query, key, key)):
            torch.testing.assert_close(grad, inputs.sum(dim=(0, 1)).expand_as(grad), atol=1e-5, rtol=1e-5)


def test_the_stored_projections_are_drawn_as_three_linear_layers_and_old_files_load() -> None:
    """``in_proj_weight`` holds what three ``nn.Linear`` made with the same seed hold, and a
    ``state_dict`` of the old names (``q_proj.weight``, ...) loads into it with the same outputs."""
    for widths in ({}, {"kdim": 5, "vdim": 7}):
        torch.manual_seed(3)
        mha = MultiHeadAttention(8, 2, **widths)
        torch.manual_seed(3)
        linears = [nn.Linear(8, 8), nn.Linear(widths.get("kdim", 8), 8), nn.Linear(widths.get("vdim", 8), 8)]
        for projection, linear in zip(mha.projections(), linears):
            assert torch.equal(projection.weight, linear.weight) and torch.equal(projection.bias, linear.bias)
        old = {f"{name}.{part}": getattr(linear, part).detach().clone()
               for name, linear in zip(("q_proj", "k_proj", "v_proj"), linears) for part in ("weight", "bias")}
        old.update({f"out_proj.{k}": v for k, v in mha.out_proj.state_dict().items()})
        fresh = MultiHeadAttention(8, 2, **widths).eval()
        fresh.load_state_dict(old)
        assert sorted(fresh.state_dict()) == sorted(mha.state_dict())
        q, k, v = torch.randn(2, 3, 8), torch.randn(2, 4, widths.get("kdim", 8)), torch.randn(2, 4, widths.get("vdim", 8))
        assert torch.equal(fresh(q, k, v)[0], mha.eval()(q, k, v)[0])
    state = {f"layer.{p}.weight": torch.ones(2, 3) for p in ("q_proj", "k_proj", "v_proj")}
    upgrade_projection_names(state, prefix="other.")
    assert sorted(state) == ["layer.k_proj.weight", "layer.q_proj.weight", "layer.v_proj.weight"]  # not under prefix


@pytest.mark.parametrize("need_weights", [False, True])
@pytest.mark.parametrize("T, L, positions", [(6, 6, False), (2, 6, False), (6, 6, True)])
def test_causal_marker_is_the_causal_mask(need_weights: bool, T: int, L: int, positions: bool) -> None:
    """CAUSAL reaches the kernel as is_causal=True where it can (T == L, no bias, no weights) and is
    made into causal_mask otherwise (fewer queries than keys: a key/value cache; a score bias)."""
    torch.manual_seed(0)
    mha = MultiHeadAttention(16, 4).eval()
    q, k, v = torch.randn(2, 4, T, 4), torch.randn(2, 4, L, 4), torch.randn(2, 4, L, 4)
    bias = torch.randn(1, 4, T, L) if positions else None
    expected = mha.attend(q, k, v, causal_mask(T, L), need_weights, bias)
    got = mha.attend(q, k, v, CAUSAL, need_weights, bias)
    torch.testing.assert_close(got[0], expected[0], atol=ATOL, rtol=0)
    if need_weights:
        assert torch.equal(got[1], expected[1])
    assert repr(CAUSAL) == "CAUSAL" and torch.equal(CAUSAL.materialise(T, L), causal_mask(T, L))


def test_a_boolean_mask_is_made_additive_once_for_all_layers_and_again_when_it_changes() -> None:
    """F.scaled_dot_product_attention turns a boolean mask into 0 / -inf at every call; the library makes
    that form once for a mask that several layers receive, and makes it again when the mask is changed
    in place, for another dtype, or forgets it when the mask is gone (at most four are kept)."""
    torch.manual_seed(0)
    q, k, v = torch.randn(2, 4, 3, 8), torch.randn(2, 4, 5, 8), torch.randn(2, 4, 5, 8)
    mask = padding_mask(torch.tensor([[5, 6, 7, 0, 0], [5, 6, 7, 8, 9]]), pad_id=0)  # (2, 1, 1, 5)
    first = attention._additive_mask(mask, torch.float32)
    assert attention._additive_mask(mask, torch.float32) is first  # remembered for the next layer
    assert torch.equal(first, torch.zeros(2, 1, 1, 5).masked_fill(~mask, float("-inf")))
    assert torch.equal(fused_attention(q, k, v, mask), F.scaled_dot_product_attention(q, k, v, attn_mask=mask))
    mask[0, 0, 0, 3] = True  # changed in place: the next call must see it
    changed = attention._additive_mask(mask, torch.float32)
    assert changed is not first and changed[0, 0, 0, 3] == 0
    torch.testing.assert_close(fused_attention(q, k, v, mask), scaled_dot_product_attention(q, k, v, mask)[0], atol=ATOL, rtol=0)
    assert attention._additive_mask(mask, torch.float64).dtype == torch.float64
    with torch.inference_mode():  # an inference-mode tensor has no version counter: sdpa converts it
        assert attention._additive_mask(mask, torch.float32) is mask
    others = [torch.ones(1, 1, 1, 5, dtype=torch.bool) for _ in range(6)]
    for other in others:
        attention._additive_mask(other, torch.float32)
    kept = [ref() for ref, _, _ in attention._ADDITIVE_MASKS.values()]
    assert len(kept) == 4 and all(a is b for a, b in zip(kept, others[2:]))  # the four used last
    del others, other, kept
    attention._additive_mask(mask, torch.float32)
    kept = [ref() for ref, _, _ in attention._ADDITIVE_MASKS.values()]
    assert len(kept) == 1 and kept[0] is mask, "gone masks are forgotten"


def test_a_mask_used_in_inference_mode_and_then_in_training_trains() -> None:
    """Nothing made in inference mode (which has no autograd) is handed to a training step later."""
    torch.manual_seed(0)
    mha = MultiHeadAttention(8, 2, dropout=0.0)
    x = torch.randn(2, 5, 8)
    mask = padding_mask(torch.tensor([[4, 5, 0, 0, 0], [4, 5, 6, 7, 8]]), pad_id=0)
    with torch.inference_mode():
        mha(x, x, x, mask)
    out, _ = mha(x, x, x, mask)
    out.sum().backward()
    assert mha.in_proj_weight.grad is not None


def test_causal_attention_with_dropout_on_the_cpu_equals_is_causal_bit_for_bit() -> None:
    """On the CPU, where sdpa's fused kernel takes no dropout, the library passes the causal mask it
    keeps instead of is_causal=True (which would build it at every call): the same numbers, the same
    dropout draws, the same gradients."""
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 4, 6, 8, requires_grad=True) for _ in range(3))
    torch.manual_seed(1)
    ours = fused_attention(q, k, v, CAUSAL, dropout_p=0.3)
    ours_grads = torch.autograd.grad(ours.square().sum(), (q, k, v))
    torch.manual_seed(1)
    expected = F.scaled_dot_product_attention(q, k, v, dropout_p=0.3, is_causal=True)
    expected_grads = torch.autograd.grad(expected.square().sum(), (q, k, v))
    assert torch.equal(ours, expected)
    assert all(torch.equal(a, b) for a, b in zip(ours_grads, expected_grads))
    assert attention._additive_causal_mask(6, q.device, q.dtype) is attention._additive_causal_mask(6, q.device, q.dtype)


@pytest.mark.parametrize("shape", [(2, 5), (0, 5), (2, 0), "transposed"])
def test_projections_made_on_rows_give_the_heads_of_each_input(shape: tuple[int, int] | str) -> None:
    """Self- and cross-attention project on the rows of their inputs and view the products as heads:
    any batch and length (empty ones too) and non-contiguous inputs give nn.Linear's heads."""
    torch.manual_seed(0)
    mha = MultiHeadAttention(16, 4)
    x = torch.randn(5, 2, 16).transpose(0, 1) if shape == "transposed" else torch.randn(*shape, 16)
    memory = torch.randn(x.size(0), 3, 16)
    q_proj, k_proj, v_proj = mha.projections()
    for query, key in ((x, x), (x, memory)):
        expected = [mha.split_heads(projection(inputs), 4) for projection, inputs in ((q_proj, query), (k_proj, key), (v_proj, key))]
        for got, want in zip(mha.project(query, key, key), expected):
            assert got.shape == want.shape
            torch.testing.assert_close(got, want, atol=2 * 16 * 2.0**-24 * float(want.abs().max()) if want.numel() else 0.0, rtol=0)
