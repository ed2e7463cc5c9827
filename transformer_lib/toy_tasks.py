"""Toy tasks: copy and reverse symbol sequences, with a held-out split (chapters 5 to 7).

Small enough to train in seconds on a CPU, and with a rule to learn that can be checked exactly:
held-out sequences never occur in training, so held-out accuracy measures the rule, not memory.
The held-out set is stratified by length, with enough of every length to measure it: 5 of the 10
one-symbol sequences over 10 symbols, 50 of the 100 two-symbol ones (drawn at random, all 10 landed in
training; held out in proportion, 1 did, and a reverse model mapping ``3`` to ``3 3`` scored 100%).
:func:`exact_match_by_length` reports a model's held-out accuracy length by length.
The pairs are a :class:`~transformer_lib.batching.TranslationData`, batched like a translation corpus.
"""

from __future__ import annotations

import math
import torch
from torch import nn

from .batching import TranslationData, collate
from .validation import check_int
from .vocab import SPECIALS, Vocab

__all__ = ["TOY_TASKS", "MAX_SYMBOLS", "MAX_LENGTH", "MAX_PAIRS", "toy_vocab", "toy_task", "exact_match_by_length"]

TOY_TASKS = ("copy", "reverse")
# Bounds far above what a toy needs, each checked before any work: beyond them a toy task would fill
# the memory (10**8 symbols are 10**8 strings) or run for hours.
MAX_SYMBOLS = 100_000
MAX_LENGTH = 4_096
MAX_PAIRS = 10_000_000
PAD_ID = SPECIALS.index("<pad>")  # collate's padding, as toy_vocab numbers it
# The held-out sequences of each length, at least (or half of the length's sequences, if fewer): with
# none wrong among 50, the model's error rate on that length is below 6% (95% confidence, 3 / 50).
MIN_HELDOUT_PER_LENGTH = 50


