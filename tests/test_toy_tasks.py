"""Tests of transformer_lib.toy_tasks: copy and reverse pairs with a disjoint held-out split."""

from __future__ import annotations

import math
from collections import Counter

import pytest
import torch
from errors import raises

from transformer_lib.config import TransformerConfig
from transformer_lib.model import Transformer
from transformer_lib.toy_tasks import (
    MAX_LENGTH, MAX_PAIRS, MAX_SYMBOLS, MIN_HELDOUT_PER_LENGTH, exact_match_by_length, toy_task, toy_vocab
)


@pytest.mark.parametrize("task", ["copy", "reverse"])
def test_toy_task_targets_and_held_out_split(task: str) -> None:
    train, heldout = toy_task(task, 500, 100, n_symbols=5, shortest=2, longest=6, seed=3)
    assert (len(train), len(heldout)) == (500, 100)
    for src, tgt in [*train, *heldout]:
        assert tgt == (src if task == "copy" else src[::-1])
        assert 2 <= len(src) <= 6 and all(4 <= i < 9 for i in src)
    train_set = {tuple(s) for s in train.src}
    assert len(train_set) == 500 and not train_set & {tuple(s) for s in heldout.src}
    assert toy_task(task, 500, 100, n_symbols=5, shortest=2, longest=6, seed=3)[1].src == heldout.src  # seeded
    assert toy_task(task, 500, 100, n_symbols=5, shortest=2, longest=6, seed=4)[1].src != heldout.src
    assert len(toy_vocab(5)) == 9 and toy_vocab(5).decode(heldout.src[0]) == [str(i - 4) for i in heldout.src[0]]


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"task": "sort"}, ["'sort'"]),
        ({"n_train": 10_000, "longest": 3, "n_symbols": 4}, [10005, 84]),
        ({"n_train": 80, "longest": 3, "n_symbols": 4}, [85, 84]),
        ({"shortest": 5, "longest": 2}, ["longest", ">= 5", 2]),
        ({"n_symbols": 0}, ["n_symbols", 0]),
        ({"n_train": -1}, ["n_train", -1]),
    ],
)
def test_toy_task_rejects_bad_arguments(kwargs: dict, named: list) -> None:
    arguments = {"task": "reverse", "n_train": 10, "n_heldout": 5, **kwargs}
    with raises(ValueError, *named):
        toy_task(arguments.pop("task"), arguments.pop("n_train"), arguments.pop("n_heldout"), **arguments)


@pytest.mark.parametrize(("n_symbols", "shortest", "longest", "n_train", "n_heldout"),
                         [(10, 1, 8, 20_000, 1_000), (3, 1, 4, 100, 12), (5, 2, 6, 500, 100), (2, 1, 3, 10, 4)])
def test_the_held_out_set_covers_every_length_and_stays_disjoint(n_symbols, shortest, longest, n_train, n_heldout) -> None:
    """Issue 27: drawn at random, all 10 one-symbol sequences landed in training and none in held-out."""
    train, heldout = toy_task("reverse", n_train, n_heldout, n_symbols=n_symbols, shortest=shortest, longest=longest)
    assert (len(train), len(heldout)) == (n_train, n_heldout)
    lengths = set(range(shortest, longest + 1))
    assert {len(s) for s in heldout.src} == lengths
    assert {len(s) for s in train.src} == lengths  # training sees every length too
    train_set = {tuple(s) for s in train.src}
    assert len(train_set) == n_train and not train_set & {tuple(s) for s in heldout.src}


def test_lengths_are_spread_evenly_and_short_ones_are_used_up() -> None:
    train, heldout = toy_task("copy", 20_000, 1_000, n_symbols=10, shortest=1, longest=8)
    counts = Counter(len(s) for s in [*train.src, *heldout.src])
    assert counts[1] == 10 and counts[2] == 100 and counts[3] == 1_000  # every sequence there is
    assert max(counts[n] for n in range(4, 9)) - min(counts[n] for n in range(4, 9)) <= 1  # the rest share evenly


@pytest.mark.parametrize(("n_symbols", "longest", "n_train", "n_heldout"),
                         [(10, 8, 20_000, 1_000), (10, 6, 4_000, 300), (4, 6, 2_000, 400), (10, 3, 500, 200)])
