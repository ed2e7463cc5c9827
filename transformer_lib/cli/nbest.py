"""The translate command line's text files: sentences in (arguments, a file, ``.gz`` or standard
input), translations and n-best lists out, and the ``--src``/``--ref`` pairs it scores.

An n-best list is in the Moses format that fairseq, Marian and OpenNMT read and write, one
hypothesis a line, best first: ``SENTENCE ||| TRANSLATION ||| log_prob=L ||| SCORE``, where
``SENTENCE`` counts from 0, ``L`` is the sum of the tokens' log-probabilities and ``SCORE`` the
length-normalised score beam search ranks by (:mod:`transformer_lib.beam_search`). A blank input
line has one entry, the empty translation with ``log_prob=0.0000 ||| 0.0000`` (nothing to translate
has one translation, certain), so every sentence number from 0 up appears in the list.
"""

from __future__ import annotations

import gzip
import io
import sys
import zlib
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import IO

import torch

from ..batching import pad_sequences
from ..beam_search import beam_search
from ..checkpoint import atomic_file
from ..masking import padding_mask
from ..translator import EXTRA_OUTPUT_TOKENS, TranslationError, Translator

__all__ = ["read_lines", "open_output", "n_best", "format_n_best"]


def read_lines(path: str) -> list[str]:
    """The lines of a text file (UTF-8; ``.gz`` is decompressed; ``-`` is standard input), without line ends."""
    try:
        if path == "-":
            return _stdin_text().splitlines()
        if path.endswith(".gz"):
            with gzip.open(path, "rt", encoding="utf-8") as f:
                return f.read().splitlines()
        return Path(path).read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as error:
        raise TranslationError(f"{path} is not UTF-8 text (byte {error.start}): give a UTF-8 file") from None
    except (OSError, EOFError, zlib.error) as error:  # a missing file, a folder, a cut or damaged .gz
        raise TranslationError(f"cannot read {path}: {error}") from None


def _stdin_text() -> str:
    """Standard input as UTF-8 whatever the locale's encoding and error handler: a byte that is not
    UTF-8 stays a surrogate (as in a C locale), so the sentence holding it is refused by its number
    (:meth:`Translator.source_ids`) instead of the whole input being dropped by a strict decoder."""
    buffer = getattr(sys.stdin, "buffer", None)
    if buffer is None:  # a text stream put in its place (a test, an embedding program)
        return sys.stdin.read()
    return buffer.read().decode("utf-8", errors="surrogateescape")


@contextmanager
def open_output(path: str | None) -> Iterator[IO[str]]:
    """Standard output (``None`` or ``-``), or the file ``path`` (``.gz`` compressed), written as UTF-8.

    The file is written whole or not at all: to a temporary file beside it, renamed over ``path`` when
    the block ends without an error (:func:`~transformer_lib.checkpoint.atomic_file`). An error, a full
    disk or Ctrl-C leaves ``path`` as it was, so ``--input F --output F`` (the input is read first) is safe.
    """
    if path is None or path == "-":
        yield sys.stdout
        return
    with atomic_file(path) as raw:
        if path.endswith(".gz"):
            with gzip.open(raw, "wt", encoding="utf-8") as f:
                yield f
        else:
            text = io.TextIOWrapper(raw, encoding="utf-8")
            yield text
            text.flush()
            text.detach()  # atomic_file closes the file, after its fsync


@torch.no_grad()
def n_best(translator: Translator, sentences: Sequence[str], k: int, beam_size: int, length_penalty: float,
           batch_size: int) -> list[list[tuple[str, float, float]]]:
    """The ``k`` best translations of each sentence by beam search: ``(text, log_prob, score)``, best first;
    a blank sentence's list is its one empty translation, ``[("", 0.0, 0.0)]``."""
    rows = translator.source_ids(sentences, blanks=True)  # checks every sentence before any is decoded
    vocab = translator.tgt_vocab
    results: list[list[tuple[str, float, float]]] = [[("", 0.0, 0.0)] for _ in rows]
    decoded = [i for i, row in enumerate(rows) if row]
    for start in range(0, len(decoded), batch_size):
        indices = decoded[start : start + batch_size]
        chunk = [rows[i] for i in indices]
        src = pad_sequences(chunk, translator.src_vocab.pad_id).to(translator.device)  # (B, S)
        src_mask = padding_mask(src, translator.src_vocab.pad_id)  # (B, 1, 1, S)
        max_new = min(translator.model.config.max_len, src.size(1) + EXTRA_OUTPUT_TOKENS)
        found = beam_search(translator.model, src, src_mask, beam_size=beam_size, length_penalty=length_penalty,
                            max_new_tokens=max_new, min_new_tokens=1, bos_id=vocab.bos_id, eos_id=vocab.eos_id,
                            pad_id=vocab.pad_id)
        for i, hypotheses in zip(indices, found.hypotheses):
            results[i] = [(translator.detokenize(translator.output_tokens(h.tokens)), h.log_prob, h.score)
                          for h in hypotheses[:k]]
    return results


def format_n_best(lists: Sequence[Sequence[tuple[str, float, float]]]) -> Iterator[str]:
    """Moses-format lines of :func:`n_best`'s lists."""
    for i, hypotheses in enumerate(lists):
        for text, log_prob, score in hypotheses:
            yield f"{i} ||| {text} ||| log_prob={log_prob:.4f} ||| {score:.4f}"
