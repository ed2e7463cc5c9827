"""Tests of transformer_lib.kv_cache: the cached attentions equal the uncached layer, the cache
keeps rows for beam search, and kv_cache() gives the model its own modules back.

(Model-level equivalence, cached decoding = recomputing the prefix for every positional option and
for greedy, beam search and sampling, is in test_decoding.py, test_positions.py and
test_decoder_only.py.)
"""

from __future__ import annotations

import pytest
import torch
from errors import raises

from transformer_lib.attention import MultiHeadAttention
import dataclasses

from transformer_lib.config import TransformerConfig
from transformer_lib.decoding import greedy_decode
from transformer_lib.kv_cache import CacheBytes, CachedCrossAttention, CachedSelfAttention, kv_cache, kv_cache_bytes_per_token
from transformer_lib.masking import causal_mask
from transformer_lib.model import DecoderOnlyTransformer, Transformer

# Cached and uncached attention differ only in the order of additions: at most about 2 * n * u *
# scale in float32 (Higham 2002, section 4.2), sums of n <= 16 terms, outputs of scale <= 4.
ATOL = 2 * 16 * 2.0**-24 * 4  # 7.6e-6


def test_growing_cache_reproduces_full_causal_self_attention() -> None:
    mha = MultiHeadAttention(8, 2).eval()
    x = torch.randn(2, 5, 8)
    full, _ = mha(x, x, x, mask=causal_mask(5))
    cache = CachedSelfAttention(mha)
    steps = []
    for t in range(5):
        step = x[:, t : t + 1]
        out, _ = cache(step, step, step)  # one new query sees every cached key
        steps.append(out)
    assert cache.length == 5
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=ATOL, rtol=0)


def test_static_cache_projects_memory_once_and_reuses_it() -> None:
    mha = MultiHeadAttention(8, 2).eval()
    memory, queries = torch.randn(2, 7, 8), torch.randn(2, 3, 8)
    expected, _ = mha(queries, memory, memory)
    cache = CachedCrossAttention(mha)
    first, _ = cache(queries[:, :1], memory, memory)
    key_before = cache.key
    # once filled, the memory arguments are ignored: garbage there changes nothing
    rest, _ = cache(queries[:, 1:], torch.full_like(memory, float("nan")), memory * 0)
    assert cache.key is key_before and cache.length == 7
    torch.testing.assert_close(torch.cat([first, rest], dim=1), expected, atol=ATOL, rtol=0)


def test_cache_reorder_selects_batch_rows() -> None:
    cache = CachedSelfAttention(MultiHeadAttention(2, 1))
    cache.key, cache.value = torch.arange(3.0).view(3, 1, 1, 1), torch.arange(3.0).view(3, 1, 1, 1)
    cache.reorder(torch.tensor([2, 2, 0]))
    assert cache.key.flatten().tolist() == [2.0, 2.0, 0.0]
    assert cache.value.flatten().tolist() == [2.0, 2.0, 0.0]


def test_kv_cache_gives_the_model_its_modules_back_and_refuses_nesting() -> None:
    from transformer_lib.model import Transformer
    from transformer_lib.config import TransformerConfig

    model = Transformer(TransformerConfig.from_preset("tiny", src_vocab_size=9, tgt_vocab_size=9))
    before = [(layer.self_attn, layer.cross_attn) for layer in model.decoder.layers]
    names = set(model.state_dict())
    with pytest.raises(KeyError):
        with kv_cache(model) as cache:
            assert all(isinstance(layer.self_attn, CachedSelfAttention) for layer in model.decoder.layers)
            assert len(cache.attentions) == 2 * len(before) and cache.length == 0
            with raises(RuntimeError, 'kv_cache'):
                with kv_cache(model):
                    pass
            raise KeyError("an error inside the block")
    assert [(layer.self_attn, layer.cross_attn) for layer in model.decoder.layers] == before
    assert set(model.state_dict()) == names


