"""Tests of transformer_lib.toy_tasks: copy and reverse pairs with a disjoint held-out split."""

from __future__ import annotations

import pytest
from errors import raises

from transformer_lib.toy_tasks import toy_task, toy_vocab


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
        ({"shortest": 5, "longest": 2}, ["longest", ">= 5", 2]),
        ({"n_symbols": 0}, ["n_symbols", 0]),
        ({"n_train": -1}, ["n_train", -1]),
    ],
)
def test_toy_task_rejects_bad_arguments(kwargs: dict, named: list) -> None:
    arguments = {"task": "reverse", "n_train": 10, "n_heldout": 5, **kwargs}
    with raises(ValueError, *named):
        toy_task(arguments.pop("task"), arguments.pop("n_train"), arguments.pop("n_heldout"), **arguments)
