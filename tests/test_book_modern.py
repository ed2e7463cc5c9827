"""Section 7.9's helpers: the cache read while decoding greedily, and the side-by-side training."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from transformer_lib.book.modern import VARIANTS, cache_while_decoding, side_by_side
from transformer_lib.config import TransformerConfig
from transformer_lib.decoding import greedy_decode
from transformer_lib.kv_cache import kv_cache_bytes_per_token
from transformer_lib.model import Transformer

SMALL = dict(d_model=16, d_ff=32, n_encoder_layers=1, n_decoder_layers=1)


@pytest.mark.parametrize("n_kv_heads", [4, 2, 1])
def test_the_cache_is_read_during_greedy_decoding(n_kv_heads: int) -> None:
    torch.manual_seed(0)
    config = TransformerConfig.from_preset("tiny", src_vocab_size=12, tgt_vocab_size=12, n_kv_heads=n_kv_heads, dropout=0.0)
    model = Transformer(config).eval()
    src = torch.randint(4, 12, (3, 5))
    tokens, records = cache_while_decoding(model, src, new_tokens=6, bos_id=2, pad_id=0)
    assert torch.equal(tokens, greedy_decode(model, src, None, max_new_tokens=6, bos_id=2, eos_id=None, pad_id=0))
    per_token = kv_cache_bytes_per_token(config)
    assert [r["decoded"] for r in records] == list(range(1, 7))
    assert [r["self-attention"] for r in records] == [t * 3 * per_token.per_target_token for t in range(1, 7)]
    assert {r["cross-attention"] for r in records} == {3 * 5 * per_token.per_source_token}
    multi_head = kv_cache_bytes_per_token(dataclasses.replace(config, n_kv_heads=None)).per_target_token
    assert per_token.per_target_token * (config.n_heads // n_kv_heads) == multi_head


def test_every_variant_is_a_valid_config() -> None:
    for overrides in VARIANTS.values():
        TransformerConfig.from_preset("tiny", src_vocab_size=14, tgt_vocab_size=14, **overrides)
    assert list(VARIANTS)[0] == "baseline" and VARIANTS["baseline"] == {}


def test_side_by_side_trains_each_variant_with_its_seeds_reproducibly() -> None:
    variants = {"baseline": {}, "GQA": {"n_kv_heads": 1}}
    runs = side_by_side(variants, steps=4, size=SMALL, seeds={"baseline": (0, 1)})
    table = runs.table
    assert list(zip(table["variant"], table["seed"])) == [("baseline", 0), ("baseline", 1), ("GQA", 0)]
    assert runs.steps == [1, 2, 3, 4] and set(runs.curves) == {"baseline, seed 0", "baseline, seed 1", "GQA, seed 0"}
    assert all(len(curve) == 4 for curve in runs.curves.values())
    assert table["parameters"][2] < table["parameters"][0] == table["parameters"][1]  # narrower K/V projections
    assert table["loss"][0] != table["loss"][1], "another seed: other weights, other batches"
    again = side_by_side({"baseline": {}}, steps=4, size=SMALL)
    assert again.table["loss"][0] == table["loss"][0], "one seed, one result"
