"""Each pitfall reproduction really has its bug, measured against the library's correct version, and
each effect helper measures what it says (0 for the correct code, clearly more for the bug)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from transformer_lib.attention import MultiHeadAttention, scaled_dot_product_attention
from transformer_lib.blocks import Residual
from transformer_lib.book import pitfalls
from transformer_lib.book.graders.training import length_batching_sentences
from transformer_lib.masking import causal_mask, padding_mask, target_mask
from transformer_lib.properties import assert_causal, assert_deterministic, assert_padding_invariant

TOKENS = torch.tensor([[5, 6, 7, 0, 0, 0], [4, 5, 6, 7, 8, 0]])  # (B, L), pad 0


def attend(mask: torch.Tensor):
    """Self-attention of ``x`` ``(B, L, D)`` under ``mask`` with the library's attention."""
    return lambda x: scaled_dot_product_attention(x[:, None], x[:, None], x[:, None], mask)[0][:, 0]


def test_query_side_padding_mask_lets_real_tokens_attend_to_pads() -> None:
    buggy = pitfalls.query_side_padding_mask(TOKENS, 0)
    assert buggy.shape == (2, 1, 6, 1)
    real, right = TOKENS != 0, padding_mask(TOKENS, 0)
    on_pads = pitfalls.weight_on_blocked_keys(pitfalls.self_attention_weights(TOKENS, buggy), right, queries=real)
    assert pitfalls.weight_on_blocked_keys(pitfalls.self_attention_weights(TOKENS, right), right, queries=real) == 0.0
    # An untrained layer spreads its weight almost evenly: the pads' share is near pads / length
    pads_share = float(((~real).sum(1, keepdim=True) / 6).expand_as(real)[real].mean())
    assert on_pads > 0.5 * pads_share > 0.1
    x = torch.randn(2, 6, 8)
    with pytest.raises(AssertionError, match="padding leaks"):
        assert_padding_invariant(attend(buggy), x, real)
    assert_padding_invariant(attend(right), x, real)


def test_padding_only_target_mask_lets_the_decoder_see_the_future() -> None:
    buggy = pitfalls.padding_only_target_mask(TOKENS, 0)
    future = pitfalls.weight_on_blocked_keys(pitfalls.self_attention_weights(TOKENS, buggy), causal_mask(6),
                                             queries=TOKENS != 0)
    assert future > 0.2
    right = target_mask(TOKENS, 0)
    assert pitfalls.weight_on_blocked_keys(pitfalls.self_attention_weights(TOKENS, right), causal_mask(6)) == 0.0
    x = torch.randn(2, 6, 8)
    with pytest.raises(AssertionError, match="not causal"):
        assert_causal(attend(buggy), x)
    assert_causal(attend(right), x)


def test_unassigned_masked_fill_masks_nothing() -> None:
    q, k, v = torch.randn(3, 2, 5, 4).unbind(0)
    mask = causal_mask(5)[0]
    out, weights = pitfalls.attention_unassigned_masked_fill(q, k, v, mask)
    unmasked, _ = scaled_dot_product_attention(q, k, v)
    assert torch.allclose(out, unmasked, atol=1e-6)
    assert pitfalls.weight_on_blocked_keys(weights, mask) > 0.2
    with pytest.raises(AssertionError, match="not causal"):
        assert_causal(lambda x: pitfalls.attention_unassigned_masked_fill(x, x, x, mask)[0], q)


def test_flipped_mask_puts_all_the_weight_where_it_must_not() -> None:
    q, k, v = torch.randn(3, 2, 4, 4).unbind(0)
    mask = torch.tensor([[True, False, True, False], [False, True, True, True], [True, True, False, False],
                         [False, False, False, True]])  # every row keeps a key and hides one
    _, weights = pitfalls.attention_flipped_mask(q, k, v, mask)
    assert pitfalls.weight_on_blocked_keys(weights, mask) == pytest.approx(1.0)


