"""The decoder-only language model (chapter 7), built from the same blocks.

Against PyTorch (a decoder layer without cross-attention is an encoder layer with a causal mask),
causality, the key/value cache with every kind of position, weight tying, training, bad input.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from errors import raises
from torch import nn

from transformer_lib.blocks import EncoderLayer
from transformer_lib.properties import assert_causal
from transformer_lib.decoding import greedy_continue, sample_continue
from transformer_lib.kv_cache import kv_cache
from transformer_lib.masking import causal_mask, to_torch_blocked
from transformer_lib.positions import POSITIONAL
from transformer_lib.model import DecoderOnlyTransformer, count_parameters
from transformer_lib.config import TransformerConfig
from transformer_lib.reference import torch_encoder_layer

V = 12
PAD, BOS, EOS = 0, 2, 3
NEVER = None  # no <eos>: generation runs to max_new_tokens


def lm(positional: str = "sinusoidal", **overrides) -> DecoderOnlyTransformer:
    values = dict(d_model=16, n_heads=4, n_decoder_layers=2, d_ff=32, max_len=40, positional=positional)
    return DecoderOnlyTransformer(TransformerConfig.decoder_only("tiny", vocab_size=V, **{**values, **overrides}))


@pytest.mark.parametrize("norm_first", [False, True])
def test_the_gpt_block_is_a_causal_encoder_layer(no_fastpath, norm_first: bool) -> None:
    model = lm(norm_first=norm_first).eval()
    ours = model.blocks.layers[0]
    assert type(ours) is EncoderLayer
    with torch.no_grad():
        for m in ours.modules():
            if isinstance(m, nn.LayerNorm):
                m.weight.normal_(1.0, 0.2)
                m.bias.normal_(0.0, 0.2)
    theirs = torch_encoder_layer(ours).eval()  # the same weights in nn.TransformerEncoderLayer
    x = torch.randn(3, 7, 16)
    out, self_weights = ours(x, causal_mask(7), need_weights=True)
    assert self_weights.shape == (3, 4, 7, 7) and bool((self_weights[..., 0, 1:] == 0).all())
    expected = theirs(x, src_mask=to_torch_blocked(causal_mask(7)[0, 0]))
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=0)


def test_decoder_only_parameters_are_the_decoder_without_cross_attention() -> None:
    D, d_ff, N = 16, 32, 2
    model = lm(norm_first=True, tie_output=True)
    attention = 4 * (D * D + D)
    feed_forward = D * d_ff + d_ff + d_ff * D + D
    layer = attention + feed_forward + 2 * (2 * D)  # two LayerNorms per layer: no cross-attention
    assert count_parameters(model) == V * D + N * layer + 2 * D  # + the final LayerNorm of Pre-LN
    assert model.output_layer.weight is model.embed.weight
    assert not any("cross" in name for name, _ in model.named_parameters())


@pytest.mark.parametrize("positional", POSITIONAL)
def test_decoder_only_model_is_causal(positional: str) -> None:
    model = lm(positional).eval()
    tokens = torch.randint(1, V, (3, 9))
    assert_causal(model, tokens, perturb=lambda x, g: torch.randint(1, V, x.shape, generator=g))
    # the default mask is causal: the check can fail without it
    with raises(AssertionError, "position"):
        assert_causal(lambda x: model(x, mask=torch.ones(1, 1, 9, 9, dtype=torch.bool)), tokens,
                     perturb=lambda x, g: torch.randint(1, V, x.shape, generator=g))


@pytest.mark.parametrize("positional", POSITIONAL)
def test_cached_decoding_equals_the_full_pass(positional: str) -> None:
    model = lm(positional, norm_first=True).eval()
    with torch.no_grad():  # relative biases start at zero; make them matter
        for name, p in model.named_parameters():
            if "bias_table" in name:
                p.normal_()
    tokens = torch.randint(1, V, (2, 10))
    full = model.decode(tokens, tgt_mask=causal_mask(10))
    with kv_cache(model) as cache:
        prompt = model.decode(tokens[:, :4], tgt_mask=causal_mask(4))  # the prompt at once
        steps = [model.decode(tokens[:, t : t + 1], start=t) for t in range(4, 10)]  # then one by one
        assert cache.length == 10
    torch.testing.assert_close(torch.cat([prompt, *steps], dim=1), full, atol=1e-5, rtol=0)


@pytest.mark.parametrize("positional", POSITIONAL)
def test_generation_with_the_cache_equals_generation_without(positional: str) -> None:
    model = lm(positional, norm_first=True)
    prompt = torch.randint(4, V, (3, 5))
    cached = greedy_continue(model, prompt, max_new_tokens=8, eos_id=NEVER, pad_id=PAD)
    uncached = greedy_continue(model, prompt, max_new_tokens=8, eos_id=NEVER, pad_id=PAD, use_cache=False)
    assert cached.shape == (3, 8) and torch.equal(cached, uncached)
    # ...and both equal the plainest loop: the whole sequence through forward, argmax of the last
    tokens = prompt
    model.eval()  # (generation does this itself, and restores the mode after)
    for _ in range(8):
        tokens = torch.cat([tokens, model(tokens)[:, -1].argmax(-1, keepdim=True)], dim=1)
    model.train()
    assert torch.equal(tokens[:, 5:], cached)
    draws = [
        sample_continue(model, prompt, max_new_tokens=8, eos_id=NEVER, pad_id=PAD, top_k=5,
                        generator=torch.Generator().manual_seed(3), use_cache=use_cache)
        for use_cache in (True, False, True)
    ]
    assert torch.equal(draws[0], draws[1]) and torch.equal(draws[0], draws[2])
    assert model.training, "generation restores the model's mode"


def test_generation_stops_each_row_at_its_eos() -> None:
    model = lm().eval()
    prompt = torch.randint(4, V, (4, 3))
    free = greedy_continue(model, prompt, max_new_tokens=6, eos_id=NEVER, pad_id=PAD)
    eos = int(free[0, 1])  # the token row 0 produces second: treat it as <eos>
    out = greedy_continue(model, prompt, max_new_tokens=6, eos_id=eos, pad_id=PAD)
    for row, generated in zip(free, out):
        hits = (row == eos).nonzero()
        end = int(hits[0]) + 1 if len(hits) else 6
        assert torch.equal(generated[:end], row[:end]) and (generated[end:] == PAD).all()


def test_attention_maps_are_causal_per_layer() -> None:
    model = lm().eval()
    maps = model.attention_maps(torch.randint(1, V, (2, 6)))
    assert [m.shape for m in maps] == [(2, 4, 6, 6)] * 2
    assert all(torch.equal(m.triu(1), torch.zeros_like(m)) for m in maps)


@pytest.mark.end_to_end
def test_decoder_only_learns_to_continue_with_the_reversal() -> None:
    # One sequence holds the task: x_1 .. x_n <bos> x_n .. x_1 <eos>; the loss counts the answer.
    torch.manual_seed(0)
    model = lm("rope", d_model=32, d_ff=64, dropout=0.0, norm_first=True)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    generator = torch.Generator().manual_seed(0)
    n = 5

    def reverse_batch(size: int) -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.randint(4, 9, (size, n), generator=generator)
        sequence = torch.cat([x, torch.full((size, 1), BOS), x.flip(1), torch.full((size, 1), EOS)], dim=1)
        inputs, targets = sequence[:, :-1], sequence[:, 1:].clone()
        targets[:, :n] = -100  # predicting the question is not the task
        return inputs, targets

    for _ in range(300):
        inputs, targets = reverse_batch(32)
        loss = F.cross_entropy(model(inputs).flatten(0, 1), targets.flatten())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()
    inputs, targets = reverse_batch(200)
    with torch.no_grad():
        predicted = model(inputs).argmax(-1)
    answer = targets != -100
    accuracy = (predicted[answer] == targets[answer]).float().mean().item()
    assert accuracy > 0.9, f"token accuracy {accuracy:.2f} after 300 steps"
    # and it answers by itself: greedy continuation of "x_1 .. x_n <bos>"
    answers = greedy_continue(model, inputs[:, : n + 1], max_new_tokens=n + 1, eos_id=EOS, pad_id=PAD)
    correct = (answers == targets[:, n:]).all(dim=1).float().mean().item()
    assert correct > 0.6, f"{correct:.0%} of reversals right"


def test_bad_input_and_config_are_named() -> None:
    with raises(ValueError, "n_encoder_layers=2", "TransformerConfig.decoder_only"):
        DecoderOnlyTransformer(TransformerConfig.from_preset("tiny", src_vocab_size=V, tgt_vocab_size=V))
    with raises(ValueError, "src_vocab_size=5", "tgt_vocab_size=12"):
        DecoderOnlyTransformer(TransformerConfig.from_preset("tiny", src_vocab_size=5, tgt_vocab_size=V, n_encoder_layers=0))
    model = lm()
    tokens = torch.randint(1, V, (2, 5))
    with raises(ValueError, "memory"):
        model.decode(tokens, torch.randn(2, 3, 16))
    with raises(ValueError, "0..40", "max_len=40"):
        model(torch.randint(1, V, (1, 41)))
    with raises(ValueError, "pad_id=0"):
        greedy_continue(model, torch.tensor([[5, 6, 0]]), max_new_tokens=3, eos_id=EOS, pad_id=PAD)
    with raises(ValueError, "max_new_tokens=39", 41, "config.max_len=40", "max_new_tokens <= 38"):
        greedy_continue(model, torch.full((1, 3), 5), max_new_tokens=39, eos_id=EOS, pad_id=PAD)
    with raises(ValueError, "prompt", "(3,)"):
        sample_continue(model, torch.full((3,), 5), max_new_tokens=3, eos_id=EOS, pad_id=PAD)
    with raises(ValueError, "prompt", V):
        greedy_continue(model, torch.full((1, 3), V), max_new_tokens=3, eos_id=EOS, pad_id=PAD)