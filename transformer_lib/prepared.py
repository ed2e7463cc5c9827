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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from .batching import SOURCE_FORMAT, TranslationData
from .multi30k import load_multi30k
from .tokenizers import TOKENIZERS, WordTokenizer, learned_tokenizers, tokenizer_from_dict
from .validation import check_bool, content_sha256, refusal_reason
from .vocab import Tokenizer, TokenizerPair, Vocab

__all__ = ["PREPARED_FORMAT", "PreparedTranslation", "prepare_multi30k"]

# What PreparedTranslation.save writes into its file, so load can refuse any other file.
PREPARED_FORMAT = "transformer_lib.prepared_translation"
PREPARED_VERSION = 2  # 2: the tokenizers (each with its kind) replace version 1's vocabularies
SplitTokens = dict[str, tuple[list[list[str]], list[list[str]]]]  # split -> (source tokens, target tokens)


@dataclass
class PreparedTranslation(TokenizerPair):
    """A tokenized translation corpus: tokenizers, ids for each split, and the raw text.

    Everything a training run needs, so that it can be made once (with the data and spaCy at hand)
    and copied to another machine (a GPU box without network, say) with :meth:`save` / :meth:`load`.

    Attributes:
        src_tokenizer, tgt_tokenizer: their vocabularies built on the training split (one and the
            same BPE tokenizer for a joint vocabulary).
        splits: split name -> :class:`TranslationData`.
        text: split name -> list of raw ``(source, target)`` pairs (references for BLEU, samples).
        settings: how the text was tokenized (the checkpoint's ``"data"`` entry): plain values only.
        sha256: the SHA-256 of the contents as :meth:`save` wrote them (set by :meth:`save` and
            :meth:`load`; ``None`` before): what a resumed run compares to know it trains on the same data.
    """

    src_tokenizer: Tokenizer
    tgt_tokenizer: Tokenizer
    splits: dict[str, TranslationData]
    text: dict[str, list[tuple[str, str]]]
    settings: dict[str, Any]
    sha256: str | None = field(default=None, compare=False)

    def save(self, path: str | Path) -> None:
        """Write the file atomically (a temporary file beside ``path``, then renamed), with its checksum."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        payload = {
            "format": PREPARED_FORMAT,
            "version": PREPARED_VERSION,
            "settings": dict(self.settings),
            "tokenizers": {"src": self.src_tokenizer.to_dict(), "tgt": self.tgt_tokenizer.to_dict()},
            "splits": {name: data.to_dict() for name, data in self.splits.items()},
            "text": {name: {"src": [s for s, _ in pairs], "tgt": [t for _, t in pairs]} for name, pairs in self.text.items()},
        }
        self.sha256 = content_sha256(payload)
        payload["checksum"] = {"sha256": self.sha256}  # verified by load
        tmp = path.with_name(f".{path.name}.tmp")
        torch.save(payload, tmp)
        os.replace(tmp, path)

    @classmethod
    def load(cls, path: str | Path, needs: Sequence[str] = ("train",)) -> PreparedTranslation:
        """Read a file :meth:`save` wrote (``weights_only``: no code runs), verify its SHA-256 checksum and
        check every entry before use: the tokenizers, each split's ids (in the vocabularies), lengths
        (they add up, source and target pair up), text (for every split, and giving its ids: a sample of
        pairs is tokenized again), and that it holds the splits ``needs`` names. Errors are
        ``ValueError`` s naming the file and the split or entry."""
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"no prepared data at {path}; make it with `python -m transformer_lib.cli.train --task multi30k --prepare-only --out FOLDER`")
        try:
            payload = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as error:  # noqa: BLE001 - torch raises many kinds for a file of another kind
            raise ValueError(f"{path} is not prepared data from --prepare-only: {refusal_reason(error)}") from error
        if not isinstance(payload, dict) or payload.get("format") != PREPARED_FORMAT:
            raise ValueError(f"{path} is not prepared translation data (no format={PREPARED_FORMAT!r} entry)")
        if payload.get("version") != PREPARED_VERSION:
            raise ValueError(
                f"{path} has prepared-data version {payload.get('version')!r}; this library reads version "
                f"{PREPARED_VERSION}: prepare it again with --prepare-only"
            )
        _verify_checksum(payload, path)
        prepared = _from_payload(cls, payload, path)
        missing = [name for name in needs if name not in prepared.splits]
        if missing:
            raise ValueError(f"{path} has no {' or '.join(repr(m) for m in missing)} split (it holds {sorted(prepared.splits)}); "
                             "prepare it again with --prepare-only")
        check_alignment(prepared, str(path))
        stored = payload.get("checksum")  # verified above; older files have none
        prepared.sha256 = stored["sha256"] if stored else content_sha256(payload)
        return prepared


def _verify_checksum(payload: Mapping[str, Any], path: Path) -> None:
    """The file's contents are what :meth:`PreparedTranslation.save` wrote (files written before
    checksums existed have none, and are checked entry by entry only)."""
    stored = payload.get("checksum")
    if stored is None:
        return
    contents = {key: value for key, value in payload.items() if key != "checksum"}
    if not isinstance(stored, dict) or stored.get("sha256") != content_sha256(contents):
        raise ValueError(
            f"{path} is corrupt: its contents do not match the SHA-256 checksum stored when it was written "
            "(the file changed on disk or in a copy); prepare it again with --prepare-only"
        )


def _from_payload(cls: type[PreparedTranslation], payload: Mapping[str, Any], path: Path) -> PreparedTranslation:
    """The prepared data of a loaded file, every entry checked (``ValueError`` naming ``path`` and the entry)."""
    try:
        src, tgt = (tokenizer_from_dict(payload["tokenizers"][side], f"tokenizers['{side}']") for side in ("src", "tgt"))
    except (KeyError, TypeError, ValueError) as error:
        raise ValueError(f"{path}: the tokenizers: {error}") from None
    splits, text, settings = payload.get("splits"), payload.get("text"), payload.get("settings")
    if not isinstance(splits, dict) or "train" not in splits:
        raise ValueError(f"{path}: 'splits' must be a dict holding at least 'train', got {_describe(splits)}")
    if not isinstance(text, dict) or not isinstance(settings, dict):
        raise ValueError(f"{path}: 'text' and 'settings' must be dicts, got {_describe(text)} and {_describe(settings)}")
    data = {name: _split_from_file(values, len(src.vocab), len(tgt.vocab), f"{path}: split {name!r}")
            for name, values in splits.items()}
    if set(text) != set(data):
        raise ValueError(f"{path}: the splits with ids {sorted(data)} and with text {sorted(text)} differ; every split "
                         "needs both (the text is what BLEU scores against)")
    pairs = {name: _text_from_file(values, len(data[name]) if name in data else None, f"{path}: text of split {name!r}")
             for name, values in text.items()}
    return cls(src_tokenizer=src, tgt_tokenizer=tgt if tgt != src else src, splits=data, text=pairs, settings=dict(settings))


ALIGNMENT_SAMPLE = 32  # pairs of each split tokenized again at load: the first, the last, and evenly between


def check_alignment(prepared: PreparedTranslation, where: str) -> None:
    """Each split's text gives its ids, on a sample of pairs: sources and references that were shifted or
    shuffled against each other (or against the ids) are refused instead of trained and scored on.

    A BPE or symbol tokenizer tokenizes the text again and must give the ids exactly; a word
    tokenizer's tokens (spaCy's, slices of the text) must each occur in the text, so no spaCy is needed.

    Raises:
        ValueError: naming ``where``, the split, the pair (counted from 1) and its side.
    """
    for name, data in prepared.splits.items():
        pairs = prepared.text.get(name, [])
        n = min(len(pairs), len(data))
        for i in sorted({round(k * (n - 1) / max(ALIGNMENT_SAMPLE - 1, 1)) for k in range(ALIGNMENT_SAMPLE)} if n else ()):
            for side, tokenizer, text, ids in (("source", prepared.src_tokenizer, pairs[i][0], data.src[i]),
                                               ("reference", prepared.tgt_tokenizer, pairs[i][1], data.tgt[i])):
                if not _gives(tokenizer, text, list(ids)):
                    raise ValueError(
                        f"{where}: split {name!r}, pair {i + 1}: the {side} text {text[:60]!r} does not give its token ids "
                        f"({' '.join(tokenizer.vocab.decode(ids))[:60]!r}): the text and the ids are misaligned; "
                        "prepare the data again with --prepare-only"
                    )


def _gives(tokenizer: Tokenizer, text: str, ids: list[int]) -> bool:
    if isinstance(tokenizer, WordTokenizer):
        lowered = text.lower() if tokenizer.lowercase else text
        unk = tokenizer.vocab.unk_id
        return all(tokenizer.vocab.tokens[i] in lowered for i in ids if i != unk)
    return tokenizer.encode(text) == ids


def _describe(value: object) -> str:
    return f"{type(value).__name__} {sorted(value) if isinstance(value, dict) else ''}".strip()


_SPLIT_KEYS = ("src_ids", "src_lengths", "tgt_ids", "tgt_lengths")


def _split_from_file(values: object, src_size: int, tgt_size: int, where: str) -> TranslationData:
    """One split of a file (:meth:`TranslationData.to_dict`'s flat ids and lengths), checked: 1-D integer
    tensors, lengths >= 0 that add up to the ids and pair up, every id inside its vocabulary."""
    if not isinstance(values, dict) or set(values) != set(_SPLIT_KEYS):
        raise ValueError(f"{where} must hold exactly {list(_SPLIT_KEYS)}, got {_describe(values)}")
    for key in _SPLIT_KEYS:
        tensor = values[key]
        if not isinstance(tensor, torch.Tensor) or tensor.dim() != 1 or tensor.dtype not in (torch.int32, torch.int64):
            raise ValueError(f"{where}: {key} must be a 1-D integer tensor, got {_tensor_kind(tensor)}")
    if len(values["src_lengths"]) != len(values["tgt_lengths"]):
        raise ValueError(f"{where}: {len(values['src_lengths'])} source but {len(values['tgt_lengths'])} target sentences")
    for side, size in (("src", src_size), ("tgt", tgt_size)):
        ids, lengths = values[f"{side}_ids"], values[f"{side}_lengths"]
        if len(lengths) and int(lengths.min()) < 0:
            raise ValueError(f"{where}: {side}_lengths holds a negative length {int(lengths.min())}")
        if int(lengths.sum()) != len(ids):
            raise ValueError(f"{where}: {side}_lengths add up to {int(lengths.sum())}, but {side}_ids holds {len(ids)} ids")
        if len(ids) and not 0 <= int(ids.min()) <= int(ids.max()) < size:
            bad = int(ids.min()) if int(ids.min()) < 0 else int(ids.max())
            raise ValueError(f"{where}: {side}_ids holds token id {bad}, outside the {side} vocabulary [0, {size - 1}]")
    return TranslationData.from_dict(values)


def _tensor_kind(value: object) -> str:
    return f"{value.dtype} of shape {tuple(value.shape)}" if isinstance(value, torch.Tensor) else type(value).__name__


def _text_from_file(values: object, n_pairs: int | None, where: str) -> list[tuple[str, str]]:
    """One split's raw text: ``{"src": [str], "tgt": [str]}`` of equal length (that of its ids, if any)."""
    if not isinstance(values, dict) or not all(isinstance(values.get(side), list) for side in ("src", "tgt")):
        raise ValueError(f"{where} must be a dict of 'src' and 'tgt' lists, got {_describe(values)}")
    src, tgt = values["src"], values["tgt"]
    if len(src) != len(tgt) or (n_pairs is not None and len(src) != n_pairs):
        raise ValueError(f"{where}: {len(src)} sources and {len(tgt)} targets for {n_pairs} pairs of ids")
    bad = next((s for s in (*src, *tgt) if not isinstance(s, str)), None)
    if bad is not None:
        raise ValueError(f"{where} holds a {type(bad).__name__}, not text: {bad!r}")
    return list(zip(src, tgt))


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
    tokenizer: str = "words",
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
        tokenizer: ``"words"`` (spaCy words, one vocabulary per language, ``min_freq`` decides) or
            ``"bpe"`` (one joint subword vocabulary of ``vocab_size`` tokens learned on the training
            split of both languages, :class:`~transformer_lib.subword.SubwordTokenizer`; ``min_freq``
            is the fewest times a pair must occur to be merged): a kind of
            :data:`~transformer_lib.tokenizers.TOKENIZERS` that learns from text (:func:`~transformer_lib.tokenizers.learned_tokenizers`).
        find_options: passed to :func:`~transformer_lib.multi30k.multi30k_dir`.
    """
    if tokenizer not in learned_tokenizers():
        raise ValueError(f"tokenizer must be one of {sorted(learned_tokenizers())}, got {tokenizer!r}")
    check_bool("lowercase", lowercase)  # "no" would lower-case every sentence
    if "train" not in splits:
        raise ValueError(f"splits must include 'train' (the vocabularies are built from it), got {list(splits)}")
    text = {split: load_multi30k(split, root, src_lang=src_lang, tgt_lang=tgt_lang, **find_options) for split in splits}
    if train_size is not None:
        text["train"] = _training_subset(text["train"], train_size, seed)
    learn = TOKENIZERS[tokenizer].learn
    assert learn is not None  # checked above: a kind that learns from text
    tokens, src_tokenizer, tgt_tokenizer = learn(text, src_lang, tgt_lang, lowercase, min_freq, vocab_size)
    settings = {
        "corpus": "multi30k",
        "src_lang": src_lang,
        "tgt_lang": tgt_lang,
        "lowercase": lowercase,
        "tokenizer": tokenizer,
        "min_freq": min_freq,
        **({"vocab_size": len(src_tokenizer.vocab)} if TOKENIZERS[tokenizer].joint else {}),
        "train_size": len(text["train"]),
        "train_subset": train_size is not None,  # a random subset (train_size) rather than every pair
        "source_format": SOURCE_FORMAT,
    }
    return PreparedTranslation(src_tokenizer, tgt_tokenizer, _as_ids(tokens, src_tokenizer.vocab, tgt_tokenizer.vocab),
                               text, settings)


def _training_subset(pairs: Sequence[tuple[str, str]], train_size: int, seed: int) -> list[tuple[str, str]]:
    """A random subset of ``train_size`` pairs, picked by ``seed``, in corpus order."""
    if not 1 <= train_size <= len(pairs):
        raise ValueError(f"train_size must be in [1, {len(pairs)}], got {train_size}")
    keep = torch.randperm(len(pairs), generator=torch.Generator().manual_seed(seed))[:train_size]
    return [pairs[i] for i in sorted(keep.tolist())]


def _as_ids(tokens: SplitTokens, src_vocab: Vocab, tgt_vocab: Vocab) -> dict[str, TranslationData]:
    """Every split's tokens as ids, without specials (:func:`~transformer_lib.batching.collate` adds them)."""
    return {
        split: TranslationData([src_vocab.encode(s) for s in src_tok], [tgt_vocab.encode(t) for t in tgt_tok])
        for split, (src_tok, tgt_tok) in tokens.items()
    }