def test_finite_fill_overflows_float16_fits_bfloat16_and_leaks_when_scores_drift_below_it() -> None:
    q, k, v = torch.randn(3, 2, 5, 4).unbind(0)
    mask = causal_mask(5)[0]
    out, _ = pitfalls.attention_with_finite_fill(q, k, v, mask)
    assert torch.allclose(out, scaled_dot_product_attention(q, k, v, mask)[0], atol=1e-6)  # fine in float32
    with pytest.raises(RuntimeError, match="overflow"):
        pitfalls.attention_with_finite_fill(q.half(), k.half(), v.half(), mask)
    _, weights = pitfalls.attention_with_finite_fill(q.bfloat16(), k.bfloat16(), v.bfloat16(), mask)
    assert (weights.masked_select(~mask) == 0).all()
    x = 0.5 + torch.rand(1, 6, 8)
    leaky = lambda x: pitfalls.attention_with_finite_fill(-5000 * x, x, x, causal_mask(6)[0], fill=-1e4)[0]  # noqa: E731
    with pytest.raises(AssertionError, match="not causal"):
        assert_causal(leaky, x)
    assert_causal(lambda x: scaled_dot_product_attention(-5000 * x, x, x, causal_mask(6)[0])[0], x)


def test_finite_fill_in_low_precision_reports_what_this_pytorch_does() -> None:
    report = pitfalls.finite_fill_in_low_precision(-1e9)
    half, bf16 = report["float16"], report["bfloat16"]
    assert half["stored as"] == -math.inf and "overflow" in str(half["error"])
    assert "masked weight (fill)" not in half  # masked_fill refused it
    assert half["masked weight (-inf)"] == 0.0 and half["fully masked row (-inf)"] == "NaN"
    assert bf16["error"] is None and -1.01e9 < bf16["stored as"] < -0.99e9
    assert bf16["masked weight (fill)"] == 0.0 and bf16["fully masked row (fill)"] == "uniform"
    small = pitfalls.finite_fill_in_low_precision(-1e4)["float16"]
    assert small["error"] is None and small["stored as"] == -10000.0


def test_attention_without_scaling_saturates_wide_heads() -> None:
    generator = torch.Generator().manual_seed(0)
    q, k = torch.randn(500, 1, 256, generator=generator), torch.randn(500, 32, 256, generator=generator)
    v = torch.randn(500, 32, 2, generator=generator)
    _, unscaled = pitfalls.attention_without_scaling(q, k, v)
    _, scaled = scaled_dot_product_attention(q, k, v)
    assert torch.allclose(pitfalls.attention_without_scaling(q, k, v)[0], torch.softmax(q @ k.mT, -1) @ v, atol=1e-5)
    assert unscaled.amax(-1).mean() > 0.8 > 0.3 > scaled.amax(-1).mean()


def test_softmax_over_queries_makes_columns_not_rows_sum_to_one() -> None:
    q, k, v = torch.randn(3, 5, 4).unbind(0)
    _, weights = pitfalls.attention_softmax_over_queries(q, k, v)
    assert torch.allclose(weights.sum(0), torch.ones(5))
    assert not torch.allclose(weights.sum(1), torch.ones(5), atol=0.05)


def test_full_width_heads_have_n_heads_times_the_parameters() -> None:
    D, H = 512, 8
    wide = 4 * H * D * D + 3 * H * D + D  # four (D x H·D) matrices, their biases
    right = 4 * D * D + 4 * D
    assert pitfalls.attention_parameter_ratio(D, H) == pytest.approx(wide / right)
    assert 7.9 < pitfalls.attention_parameter_ratio(D, H) < 8.0
    layer = pitfalls.FullWidthHeadsAttention(16, 4)
    assert layer.q_proj.out_features == 64 and layer(torch.randn(2, 3, 16), torch.randn(2, 3, 16),
                                                     torch.randn(2, 3, 16))[0].shape == (2, 3, 16)


def test_dropout_built_in_forward_stays_on_in_eval() -> None:
    x = torch.randn(2, 5, 16)
    buggy = pitfalls.DropoutInForwardAttention(16, 2).eval()
    assert pitfalls.eval_mode_variation(buggy, x) > 0.01
    assert pitfalls.eval_mode_variation(MultiHeadAttention(16, 2, dropout=0.1), x) == 0.0
    with pytest.raises(AssertionError, match="not deterministic"):
        assert_deterministic(lambda x: buggy(x, x, x)[0], x)


