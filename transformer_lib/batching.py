"""From token ids to batches: the dataset of id pairs, padding, and length bucketing (chapter 5).

- Data: :class:`TranslationData`, a parallel corpus as token ids (Multi30k or a toy task).
- Batches: :func:`collate` (shifted targets, padding) into a :class:`Batch`,
  :class:`BucketBatchSampler` (length bucketing, sliced across processes),
  :class:`TokenBatchSampler` (batches by a token budget, as the paper's), :func:`padding_waste`,
  :func:`make_loader`.

It imports nothing from the model, and nothing about text: the ids come from
:mod:`transformer_lib.prepared` or :mod:`transformer_lib.toy_tasks`, and are checked against the
vocabularies once, where they are loaded (:meth:`TranslationData.check_ids`).

Shapes::

    B  batch size    S  source length    T  target length
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import torch
from torch import Tensor

from .validation import check_int

__all__ = [
    "TranslationData",
    "SOURCE_FORMAT",
    "Batch",
    "pad_sequences",
    "collate",
    "BucketBatchSampler",
    "TokenBatchSampler",
    "padding_waste",
    "make_loader",
]


class TranslationData:
    """A parallel corpus as token ids, without specials (:func:`collate` adds them).

    A map-style dataset: ``data[i]`` is ``(src_ids, tgt_ids)``, so it plugs into a
    ``torch.utils.data.DataLoader`` directly.

    Args:
        src: source sentences, each a list of token ids.
        tgt: target sentences, as many as ``src``.
    """

    def __init__(self, src: Sequence[Sequence[int]], tgt: Sequence[Sequence[int]]) -> None:
        if len(src) != len(tgt):
            raise ValueError(f"src has {len(src)} sentences but tgt has {len(tgt)}; they must pair up")
        self.src = [list(s) for s in src]
        self.tgt = [list(t) for t in tgt]

    def __len__(self) -> int:
        return len(self.src)

    def __iter__(self) -> Iterator[tuple[list[int], list[int]]]:
        return (self[i] for i in range(len(self)))

    def __getitem__(self, i: int) -> tuple[list[int], list[int]]:
        return self.src[i], self.tgt[i]

    def __repr__(self) -> str:
        return f"TranslationData({len(self)} pairs)"

    @property
    def src_lengths(self) -> list[int]:
        return [len(s) for s in self.src]

    @property
    def tgt_lengths(self) -> list[int]:
        return [len(t) for t in self.tgt]

    def check_ids(self, src_vocab_size: int, tgt_vocab_size: int) -> None:
        """Raise a ``ValueError`` naming the first id outside ``[0, vocab_size)``: the data's one range
        check, made where data are loaded, so that no training step has to read its batches' values."""
        for side, sentences, size in (("src", self.src, src_vocab_size), ("tgt", self.tgt, tgt_vocab_size)):
            for i, sentence in enumerate(sentences):
                if sentence and not 0 <= min(sentence) <= max(sentence) < size:
                    bad = next(t for t in sentence if not 0 <= t < size)
                    raise ValueError(f"{side} sentence {i} holds token id {bad}, outside the vocabulary [0, {size - 1}]")

    def subset(self, indices: Iterable[int]) -> TranslationData:
        indices = list(indices)
        return TranslationData([self.src[i] for i in indices], [self.tgt[i] for i in indices])

    def to_dict(self) -> dict[str, Tensor]:
        """Flat ``int32`` tensors plus offsets: compact, and loadable with ``weights_only=True``."""
        return {
            "src_ids": torch.tensor([i for s in self.src for i in s], dtype=torch.int32),
            "src_lengths": torch.tensor(self.src_lengths, dtype=torch.int32),
            "tgt_ids": torch.tensor([i for t in self.tgt for i in t], dtype=torch.int32),
            "tgt_lengths": torch.tensor(self.tgt_lengths, dtype=torch.int32),
        }

    @classmethod
    def from_dict(cls, values: Mapping[str, Tensor]) -> TranslationData:
        def split(ids: Tensor, lengths: Tensor) -> list[list[int]]:
            return [chunk.tolist() for chunk in torch.split(ids, lengths.tolist())] if len(lengths) else []

        return cls(split(values["src_ids"], values["src_lengths"]), split(values["tgt_ids"], values["tgt_lengths"]))