def toy_vocab(n_symbols: int) -> Vocab:
    """The vocabulary of a toy task: the specials, then the symbols ``"0"``, ``"1"``, ... as tokens.

    Toy tasks get a real :class:`Vocab` like translation does, so every checkpoint carries one.
    """
    check_int("n_symbols", n_symbols)
    if n_symbols > MAX_SYMBOLS:
        raise ValueError(f"n_symbols={n_symbols} is more than a toy task allows ({MAX_SYMBOLS})")
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
    balance_lengths: bool = False,
) -> tuple[TranslationData, TranslationData]:
    """Random symbol sequences and their copy or reversal, split into training and held-out pairs.

    Every sequence is distinct, and no held-out sequence occurs in training, so held-out accuracy
    measures whether the model learned the *rule*, not the examples. Lengths are spread evenly over
    ``[shortest, longest]`` (a length with fewer sequences than its share gets all of them, and the
    rest go to the others), symbols uniform over ``n_symbols`` (ids ``4 .. 4 + n_symbols - 1`` of
    :func:`toy_vocab`).

    The held-out set is stratified by length, so that every length is measured: each gives the same
    share of its sequences, but at least :data:`MIN_HELDOUT_PER_LENGTH` (50), or half of its
    sequences where it has fewer than 100. Over 10 symbols that holds out 5 of the 10 one-symbol
    sequences and 50 of the 100 two-symbol ones, which training never sees; it trains on the other
    halves. (There is no more to hold out: a length with ``V`` sequences cannot be measured on more
    than ``V``, and training must see the length too.) Report held-out accuracy length by length
    with :func:`exact_match_by_length`: one number over all of it is dominated by the long lengths.

    A length with few sequences is then rare in training (5 one-symbol sequences among 20,000 pairs:
    in 800 updates of 64 the reverse task's model meets one about 13 times, and 4 of the 5 held-out
    ones were still wrong at the end). ``balance_lengths=True`` repeats each training sequence of a length with
    ``count`` of them ``round(sqrt(most / count))`` times, ``most`` the count of the commonest length:
    each length then occurs in proportion to the square root of its count, the balance XLM samples
    its languages with (``alpha = 0.5``, Lample and Conneau 2019). Over 10 symbols and 20,000 pairs
    the 5 one-symbol sequences occur 28 times each and the 50 two-symbol ones 9 times. Balancing them
    fully (to ``most`` each) takes so many updates from the long lengths that those come out right
    later. The held-out set is the same either way.

    Args:
        task: ``"copy"`` or ``"reverse"``.
        n_train, n_heldout: number of pairs in each split.
        n_symbols: the size of the alphabet.
        shortest, longest: the fewest and the most symbols in a sequence.
        seed: the same seed gives the same pairs.
        balance_lengths: repeat the training pairs of the lengths with fewer sequences (above).

    Returns:
        ``(train, heldout)``: ``n_train`` distinct training pairs (more pairs, repeats, with
        ``balance_lengths``) and ``n_heldout`` held-out pairs.

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
    if longest > MAX_LENGTH:
        raise ValueError(f"longest={longest} is more than a toy task allows ({MAX_LENGTH})")
    if n_train + n_heldout > MAX_PAIRS:
        raise ValueError(f"n_train + n_heldout = {n_train + n_heldout} is more than a toy task allows ({MAX_PAIRS})")
    toy_vocab(n_symbols)  # validates n_symbols
    generator = torch.Generator().manual_seed(seed)
    lengths = range(shortest, longest + 1)
    drawn = _length_quotas(n_train + n_heldout, [_count(n_symbols, n, n_train + n_heldout) for n in lengths], generator)
    kept = _heldout_quotas(n_heldout, drawn)
    train_src: list[list[int]] = []
    heldout_src: list[list[int]] = []
    most = max(n - k for n, k in zip(drawn, kept))  # the training sequences of the commonest length
    for length, n_drawn, n_kept in zip(lengths, drawn, kept):
        sequences = _distinct_sequences(n_drawn, n_symbols, length, generator)
        heldout_src += sequences[:n_kept]
        n_trained = n_drawn - n_kept
        repeats = max(1, round(math.sqrt(most / n_trained))) if balance_lengths and n_trained else 1
        train_src += sequences[n_kept:] * repeats
    return tuple(_pairs(task, _shuffled(src, generator)) for src in (train_src, heldout_src))  # type: ignore[return-value]


def _pairs(task: str, sources: list[list[int]]) -> TranslationData:
    return TranslationData(sources, [list(s) if task == "copy" else s[::-1] for s in sources])


def _shuffled(items: list[list[int]], generator: torch.Generator) -> list[list[int]]:
    """The lengths mixed (they were drawn length by length), in an order the seed decides."""
    return [items[i] for i in torch.randperm(len(items), generator=generator).tolist()]


def _count(n_symbols: int, length: int, cap: int) -> int:
    """How many sequences of ``length`` symbols exist, ``n_symbols ** length``, or ``cap + 1`` if more:
    an exact power of 10 with 100,000 digits takes long, and no request needs more than ``cap``."""
    if length * math.log(n_symbols) > math.log(cap + 1):
        return cap + 1
    return min(n_symbols**length, cap + 1)


def _length_quotas(wanted: int, space: list[int], generator: torch.Generator) -> list[int]:
    """How many sequences to draw of each length: an even share each (the remainder to lengths the seed
    picks); a length with fewer sequences than its share gives all it has, and the others share the rest."""
    if wanted > sum(space):
        raise ValueError(
            f"asked for {wanted} distinct sequences, but only {sum(space)} exist with these lengths and "
            "symbols; ask for fewer, or raise longest or n_symbols"
        )
    quotas = [0] * len(space)
    open_lengths = list(range(len(space)))
    while wanted > 0:  # each round fills every share, or uses up a length
        share, extra = divmod(wanted, len(open_lengths))
        lucky = set(torch.randperm(len(open_lengths), generator=generator)[:extra].tolist())
        for rank, i in enumerate(open_lengths):
            take = min(share + (rank in lucky), space[i] - quotas[i])
            quotas[i] += take
            wanted -= take
        open_lengths = [i for i in open_lengths if quotas[i] < space[i]]
    return quotas


def _heldout_quotas(n_heldout: int, drawn: list[int]) -> list[int]:
    """How many of each length's sequences are held out: the same share ``f`` of every length's
    sequences, but at least ``min(MIN_HELDOUT_PER_LENGTH, half of them)`` of each (scaled down, one
    at least, if ``n_heldout`` is too small for that), and never all of a length while others have
    room: training sees every length too. Over 10 symbols that holds out 5 of the 10 one-symbol
    sequences, where a share in proportion holds out 1 (and the other 9 could all be wrong)."""
    if n_heldout == 0:
        return [0] * len(drawn)
    room = [n - 1 if n >= 2 else 0 for n in drawn]
    if n_heldout > sum(room):  # asked for (nearly) everything: whole lengths go too
        room = list(drawn)
    floor = [min(MIN_HELDOUT_PER_LENGTH, n // 2, r) for n, r in zip(drawn, room)]
    if sum(floor) > n_heldout:  # too few for that: the minimums scaled down, one each at least
        floor = [min(r, max(1, lowest * n_heldout // sum(floor))) for r, lowest in zip(room, floor)]

    def held(f: float) -> list[float]:
        return [min(r, max(lowest, f * n)) for r, lowest, n in zip(room, floor, drawn)]

    low, high = 0.0, 1.0  # sum(held(f)) grows with f, from sum(floor) to sum(room): bisect for n_heldout
    for _ in range(60):
        middle = (low + high) / 2
        low, high = (middle, high) if sum(held(middle)) < n_heldout else (low, middle)
    ideal = held(high)
    kept = [min(r, max(lowest, math.floor(x))) for r, lowest, x in zip(room, floor, ideal)]
    while sum(kept) > n_heldout:  # fewer asked for than one per length: the longest lengths go without
        kept[max(i for i in range(len(kept)) if kept[i] > 0)] -= 1
    while sum(kept) < n_heldout:  # rounding down left some: give where furthest below
        i = max((i for i in range(len(kept)) if kept[i] < room[i]), key=lambda i: ideal[i] - kept[i])
        kept[i] += 1
    return kept


def _distinct_sequences(wanted: int, n_symbols: int, length: int, generator: torch.Generator) -> list[list[int]]:
    """``wanted`` distinct random sequences of ``length`` ids of :func:`toy_vocab`'s symbols."""
    first_id = len(SPECIALS)
    space = _count(n_symbols, length, 4 * wanted)
    if space <= 4 * wanted:  # few exist: number them all and pick without replacement
        picked = torch.randperm(space, generator=generator)[:wanted]  # (wanted,)
        digits = n_symbols ** torch.arange(length - 1, -1, -1)  # (length,) place values
        return ((picked[:, None] // digits) % n_symbols + first_id).tolist()
    seen: set[tuple[int, ...]] = set()  # many exist: rejection sampling, which stays fast at < 1/4 of them
    sequences: list[list[int]] = []
    while len(sequences) < wanted:
        seq = (torch.randint(0, n_symbols, (length,), generator=generator) + first_id).tolist()
        if tuple(seq) not in seen:
            seen.add(tuple(seq))
            sequences.append(seq)
    return sequences



@torch.no_grad()
def exact_match_by_length(model: nn.Module, data: TranslationData, *, batch_size: int = 256,
                          device: torch.device | str | None = None) -> dict[int, tuple[int, int]]:
    """A model's exact match on toy pairs, length by length: ``{source length: (matches, pairs)}``.

    One number for the whole held-out set hides the lengths it has few of; this shows each (chapter 5:
    a reverse model scoring 100% overall while it maps each single symbol ``d`` to ``d d``). Exact match
    is teacher-forced: every non-padding position's argmax is right, which equals greedy decoding's
    exact match (see :func:`~transformer_lib.metrics.exact_match_counts`). The model is evaluated in eval mode; its mode is restored afterwards.

    Example:
        >>> from transformer_lib.config import TransformerConfig
        >>> from transformer_lib.model import Transformer
        >>> model = Transformer(TransformerConfig.from_preset("tiny", src_vocab_size=8, tgt_vocab_size=8))
        >>> _, heldout = toy_task("copy", 60, 12, n_symbols=4, longest=3)
        >>> sorted(exact_match_by_length(model, heldout))
        [1, 2, 3]
    """
    check_int("batch_size", batch_size)
    device = torch.device(device) if device is not None else next(model.parameters()).device
    by_length: dict[int, list[int]] = {}
    for i, source in enumerate(data.src):
        by_length.setdefault(len(source), []).append(i)
    was_training = model.training
    model.eval()
    report: dict[int, tuple[int, int]] = {}
    try:
        for length in sorted(by_length):
            indices, matches = by_length[length], 0
            for start in range(0, len(indices), batch_size):
                batch = collate([data[i] for i in indices[start : start + batch_size]]).to(device)
                right = model(batch.src, batch.tgt_in).argmax(dim=-1) == batch.tgt_out  # (B, T)
                matches += int((right | (batch.tgt_out == PAD_ID)).all(dim=-1).sum())
            report[length] = (matches, len(indices))
    finally:
        model.train(was_training)
    return report

