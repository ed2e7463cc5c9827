"""Chapter 5's shared set-up: the reverse task as the command-line trainer makes it, and the
Multi30k corpus as word ids (prepared once, then loaded from the cache).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from transformer_lib.book.cache import cached
from transformer_lib.book.experiment import current_profile
from transformer_lib.prepared import PreparedTranslation, prepare_multi30k
from transformer_lib.toy_tasks import toy_task, toy_vocab
from transformer_lib.cli.profiles import DEFAULTS
from transformer_lib.vocab import Vocab

__all__ = ["ReverseTask", "multi30k_words", "reverse_task"]


@dataclass(frozen=True)
class ReverseTask:
    """The reverse task of the trainer's current profile: its ``settings`` (``DEFAULTS["toy"]``),
    its ``vocab`` (four specials, then the digits), and ``train`` and ``heldout`` pairs (no held-out
    sequence occurs in training)."""

    settings: dict[str, Any]
    vocab: Vocab
    train: Any
    heldout: Any


def reverse_task() -> ReverseTask:
    """The reverse task with the command-line trainer's settings (``--task reverse``, seed 0)."""
    s = DEFAULTS["toy"][current_profile()]
    train, heldout = toy_task("reverse", s["n_train"], s["n_heldout"], n_symbols=s["n_symbols"],
                              shortest=s["shortest"], longest=s["longest"], seed=0)
    return ReverseTask(dict(s), toy_vocab(s["n_symbols"]), train, heldout)


def multi30k_words(min_freq: int = 2) -> PreparedTranslation:
    """Multi30k tokenized into spaCy words, one vocabulary per language (tokens seen ``min_freq``
    times in training): :func:`~transformer_lib.prepared.prepare_multi30k` the first time, then
    its saved copy from the cache."""

    def prepare(folder: Path) -> None:
        prepare_multi30k(min_freq=min_freq).save(folder / "data.pt")

    return PreparedTranslation.load(cached("multi30k-words", {"min_freq": min_freq}, prepare) / "data.pt")
