"""The Multi30k files: where they come from, how they are checked, and reading them as sentence pairs.

Multi30k (Elliott et al. 2016) is the German-English corpus of chapter 5: 29,000 image captions
for training, 1,014 for validation and the 2016 Flickr test set of 1,000. The six ``.gz`` files are
read from a local folder (``root``, or ``MULTI30K_DIR``) or downloaded once into the user cache,
and every file is checked against the SHA-256 published here before it is used.

- :func:`load_multi30k`: one split as raw ``(source, target)`` text pairs.
- :func:`multi30k_dir`: the checked folder; :func:`verify_file`, :func:`sha256_file`, :class:`ChecksumError`.

Turning the text into token ids is :mod:`transformer_lib.prepared`. It imports nothing from the model.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import shutil
import tempfile
import urllib.error
import urllib.request
import zlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any

__all__ = [
    "MULTI30K_ENV",
    "MULTI30K_URL",
    "MULTI30K_SHA256",
    "MULTI30K_SPLITS",
    "MULTI30K_LANGS",
    "ChecksumError",
    "default_cache_dir",
    "sha256_file",
    "verify_file",
    "multi30k_dir",
    "load_multi30k",
]

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
        folder = _given_folder(root, checksums, cache)
    else:
        folder = cache
        _fill_cache(cache, checksums, base_url, download)
    for name, expected in checksums.items():
        verify_file(folder / name, expected)
    return folder


def _given_folder(root: str | Path | None, checksums: Mapping[str, str], cache: Path) -> Path:
    """The folder named by ``root`` or ``MULTI30K_DIR``: only read, so every file must be in it already."""
    folder = Path(root if root is not None else os.environ[MULTI30K_ENV]).expanduser()
    source = "given as root" if root is not None else f"from {MULTI30K_ENV}"
    missing = [name for name in checksums if not (folder / name).is_file()]
    if missing:
        raise FileNotFoundError(_missing_data_message(folder, missing, f"the folder was {source}", cache))
    return folder


def _fill_cache(cache: Path, checksums: Mapping[str, str], base_url: str, download: bool) -> None:
    """Download the files missing from ``cache``; a download that fails its checksum is deleted."""
    missing = [name for name in checksums if not (cache / name).is_file()]
    if missing and not download:
        raise FileNotFoundError(_missing_data_message(cache, missing, "download=False", cache))
    for name in missing:
        url = base_url + name
        try:
            _download(url, cache / name)
        except (OSError, urllib.error.URLError) as error:
            raise FileNotFoundError(
                _missing_data_message(cache, missing, f"downloading {url} failed: {error}", cache)
            ) from error
        try:
            verify_file(cache / name, checksums[name])
        except ChecksumError:
            (cache / name).unlink()  # never keep a bad download in the cache
            raise


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
    """The lines of a gzipped UTF-8 file; a damaged or cut one is a ``ValueError`` naming it (not
    ``zlib.error`` or ``EOFError``)."""
    try:
        with gzip.open(path, "rt", encoding="utf-8") as f:
            return [line.rstrip("\r\n") for line in f]
    except (zlib.error, EOFError, gzip.BadGzipFile, UnicodeDecodeError) as error:
        raise ValueError(f"{path} is damaged ({type(error).__name__}: {error}): download it again") from None
