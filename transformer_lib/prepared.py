"""Multi30k as token ids: tokenize once, save, and train anywhere (chapter 5).

:func:`prepare_multi30k` reads the text (:mod:`transformer_lib.multi30k`), splits it into words
(:mod:`transformer_lib.vocab`) or subword pieces (:mod:`transformer_lib.subword`), builds the
vocabularies on the training split and turns every split into a
:class:`~transformer_lib.batching.TranslationData`. The result, a :class:`PreparedTranslation`,
saves to one file, so a machine without the data, spaCy or a network (a GPU box, say) can train on
it. It imports nothing from the model.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from .batching import SOURCE_FORMAT, TranslationData
from .multi30k import load_multi30k
from .subword import SubwordTokenizer
from .vocab import Vocab, tokenize_corpus

__all__ = ["TOKENIZERS", "PREPARED_FORMAT", "PreparedTranslation", "prepare_multi30k"]

# How prepare_multi30k turns text into tokens: spaCy words, or subword pieces (transformer_lib.subword).
TOKENIZERS = ("spacy", "bpe")
# What PreparedTranslation.save writes into its file, so load can refuse any other file.
PREPARED_FORMAT = "transformer_lib.prepared_translation"
SplitTokens = dict[str, tuple[list[list[str]], list[list[str]]]]  # split -> (source tokens, target tokens)


@dataclass
class PreparedTranslation:
    """A tokenized translation corpus: vocabularies, ids for each split, and the raw text.

    Everything a training run needs, so that it can be made once (with the data and spaCy at hand)
    and copied to another machine (a GPU box without network, say) with :meth:`save` / :meth:`load`.

    Attributes:
        src_vocab, tgt_vocab: built on the training split.
        splits: split name -> :class:`TranslationData`.
        text: split name -> list of raw ``(source, target)`` pairs (references for BLEU, samples).
        settings: how the text was tokenized (the checkpoint's ``"data"`` entry): plain values only.
    """

    src_vocab: Vocab
    tgt_vocab: Vocab
    splits: dict[str, TranslationData]
    text: dict[str, list[tuple[str, str]]]
    settings: dict[str, Any]

    def save(self, path: str | Path) -> None:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        payload = {
            "format": PREPARED_FORMAT,
            "version": 1,
            "settings": dict(self.settings),
            "src_vocab": self.src_vocab.to_dict(),
            "tgt_vocab": self.tgt_vocab.to_dict(),
            "splits": {name: data.to_dict() for name, data in self.splits.items()},
            "text": {name: {"src": [s for s, _ in pairs], "tgt": [t for _, t in pairs]} for name, pairs in self.text.items()},
        }
        tmp = path.with_name(f".{path.name}.tmp")
        torch.save(payload, tmp)
        os.replace(tmp, path)

    @classmethod
    def load(cls, path: str | Path) -> PreparedTranslation:
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"no prepared data at {path}; make it with `python -m transformer_lib.train --task multi30k --prepare-only --out FOLDER`")
        payload = torch.load(path, map_location="cpu", weights_only=True)
        if not isinstance(payload, dict) or payload.get("format") != PREPARED_FORMAT:
            raise ValueError(f"{path} is not prepared translation data (no format={PREPARED_FORMAT!r} entry)")
        if payload.get("version") != 1:
            raise ValueError(f"{path} has prepared-data version {payload.get('version')!r}; this library reads version 1")
        return cls(
            src_vocab=Vocab.from_dict(payload["src_vocab"]),
            tgt_vocab=Vocab.from_dict(payload["tgt_vocab"]),
            splits={name: TranslationData.from_dict(values) for name, values in payload["splits"].items()},
            text={name: list(zip(values["src"], values["tgt"])) for name, values in payload["text"].items()},
            settings=dict(payload["settings"]),
        )



def prepare_multi30k(
    root: str | Path | None = None,
    *,
    src_lang: str = "de",
    tgt_lang: str = "en",
    lowercase: bool = False,
    min_freq: int = 2,
    train_size: int | None = None,
    seed: int = 0,
    splits: Sequence[str] = ("train", "val", "test"),
    tokenizer: str = "spacy",
    vocab_size: int = 8000,
    **find_options: Any,
) -> PreparedTranslation:
    """Load, tokenize and index Multi30k: vocabularies from the training split, ids for every split.

    Args:
        root: local folder with the ``.gz`` files (see :func:`~transformer_lib.multi30k.multi30k_dir`).
        src_lang, tgt_lang: translation direction.
        lowercase: lower-case text before tokenizing.
        min_freq: a token must occur this often in training to get its own id (else ``<unk>``).
        train_size: use a random subset of this many training pairs (``None``: all 29,000); the
            vocabularies are built on the subset.
        seed: picks the subset.
        splits: which splits to prepare; must include ``"train"``.
        tokenizer: ``"spacy"`` (words, one vocabulary per language, ``min_freq`` decides) or
            ``"bpe"`` (one joint subword vocabulary of ``vocab_size`` tokens learned on the training
            split of both languages, :class:`~transformer_lib.subword.SubwordTokenizer`; ``min_freq``
            is the fewest times a pair must occur to be merged). The BPE tokenizer itself is kept in
            the settings (``"subword_model"``, a JSON string), so checkpoints carry it.
        find_options: passed to :func:`~transformer_lib.multi30k.multi30k_dir`.
    """
    if tokenizer not in TOKENIZERS:
        raise ValueError(f"tokenizer must be one of {TOKENIZERS}, got {tokenizer!r}")
    if "train" not in splits:
        raise ValueError(f"splits must include 'train' (the vocabularies are built from it), got {list(splits)}")
    text = {split: load_multi30k(split, root, src_lang=src_lang, tgt_lang=tgt_lang, **find_options) for split in splits}
    if train_size is not None:
        text["train"] = _training_subset(text["train"], train_size, seed)
    if tokenizer == "bpe":
        tokens, src_vocab, subword_settings = _bpe_tokens(text, lowercase, vocab_size, min_freq)
        tgt_vocab = src_vocab
    else:
        tokens, src_vocab, tgt_vocab = _word_tokens(text, src_lang, tgt_lang, lowercase, min_freq)
        subword_settings = {}
    settings = {
        "corpus": "multi30k",
        "src_lang": src_lang,
        "tgt_lang": tgt_lang,
        "lowercase": lowercase,
        "tokenizer": "spacy.blank" if tokenizer == "spacy" else "bpe",
        "min_freq": min_freq,
        **subword_settings,
        "train_size": len(text["train"]),
        "train_subset": train_size is not None,  # a random subset (train_size) rather than every pair
        "source_format": SOURCE_FORMAT,
    }
    return PreparedTranslation(src_vocab, tgt_vocab, _as_ids(tokens, src_vocab, tgt_vocab), text, settings)


def _training_subset(pairs: Sequence[tuple[str, str]], train_size: int, seed: int) -> list[tuple[str, str]]:
    """A random subset of ``train_size`` pairs, picked by ``seed``, in corpus order."""
    if not 1 <= train_size <= len(pairs):
        raise ValueError(f"train_size must be in [1, {len(pairs)}], got {train_size}")
    keep = torch.randperm(len(pairs), generator=torch.Generator().manual_seed(seed))[:train_size]
    return [pairs[i] for i in sorted(keep.tolist())]


def _word_tokens(
    text: Mapping[str, Sequence[tuple[str, str]]], src_lang: str, tgt_lang: str, lowercase: bool, min_freq: int
) -> tuple[SplitTokens, Vocab, Vocab]:
    """Split every split into spaCy words, and build one vocabulary per language on the training split."""
    tokens = {
        split: (tokenize_corpus((s for s, _ in pairs), src_lang, lowercase), tokenize_corpus((t for _, t in pairs), tgt_lang, lowercase))
        for split, pairs in text.items()
    }
    src_vocab = Vocab.build(tokens["train"][0], min_freq=min_freq)
    tgt_vocab = Vocab.build(tokens["train"][1], min_freq=min_freq)
    return tokens, src_vocab, tgt_vocab


def _bpe_tokens(
    text: Mapping[str, Sequence[tuple[str, str]]], lowercase: bool, vocab_size: int, min_freq: int
) -> tuple[SplitTokens, Vocab, dict[str, Any]]:
    """Learn one BPE vocabulary on the training split (both sides) and split every split into pieces."""

    def side(pairs: Sequence[tuple[str, str]], i: int) -> list[str]:
        return [pair[i].lower() if lowercase else pair[i] for pair in pairs]

    bpe = SubwordTokenizer.train([*side(text["train"], 0), *side(text["train"], 1)], vocab_size=vocab_size, min_frequency=min_freq)
    tokens = {split: (bpe.tokenize_batch(side(pairs, 0)), bpe.tokenize_batch(side(pairs, 1))) for split, pairs in text.items()}
    return tokens, bpe.vocab, {"vocab_size": len(bpe), "subword_model": bpe.to_json()}


def _as_ids(tokens: SplitTokens, src_vocab: Vocab, tgt_vocab: Vocab) -> dict[str, TranslationData]:
    """Every split's tokens as ids, without specials (:func:`~transformer_lib.batching.collate` adds them)."""
    return {
        split: TranslationData([src_vocab.encode(s) for s in src_tok], [tgt_vocab.encode(t) for t in tgt_tok])
        for split, (src_tok, tgt_tok) in tokens.items()
    }