def test_every_length_has_enough_held_out_sequences_to_measure_it(n_symbols, longest, n_train, n_heldout) -> None:
    """Issue 43: 1 of 10 one-symbol sequences held out (5 of 100 two-symbol ones), and a reverse model
    mapping '3' to '3 3' scored 100% held-out. Now each length holds out MIN_HELDOUT_PER_LENGTH, or
    half of its sequences where it has fewer than twice that, and the longer lengths share the rest."""
    train, heldout = toy_task("reverse", n_train, n_heldout, n_symbols=n_symbols, longest=longest, seed=5)
    drawn = Counter(len(s) for s in [*train.src, *heldout.src])
    held = Counter(len(s) for s in heldout.src)
    for length in range(1, longest + 1):
        assert held[length] >= min(MIN_HELDOUT_PER_LENGTH, drawn[length] // 2), (length, held[length], drawn[length])
        assert held[length] < drawn[length]  # training sees every length
    assert held[1] == n_symbols // 2  # half of the one-symbol sequences: every one there is, measured
    share = [held[n] / drawn[n] for n in range(1, longest + 1) if held[n] > MIN_HELDOUT_PER_LENGTH]
    assert share and max(share) - min(share) < 0.01  # above the minimum, the same share of each length


def test_balanced_lengths_repeat_the_rare_lengths_and_keep_the_held_out_set() -> None:
    plain_train, plain_heldout = toy_task("reverse", 20_000, 1_000, longest=8, seed=1)
    train, heldout = toy_task("reverse", 20_000, 1_000, longest=8, seed=1, balance_lengths=True)
    assert sorted(map(tuple, heldout.src)) == sorted(map(tuple, plain_heldout.src))  # the same held-out set
    assert {tuple(s) for s in train.src} == {tuple(s) for s in plain_train.src}  # the same sequences, repeated
    assert not {tuple(s) for s in train.src} & {tuple(s) for s in heldout.src}
    counts, plain = Counter(len(s) for s in train.src), Counter(len(s) for s in plain_train.src)
    most = max(plain.values())  # each length in proportion to the square root of its count (XLM's alpha 0.5)
    assert counts == {n: plain[n] * max(1, round(math.sqrt(most / plain[n]))) for n in plain}
    assert (plain[1], counts[1]) == (5, 140)  # 5 one-symbol sequences, each 28 times
    assert all(tgt == src[::-1] for src, tgt in train)


def test_held_out_quotas_when_too_few_are_asked_for() -> None:
    # 12 held out over 4 lengths of 3 symbols: the minimums (1, 4, 13, 36) do not fit, so they are
    # scaled down, one each at least; 2 held out over 4 lengths: the longest go without
    train, heldout = toy_task("copy", 100, 12, n_symbols=3, longest=4)
    assert set(Counter(len(s) for s in heldout.src)) == {1, 2, 3, 4} and len(heldout) == 12
    _, two = toy_task("copy", 100, 2, n_symbols=3, longest=4)
    assert sorted(len(s) for s in two.src) == [1, 2]


def test_exact_match_by_length_reports_each_length() -> None:
    _, heldout = toy_task("copy", 50, 30, n_symbols=4, longest=3, seed=2)
    torch.manual_seed(0)
    model = Transformer(TransformerConfig.from_preset("tiny", src_vocab_size=8, tgt_vocab_size=8, dropout=0.0))
    report = exact_match_by_length(model, heldout, batch_size=4)
    assert sorted(report) == [1, 2, 3]
    assert sum(n for _, n in report.values()) == 30 and all(0 <= m <= n for m, n in report.values())
    perfect = _Oracle(8)  # a "model" that always scores the right next token highest
    assert exact_match_by_length(perfect, heldout) == {length: (n, n) for length, (_, n) in report.items()}


class _Oracle(torch.nn.Module):
    """Teacher-forced logits that put the target's next token first: the copy task's tgt_in shifted."""

    def __init__(self, vocab_size: int) -> None:
        super().__init__()
        self.vocab_size = vocab_size
        self.anchor = torch.nn.Parameter(torch.zeros(()))

    def forward(self, src: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
        target = torch.cat([tgt_in[:, 1:], torch.full_like(tgt_in[:, :1], 0)], dim=1)  # (B, T)
        lengths = (tgt_in != 0).sum(dim=1)  # (B,) <bos> + tokens
        target[torch.arange(len(target)), lengths - 1] = 3  # <eos> after the last token
        return torch.nn.functional.one_hot(target, self.vocab_size).float()  # (B, T, V)


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"longest": 100_000}, ["longest", 100000, MAX_LENGTH]),
        ({"n_symbols": 10**8}, ["n_symbols", 100000000, MAX_SYMBOLS]),
        ({"n_train": 10**9}, [1000000005, MAX_PAIRS]),
        ({"n_symbols": 1.5}, ["n_symbols", 1.5]),
        ({"shortest": True}, ["shortest", True]),
    ],
    ids=["longest", "n_symbols", "pairs", "float-symbols", "bool-length"],
)
def test_toy_task_sizes_beyond_their_bounds_fail_at_once(kwargs: dict, named: list) -> None:
    arguments = {"n_train": 10, "n_heldout": 5, **kwargs}
    with raises(ValueError, *named):
        toy_task("copy", arguments.pop("n_train"), arguments.pop("n_heldout"), **arguments)
