"""Toy tasks: copy and reverse symbol sequences, with a held-out split (chapters 5 to 7).

Small enough to train in seconds on a CPU, and with a rule to learn that can be checked exactly:
held-out sequences never occur in training, so held-out accuracy measures the rule, not memory.
The pairs are a :class:`~transformer_lib.batching.TranslationData`, batched like a translation corpus.
"""

from __future__ import annotations

import torch

from .batching import TranslationData
from .validation import check_int
from .vocab import SPECIALS, Vocab

__all__ = ["TOY_TASKS", "toy_vocab", "toy_task"]

TOY_TASKS = ("copy", "reverse")


def toy_vocab(n_symbols: int) -> Vocab:
    """The vocabulary of a toy task: the specials, then the symbols ``"0"``, ``"1"``, ... as tokens.

    Toy tasks get a real :class:`Vocab` like translation does, so every checkpoint carries one.
    """
    check_int("n_symbols", n_symbols)
    return Vocab([*SPECIALS, *(str(i) for i in range(n_symbols))])


def toy_task(
    task: str,
    n_train: int,
    n_heldout: int,
    *,
    n_symbols: int = 10,
    shortest: int = 1,
    longest: int = 10,
    seed: int = 0,
) -> tuple[TranslationData, TranslationData]:
    """Random symbol sequences and their copy or reversal, split into training and held-out pairs.

    Every sequence is distinct, and no held-out sequence occurs in training, so held-out accuracy
    measures whether the model learned the *rule*, not the examples. Lengths are uniform in
    ``[shortest, longest]``, symbols uniform over ``n_symbols`` (ids ``4 .. 4 + n_symbols - 1`` of
    :func:`toy_vocab`).

    Args:
        task: ``"copy"`` or ``"reverse"``.
        n_train, n_heldout: number of pairs in each split.
        n_symbols: the size of the alphabet.
        shortest, longest: the fewest and the most symbols in a sequence.
        seed: the same seed gives the same pairs.

    Returns:
        ``(train, heldout)``.

    Example:
        >>> train, heldout = toy_task("reverse", 3, 1, n_symbols=5, longest=4, seed=1)
        >>> src, tgt = train[0]
        >>> tgt == src[::-1]
        True
    """
    if task not in TOY_TASKS:
        raise ValueError(f"unknown toy task {task!r}; choose one of {TOY_TASKS}")
    check_int("n_train", n_train, minimum=0)
    check_int("n_heldout", n_heldout, minimum=0)
    check_int("shortest", shortest)
    check_int("longest", longest, minimum=shortest)
    toy_vocab(n_symbols)  # validates n_symbols
    sequences = _distinct_sequences(n_train + n_heldout, n_symbols, shortest, longest, seed)
    targets = [list(s) if task == "copy" else s[::-1] for s in sequences]
    train = TranslationData(sequences[:n_train], targets[:n_train])
    heldout = TranslationData(sequences[n_train:], targets[n_train:])
    return train, heldout


def _distinct_sequences(wanted: int, n_symbols: int, shortest: int, longest: int, seed: int) -> list[list[int]]:
    """``wanted`` distinct random sequences of the ids of :func:`toy_vocab`'s symbols, in drawing order."""
    first_id = len(SPECIALS)
    available = sum(n_symbols**length for length in range(shortest, longest + 1))
    # Rejection sampling stays fast while the request is a modest fraction of all sequences.
    if wanted > available // 2:
        raise ValueError(
            f"asked for {wanted} distinct sequences, but only {available} exist with n_symbols={n_symbols} "
            f"and lengths {shortest}..{longest}; ask for at most {available // 2}, or raise longest or n_symbols"
        )
    generator = torch.Generator().manual_seed(seed)
    seen: set[tuple[int, ...]] = set()
    sequences: list[list[int]] = []
    while len(sequences) < wanted:
        length = int(torch.randint(shortest, longest + 1, (), generator=generator))
        seq = (torch.randint(0, n_symbols, (length,), generator=generator) + first_id).tolist()
        if tuple(seq) not in seen:
            seen.add(tuple(seq))
            sequences.append(seq)
    return sequences