# How collate lays out a source sentence: its tokens then <eos>, no <bos> (as fairseq does; the
# encoder sees the whole sentence at once and needs no start symbol). Recorded in checkpoints.
SOURCE_FORMAT = "tokens+eos"


@dataclass
class Batch:
    """One padded batch for teacher forcing.

    Attributes:
        src: ``(B, S)`` source ids followed by ``<eos>``, right-padded.
        tgt_in: ``(B, T)`` the decoder input: ``<bos>`` followed by the target.
        tgt_out: ``(B, T)`` what each position must predict: the target followed by ``<eos>``,
            i.e. ``tgt_in`` shifted left by one.
        n_tokens: number of non-padding positions in ``tgt_out`` (the loss is averaged over these).
    """

    src: Tensor
    tgt_in: Tensor
    tgt_out: Tensor
    n_tokens: int

    def to(self, device: torch.device | str, non_blocking: bool = False) -> Batch:
        return Batch(
            self.src.to(device, non_blocking=non_blocking),
            self.tgt_in.to(device, non_blocking=non_blocking),
            self.tgt_out.to(device, non_blocking=non_blocking),
            self.n_tokens,
        )

    def pin_memory(self) -> Batch:
        """Page-locked copies, so ``to("cuda", non_blocking=True)`` can overlap the copy with compute
        (``DataLoader(pin_memory=True)`` calls this)."""
        return Batch(self.src.pin_memory(), self.tgt_in.pin_memory(), self.tgt_out.pin_memory(), self.n_tokens)

    def __len__(self) -> int:
        return self.src.size(0)


def pad_sequences(sequences: Sequence[Sequence[int]], pad_id: int = 0) -> Tensor:
    """Right-pad id lists to a ``(B, L_max)`` long tensor."""
    if len(sequences) == 0:
        raise ValueError("cannot pad an empty list of sequences")
    width = max(len(s) for s in sequences)
    # One tensor from padded lists: a tensor per row, copied in one by one, took ten times as long,
    # about a tenth of a small model's training step on a CPU.
    return torch.tensor([[*seq, *[pad_id] * (width - len(seq))] for seq in sequences], dtype=torch.long)  # (B, L_max)


def collate(
    examples: Sequence[tuple[Sequence[int], Sequence[int]]],
    pad_id: int = 0,
    bos_id: int = 2,
    eos_id: int = 3,
    pad_multiple: int = 1,
) -> Batch:
    """Build a teacher-forcing :class:`Batch` from ``(src_ids, tgt_ids)`` pairs without specials.

    For a target ``y1 y2 y3``: ``tgt_in = <bos> y1 y2 y3`` and ``tgt_out = y1 y2 y3 <eos>``, so the
    decoder at position ``t`` reads ``y_<t`` and is scored on ``y_t``. ``pad_multiple``: pad both
    lengths up to a multiple of it, so batches come in few shapes (``torch.compile`` compiles one
    graph per shape; the extra pads are masked and ignored by the loss, so nothing else changes).

    Example:
        >>> batch = collate([([7, 8], [9, 10, 11]), ([7], [9])])
        >>> batch.src.tolist(), batch.tgt_in.tolist(), batch.tgt_out.tolist()
        ([[7, 8, 3], [7, 3, 0]], [[2, 9, 10, 11], [2, 9, 0, 0]], [[9, 10, 11, 3], [9, 3, 0, 0]])
    """
    src = pad_sequences([[*s, eos_id] for s, _ in examples], pad_id)  # (B, S)
    tgt_in = pad_sequences([[bos_id, *t] for _, t in examples], pad_id)  # (B, T)
    tgt_out = pad_sequences([[*t, eos_id] for _, t in examples], pad_id)  # (B, T)
    if pad_multiple > 1:
        src, tgt_in, tgt_out = (_pad_to_multiple(x, pad_multiple, pad_id) for x in (src, tgt_in, tgt_out))
    n_tokens = sum(len(t) + 1 for _, t in examples)
    return Batch(src, tgt_in, tgt_out, n_tokens)


def _pad_to_multiple(x: Tensor, multiple: int, pad_id: int) -> Tensor:
    extra = -x.size(1) % multiple
    return torch.nn.functional.pad(x, (0, extra), value=pad_id) if extra else x


