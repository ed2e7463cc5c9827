"""From text to batches of token ids: tokenizers, vocabularies, datasets and batching.

This module replaces what ``torchtext`` used to provide (its last release does not import with
current PyTorch): spaCy's rule-based tokenizers, a plain-Python :class:`Vocab`, and the loaders and
batching below. It imports nothing from the model.

- Text: :func:`tokenizer`, :class:`Vocab`.
- Multi30k: :func:`load_multi30k` (local folder, ``MULTI30K_DIR``, or a checksummed download),
  :func:`prepare_multi30k` (tokenized ids, savable for machines without the data).
- Toy tasks: :func:`toy_task` (copy, reverse) with a held-out split.
- Batches: :func:`collate` (shifted targets, padding), :class:`BucketBatchSampler` (length
  bucketing), :func:`padding_waste`, :func:`make_loader`.

Shapes:

    B  batch size    S  source length    T  target length
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import shutil
import tempfile
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache, partial
from pathlib import Path
from types import MappingProxyType
from typing import Any

import torch
from torch import Tensor

__all__ = [
    "SPECIALS",
    "PAD",
    "UNK",
    "BOS",
    "EOS",
    "tokenizer",
    "TOKENIZERS",
    "Vocab",
    # Multi30k
    "MULTI30K_ENV",
    "MULTI30K_URL",
    "MULTI30K_SHA256",
    "MULTI30K_SPLITS",
    "ChecksumError",
    "default_cache_dir",
    "sha256_file",
    "verify_file",
    "multi30k_dir",
    "load_multi30k",
    "tokenize_corpus",
    "prepare_multi30k",
    "PreparedTranslation",
    # datasets, toy tasks, batching
    "TranslationData",
    "TOY_TASKS",
    "toy_vocab",
    "toy_task",
    "SOURCE_FORMAT",
    "Batch",
    "pad_sequences",
    "collate",
    "BucketBatchSampler",
    "padding_waste",
    "make_loader",
]

PAD, UNK, BOS, EOS = "<pad>", "<unk>", "<bos>", "<eos>"
# Specials come first, so their ids are the same in every vocabulary: <pad>=0, <unk>=1, <bos>=2, <eos>=3.
SPECIALS: tuple[str, ...] = (PAD, UNK, BOS, EOS)
# How prepare_multi30k turns text into tokens: spaCy words, or subword pieces (transformer_lib.subword).
TOKENIZERS = ("spacy", "bpe")


@lru_cache(maxsize=None)
def _blank_pipeline(lang: str):
    import spacy  # imported lazily: only the text pipeline needs it

    return spacy.blank(lang)


def tokenizer(lang: str) -> Callable[[str], list[str]]:
    """A rule-based word tokenizer for ``lang`` (``"de"``, ``"en"``, ...), from ``spacy.blank``.

    ``spacy.blank`` needs no model download: it holds only the language's tokenization rules
    (punctuation, abbreviations such as "z.B.", contractions such as "isn't" -> "is", "n't").

    Example:
        >>> tokenizer("de")("Ein Mann fährt Fahrrad.")
        ['Ein', 'Mann', 'fährt', 'Fahrrad', '.']
    """
    nlp = _blank_pipeline(lang)

    def tokenize(text: str) -> list[str]:
        return [token.text for token in nlp.tokenizer(text.strip())]

    return tokenize


class Vocab:
    """A bidirectional map between tokens and integer ids.

    The special tokens come first (``<pad>``=0, ``<unk>``=1, ``<bos>``=2, ``<eos>``=3 by default);
    unknown tokens map to ``<unk>``.

    Args:
        tokens: every token in id order, specials included.
        unk_token: the token that unknown tokens map to.

    Example:
        >>> vocab = Vocab.build([["a", "b", "a"], ["c"]], min_freq=2)
        >>> vocab.tokens
        ['<pad>', '<unk>', '<bos>', '<eos>', 'a']
        >>> vocab.encode(["a", "zzz"])
        [4, 1]
    """

    def __init__(self, tokens: Sequence[str], unk_token: str = UNK) -> None:
        self.tokens: list[str] = list(tokens)
        self.index: dict[str, int] = {}
        for i, token in enumerate(self.tokens):
            if token in self.index:
                raise ValueError(f"token {token!r} appears twice (ids {self.index[token]} and {i})")
            self.index[token] = i
        if unk_token not in self.index:
            raise ValueError(f"the unknown token {unk_token!r} must be in the vocabulary")
        self.unk_token = unk_token

    @classmethod
    def build(
        cls,
        sentences: Iterable[Sequence[str]],
        min_freq: int = 1,
        max_size: int | None = None,
        specials: Sequence[str] = SPECIALS,
    ) -> Vocab:
        """Count tokens and keep those seen at least ``min_freq`` times, most frequent first.

        Ties are broken alphabetically, so the same corpus always gives the same ids.
        ``max_size`` caps the number of non-special tokens.
        """
        if min_freq < 1:
            raise ValueError(f"min_freq must be at least 1, got {min_freq}")
        counts = Counter(token for sentence in sentences for token in sentence)
        for special in specials:
            counts.pop(special, None)
        kept = sorted((t for t, c in counts.items() if c >= min_freq), key=lambda t: (-counts[t], t))
        if max_size is not None:
            kept = kept[:max_size]
        return cls([*specials, *kept])

    def __len__(self) -> int:
        return len(self.tokens)

    def __contains__(self, token: str) -> bool:
        return token in self.index

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Vocab) and self.tokens == other.tokens and self.unk_token == other.unk_token

    def __repr__(self) -> str:
        return f"Vocab(size={len(self)}, first={self.tokens[:6]})"

    @property
    def unk_id(self) -> int:
        return self.index[self.unk_token]

    @property
    def pad_id(self) -> int:
        return self.index[PAD]

    @property
    def bos_id(self) -> int:
        return self.index[BOS]

    @property
    def eos_id(self) -> int:
        return self.index[EOS]

    def token_to_id(self, token: str) -> int:
        return self.index.get(token, self.unk_id)

    def id_to_token(self, token_id: int) -> str:
        if not 0 <= token_id < len(self.tokens):
            raise ValueError(f"id {token_id} is outside the vocabulary [0, {len(self.tokens) - 1}]")
        return self.tokens[token_id]

    def encode(self, tokens: Sequence[str], add_bos: bool = False, add_eos: bool = False) -> list[int]:
        """Tokens to ids, optionally wrapped in ``<bos>`` ... ``<eos>``."""
        ids = [self.token_to_id(token) for token in tokens]
        return ([self.bos_id] if add_bos else []) + ids + ([self.eos_id] if add_eos else [])

    def decode(self, ids: Iterable[int], strip_specials: bool = True) -> list[str]:
        """Ids to tokens; stops at ``<eos>`` and drops ``<pad>``/``<bos>`` when ``strip_specials``."""
        tokens = []
        for token_id in ids:
            token_id = int(token_id)
            if strip_specials:
                if token_id == self.eos_id:
                    break
                if token_id in (self.pad_id, self.bos_id):
                    continue
            tokens.append(self.id_to_token(token_id))
        return tokens

    def to_dict(self) -> dict[str, object]:
        """Plain types only (for JSON files and ``weights_only`` checkpoints)."""
        return {"tokens": list(self.tokens), "unk_token": self.unk_token}

    @classmethod
    def from_dict(cls, values: dict[str, object]) -> Vocab:
        return cls(values["tokens"], values.get("unk_token", UNK))  # type: ignore[arg-type]

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), ensure_ascii=False), encoding="utf-8")

    @classmethod
    def load(cls, path: str | Path) -> Vocab:
        return cls.from_dict(json.loads(Path(path).read_text(encoding="utf-8")))


# --- Multi30k: where the files come from and how they are checked -----------------------------

MULTI30K_ENV = "MULTI30K_DIR"
# The dataset's own repository (github.com/multi30k/dataset), folder data/task1/raw/, unchanged gzip files.
MULTI30K_URL = "https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw/"
# SHA-256 of each file as published there. A file that does not match is corrupted or a different
# release, and is never used.
MULTI30K_SHA256: Mapping[str, str] = MappingProxyType({
    "train.de.gz": "726e39b2fa9eb9ffb6dc763fb35a179f80fae06ffc5d28b6ace5faa883de28a6",
    "train.en.gz": "d79cfa999dd4c51d2cb42499b6796d5a882c3a8a961923c25a898c90f8bbd56f",
    "val.de.gz": "f0cba2f995189cf5770f29a8a9a537a3ad3f51657ad873405082ff6863a5e75a",
    "val.en.gz": "14f7d25ddd868909a9213e361768460edcacdd6ab9d1e77b92560dc10c10dc28",
    "test_2016_flickr.de.gz": "9204244e408ccb38d2a55cfcd344df15005fc42a07a6e55ca6c52b6ababb8cc8",
    "test_2016_flickr.en.gz": "611d361c6334bc7246101d48097c13cf5c4413c5befc793cc629934359d532d9",
})
# Split name -> file stem. "test" is the 2016 Flickr test set, the one most papers report on.
MULTI30K_SPLITS: Mapping[str, str] = MappingProxyType({"train": "train", "val": "val", "test": "test_2016_flickr"})
MULTI30K_LANGS = ("de", "en")


class ChecksumError(ValueError):
    """A data file's SHA-256 differs from the published one (corrupted, truncated or another release)."""