def test_normalised_input_residual_loses_the_identity_path() -> None:
    x = 3.0 + 2.0 * torch.randn(2, 5, 16)
    assert pitfalls.identity_path_change(Residual(16, norm_first=True), x) == 0.0
    change = pitfalls.identity_path_change(pitfalls.NormalisedInputResidual(16), x)
    assert change > 0.5
    block = pitfalls.NormalisedInputResidual(16).eval()
    with torch.no_grad():
        assert torch.allclose(block(x, torch.zeros_like), F.layer_norm(x, (16,)), atol=1e-5)


def test_targets_without_shift_can_be_copied_from_the_input() -> None:
    tgt = torch.tensor([[2, 5, 6, 7, 3], [2, 8, 3, 0, 0]])
    tgt_in, tgt_out = pitfalls.targets_without_shift(tgt)
    assert pitfalls.copy_accuracy(tgt_in, tgt_out, pad_id=0) == 1.0
    assert pitfalls.copy_accuracy(tgt[:, :-1], tgt[:, 1:], pad_id=0) == 0.0


def test_sorting_by_characters_pads_more_than_sorting_by_tokens() -> None:
    sentences = length_batching_sentences()
    waste = pitfalls.padding_waste_by_sort_key(sentences, str.split, batch_size=8)
    assert waste["tokens"] < waste["characters"] < waste["random"]
    assert waste["characters"] > 2 * waste["tokens"]
    batches = pitfalls.batches_sorted_by_characters(sentences, str.split, 8)
    assert sorted(i for batch in batches for i in batch) == list(range(len(sentences)))
    lengths = [len(s) for s in sentences]
    assert all(max(lengths[i] for i in a) <= min(lengths[i] for i in b) for a, b in zip(batches, batches[1:]))


def test_weight_on_blocked_keys_averages_over_the_chosen_queries_only() -> None:
    weights = torch.tensor([[[[0.5, 0.5], [1.0, 0.0]]]])  # (B=1, H=1, T=2, L=2)
    allowed = torch.tensor([True, False])
    assert pitfalls.weight_on_blocked_keys(weights, allowed) == pytest.approx(0.25)
    assert pitfalls.weight_on_blocked_keys(weights, allowed, queries=torch.tensor([[True, False]])) == 0.5
    assert pitfalls.weight_on_blocked_keys(weights, allowed, queries=torch.tensor([[False, True]])) == 0.0


def test_unstable_softmax_is_exact_on_small_scores_and_nan_on_realistic_ones() -> None:
    generator = torch.Generator().manual_seed(0)
    q, k, v = torch.randn(3, 2, 5, 8, generator=generator).unbind(0)
    assert torch.allclose(pitfalls.attention_unstable_softmax(q, k, v)[0], scaled_dot_product_attention(q, k, v)[0],
                          atol=1e-6)
    big_q, big_k = 30 * torch.randn(2, 3, 64, generator=generator), 30 * torch.randn(2, 5, 64, generator=generator)
    value = torch.randn(2, 5, 4, generator=generator)
    assert pitfalls.attention_unstable_softmax(big_q, big_k, value)[0].isnan().any()
    assert torch.isfinite(scaled_dot_product_attention(big_q, big_k, value)[0]).all()
    half = [3 * t.half() for t in (q, k)]
    assert pitfalls.attention_unstable_softmax(*half, v.half())[0].isnan().any()  # exp overflows float16 at 11.1


def test_detached_weights_give_the_output_but_no_gradient_to_queries_and_keys() -> None:
    q, k, v = (t.requires_grad_() for t in torch.randn(3, 2, 4, 8).unbind(0))
    out, _ = pitfalls.attention_detached_weights(q, k, v)
    assert torch.allclose(out, scaled_dot_product_attention(q, k, v)[0], atol=1e-6)
    out.sum().backward()
    assert q.grad is None and k.grad is None and v.grad is not None and v.grad.abs().sum() > 0


def test_in_place_query_division_changes_the_callers_tensor() -> None:
    q, k, v = torch.randn(3, 2, 4, 16).unbind(0)
    before = q.clone()
    out, _ = pitfalls.attention_dividing_query_in_place(q, k, v)
    assert torch.allclose(out, scaled_dot_product_attention(before, k, v)[0], atol=1e-6)  # the output is right
    assert torch.allclose(q, before / 4)  # but the caller's query is divided by sqrt(16)