class BucketBatchSampler(torch.utils.data.Sampler[list[int]]):
    """Batches of indices with similar lengths: shuffle, cut into pools, sort each pool, batch, shuffle batches.

    Sorting within a pool of ``pool_batches * batch_size`` examples puts sentences of similar length
    in the same batch, so little padding is needed; shuffling first (and shuffling the batches
    afterwards) keeps the batches random enough to train on. With ``bucket=False`` it is plain
    random batching, the baseline that :func:`padding_waste` compares against.

    Iteration is reproducible: epoch ``e`` of seed ``s`` always yields the same batches (call
    :meth:`set_epoch` before each epoch), and it does not touch the global random state.

    **Several processes** (``num_replicas > 1``, one per GPU under ``torchrun``): every process
    builds the same *global* batches (same seed, same epoch) and takes its own slice of each one,
    every ``num_replicas``-th example starting at ``rank``. So ``batch_size`` is the global batch
    whatever the number of processes, every process gets the same number of batches, and each
    example of an epoch goes to exactly one process. The slices are strided rather than contiguous
    because a bucketed batch is sorted by length: striding gives every process the same mix of
    lengths, so none waits for another. A final batch with fewer examples than processes cannot be
    sliced; it is merged into the batch before it (so nothing is lost).

    Args:
        lengths: one sort key per example (a length, or a tuple such as ``(src_len, tgt_len)``).
        batch_size: examples per batch.
        bucket: sort within pools (``False``: random batches).
        pool_batches: pool size in batches; larger pools waste less padding but make batches
            less random.
        shuffle: shuffle examples and batch order (``False``: keep dataset order, for evaluation).
        drop_last: drop a final smaller batch.
        seed: base seed; epoch ``e`` uses ``seed + e``.
        num_replicas: number of processes sharing each batch (the DDP world size).
        rank: this process's index in ``[0, num_replicas)``.

    Example:
        >>> global_batches = BucketBatchSampler([1, 2, 3, 4, 5], 4, shuffle=False).batches()
        >>> global_batches
        [[0, 1, 2, 3], [4]]
        >>> [BucketBatchSampler([1, 2, 3, 4, 5], 4, shuffle=False, num_replicas=2, rank=r).batches() for r in (0, 1)]
        [[[0, 2, 4]], [[1, 3]]]
    """

    def __init__(
        self,
        lengths: Sequence[Any],
        batch_size: int,
        *,
        bucket: bool = True,
        pool_batches: int = 100,
        shuffle: bool = True,
        drop_last: bool = False,
        seed: int = 0,
        num_replicas: int = 1,
        rank: int = 0,
    ) -> None:
        for name, value in (("batch_size", batch_size), ("pool_batches", pool_batches), ("num_replicas", num_replicas)):
            check_int(name, value)
        check_int("rank", rank, minimum=0, maximum=num_replicas - 1)
        if len(lengths) == 0:
            raise ValueError("lengths is empty: there is nothing to batch")
        if batch_size < num_replicas:
            raise ValueError(
                f"batch_size={batch_size} is the global batch, shared by num_replicas={num_replicas} processes; "
                f"it must be at least {num_replicas} so that each gets an example"
            )
        if len(lengths) < num_replicas:
            raise ValueError(f"{len(lengths)} examples are too few to give each of num_replicas={num_replicas} processes one")
        self.lengths = list(lengths)
        self.batch_size = batch_size
        self.bucket = bucket
        self.pool_batches = pool_batches
        self.shuffle = shuffle
        self.drop_last = drop_last
        self.seed = seed
        self.epoch = 0
        self.num_replicas = num_replicas
        self.rank = rank

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def global_batches(self) -> list[list[int]]:
        """The batches of the current epoch, in order, before they are sliced across processes."""
        n = len(self.lengths)
        generator = torch.Generator().manual_seed(self.seed + self.epoch)
        order = torch.randperm(n, generator=generator).tolist() if self.shuffle else list(range(n))
        if self.bucket:
            pool = self.pool_batches * self.batch_size
            order = [i for start in range(0, n, pool) for i in sorted(order[start : start + pool], key=self.lengths.__getitem__)]
        batches = [order[start : start + self.batch_size] for start in range(0, n, self.batch_size)]
        if self.drop_last and len(batches[-1]) < self.batch_size:
            batches.pop()
        elif len(batches[-1]) < self.num_replicas:  # too small to give every process an example
            batches[-2].extend(batches.pop())
        if self.shuffle and self.bucket:
            # sorted pools would otherwise feed short batches first and long ones last
            batches = [batches[i] for i in torch.randperm(len(batches), generator=generator).tolist()]
        return batches

    def batches(self) -> list[list[int]]:
        """This process's batches of the current epoch: its slice of each global batch, in order."""
        return [batch[self.rank :: self.num_replicas] for batch in self.global_batches()]

    def __iter__(self) -> Iterator[list[int]]:
        return iter(self.batches())

    def __len__(self) -> int:
        n = len(self.lengths)
        if self.drop_last:
            return n // self.batch_size
        full, rest = divmod(n, self.batch_size)
        return full + (1 if rest >= self.num_replicas else 0)