def default_cache_dir() -> Path:
    """Where downloaded data lives: ``$XDG_CACHE_HOME/transformer_lib`` or ``~/.cache/transformer_lib``."""
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "transformer_lib"


def sha256_file(path: str | Path) -> str:
    """The SHA-256 hex digest of a file, read in 1 MiB chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def verify_file(path: str | Path, expected_sha256: str) -> None:
    """Raise :class:`ChecksumError` unless ``path`` has the expected SHA-256."""
    actual = sha256_file(path)
    if actual != expected_sha256:
        raise ChecksumError(
            f"{path} has SHA-256 {actual}, expected {expected_sha256}: the file is corrupted, truncated "
            "or not the published Multi30k release. Delete it and download it again"
        )


def _download(url: str, destination: Path, timeout: float = 60.0) -> None:
    """Fetch ``url`` into ``destination`` (via a temporary file, so a failed download leaves nothing)."""
    destination.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(dir=destination.parent, prefix=f".{destination.name}.", suffix=".part")
    try:
        with os.fdopen(fd, "wb") as out, urllib.request.urlopen(url, timeout=timeout) as response:
            shutil.copyfileobj(response, out)
        os.replace(tmp_name, destination)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise


def _missing_data_message(folder: Path, missing: Sequence[str], reason: str, cache: Path) -> str:
    return (
        f"Multi30k files {list(missing)} are missing from {folder} ({reason}). Put the six files "
        f"{sorted(MULTI30K_SHA256)} from {MULTI30K_URL} into a folder and point the environment variable "
        f"{MULTI30K_ENV} at it (or pass root=...); or, with {MULTI30K_ENV} unset and internet access, "
        f"they are downloaded into {cache} on first use"
    )


def multi30k_dir(
    root: str | Path | None = None,
    *,
    download: bool = True,
    cache_dir: str | Path | None = None,
    base_url: str = MULTI30K_URL,
    checksums: Mapping[str, str] = MULTI30K_SHA256,
) -> Path:
    """The folder holding the Multi30k ``.gz`` files, every file checked against its SHA-256.

    Where the files are looked for, in order:

    1. ``root``, if given;
    2. the folder named by the environment variable ``MULTI30K_DIR``, if set;
    3. the user cache (``default_cache_dir() / "multi30k"``, or ``cache_dir``), downloading any
       missing file from ``base_url`` (the dataset repository's raw files) when ``download`` is true.

    A folder given by ``root`` or ``MULTI30K_DIR`` is only read, never downloaded into, so a
    misconfigured CI run fails with a clear message instead of reaching for the network.

    Args:
        root: a local folder with the files.
        download: allow downloading into the cache.
        cache_dir: override the cache folder (the files go directly into it).
        base_url: where to download from; each file is ``base_url + name``.
        checksums: file name -> SHA-256; also decides which files are needed.

    Raises:
        FileNotFoundError: files are missing and cannot be downloaded; the message says where to put them.
        ChecksumError: a file does not match its checksum (a freshly downloaded bad file is deleted).
    """
    cache = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir() / "multi30k"
    if root is not None or os.environ.get(MULTI30K_ENV):
        folder = Path(root if root is not None else os.environ[MULTI30K_ENV]).expanduser()
        source = "given as root" if root is not None else f"from {MULTI30K_ENV}"
        missing = [name for name in checksums if not (folder / name).is_file()]
        if missing:
            raise FileNotFoundError(_missing_data_message(folder, missing, f"the folder was {source}", cache))
    else:
        folder = cache
        missing = [name for name in checksums if not (folder / name).is_file()]
        if missing and not download:
            raise FileNotFoundError(_missing_data_message(folder, missing, "download=False", cache))
        for name in missing:
            url = base_url + name
            try:
                _download(url, folder / name)
            except (OSError, urllib.error.URLError) as error:
                raise FileNotFoundError(
                    _missing_data_message(folder, missing, f"downloading {url} failed: {error}", cache)
                ) from error
            try:
                verify_file(folder / name, checksums[name])
            except ChecksumError:
                (folder / name).unlink()  # never keep a bad download in the cache
                raise
    for name, expected in checksums.items():
        verify_file(folder / name, expected)
    return folder


def load_multi30k(
    split: str,
    root: str | Path | None = None,
    *,
    src_lang: str = "de",
    tgt_lang: str = "en",
    **find_options: Any,
) -> list[tuple[str, str]]:
    """Sentence pairs ``(source, target)`` of one Multi30k split, as raw text.

    Args:
        split: ``"train"`` (29,000 pairs), ``"val"`` (1,014) or ``"test"`` (test_2016_flickr, 1,000).
        root: a local folder; see :func:`multi30k_dir` for where else the files are looked for.
        src_lang, tgt_lang: ``"de"`` and ``"en"`` in either order.
        find_options: passed to :func:`multi30k_dir` (``download``, ``cache_dir``, ``base_url``, ``checksums``).

    Example:
        >>> pairs = load_multi30k("val")            # doctest: +SKIP
        >>> pairs[0]                                # doctest: +SKIP
        ('Eine Gruppe von Männern lädt Baumwolle auf einen Lastwagen', 'A group of men are loading cotton onto a truck')
    """
    if split not in MULTI30K_SPLITS:
        raise ValueError(f"unknown Multi30k split {split!r}; choose one of {list(MULTI30K_SPLITS)}")
    for lang in (src_lang, tgt_lang):
        if lang not in MULTI30K_LANGS:
            raise ValueError(f"Multi30k task 1 has languages {MULTI30K_LANGS}, got {lang!r}")
    if src_lang == tgt_lang:
        raise ValueError(f"src_lang and tgt_lang must differ, both are {src_lang!r}")
    folder = multi30k_dir(root, **find_options)
    stem = MULTI30K_SPLITS[split]
    src_lines = _read_gz_lines(folder / f"{stem}.{src_lang}.gz")
    tgt_lines = _read_gz_lines(folder / f"{stem}.{tgt_lang}.gz")
    if len(src_lines) != len(tgt_lines):
        raise ValueError(
            f"{stem}.{src_lang}.gz has {len(src_lines)} lines but {stem}.{tgt_lang}.gz has {len(tgt_lines)}; "
            "line i of one must translate line i of the other"
        )
    return list(zip(src_lines, tgt_lines))


def _read_gz_lines(path: Path) -> list[str]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [line.rstrip("\r\n") for line in f]


# --- Parallel corpora as token ids --------------------------------------------------------------


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


# --- Toy tasks: copy and reverse --------------------------------------------------------------

TOY_TASKS = ("copy", "reverse")


def toy_vocab(n_symbols: int) -> Vocab:
    """The vocabulary of a toy task: the specials, then the symbols ``"0"``, ``"1"``, ... as tokens.

    Toy tasks get a real :class:`Vocab` like translation does, so every checkpoint carries one.
    """
    if isinstance(n_symbols, bool) or not isinstance(n_symbols, int) or n_symbols < 1:
        raise ValueError(f"n_symbols must be a positive integer, got {n_symbols!r}")
    return Vocab([*SPECIALS, *(str(i) for i in range(n_symbols))])


def toy_task(
    task: str,
    n_train: int,
    n_heldout: int,
    *,
    n_symbols: int = 10,
    min_len: int = 1,
    max_len: int = 10,
    seed: int = 0,
) -> tuple[TranslationData, TranslationData]:
    """Random symbol sequences and their copy or reversal, split into training and held-out pairs.

    Every sequence is distinct, and no held-out sequence occurs in training, so held-out accuracy
    measures whether the model learned the *rule*, not the examples. Lengths are uniform in
    ``[min_len, max_len]``, symbols uniform over ``n_symbols`` (ids ``4 .. 4 + n_symbols - 1`` of
    :func:`toy_vocab`).

    Args:
        task: ``"copy"`` or ``"reverse"``.
        n_train, n_heldout: number of pairs in each split.
        n_symbols, min_len, max_len: the alphabet and the lengths.
        seed: the same seed gives the same pairs.

    Returns:
        ``(train, heldout)``.

    Example:
        >>> train, heldout = toy_task("reverse", 3, 1, n_symbols=5, max_len=4, seed=1)
        >>> src, tgt = train[0]
        >>> tgt == src[::-1]
        True
    """
    if task not in TOY_TASKS:
        raise ValueError(f"unknown toy task {task!r}; choose one of {TOY_TASKS}")
    for name, value in (("n_train", n_train), ("n_heldout", n_heldout)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{name} must be a non-negative integer, got {value!r}")
    if not 1 <= min_len <= max_len:
        raise ValueError(f"need 1 <= min_len <= max_len, got min_len={min_len}, max_len={max_len}")
    toy_vocab(n_symbols)  # validates n_symbols
    first_id = len(SPECIALS)
    available = sum(n_symbols**length for length in range(min_len, max_len + 1))
    wanted = n_train + n_heldout
    # Rejection sampling stays fast while the request is a modest fraction of all sequences.
    if wanted > available // 2:
        raise ValueError(
            f"asked for {wanted} distinct sequences, but only {available} exist with n_symbols={n_symbols} "
            f"and lengths {min_len}..{max_len}; ask for at most {available // 2}, or raise max_len or n_symbols"
        )
    generator = torch.Generator().manual_seed(seed)
    seen: set[tuple[int, ...]] = set()
    sequences: list[list[int]] = []
    while len(sequences) < wanted:
        length = int(torch.randint(min_len, max_len + 1, (), generator=generator))
        seq = (torch.randint(0, n_symbols, (length,), generator=generator) + first_id).tolist()
        if tuple(seq) not in seen:
            seen.add(tuple(seq))
            sequences.append(seq)
    targets = [list(s) if task == "copy" else s[::-1] for s in sequences]
    train = TranslationData(sequences[:n_train], targets[:n_train])
    heldout = TranslationData(sequences[n_train:], targets[n_train:])
    return train, heldout


# --- Tokenizing Multi30k into ids, and a cache for machines without the data or network -------

PREPARED_FORMAT = "transformer_lib.prepared_translation"


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


def tokenize_corpus(texts: Iterable[str], lang: str, lowercase: bool = False) -> list[list[str]]:
    """Tokenize many sentences with :func:`tokenizer` (``spacy.blank``), lower-casing first if asked."""
    tokenize = tokenizer(lang)
    return [tokenize(text.lower() if lowercase else text) for text in texts]


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
        root: local folder with the ``.gz`` files (see :func:`multi30k_dir`).
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
        find_options: passed to :func:`multi30k_dir`.
    """
    if tokenizer not in TOKENIZERS:
        raise ValueError(f"tokenizer must be one of {TOKENIZERS}, got {tokenizer!r}")
    if "train" not in splits:
        raise ValueError(f"splits must include 'train' (the vocabularies are built from it), got {list(splits)}")
    text = {split: load_multi30k(split, root, src_lang=src_lang, tgt_lang=tgt_lang, **find_options) for split in splits}
    if train_size is not None:
        if not 1 <= train_size <= len(text["train"]):
            raise ValueError(f"train_size must be in [1, {len(text['train'])}], got {train_size}")
        keep = torch.randperm(len(text["train"]), generator=torch.Generator().manual_seed(seed))[:train_size]
        text["train"] = [text["train"][i] for i in sorted(keep.tolist())]
    if tokenizer == "bpe":
        tokens, src_vocab, subword_settings = _bpe_tokens(text, lowercase, vocab_size, min_freq)
        tgt_vocab = src_vocab
    else:
        tokens = {
            split: (tokenize_corpus((s for s, _ in pairs), src_lang, lowercase), tokenize_corpus((t for _, t in pairs), tgt_lang, lowercase))
            for split, pairs in text.items()
        }
        src_vocab = Vocab.build(tokens["train"][0], min_freq=min_freq)
        tgt_vocab = Vocab.build(tokens["train"][1], min_freq=min_freq)
        subword_settings = {}
    data = {
        split: TranslationData([src_vocab.encode(s) for s in src_tok], [tgt_vocab.encode(t) for t in tgt_tok])
        for split, (src_tok, tgt_tok) in tokens.items()
    }
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
    return PreparedTranslation(src_vocab, tgt_vocab, data, text, settings)


def _bpe_tokens(
    text: Mapping[str, Sequence[tuple[str, str]]], lowercase: bool, vocab_size: int, min_freq: int
) -> tuple[dict[str, tuple[list[list[str]], list[list[str]]]], Vocab, dict[str, Any]]:
    """Learn one BPE vocabulary on the training split (both sides) and split every split into pieces."""
    from .subword import SubwordTokenizer  # imported here: subword builds on this module's Vocab

    def side(pairs: Sequence[tuple[str, str]], i: int) -> list[str]:
        return [pair[i].lower() if lowercase else pair[i] for pair in pairs]

    bpe = SubwordTokenizer.train([*side(text["train"], 0), *side(text["train"], 1)], vocab_size=vocab_size, min_frequency=min_freq)
    tokens = {split: (bpe.tokenize_batch(side(pairs, 0)), bpe.tokenize_batch(side(pairs, 1))) for split, pairs in text.items()}
    return tokens, bpe.vocab, {"vocab_size": len(bpe), "subword_model": bpe.to_json()}


# --- Batches: specials, padding, and length bucketing -----------------------------------------

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
    out = torch.full((len(sequences), width), pad_id, dtype=torch.long)  # (B, L_max)
    for row, seq in enumerate(sequences):
        out[row, : len(seq)] = torch.as_tensor(seq, dtype=torch.long)
    return out


def collate(
    examples: Sequence[tuple[Sequence[int], Sequence[int]]],
    pad_id: int = 0,
    bos_id: int = 2,
    eos_id: int = 3,
) -> Batch:
    """Build a teacher-forcing :class:`Batch` from ``(src_ids, tgt_ids)`` pairs without specials.

    For a target ``y1 y2 y3``: ``tgt_in = <bos> y1 y2 y3`` and ``tgt_out = y1 y2 y3 <eos>``, so the
    decoder at position ``t`` reads ``y_<t`` and is scored on ``y_t``.

    Example:
        >>> batch = collate([([7, 8], [9, 10, 11]), ([7], [9])])
        >>> batch.src.tolist(), batch.tgt_in.tolist(), batch.tgt_out.tolist()
        ([[7, 8, 3], [7, 3, 0]], [[2, 9, 10, 11], [2, 9, 0, 0]], [[9, 10, 11, 3], [9, 3, 0, 0]])
    """
    src = pad_sequences([[*s, eos_id] for s, _ in examples], pad_id)  # (B, S)
    tgt_in = pad_sequences([[bos_id, *t] for _, t in examples], pad_id)  # (B, T)
    tgt_out = pad_sequences([[*t, eos_id] for _, t in examples], pad_id)  # (B, T)
    n_tokens = sum(len(t) + 1 for _, t in examples)
    return Batch(src, tgt_in, tgt_out, n_tokens)


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
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < num_replicas:
            raise ValueError(f"rank must be an integer in [0, {num_replicas - 1}] (num_replicas={num_replicas}), got {rank!r}")
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
    batch_size: int,
    *,
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
) -> torch.utils.data.DataLoader:
    """A ``DataLoader`` of :class:`Batch` es over ``data``, length-bucketed (see :class:`BucketBatchSampler`).

    The loader has its own random generator, so iterating it leaves the global random state
    (which dropout uses) alone: what makes a resumed run repeat an uninterrupted one exactly.
    With ``num_replicas`` processes, ``batch_size`` is the global batch and this process
    (``rank``) gets its slice of each one.
    """
    # Sort by the longer side first: both source and target batches then need little padding.
    keys = [(max(s, t), s, t) for s, t in zip(data.src_lengths, data.tgt_lengths)]
    sampler = BucketBatchSampler(
        keys, batch_size,
        bucket=bucket, pool_batches=pool_batches, shuffle=shuffle, seed=seed, num_replicas=num_replicas, rank=rank,
    )
    return torch.utils.data.DataLoader(
        data,
        batch_sampler=sampler,
        collate_fn=partial(collate, pad_id=pad_id, bos_id=bos_id, eos_id=eos_id),
        pin_memory=pin_memory,
        generator=torch.Generator().manual_seed(seed),
    )
