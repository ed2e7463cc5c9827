"""Tests of transformer_lib.toy_tasks: copy and reverse pairs with a disjoint held-out split."""

from __future__ import annotations

import pytest

from transformer_lib.toy_tasks import toy_task, toy_vocab


@pytest.mark.parametrize("task", ["copy", "reverse"])
def test_toy_task_targets_and_held_out_split(task: str) -> None:
    train, heldout = toy_task(task, 500, 100, n_symbols=5, min_len=2, max_len=6, seed=3)
    assert (len(train), len(heldout)) == (500, 100)
    for src, tgt in [*train, *heldout]:
        assert tgt == (src if task == "copy" else src[::-1])
        assert 2 <= len(src) <= 6 and all(4 <= i < 9 for i in src)
    train_set = {tuple(s) for s in train.src}
    assert len(train_set) == 500 and not train_set & {tuple(s) for s in heldout.src}
    assert toy_task(task, 500, 100, n_symbols=5, min_len=2, max_len=6, seed=3)[1].src == heldout.src  # seeded
    assert toy_task(task, 500, 100, n_symbols=5, min_len=2, max_len=6, seed=4)[1].src != heldout.src
    assert len(toy_vocab(5)) == 9 and toy_vocab(5).decode(heldout.src[0]) == [str(i - 4) for i in heldout.src[0]]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"task": "sort"}, "unknown toy task"),
        ({"n_train": 10_000, "max_len": 3, "n_symbols": 4}, "distinct sequences"),
        ({"min_len": 5, "max_len": 2}, "min_len"),
        ({"n_symbols": 0}, "n_symbols"),
        ({"n_train": -1}, "n_train"),
    ],
)
def test_toy_task_rejects_bad_arguments(kwargs: dict, message: str) -> None:
    arguments = {"task": "reverse", "n_train": 10, "n_heldout": 5, **kwargs}
    with pytest.raises(ValueError, match=message):
        toy_task(arguments.pop("task"), arguments.pop("n_train"), arguments.pop("n_heldout"), **arguments)
