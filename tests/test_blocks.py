"""Blocks: feed-forward, residual placement, encoder/decoder layers against torch.nn, stacks, cache."""

from __future__ import annotations

import pytest
import torch
from errors import raises
from torch import nn

from types import SimpleNamespace

from transformer_lib.attention import MultiHeadAttention
from transformer_lib.blocks import Decoder, DecoderLayer, Encoder, EncoderLayer, FeedForward, GatedFeedForward, Residual
from transformer_lib.kv_cache import kv_cache
from transformer_lib.normalization import RMSNorm
from transformer_lib.masking import causal_mask, padding_mask, target_mask, to_torch_blocked
from transformer_lib.reference import torch_decoder_layer, torch_encoder_layer

ATOL = 1e-5  # fp32 tolerance asked for; the tests below reach it with room to spare (see the note in test_model)


@pytest.fixture(autouse=True)
def _no_fastpath(no_fastpath):
    """Every test here compares against PyTorch's layers (conftest.py: no_fastpath)."""


def _randomise_norms(module: nn.Module) -> None:
    # LayerNorms start at (1, 0); random affine parameters make the comparison meaningful.
    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, nn.LayerNorm):
                m.weight.normal_(1.0, 0.2)
                m.bias.normal_(0.0, 0.2)


def test_feed_forward_acts_on_each_position_independently() -> None:
    ff = FeedForward(8, 32).eval()
    x = torch.randn(2, 5, 8)
    y = x.clone()
    y[1, 3] += 1.0
    changed = (ff(x) != ff(y)).any(-1)
    assert changed.tolist() == [[False] * 5, [False, False, False, True, False]]


@pytest.mark.parametrize("shape", [(8,), (3, 8), (2, 5, 8), (2, 3, 4, 8), (0, 5, 8), (2, 0, 8), "transposed"])
@pytest.mark.parametrize("gated", [False, True])
def test_feed_forward_works_on_the_rows_of_any_shape_with_nn_linears_numbers(shape: tuple[int, ...] | str, gated: bool) -> None:
    """The network multiplies the positions as one matrix of rows (one reshape in, one out, not two per
    nn.Linear): the numbers nn.Linear gives on the input as it is, bit for bit, with the input's shape
    (any leading dimensions, empty ones, a non-contiguous input)."""
    torch.manual_seed(0)
    ff = (GatedFeedForward(8, 12) if gated else FeedForward(8, 12)).eval()
    x = torch.randn(5, 2, 8).transpose(0, 1) if shape == "transposed" else torch.randn(shape)
    if gated:
        expected = ff.linear2(ff.activation(ff.linear_gate(x)) * ff.linear1(x))  # each nn.Linear on x as it is
    else:
        expected = ff.linear2(ff.activation(ff.linear1(x)))
    got = ff(x)
    assert got.shape == x.shape
    if shape == "transposed":  # nn.Linear multiplies a non-contiguous input by another kernel: sums of <= 12 terms reordered
        torch.testing.assert_close(got, expected, atol=2 * 12 * 2.0**-24 * float(expected.abs().max()), rtol=0)
    else:  # the same products and the same kernel: bit for bit
        assert torch.equal(got, expected)


@pytest.mark.parametrize("norm_first", [False, True])
def test_residual_places_the_norm_before_or_after(norm_first: bool) -> None:
    residual = Residual(6, dropout=0.0, norm_first=norm_first)
    _randomise_norms(residual)
    x = torch.randn(3, 6)
    f = nn.Linear(6, 6)
    expected = x + f(residual.norm(x)) if norm_first else residual.norm(x + f(x))
    torch.testing.assert_close(residual(x, f), expected)


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_encoder_layer_matches_nn_transformer_encoder_layer(norm_first: bool, activation: str) -> None:
    ours = EncoderLayer(16, MultiHeadAttention(16, 4, 0.1), FeedForward(16, 32, 0.1, activation=activation), 0.1, norm_first=norm_first).eval()
    _randomise_norms(ours)
    theirs = torch_encoder_layer(ours).eval()
    src = torch.tensor([[3, 3, 3, 3, 0, 0], [3, 3, 3, 3, 3, 3], [3, 0, 0, 0, 0, 0]])
    x = torch.randn(3, 6, 16)
    out, _ = ours(x, padding_mask(src, 0))
    expected = theirs(x, src_key_padding_mask=to_torch_blocked(padding_mask(src, 0)[:, 0, 0]))
    torch.testing.assert_close(out, expected, atol=ATOL, rtol=0)


@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_layer_matches_nn_transformer_decoder_layer(norm_first: bool) -> None:
    ours = DecoderLayer(16, MultiHeadAttention(16, 4, 0.1), MultiHeadAttention(16, 4, 0.1), FeedForward(16, 32, 0.1), 0.1, norm_first=norm_first).eval()
    _randomise_norms(ours)
    theirs = torch_decoder_layer(ours).eval()
    src = torch.tensor([[3, 3, 3, 0, 0], [3, 3, 3, 3, 3]])
    tgt = torch.tensor([[2, 5, 5, 5], [2, 5, 0, 0]])
    x, memory = torch.randn(2, 4, 16), torch.randn(2, 5, 16)
    out, _, _ = ours(x, memory, src_mask=padding_mask(src, 0), tgt_mask=target_mask(tgt, 0))
    expected = theirs(
        x, memory,
        tgt_mask=to_torch_blocked(causal_mask(4)[0, 0]),
        tgt_key_padding_mask=to_torch_blocked(padding_mask(tgt, 0)[:, 0, 0]),
        memory_key_padding_mask=to_torch_blocked(padding_mask(src, 0)[:, 0, 0]),
    )
    torch.testing.assert_close(out, expected, atol=ATOL, rtol=0)


