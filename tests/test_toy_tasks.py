"""Tests of transformer_lib.toy_tasks: copy and reverse pairs with a disjoint held-out split."""

from __future__ import annotations

from collections import Counter

import pytest
import torch
from errors import raises

from transformer_lib.config import TransformerConfig
from transformer_lib.model import Transformer
from transformer_lib.toy_tasks import MAX_LENGTH, MAX_PAIRS, MAX_SYMBOLS, exact_match_by_length, toy_task, toy_vocab


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
    held = Counter(len(s) for s in heldout.src)
    assert held[1] >= 1 and held[2] >= 1 and held[8] > held[2]  # in proportion, at least one each


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