class TokenBatchSampler(torch.utils.data.Sampler[list[int]]):
    """Batches by number of tokens, not of sentences: the paper's "approximately 25000 source tokens
    and 25000 target tokens" per batch (section 5.1).

    The examples are sorted by length (ties in a seeded random order) and cut into batches as large
    as ``max_tokens`` allows, counting a batch as its padded size, ``len(batch) * longest`` (what
    memory and compute pay for; fairseq's ``--max-tokens`` counts the same way). So batches of short
    sentences hold many, of long ones few, and every batch costs about the same. The batches are
    made once; each epoch shuffles their order (``set_epoch``), so :meth:`__len__` never changes,
    as the :class:`~transformer_lib.trainer.Trainer` needs. Combined with the trainer's
    ``batches_per_update``, a budget too large for the memory is reached in parts.

    **Several processes** (``num_replicas > 1``): as :class:`BucketBatchSampler`, ``max_tokens`` is
    the budget of the global batch and each process takes every ``num_replicas``-th example of it;
    every batch holds at least ``num_replicas`` examples (a final smaller one joins the batch of the
    next-shortest sentences, the smallest overshoot).

    Args:
        lengths: each example's length in tokens (for translation, the longer side's, with its
            ``<eos>``: :func:`make_loader` passes that).
        max_tokens: the budget of one batch, padding included; at least the longest example (times
            ``num_replicas``).
        shuffle: shuffle the batches' order each epoch (``False``: shortest first, for evaluation).
        seed: base seed; epoch ``e`` uses ``seed + e``.
        num_replicas, rank: the processes sharing each batch, and this one.

    Example:
        >>> TokenBatchSampler([2, 5, 3, 3, 4], max_tokens=8, shuffle=False).batches()
        [[0, 2], [3, 4], [1]]
    """

    def __init__(self, lengths: Sequence[int], max_tokens: int, *, shuffle: bool = True, seed: int = 0,
                 num_replicas: int = 1, rank: int = 0) -> None:
        check_int("max_tokens", max_tokens)
        check_int("num_replicas", num_replicas)
        check_int("rank", rank, minimum=0, maximum=num_replicas - 1)
        if len(lengths) < num_replicas:
            raise ValueError(f"{len(lengths)} examples are too few to give each of num_replicas={num_replicas} processes one")
        longest = max(lengths)
        if longest * num_replicas > max_tokens:
            raise ValueError(
                f"max_tokens={max_tokens} is too small: example {list(lengths).index(longest)} has {longest} tokens"
                + (f", and each of num_replicas={num_replicas} processes needs one" if num_replicas > 1 else "")
                + f"; use max_tokens >= {longest * num_replicas}"
            )
        self.max_tokens, self.shuffle, self.seed, self.epoch = max_tokens, shuffle, seed, 0
        self.num_replicas, self.rank = num_replicas, rank
        self._batches = self._cut(list(lengths))

    def _cut(self, lengths: list[int]) -> list[list[int]]:
        """Shortest first, each batch as long as the budget allows and at least ``num_replicas`` examples."""
        ties = torch.randperm(len(lengths), generator=torch.Generator().manual_seed(self.seed)).tolist()
        order = sorted(range(len(lengths)), key=lambda i: (lengths[i], ties[i]))
        batches: list[list[int]] = [[]]
        for i in order:  # lengths only grow along the order: the newest example is the batch's longest
            if (len(batches[-1]) + 1) * lengths[i] > self.max_tokens and len(batches[-1]) >= self.num_replicas:
                batches.append([])
            batches[-1].append(i)
        if len(batches) > 1 and len(batches[-1]) < self.num_replicas:
            batches[-2].extend(batches.pop())
        return batches

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def global_batches(self) -> list[list[int]]:
        """The batches of the current epoch, in order, before they are sliced across processes."""
        if not self.shuffle:
            return [list(batch) for batch in self._batches]
        generator = torch.Generator().manual_seed(self.seed + self.epoch)
        return [list(self._batches[i]) for i in torch.randperm(len(self._batches), generator=generator).tolist()]

    def batches(self) -> list[list[int]]:
        """This process's batches of the current epoch: its slice of each global batch, in order."""
        return [batch[self.rank :: self.num_replicas] for batch in self.global_batches()]

    def __iter__(self) -> Iterator[list[int]]:
        return iter(self.batches())

    def __len__(self) -> int:
        return len(self._batches)