@pytest.mark.parametrize("positional", ["sinusoidal", "rope", "alibi"])
@pytest.mark.parametrize("n_kv_heads", [1, 2])
def test_grouped_query_models_decode_the_same_with_the_cache_and_keep_fewer_heads(positional: str, n_kv_heads: int) -> None:
    """Grouped-query attention (n_kv_heads) needs no change to the cache: it stores what the
    attention's projections return, n_kv_heads heads instead of n_heads."""
    torch.manual_seed(0)
    config = TransformerConfig.from_preset("tiny", src_vocab_size=12, tgt_vocab_size=12, n_kv_heads=n_kv_heads,
                                           positional=positional)
    model = Transformer(config).eval()
    src = torch.randint(4, 12, (3, 6))
    ids = dict(max_new_tokens=8, bos_id=2, eos_id=None, pad_id=0)
    cached = greedy_decode(model, src, None, **ids)
    assert torch.equal(cached, greedy_decode(model, src, None, **ids, use_cache=False))
    with torch.no_grad(), kv_cache(model) as cache:
        memory = model.encode(src)
        model.decode(torch.full((3, 2), 2), memory, tgt_mask=causal_mask(2))
        heads = {tuple(a.key.shape[1:3]) for a in cache.attentions}
    assert heads == {(n_kv_heads, 2), (n_kv_heads, 6)}, "self- and cross-attention caches hold n_kv_heads heads"


# Chapter 7's options, alone and together: each must leave the cache's answers those of recomputing.
MODERN = {
    "rmsnorm": dict(norm="rmsnorm"),
    "swiglu": dict(activation="swiglu"),
    "qk_norm": dict(qk_norm=True),
    "qk_norm+rope": dict(qk_norm=True, positional="rope"),
    "all+gqa": dict(norm="rmsnorm", activation="swiglu", qk_norm=True, positional="rope", n_kv_heads=2),
}


@pytest.mark.parametrize("option", sorted(MODERN))
@pytest.mark.parametrize("decoder_only", [False, True])
@pytest.mark.parametrize("norm_first", [True, False])
def test_cached_decoding_equals_recomputing_with_each_modern_option(option: str, decoder_only: bool,
                                                                     norm_first: bool) -> None:
    """One token at a time inside kv_cache() gives the decoder states of one pass over the whole
    prefix: QK-norm is applied where the keys are made (project_key_value), so the cache keeps
    normalised keys; RMSNorm and SwiGLU act on each position alone."""
    torch.manual_seed(0)
    values = dict(MODERN[option], norm_first=norm_first)
    if decoder_only:
        model = DecoderOnlyTransformer(TransformerConfig.decoder_only("tiny", vocab_size=12, **values)).eval()
        memory = None
    else:
        model = Transformer(TransformerConfig.from_preset("tiny", src_vocab_size=12, tgt_vocab_size=12, **values)).eval()
        memory = model.encode(torch.randint(1, 12, (2, 7)))  # (B, S, D)
    tokens = torch.randint(1, 12, (2, 6))  # (B, T)
    with torch.no_grad():
        full = model.decode(tokens, memory, tgt_mask=causal_mask(6))  # (B, T, D)
        with kv_cache(model) as cache:
            steps = [model.decode(tokens[:, t : t + 1], memory, start=cache.length) for t in range(6)]
    # Only the order of additions differs: sums of <= 256 terms (d_ff) in each of 2 layers, and the
    # norms keep values at the output's scale (as in test_model's reordering_atol, Higham 2002).
    atol = 2 * 2 * 256 * 2.0**-24 * float(full.abs().max())
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=atol, rtol=0)


@pytest.mark.parametrize("n_kv_heads", [4, 2, 1])
def test_kv_cache_bytes_per_token_is_layers_times_kv_heads_times_head_width(n_kv_heads: int) -> None:
    """Measured from the cached tensors: 2 (keys and values) * layers * Hkv * Dh * bytes per token,
    so multi-query attention keeps n_heads times less than multi-head attention."""
    config = TransformerConfig.from_preset("tiny", src_vocab_size=9, tgt_vocab_size=9, n_kv_heads=n_kv_heads,
                                           n_decoder_layers=3)
    head_width = config.d_model // config.n_heads
    expected = 2 * 3 * n_kv_heads * head_width * 4
    assert kv_cache_bytes_per_token(config) == CacheBytes(expected, expected)
    assert kv_cache_bytes_per_token(config, torch.bfloat16) == CacheBytes(expected // 2, expected // 2)
    decoder_only = TransformerConfig.decoder_only("tiny", vocab_size=9, n_kv_heads=n_kv_heads, n_decoder_layers=3)
    assert kv_cache_bytes_per_token(decoder_only) == CacheBytes(expected, 0), "no encoder, no cross-attention"
    multi_head = kv_cache_bytes_per_token(dataclasses.replace(config, n_kv_heads=None)).per_target_token
    assert multi_head == expected * config.n_heads // n_kv_heads
