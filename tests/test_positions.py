"""Positions inside attention (chapter 7): RoPE, ALiBi and relative position biases.

Each option's defining property, its definition computed independently, both attention paths, the
key/value cache, the whole model with each option, and bad input.
"""

from __future__ import annotations

import math

import pytest
import torch
from errors import raises
import torch.nn.functional as F

from transformer_lib.attention import MultiHeadAttention, fused_attention, scaled_dot_product_attention, softmax_attention
from transformer_lib.kv_cache import CachedSelfAttention, kv_cache
from transformer_lib.positional_attention import BiasedAttention, RotaryAttention
from transformer_lib.embeddings import (
    ALiBiBias,
    NoPositionalEncoding,
    RelativePositionBias,
    RotaryEmbedding,
    alibi_slopes,
    sinusoidal_table,
)
from transformer_lib.masking import causal_mask, padding_mask
from transformer_lib.model import Transformer
from transformer_lib.config import TransformerConfig

ATOL = 1e-5
IN_ATTENTION = ["rope", "alibi", "relative"]


# --- RoPE -------------------------------------------------------------------------------------


def test_rope_matches_complex_multiplication() -> None:
    # Independent definition: pair (x_2i, x_2i+1) is the complex number x_2i + i x_2i+1, and
    # position p multiplies it by exp(i p theta_i), theta_i = 10000^(-2i/Dh).
    Dh, L = 8, 11
    x = torch.randn(2, 3, L, Dh, dtype=torch.float64)
    theta = 10000.0 ** (-torch.arange(0, Dh, 2, dtype=torch.float64) / Dh)  # (Dh/2,)
    for start in (0, 5):
        angles = torch.arange(start, start + L, dtype=torch.float64)[:, None] * theta  # (L, Dh/2)
        as_complex = torch.view_as_complex(x.reshape(2, 3, L, Dh // 2, 2).contiguous())
        expected = torch.view_as_real(as_complex * torch.polar(torch.ones_like(angles), angles)).flatten(-2)
        rope = RotaryEmbedding(Dh, max_len=32).double()
        torch.testing.assert_close(rope(x, start), expected, atol=1e-6, rtol=0)  # float32 tables


@pytest.mark.parametrize("shift", [1, 7, 40])
def test_rope_score_depends_only_on_the_relative_position(shift: int) -> None:
    rope = RotaryEmbedding(16, max_len=64)
    q, k = torch.randn(1, 1, 1, 16), torch.randn(1, 1, 1, 16)

    def score(i: int, j: int) -> float:
        return (rope(q, i) * rope(k, j)).sum().item()

    for i, j in [(0, 0), (3, 1), (1, 3), (10, 2)]:
        assert math.isclose(score(i, j), score(i + shift, j + shift), abs_tol=1e-4), (i, j)
    # ...and it does depend on the distance: the check can fail
    assert not math.isclose(score(3, 1), score(1, 3), abs_tol=1e-3)
    # <R_m q, R_n k> = <R_0 q, R_(n-m) k> = <q, R_(n-m) k>: only n - m matters
    assert math.isclose(score(4, 9), (q * rope(k, 5)).sum().item(), abs_tol=1e-4)


def test_rope_is_a_rotation_and_uses_the_sinusoidal_frequencies() -> None:
    rope = RotaryEmbedding(12, max_len=40)
    x = torch.randn(3, 2, 40, 12)
    torch.testing.assert_close(rope(x).norm(dim=-1), x.norm(dim=-1), atol=ATOL, rtol=0)
    torch.testing.assert_close(rope(x)[..., :1, :], x[..., :1, :])  # position 0: no rotation
    # The angles are chapter 3's sinusoidal table: sin in even columns, cos in odd ones.
    table = sinusoidal_table(40, 12)
    torch.testing.assert_close(rope.sin, table[:, 0::2], atol=1e-6, rtol=0)
    torch.testing.assert_close(rope.cos, table[:, 1::2], atol=1e-6, rtol=0)
    assert "cos" not in rope.state_dict() and len(list(rope.parameters())) == 0
    # start offsets the positions: rotating positions 5..9 equals slicing the full rotation
    torch.testing.assert_close(rope(x[..., 5:10, :], start=5), rope(x)[..., 5:10, :], atol=ATOL, rtol=0)


def test_rope_rejects_odd_widths_and_too_long_sequences() -> None:
    with raises(ValueError, 'head_dim', '5'):
        RotaryEmbedding(5)
    rope = RotaryEmbedding(4, max_len=10)
    rope(torch.randn(1, 1, 10, 4))
    with raises(ValueError, 'max_len=10'):
        rope(torch.randn(1, 1, 3, 4), start=8)
    with raises(ValueError, 'head_dim=4'):
        rope(torch.randn(1, 1, 3, 6))
    with raises(ValueError, '4', 'd_k=8'):
        RotaryAttention(16, 2, rotary=rope)


def test_rope_attention_is_translation_invariant_and_not_permutation_equivariant() -> None:
    mha = RotaryAttention(16, 2, rotary=RotaryEmbedding(8, max_len=64)).eval()
    x = torch.randn(2, 6, 16)
    out, _ = mha(x, x, x)
    perm = torch.tensor([5, 0, 3, 1, 4, 2])
    permuted, _ = mha(x[:, perm], x[:, perm], x[:, perm])
    assert not torch.allclose(permuted, out[:, perm], atol=1e-3), "RoPE must make order matter"
    # The same tokens placed 20 positions later, behind 20 cached positions that are masked out,
    # give the same outputs: only distances count.
    cache = CachedSelfAttention(mha)
    filler = torch.randn(2, 20, 16)
    cache(filler, filler, filler)
    late_mask = (torch.arange(26) >= 20)[None, None, None, :]  # (1, 1, 1, L): the filler keys are invisible
    shifted, _ = cache(x, x, x, mask=late_mask)
    torch.testing.assert_close(shifted, out, atol=ATOL, rtol=0)


# --- ALiBi ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "n_heads, expected",
    [
        (8, [2.0**-k for k in range(1, 9)]),  # the paper: 1/2, 1/4, ..., 1/256
        (4, [2.0**-2, 2.0**-4, 2.0**-6, 2.0**-8]),
        (1, [2.0**-8]),
        # not a power of two: the 4-head slopes, then every other slope of the 8-head sequence
        (6, [2.0**-2, 2.0**-4, 2.0**-6, 2.0**-8, 2.0**-1, 2.0**-3]),
        (12, [2.0**-k for k in range(1, 9)] + [2.0**-0.5, 2.0**-1.5, 2.0**-2.5, 2.0**-3.5]),
    ],
)
def test_alibi_slopes_follow_the_paper(n_heads: int, expected: list[float]) -> None:
    torch.testing.assert_close(alibi_slopes(n_heads), torch.tensor(expected), atol=1e-7, rtol=0)


@pytest.mark.parametrize("n_queries, n_keys, start", [(5, 5, 0), (1, 7, 6), (3, 9, 2)])
def test_alibi_bias_matches_its_definition(n_queries: int, n_keys: int, start: int) -> None:
    alibi = ALiBiBias(n_heads=3)
    bias = alibi(n_queries, n_keys, start)
    assert bias.shape == (1, 3, n_queries, n_keys) and len(list(alibi.parameters())) == 0
    slopes = alibi_slopes(3)
    for h in range(3):
        for i in range(n_queries):
            for j in range(n_keys):
                assert math.isclose(bias[0, h, i, j].item(), -slopes[h].item() * abs(start + i - j), abs_tol=1e-6)


def test_alibi_under_a_causal_mask_equals_the_papers_code_form() -> None:
    # The paper's code adds m_h * j (no query term): in each row this differs from -m_h (i - j) by
    # the constant -m_h i, which the softmax ignores.
    T, H = 7, 4
    q, k, v = torch.randn(2, H, T, 8), torch.randn(2, H, T, 8), torch.randn(2, H, T, 8)
    scores = q @ k.transpose(-2, -1) / math.sqrt(8)
    ours, _ = softmax_attention(scores + ALiBiBias(H)(T, T), v, causal_mask(T))
    code_form = (alibi_slopes(H)[:, None, None] * torch.arange(T))[None]  # (1, H, 1, T)
    theirs, _ = softmax_attention(scores + code_form, v, causal_mask(T))
    torch.testing.assert_close(ours, theirs, atol=ATOL, rtol=0)


# --- Relative position bias -------------------------------------------------------------------


@pytest.mark.parametrize("bidirectional", [True, False])
def test_relative_bias_looks_up_the_clipped_distance(bidirectional: bool) -> None:
    k, H = 3, 2
    relative = RelativePositionBias(H, max_distance=k, bidirectional=bidirectional)
    n_distances = 2 * k + 1 if bidirectional else k + 1
    assert relative.bias_table.shape == (H, n_distances)
    assert torch.equal(relative.bias_table, torch.zeros(H, n_distances)), "starts without positions"
    with torch.no_grad():
        relative.bias_table.copy_(torch.randn(H, n_distances))
    for n_queries, n_keys, start in [(8, 8, 0), (1, 9, 8), (2, 10, 3)]:
        bias = relative(n_queries, n_keys, start)
        assert bias.shape == (1, H, n_queries, n_keys)
        for i in range(n_queries):
            for j in range(n_keys):
                distance = j - (start + i)
                clipped = max(-k, min(k if bidirectional else 0, distance))
                torch.testing.assert_close(bias[0, :, i, j], relative.bias_table[:, clipped + k])


def test_relative_bias_learns_through_both_attention_paths_alike() -> None:
    relative = RelativePositionBias(2, max_distance=2)
    mha = BiasedAttention(8, 2, position_bias=relative)
    x = torch.randn(3, 6, 8)
    grads = []
    for need_weights in (False, True):
        relative.bias_table.grad = None
        out, _ = mha(x, x, x, mask=causal_mask(6), need_weights=need_weights)
        out.square().sum().backward()
        grads.append(relative.bias_table.grad.clone())
    torch.testing.assert_close(grads[0], grads[1], atol=1e-5, rtol=0)
    # under a causal mask, the future distances (+1, +2) are never used
    assert torch.equal(grads[0][:, 3:], torch.zeros(2, 2)) and grads[0][:, :3].abs().min() > 0


# --- The hooks in MultiHeadAttention ----------------------------------------------------------


def _positional_attention(kind: str, d_model: int, n_heads: int) -> MultiHeadAttention:
    if kind == "rope":
        return RotaryAttention(d_model, n_heads, rotary=RotaryEmbedding(d_model // n_heads, max_len=32))
    if kind == "alibi":
        return BiasedAttention(d_model, n_heads, position_bias=ALiBiBias(n_heads))
    relative = RelativePositionBias(n_heads, max_distance=3)
    with torch.no_grad():
        relative.bias_table.normal_()
    return BiasedAttention(d_model, n_heads, position_bias=relative)


@pytest.mark.parametrize("kind", IN_ATTENTION)
@pytest.mark.parametrize("mask_kind", ["none", "causal", "padding", "fully-masked row"])
def test_fused_and_explicit_paths_agree_with_positions(kind: str, mask_kind: str) -> None:
    mha = _positional_attention(kind, 16, 4).eval()
    x = torch.randn(3, 7, 16)
    ids = torch.tensor([[5] * 7, [5] * 4 + [0] * 3, [5] * 2 + [0] * 5])
    mask = {
        "none": None,
        "causal": causal_mask(7),
        "padding": padding_mask(ids, 0),
        "fully-masked row": padding_mask(ids, 0) & (torch.arange(3) != 2)[:, None, None, None],
    }[mask_kind]
    fused, _ = mha(x, x, x, mask=mask)
    explicit, weights = mha(x, x, x, mask=mask, need_weights=True)
    assert torch.isfinite(fused).all()
    torch.testing.assert_close(fused, explicit, atol=ATOL, rtol=0)
    if mask is not None:
        assert (weights.masked_select(~mask.expand_as(weights)) == 0).all()


@pytest.mark.parametrize("kind", IN_ATTENTION)
def test_growing_cache_with_positions_equals_the_full_pass(kind: str) -> None:
    mha = _positional_attention(kind, 16, 4).eval()
    x = torch.randn(2, 9, 16)
    full, _ = mha(x, x, x, mask=causal_mask(9))
    cache = CachedSelfAttention(mha)
    prompt, _ = cache(x[:, :4], x[:, :4], x[:, :4], mask=causal_mask(4))  # several at once
    steps = [cache(x[:, t : t + 1], x[:, t : t + 1], x[:, t : t + 1])[0] for t in range(4, 9)]
    torch.testing.assert_close(torch.cat([prompt, *steps], dim=1), full, atol=ATOL, rtol=0)


def test_bias_argument_is_checked() -> None:
    q = torch.randn(2, 1, 3, 4)
    fused_attention(q, q, q, bias=torch.zeros(3, 3))
    with raises(TypeError, "torch.bool"):
        fused_attention(q, q, q, bias=torch.ones(3, 3, dtype=torch.bool))
    with raises(ValueError, '(2, 2, 3, 3)'):
        fused_attention(q, q, q, bias=torch.zeros(2, 2, 3, 3))
    with raises(ValueError, 'position_bias', '3', 'n_heads=2'):
        BiasedAttention(8, 2, position_bias=ALiBiBias(3))
    with raises(ValueError, '4', '3'):
        BiasedAttention(4, 1, position_bias=ALiBiBias(1))(torch.randn(1, 4, 4), torch.randn(1, 3, 4), torch.randn(1, 3, 4))
    with raises(ValueError, 'n_heads'):
        alibi_slopes(0)
    with raises(ValueError, 'max_distance', '0'):
        RelativePositionBias(2, max_distance=0)


def test_a_bias_is_added_to_the_scores_as_torch_sdpa_does() -> None:
    q, k, v = torch.randn(2, 4, 5, 8), torch.randn(2, 4, 6, 8), torch.randn(2, 4, 6, 3)
    bias = torch.randn(1, 4, 5, 6)
    out, _ = softmax_attention(q @ k.transpose(-2, -1) / math.sqrt(8) + bias, v)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=bias), atol=ATOL, rtol=0)


# --- The model with positions inside attention -------------------------------------------------


def tiny(positional: str, **overrides) -> TransformerConfig:
    values = dict(src_vocab_size=13, tgt_vocab_size=11, d_model=16, n_heads=4, n_encoder_layers=2, n_decoder_layers=2, d_ff=32, max_len=40)
    return TransformerConfig(positional=positional, **{**values, **overrides})


def batch(B: int = 3, S: int = 7, T: int = 6) -> tuple[torch.Tensor, torch.Tensor]:
    src, tgt = torch.randint(1, 13, (B, S)), torch.randint(1, 11, (B, T))
    src[0, 5:] = 0
    return src, tgt


@pytest.mark.parametrize("positional", IN_ATTENTION)
def test_model_wires_positions_into_self_attention_only(positional: str) -> None:
    model = Transformer(tiny(positional))
    assert isinstance(model.src_positions, NoPositionalEncoding) and isinstance(model.tgt_positions, NoPositionalEncoding)
    hook = "rotary" if positional == "rope" else "position_bias"
    encoder_modules = {id(getattr(layer.self_attn, hook)) for layer in model.encoder.layers}
    decoder_modules = {id(getattr(layer.self_attn, hook)) for layer in model.decoder.layers}
    assert len(encoder_modules) == len(decoder_modules) == 1, "one module per stack, shared by its layers"
    assert encoder_modules != decoder_modules
    for layer in model.decoder.layers:
        assert type(layer.cross_attn) is MultiHeadAttention, "cross-attention relates two sequences: no positions"
        assert isinstance(layer.self_attn, RotaryAttention if positional == "rope" else BiasedAttention)
    if positional == "relative":
        assert model.encoder.layers[0].self_attn.position_bias.bidirectional
        assert not model.decoder.layers[0].self_attn.position_bias.bidirectional
        # shared parameters count once: two (H, 2k+1) and (H, k+1) tables
        extra = sum(p.numel() for n, p in model.named_parameters() if "bias_table" in n)
        assert extra == 4 * 33 + 4 * 17


@pytest.mark.parametrize("positional", IN_ATTENTION)
def test_model_with_positions_in_attention_is_causal_padding_invariant_and_caches(positional: str) -> None:
    model = Transformer(tiny(positional, norm_first=True)).eval()
    with torch.no_grad():  # relative biases start at zero; make them matter
        for name, p in model.named_parameters():
            if "bias_table" in name:
                p.normal_()
    src, tgt = batch()
    logits = model(src, tgt, *model.masks_for(src, tgt))
    changed = tgt.clone()
    changed[:, 3:] = torch.randint(1, 11, (3, 3))
    other = model(src, changed, *model.masks_for(src, changed))
    assert torch.equal(logits[:, :3], other[:, :3]), "a future token changed a past output"
    padded = torch.cat([src, torch.zeros(3, 4, dtype=torch.long)], dim=1)
    torch.testing.assert_close(model(padded, tgt, *model.masks_for(padded, tgt)), logits, atol=1e-5, rtol=0)
    # cached decoding equals the full pass
    src_mask, tgt_mask = model.masks_for(src, tgt)
    memory = model.encode(src, src_mask)
    full = model.decode(tgt, memory, src_mask, tgt_mask)
    with kv_cache(model):
        steps = [model.decode(tgt[:, t : t + 1], memory, src_mask, start=t) for t in range(tgt.size(1))]
    torch.testing.assert_close(torch.cat(steps, 1), full, atol=1e-5, rtol=0)
    # and order matters (the check could fail: without positions it would not)
    perm = torch.tensor([3, 0, 6, 1, 5, 2, 4])
    assert not torch.allclose(model.encode(src[1:, perm]), model.encode(src[1:])[:, perm], atol=1e-3)


def test_symmetric_alibi_cannot_tell_left_from_right_in_an_encoder() -> None:
    # |i - j| is unchanged when a sequence is reversed, so an encoder with symmetric ALiBi (and no
    # other positions) maps a reversed sentence to the reversed outputs: a limit of the extension.
    model = Transformer(tiny("alibi")).eval()
    src = torch.randint(1, 13, (3, 7))
    torch.testing.assert_close(model.encode(src.flip(1)), model.encode(src).flip(1), atol=1e-5, rtol=0)
    rope = Transformer(tiny("rope")).eval()
    assert not torch.allclose(rope.encode(src.flip(1)), rope.encode(src).flip(1), atol=1e-3)


@pytest.mark.parametrize("positional", ["alibi", "relative"])
def test_bias_positions_have_no_length_limit_but_rope_has_its_table(positional: str) -> None:
    model = Transformer(tiny(positional, max_len=8)).eval()
    src, tgt = torch.randint(1, 13, (1, 30)), torch.randint(1, 11, (1, 25))
    assert model(src, tgt, *model.masks_for(src, tgt)).shape == (1, 25, 11)
    rope = Transformer(tiny("rope", max_len=8)).eval()
    with raises(ValueError, 'max_len=8'):
        rope(src, tgt, *rope.masks_for(src, tgt))


@pytest.mark.parametrize("positional", IN_ATTENTION)
def test_state_dict_round_trip(positional: str) -> None:
    model = Transformer(tiny(positional)).eval()
    clone = Transformer(TransformerConfig.from_dict(model.config.to_dict())).eval()
    clone.load_state_dict(model.state_dict())
    src, tgt = batch()
    assert torch.equal(model(src, tgt, *model.masks_for(src, tgt)), clone(src, tgt, *clone.masks_for(src, tgt)))


def test_sinusoidal_and_learned_models_are_unchanged_by_the_new_options() -> None:
    for positional in ("sinusoidal", "learned"):
        model = Transformer(tiny(positional))
        assert not any("bias_table" in name for name, _ in model.named_parameters())
        for layer in [*model.encoder.layers, *model.decoder.layers]:
            assert type(layer.self_attn) is MultiHeadAttention, "chapter 1's attention, nothing inside"
    # Submodules are registered in the order they had before the options existed, so a seed gives
    # the same initial weights as it did (parameters are initialised in registration order).
    assert [name for name, _ in model.decoder.layers[0].named_children()] == [
        "self_attn", "cross_attn", "feed_forward", "self_attn_residual", "cross_attn_residual", "ff_residual",
    ]


def test_config_rejects_bad_positional_choices() -> None:
    with raises(ValueError, "'sinusoidal'", "'learned'", "'rope'", "'alibi'", "'relative'"):
        tiny("rotary")
    with raises(ValueError, 'd_model', 'n_heads', '20', '4', '5'):
        tiny("rope", d_model=20)
    tiny("alibi", d_model=20)  # odd head widths are fine without rotation
    with raises(ValueError, 'relative_max_distance', '0'):
        tiny("relative", relative_max_distance=0)


# --- They train -------------------------------------------------------------------------------


@pytest.mark.end_to_end
@pytest.mark.parametrize("positional", IN_ATTENTION)
def test_each_option_learns_to_reverse_short_sequences(positional: str) -> None:
    # Reversal needs positions: without them the decoder cannot tell which source token comes next.
    torch.manual_seed(0)
    model = Transformer(tiny(positional, d_model=32, d_ff=64, dropout=0.0, norm_first=True, src_vocab_size=9, tgt_vocab_size=9))
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    generator = torch.Generator().manual_seed(0)
    BOS, EOS = 2, 3

    def reverse_batch(size: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        x = torch.randint(4, 9, (size, 5), generator=generator)
        src = torch.cat([x, torch.full((size, 1), EOS)], dim=1)
        tgt_in = torch.cat([torch.full((size, 1), BOS), x.flip(1)], dim=1)
        tgt_out = torch.cat([x.flip(1), torch.full((size, 1), EOS)], dim=1)
        return src, tgt_in, tgt_out

    for _ in range(400):
        src, tgt_in, tgt_out = reverse_batch(32)
        logits = model(src, tgt_in, *model.masks_for(src, tgt_in))
        loss = F.cross_entropy(logits.flatten(0, 1), tgt_out.flatten())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()
    src, tgt_in, tgt_out = reverse_batch(200)
    with torch.no_grad():
        accuracy = (model(src, tgt_in, *model.masks_for(src, tgt_in)).argmax(-1) == tgt_out).float().mean().item()
    assert accuracy > 0.9, f"{positional}: token accuracy {accuracy:.2f} after 400 steps"