def padding_waste(batches: Iterable[Sequence[int]], lengths: Sequence[int]) -> float:
    """Average number of padding tokens per sequence when ``batches`` are padded to their longest member.

    Example:
        >>> padding_waste([[0, 1], [2]], lengths=[3, 5, 4])   # batch 1 pads the 3 to 5; batch 2 needs none
        0.6666666666666666
    """
    pads = sequences = 0
    for batch in batches:
        batch_lengths = [lengths[i] for i in batch]
        pads += max(batch_lengths) * len(batch_lengths) - sum(batch_lengths)
        sequences += len(batch_lengths)
    if sequences == 0:
        raise ValueError("no batches given")
    return pads / sequences


def make_loader(
    data: TranslationData,
    batch_size: int | None = None,
    *,
    max_tokens: int | None = None,
    shuffle: bool = True,
    bucket: bool = True,
    pool_batches: int = 100,
    seed: int = 0,
    pad_id: int = 0,
    bos_id: int = 2,
    eos_id: int = 3,
    pin_memory: bool = False,
    num_replicas: int = 1,
    rank: int = 0,
    pad_multiple: int = 1,
) -> torch.utils.data.DataLoader:
    """A ``DataLoader`` of :class:`Batch` es over ``data``, length-bucketed (see :class:`BucketBatchSampler`).

    The loader has its own random generator, so iterating it leaves the global random state
    (which dropout uses) alone: what makes a resumed run repeat an uninterrupted one exactly.
    With ``num_replicas`` processes, ``batch_size`` is the global batch and this process
    (``rank``) gets its slice of each one. ``pad_multiple``: see :func:`collate` (e.g. 16 for
    ``torch.compile`` on a GPU: at most ``max_len / 16`` lengths per side).

    Give ``batch_size`` (sentence pairs per batch) or ``max_tokens`` (padded tokens of the longer
    side per batch, ``pad_multiple``'s padding included, :class:`TokenBatchSampler`; ``bucket`` and
    ``pool_batches`` then do not apply).
    """
    if (batch_size is None) == (max_tokens is None):
        raise ValueError(f"give batch_size or max_tokens, one of them; got batch_size={batch_size}, max_tokens={max_tokens}")
    check_int("pad_multiple", pad_multiple)
    sampler: torch.utils.data.Sampler[list[int]]
    if max_tokens is not None:
        # A padded batch is as wide as its longest source with <eos>, or target with <bos> (or <eos>),
        # rounded up to pad_multiple: the budget counts the padding collate will add.
        sizes = [-(-(max(s, t) + 1) // pad_multiple) * pad_multiple for s, t in zip(data.src_lengths, data.tgt_lengths)]
        sampler = TokenBatchSampler(sizes, max_tokens, shuffle=shuffle, seed=seed, num_replicas=num_replicas, rank=rank)
    else:
        # Sort by the longer side first: both source and target batches then need little padding.
        keys = [(max(s, t), s, t) for s, t in zip(data.src_lengths, data.tgt_lengths)]
        assert batch_size is not None  # checked above: exactly one of the two is given
        sampler = BucketBatchSampler(
            keys, batch_size,
            bucket=bucket, pool_batches=pool_batches, shuffle=shuffle, seed=seed, num_replicas=num_replicas, rank=rank,
        )
    return torch.utils.data.DataLoader(
        data,  # type: ignore[arg-type]  # a map-style dataset (__getitem__, __len__), not a Dataset subclass
        batch_sampler=sampler,
        collate_fn=partial(collate, pad_id=pad_id, bos_id=bos_id, eos_id=eos_id, pad_multiple=pad_multiple),
        pin_memory=pin_memory,
        generator=torch.Generator().manual_seed(seed),
    )