def test_layers_return_per_head_attention_weights_on_request() -> None:
    enc = EncoderLayer(8, MultiHeadAttention(8, 2, 0.1), FeedForward(8, 16, 0.1)).eval()
    dec = DecoderLayer(8, MultiHeadAttention(8, 2, 0.1), MultiHeadAttention(8, 2, 0.1), FeedForward(8, 16, 0.1)).eval()
    x, memory = torch.randn(3, 4, 8), torch.randn(3, 6, 8)
    _, none = enc(x)
    _, w = enc(x, need_weights=True)
    _, w_self, w_cross = dec(x, memory, tgt_mask=causal_mask(4), need_weights=True)
    assert none is None and w.shape == (3, 2, 4, 4)
    assert w_self.shape == (3, 2, 4, 4) and w_cross.shape == (3, 2, 4, 6)
    assert torch.all(w_self.triu(1) == 0), "decoder self-attention must not look ahead"


@pytest.mark.parametrize("norm_first", [False, True])
def test_stacks_add_a_final_norm_only_for_pre_ln(norm_first: bool) -> None:
    layers = [EncoderLayer(8, MultiHeadAttention(8, 2, 0.1), FeedForward(8, 16, 0.1), 0.1, norm_first=norm_first) for _ in range(2)]
    final = nn.LayerNorm(8) if norm_first else None
    encoder = Encoder(layers, final_norm=final).eval()
    x = torch.randn(2, 3, 8)
    out, weights = encoder(x, need_weights=True)
    h = x
    for layer in layers:
        h, _ = layer(h)
    torch.testing.assert_close(out, final(h) if norm_first else h)
    assert len(weights) == 2


def test_decoder_cache_steps_equal_the_full_pass() -> None:
    decoder = Decoder([DecoderLayer(8, MultiHeadAttention(8, 2, 0.1), MultiHeadAttention(8, 2, 0.1), FeedForward(8, 16, 0.1), 0.1, norm_first=True) for _ in range(2)], nn.LayerNorm(8)).eval()
    x, memory = torch.randn(2, 5, 8), torch.randn(2, 7, 8)
    full, _, _ = decoder(x, memory, tgt_mask=causal_mask(5))
    with kv_cache(SimpleNamespace(decoder_layers=decoder.layers)) as cache:  # anything with .decoder_layers
        steps = [decoder(x[:, t : t + 1], memory)[0] for t in range(5)]
        assert cache.length == 5
    # summation order differs (one position vs all); 2 layers of sums of <= 16 terms: 2 * 2 * 16 * u * scale.
    # 1e-6 had a margin of 1.9 (worst 5.4e-7 over 100 seeds on an AMD EPYC).
    torch.testing.assert_close(torch.cat(steps, 1), full, atol=2 * 2 * 16 * 2.0**-24 * float(full.detach().abs().max()), rtol=0)


def test_unknown_activation_is_named() -> None:
    with raises(ValueError, "'swish'"):
        FeedForward(4, 8, activation="swish")


@pytest.mark.parametrize("shape", [(3, 8), (2, 5, 8)])
def test_swiglu_feed_forward_is_the_formula(shape: tuple[int, ...]) -> None:
    """SwiGLU (Shazeer 2020): W2 (Swish(Wg x) * W1 x), Swish(z) = z sigmoid(z), no biases; computed
    directly in float64 from the module's own matrices."""
    torch.manual_seed(0)
    ff = GatedFeedForward(8, 12, activation="swiglu").double().eval()
    x = torch.randn(shape, dtype=torch.float64)
    W1, Wg, W2 = ff.linear1.weight, ff.linear_gate.weight, ff.linear2.weight
    gate = x @ Wg.T
    expected = ((gate * torch.sigmoid(gate)) * (x @ W1.T)) @ W2.T
    torch.testing.assert_close(ff(x), expected, atol=1e-12, rtol=0)
    assert sum(p.numel() for p in ff.parameters()) == 3 * 8 * 12, "three matrices, no biases"
    with raises(ValueError, "'relu'"):
        GatedFeedForward(8, 12, activation="relu")  # an ungated activation is FeedForward's


def test_layers_take_the_norm_they_are_given() -> None:
    layer = DecoderLayer(8, MultiHeadAttention(8, 2), MultiHeadAttention(8, 2), FeedForward(8, 16), norm=RMSNorm)
    residuals = [layer.self_attn_residual, layer.cross_attn_residual, layer.ff_residual]
    assert all(type(r.norm) is RMSNorm for r in residuals)
    with raises(ValueError, "RMSNorm"):
        torch_decoder_layer(layer)  # nn.TransformerDecoderLayer has LayerNorm only
    with raises(ValueError, "GatedFeedForward"):
        torch_encoder_layer(EncoderLayer(8, MultiHeadAttention(8, 2), GatedFeedForward(8, 16)))
