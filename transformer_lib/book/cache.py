"""A folder on disk for what several sections of a chapter need and one of them makes: a trained toy
model, a tokenized corpus, decoded test sets.

Chapters 5, 6 and 7 train small models that more than one section uses. Each section runs on its
own (on Colab, in the website's build, in the tests), so the first one to need a model trains it
and the others load it::

    folder = cached("reverse-model", {"profile": "fast", "args": args}, make=train_into)

``make(folder)`` fills an empty folder; the cache keeps it under a name made of ``name`` and a
digest of ``key``, of the library's source files (any change to the model, the trainer or the
book's own code makes a new entry, never a stale one) and of the versions of Python and PyTorch. It is written to a
temporary folder and renamed into place, so a reader never sees half an entry; where the operating
system can lock files (Linux, macOS), a second process that needs the same entry waits for the first
instead of repeating its work.

Where: ``$TRANSFORMER_BOOK_CACHE``, else ``$XDG_CACHE_HOME/tested-transformer``, else
``~/.cache/tested-transformer``. Deleting the folder is always safe. Of the entries of one name,
the newest ``KEEP`` stay; older ones (made by older code, or with other settings) are removed when a
new one is made.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import platform
import shutil
from collections.abc import Callable, Iterator
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

__all__ = ["CACHE_ENV", "KEEP", "cache_dir", "cached", "library_digest"]

CACHE_ENV = "TRANSFORMER_BOOK_CACHE"
KEEP = 4
"""Entries of one name kept: enough for both profiles and a change of code, few enough to stay small."""


def cache_dir() -> Path:
    """The cache's folder (created on first use by :func:`cached`)."""
    if os.environ.get(CACHE_ENV, "").strip():
        return Path(os.environ[CACHE_ENV]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME", "").strip() or Path.home() / ".cache"
    return Path(base) / "tested-transformer"


@lru_cache(maxsize=1)
def library_digest() -> str:
    """A digest of every Python file of the library (``transformer_lib/**/*.py``).

    Read through the installed package, so an editable checkout and a copy installed from git agree
    when their code does.
    """
    sha = hashlib.sha256()

    def walk(folder: Any, prefix: str) -> None:
        for entry in sorted(folder.iterdir(), key=lambda e: e.name):
            if entry.is_dir() and entry.name != "__pycache__":
                walk(entry, f"{prefix}{entry.name}/")
            elif entry.name.endswith(".py"):
                sha.update(f"{prefix}{entry.name}".encode())
                sha.update(entry.read_bytes())

    walk(resources.files("transformer_lib"), "")
    return sha.hexdigest()[:16]


def _entry_name(name: str, key: Any) -> str:
    import torch

    identity = {"key": key, "library": library_digest(), "python": platform.python_version(),
                "torch": torch.__version__}
    digest = hashlib.sha256(json.dumps(identity, sort_keys=True, default=str).encode()).hexdigest()[:16]
    return f"{name}-{digest}"


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """An exclusive lock on ``path`` where the platform has ``fcntl``; elsewhere no lock."""
    try:
        import fcntl
    except ImportError:  # Windows: two processes may both do the work; the rename keeps one
        yield
        return
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def cached(name: str, key: Any, make: Callable[[Path], object]) -> Path:
    """The cache entry for ``name`` and ``key``, made by ``make(folder)`` if it does not exist yet.

    Args:
        name: what the entry holds, in letters, digits and dashes (``"reverse-model"``).
        key: everything the entry depends on besides the library's code (settings, profile,
            device), as JSON-able values.
        make: fills the empty folder it is given; if it raises, nothing is kept.

    Returns:
        The entry's folder.
    """
    if not name or not all(c.isalnum() or c == "-" for c in name):
        raise ValueError(f"cache entry name {name!r}: use letters, digits and dashes")
    root = cache_dir()
    root.mkdir(parents=True, exist_ok=True)
    folder = root / _entry_name(name, key)
    if (folder / ".complete").exists():
        return folder
    with _locked(root / f"{folder.name}.lock"):
        if (folder / ".complete").exists():  # made by another process while this one waited
            return folder
        partial = root / f"{folder.name}.partial-{os.getpid()}"
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir()
        try:
            make(partial)
            (partial / ".complete").write_text(json.dumps({"name": name, "key": key}, default=str))
            shutil.rmtree(folder, ignore_errors=True)  # an incomplete leftover of a killed run
            os.replace(partial, folder)
        finally:
            shutil.rmtree(partial, ignore_errors=True)
    _prune(root, name, keep=folder)
    return folder


def _prune(root: Path, name: str, keep: Path) -> None:
    """Remove all but the newest ``KEEP`` complete entries called ``name`` (never ``keep``)."""
    entries = sorted((p for p in root.glob(f"{name}-*") if (p / ".complete").exists() and p != keep
                      and p.name[len(name) + 1:].isalnum()),
                     key=lambda p: (p / ".complete").stat().st_mtime, reverse=True)
    for old in entries[KEEP - 1:]:
        shutil.rmtree(old, ignore_errors=True)
        (root / f"{old.name}.lock").unlink(missing_ok=True)
