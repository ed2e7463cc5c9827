"""Chapter 2's example: two German sentences and their English translations, as a padded batch.

Every section of the chapter masks the same batch, so that its pictures can be compared: sentence 0
is short and padded, sentence 1 fills the batch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from transformer_lib.book.tables import Table, number_text
from transformer_lib.vocab import Vocab
from transformer_lib.tokenizers import word_splitter

__all__ = ["EXAMPLE_PAIRS", "ExampleBatch", "example_batch", "matrix_table"]

EXAMPLE_PAIRS = (("Ein Hund rennt.", "A dog runs."),
                 ("Zwei Kinder spielen im Park Fußball.", "Two children play football in the park."))


@dataclass(frozen=True)
class ExampleBatch:
    """The batch and what labels it: ids ``src`` ``(B, S)`` and ``tgt`` ``(B, T)``, each sentence
    between ``<bos>`` and ``<eos>`` and padded with ``pad_id``; the tokens at every position."""

    vocab: Vocab
    pad_id: int
    src: torch.Tensor
    tgt: torch.Tensor
    src_tokens: list[list[str]]
    tgt_tokens: list[list[str]]


def example_batch() -> ExampleBatch:
    """The two pairs, tokenized by spaCy's rule-based tokenizers and numbered by one small ``Vocab``."""
    src_text = [word_splitter("de")(de) for de, _ in EXAMPLE_PAIRS]
    tgt_text = [word_splitter("en")(en) for _, en in EXAMPLE_PAIRS]
    vocab = Vocab.build(src_text + tgt_text)  # one small vocabulary for both

    def pad_batch(sentences: list[list[str]]) -> torch.Tensor:
        ids = [vocab.encode(s, add_bos=True, add_eos=True) for s in sentences]
        length = max(len(i) for i in ids)
        return torch.tensor([i + [vocab.pad_id] * (length - len(i)) for i in ids])

    src, tgt = pad_batch(src_text), pad_batch(tgt_text)  # (B, S), (B, T)

    def labels(ids: torch.Tensor) -> list[list[str]]:
        return [[vocab.id_to_token(int(i)) for i in row] for row in ids]

    return ExampleBatch(vocab, vocab.pad_id, src, tgt, labels(src), labels(tgt))


def matrix_table(values: torch.Tensor, rows: Sequence[str], columns: Sequence[str], *,
                 corner: str = "", decimals: int = 2, caption: str | None = None) -> Table:
    """A small matrix (weights, scores, a mask) as a table a reader can check by hand, instead of a
    printed tensor: one labelled row per row of ``values``, ``NaN`` and ``\u2212\u221e`` spelt out.

    Args:
        values: a 2-D tensor, ``(len(rows), len(columns))``.
        rows, columns: the labels ("query 0", "key 0", a token).
        corner: the header of the column of row labels.
        decimals: digits after the point for every number.
        caption: a line above the table.

    Raises:
        ValueError: ``values`` is not 2-D, or its shape does not match the labels.
    """
    if values.dim() != 2 or tuple(values.shape) != (len(rows), len(columns)):
        raise ValueError(f"values of shape {tuple(values.shape)} do not match {len(rows)} row and "
                         f"{len(columns)} column labels")
    body = [[str(label)] + [number_text(v, decimals) for v in row]
            for label, row in zip(rows, values.tolist())]
    return Table([corner] + [str(c) for c in columns], body, [False] + [True] * len(columns), caption)