def test_padding_mask_by_order_hides_ids_below_the_pad() -> None:
    assert torch.equal(pitfalls.padding_mask_by_order(TOKENS, 0), padding_mask(TOKENS, 0))  # pad 0: no difference
    fairseq = torch.tensor([[0, 5, 6, 2, 1], [0, 7, 2, 1, 1]])  # <s> = 0, <pad> = 1, </s> = 2
    buggy, right = pitfalls.padding_mask_by_order(fairseq, 1), padding_mask(fairseq, 1)
    assert right[:, 0, 0, 0].all() and not buggy[:, 0, 0, 0].any()  # every <s> hidden
    assert torch.equal(buggy[..., 1:], right[..., 1:])


def test_loss_overwriting_targets_is_exact_but_changes_the_callers_targets() -> None:
    logits = torch.randn(2, 4, 6)
    target = torch.tensor([[4, 2, 3, 0], [1, 5, 0, 0]])
    kept = target.clone()
    loss = pitfalls.loss_overwriting_targets(logits, target, 0.1, 3)  # pad id 3: overwritten with 0
    ref = F.cross_entropy(logits.flatten(0, 1), kept.flatten(), label_smoothing=0.1, ignore_index=3)
    assert torch.allclose(loss, ref, atol=1e-6)
    assert not torch.equal(target, kept) and (target[kept == 3] == 0).all()


# --- Chapter 7 ---------------------------------------------------------------------------------------


def test_rotary_in_halves_is_rope_up_to_a_permutation_of_each_head() -> None:
    from transformer_lib.embeddings import RotaryEmbedding

    x = torch.randn(2, 5, 8)
    halves = pitfalls.rotary_in_halves(x, start=3)
    order = torch.arange(8).view(2, 4).T.flatten()  # neighbours (2i, 2i+1) <- halves (i, i + 4)
    paper = RotaryEmbedding(8, max_len=8)(x[..., order], 3)
    assert torch.allclose(halves[..., order], paper, atol=1e-5)  # the same method, coordinates permuted
    assert not torch.allclose(halves, RotaryEmbedding(8, max_len=8)(x, 3), atol=1e-2)  # not the paper's layout


def test_power_of_two_slopes_are_alibis_only_for_a_power_of_two() -> None:
    from transformer_lib.embeddings import ALiBiBias, alibi_slopes

    for heads in (1, 2, 4, 8, 16):
        assert torch.allclose(pitfalls.power_of_two_alibi_slopes(heads), alibi_slopes(heads))
    assert not torch.allclose(pitfalls.power_of_two_alibi_slopes(6), alibi_slopes(6))
    assert torch.allclose(pitfalls.alibi_bias_with_formula_slopes(4, 3, 5, 2), ALiBiBias(4)(3, 5, 2))


def test_the_window_one_too_wide_shows_each_query_one_key_more() -> None:
    from transformer_lib.masking import sliding_window_mask

    wide, right = pitfalls.sliding_window_one_too_wide(6, 6, 2), sliding_window_mask(6, 6, window=2)
    assert (right <= wide).all()
    assert wide.sum(-1).squeeze().tolist() == [1, 2, 3, 3, 3, 3] and right.sum(-1).squeeze().tolist() == [1, 2, 2, 2, 2, 2]


def test_an_rms_norm_that_centres_is_right_only_on_inputs_of_mean_zero() -> None:
    from transformer_lib.normalization import RMSNorm

    centred, right = pitfalls.RMSNormSubtractingMean(8), RMSNorm(8)
    x = torch.randn(3, 8)
    x0 = x - x.mean(-1, keepdim=True)
    assert torch.allclose(centred(x0), right(x0), atol=1e-5)
    assert not torch.allclose(centred(x + 3), right(x + 3), atol=1e-2)


def test_greedy_continue_without_cache_writes_greedy_continues_tokens() -> None:
    from transformer_lib.config import TransformerConfig
    from transformer_lib.decoding import greedy_continue
    from transformer_lib.model import DecoderOnlyTransformer

    torch.manual_seed(0)
    model = DecoderOnlyTransformer(TransformerConfig.decoder_only("tiny", vocab_size=12, tie_output=False)).eval()
    prompt = torch.tensor([[5, 6, 7, 2], [8, 9, 4, 2]])
    for eos in range(4, 12):
        expected = greedy_continue(model, prompt, max_new_tokens=5, eos_id=eos, pad_id=0)
        assert torch.equal(pitfalls.greedy_continue_without_cache(model, prompt, 5, eos, 0), expected)
