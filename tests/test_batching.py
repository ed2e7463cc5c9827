"""Tests of transformer_lib.batching: TranslationData, collate, length bucketing and the loader."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from errors import raises

from transformer_lib.batching import (
    BucketBatchSampler, TokenBatchSampler, TranslationData, collate, make_loader, padding_waste,
)
from transformer_lib.multi30k import load_multi30k
from transformer_lib.toy_tasks import toy_task
from transformer_lib.tokenizers import word_splitter

FIXTURE = Path(__file__).parent / "fixtures" / "multi30k"
FIXTURE_SHA256 = {line.split()[1]: line.split()[0] for line in (FIXTURE / "SHA256SUMS").read_text().splitlines()}


def test_collate_shifts_targets_and_pads() -> None:
    batch = collate([([5, 6, 7], [8, 9]), ([5], [8, 9, 10, 11])], pad_id=0, bos_id=2, eos_id=3)
    assert batch.src.tolist() == [[5, 6, 7, 3], [5, 3, 0, 0]]
    assert batch.tgt_in.tolist() == [[2, 8, 9, 0, 0], [2, 8, 9, 10, 11]]
    assert batch.tgt_out.tolist() == [[8, 9, 3, 0, 0], [8, 9, 10, 11, 3]]
    shifted = batch.tgt_in[:, 1:] != 0  # tgt_in is tgt_out shifted right by one, wherever it is not padding
    assert torch.equal(batch.tgt_in[:, 1:][shifted], batch.tgt_out[:, :-1][shifted])
    assert batch.n_tokens == int((batch.tgt_out != 0).sum()) == 8
    assert batch.src.dtype == torch.long and len(batch) == 2


def test_sampler_yields_every_index_once_and_is_reproducible() -> None:
    lengths = [int(x) for x in torch.randint(1, 30, (1000,))]
    sampler = BucketBatchSampler(lengths, 32, pool_batches=4, seed=1)
    batches = list(sampler)
    assert sorted(i for b in batches for i in b) == list(range(1000))
    assert len(batches) == len(sampler) == 32 and all(len(b) == 32 for b in batches[:-1] if len(b) != 8)
    assert list(sampler) == batches  # same epoch, same batches
    sampler.set_epoch(1)
    assert list(sampler) != batches
    state = torch.get_rng_state()
    list(sampler)
    assert torch.equal(torch.get_rng_state(), state)  # the global RNG (dropout's) is untouched
    assert len(BucketBatchSampler(lengths, 32, drop_last=True)) == 31 == len(list(BucketBatchSampler(lengths, 32, drop_last=True)))


def test_sampler_without_shuffle_keeps_order() -> None:
    assert list(BucketBatchSampler([3, 1, 2, 5, 4], 2, bucket=False, shuffle=False)) == [[0, 1], [2, 3], [4]]


def test_padding_waste_by_hand() -> None:
    # batch [0, 1]: lengths 3 and 5 -> 2 pads; batch [2]: none. 2 pads over 3 sequences.
    assert padding_waste([[0, 1], [2]], [3, 5, 4]) == pytest.approx(2 / 3)
    with raises(ValueError, "batches"):
        padding_waste([], [1])


def test_bucketing_reduces_padding_waste_on_the_fixture() -> None:
    pairs = load_multi30k("train", FIXTURE, checksums=FIXTURE_SHA256)
    lengths = [len(word_splitter("en")(target)) + 1 for _, target in pairs]
    random_waste = padding_waste(BucketBatchSampler(lengths, 8, bucket=False, seed=0), lengths)
    bucket_waste = padding_waste(BucketBatchSampler(lengths, 8, bucket=True, seed=0), lengths)
    assert random_waste > 2.0  # the fixture's lengths vary (4 to 20 tokens)
    assert bucket_waste < random_waste / 4


def test_make_loader_batches_cover_the_data_and_leave_the_global_rng_alone() -> None:
    train, _ = toy_task("copy", 200, 0, longest=8)
    loader = make_loader(train, 16, seed=0)
    state = torch.get_rng_state()
    batches = list(loader)
    assert torch.equal(torch.get_rng_state(), state)
    assert sum(len(b) for b in batches) == 200 and len(batches) == len(loader)
    assert sum(b.n_tokens for b in batches) == sum(len(t) + 1 for t in train.tgt)


@pytest.mark.parametrize(("call", "named"), [
    (lambda: BucketBatchSampler([1, 2], 0), ["batch_size", 0]),
    (lambda: BucketBatchSampler([], 4), ["lengths"]),
    (lambda: TokenBatchSampler([3, 9, 4], max_tokens=8), ["max_tokens=8", "example 1", 9]),
    (lambda: TokenBatchSampler([3, 4, 4], max_tokens=6, num_replicas=2), ["max_tokens=6", "num_replicas=2", 8]),
    (lambda: TokenBatchSampler([3], max_tokens=0), ["max_tokens", 0]),
    (lambda: make_loader(TranslationData([[4]], [[5]]), 4, max_tokens=100), ["batch_size=4", "max_tokens=100"]),
    (lambda: TranslationData([[1]], []), [1, 0]),
    (lambda: collate([]), []),
    (lambda: TranslationData([[4, 5]], [[9]]).check_ids(6, 8), ["tgt", 9, "[0, 7]"]),
    (lambda: TranslationData([[4, -1]], [[5]]).check_ids(6, 8), ["src", -1, "[0, 5]"]),
])
def test_batching_rejects_bad_input(call, named: list) -> None:
    with raises(ValueError, *named):
        call()


def test_ids_inside_the_vocabularies_pass_the_check() -> None:
    TranslationData([[0, 5], []], [[7], [1]]).check_ids(6, 8)


def test_translation_data_dict_round_trip() -> None:
    original = TranslationData([[4, 5], [], [6]], [[7], [8, 9, 10], []])
    restored = TranslationData.from_dict(original.to_dict())
    assert restored.src == original.src and restored.tgt == original.tgt


# --- batches by a token budget ---------------------------------------------------------------------


def _lengths(n: int = 300, seed: int = 0) -> list[int]:
    return torch.randint(1, 40, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


@pytest.mark.parametrize("max_tokens", [40, 97, 400])
def test_token_batches_keep_the_budget_cover_every_example_once_and_fill_up(max_tokens: int) -> None:
    lengths = _lengths()
    sampler = TokenBatchSampler(lengths, max_tokens, seed=3)
    batches = sampler.batches()
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    padded = [len(b) * max(lengths[i] for i in b) for b in batches]
    assert max(padded) <= max_tokens
    # Full: the next batch's shortest example would not have fitted into each batch (cut in length order).
    by_length = TokenBatchSampler(lengths, max_tokens, seed=3, shuffle=False).batches()
    assert sorted(by_length) == sorted(batches)
    for batch, following in zip(by_length, by_length[1:]):
        assert (len(batch) + 1) * min(lengths[i] for i in following) > max_tokens
    # Short sentences come many to a batch, long ones few: the count follows the budget, not a size.
    sizes = {max(lengths[i] for i in b): len(b) for b in batches}
    assert sizes[min(sizes)] > sizes[max(sizes)]


def test_token_batches_are_fixed_their_order_shuffled_per_epoch_and_reproducible() -> None:
    lengths = _lengths()
    sampler = TokenBatchSampler(lengths, 120, seed=1)
    first = sampler.batches()
    sampler.set_epoch(1)
    second = sampler.batches()
    assert first != second and sorted(first) == sorted(second), "the same batches in another order"
    assert len(sampler) == len(first) == len(second)
    assert TokenBatchSampler(lengths, 120, seed=1).batches() == first
    in_order = TokenBatchSampler(lengths, 120, shuffle=False).batches()
    longest = [max(lengths[i] for i in b) for b in in_order]
    assert longest == sorted(longest), "without shuffling: shortest first, for evaluation"


@pytest.mark.parametrize("num_replicas", [2, 3])
def test_token_batches_are_sliced_across_processes(num_replicas: int) -> None:
    lengths = _lengths(101)
    samplers = [TokenBatchSampler(lengths, 150, seed=2, num_replicas=num_replicas, rank=r) for r in range(num_replicas)]
    global_batches = samplers[0].global_batches()
    assert all(len(b) >= num_replicas for b in global_batches), "every process gets an example of every batch"
    slices = [s.batches() for s in samplers]
    assert all(len(own) == len(global_batches) for own in slices)
    for i, batch in enumerate(global_batches):
        assert sorted(x for own in slices for x in own[i]) == sorted(batch)


def test_make_loader_by_tokens_counts_the_padded_longer_side() -> None:
    train, _ = toy_task("copy", 200, 0, longest=8)
    loader = make_loader(train, max_tokens=64, seed=0)
    batches = list(loader)
    assert sum(len(b) for b in batches) == 200 and len(batches) == len(loader)
    assert all(b.src.numel() <= 64 and b.tgt_in.numel() <= 64 for b in batches)
    assert max(b.tgt_in.numel() for b in batches) > 64 - 9, "filled up to within one example of the budget"


@pytest.mark.parametrize("pad_multiple", [1, 4, 16])
def test_the_token_budget_holds_after_padding_to_a_multiple(pad_multiple: int) -> None:
    """pad_multiple=16 padded batches cut to the budget past it (issue 43): the budget counts that padding."""
    train, _ = toy_task("copy", 200, 0, longest=12, seed=3)
    batches = list(make_loader(train, max_tokens=64, seed=0, pad_multiple=pad_multiple))
    assert sum(len(b) for b in batches) == 200
    assert all(b.src.size(1) % pad_multiple == 0 for b in batches)
    worst = max(max(b.src.numel(), b.tgt_in.numel()) for b in batches)
    assert worst <= 64, f"a batch of {worst} padded tokens, over the budget of 64"


def test_padding_to_a_multiple_bounds_the_shapes_and_changes_no_loss() -> None:
    """Batches padded to multiples of 8 come in at most ceil(longest / 8) lengths per side, and the
    extra pads change neither the token count nor the loss of a model (they are masked and ignored)."""
    from test_metrics import _tiny_model

    from transformer_lib.losses import TranslationLoss

    generator = torch.Generator().manual_seed(0)
    pairs = [([int(i) for i in torch.randint(4, 12, (int(n),), generator=generator)],
              [int(i) for i in torch.randint(4, 12, (int(m),), generator=generator)])
             for n, m in torch.randint(1, 30, (200, 2), generator=generator)]
    plain = [collate(pairs[i:i + 16]) for i in range(0, 200, 16)]
    padded = [collate(pairs[i:i + 16], pad_multiple=8) for i in range(0, 200, 16)]
    lengths = {(b.src.size(1), b.tgt_in.size(1)) for b in padded}
    assert all(s % 8 == 0 and t % 8 == 0 for s, t in lengths)
    assert len({s for s, _ in lengths}) <= -(-31 // 8) and len({t for _, t in lengths}) <= -(-31 // 8)
    model = _tiny_model(dropout=0.0, vocab_size=12).eval()
    loss = TranslationLoss(0.1, 0)
    for a, b in zip(plain, padded):
        assert a.n_tokens == b.n_tokens
        with torch.no_grad():
            (la, na), (lb, nb) = loss(model, a), loss(model, b)
        # the same sums over the same real tokens, in a different order: fp32 rounding only
        assert int(na) == int(nb) and torch.allclose(la, lb, rtol=1e-5, atol=1e-5 * float(na))
    with pytest.raises(ValueError, match="pad_multiple"):
        make_loader(TranslationData([s for s, _ in pairs], [t for _, t in pairs]), 16, pad_multiple=0)
