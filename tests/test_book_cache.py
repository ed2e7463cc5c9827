"""The book's disk cache: an entry is made once, found again, never half-written, and keyed by the code."""

from __future__ import annotations

from pathlib import Path

import pytest

from transformer_lib.book import cache


@pytest.fixture(autouse=True)
def _own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(cache.CACHE_ENV, str(tmp_path / "cache"))


def _writer(calls: list[str], text: str = "made"):
    def make(folder: Path) -> None:
        assert folder.is_dir() and not any(folder.iterdir()), "make() gets an empty folder"
        calls.append(text)
        (folder / "value.txt").write_text(text)
    return make


def test_an_entry_is_made_once_and_found_again() -> None:
    calls: list[str] = []
    first = cache.cached("thing", {"size": 1}, _writer(calls))
    again = cache.cached("thing", {"size": 1}, _writer(calls, "not made again"))
    assert first == again and calls == ["made"]
    assert (again / "value.txt").read_text() == "made"
    assert cache.cached("thing", {"size": 2}, _writer(calls)) != first  # another key, another entry


def test_a_failed_make_leaves_nothing_behind() -> None:
    def broken(folder: Path) -> None:
        (folder / "half.txt").write_text("half")
        raise RuntimeError("killed")

    with pytest.raises(RuntimeError, match="killed"):
        cache.cached("thing", {}, broken)
    assert not [p for p in cache.cache_dir().iterdir() if not p.name.endswith(".lock")]
    calls: list[str] = []
    cache.cached("thing", {}, _writer(calls))
    assert calls == ["made"]


def test_only_the_newest_entries_of_a_name_are_kept() -> None:
    calls: list[str] = []
    folders = [cache.cached("thing", {"size": k}, _writer(calls)) for k in range(cache.KEEP + 3)]
    kept = [f for f in folders if f.exists()]
    assert kept == folders[-cache.KEEP:]
    assert cache.cached("other", {}, _writer(calls)).exists() and folders[-1].exists()


def test_the_key_includes_the_librarys_code(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    before = cache.cached("thing", {}, _writer(calls))
    monkeypatch.setattr(cache, "library_digest", lambda: "0" * 16)  # as if a source file had changed
    assert cache.cached("thing", {}, _writer(calls)) != before and len(calls) == 2


def test_the_library_digest_reads_the_package_and_names_are_checked() -> None:
    digest = cache.library_digest()
    assert len(digest) == 16 and int(digest, 16) >= 0
    with pytest.raises(ValueError, match="cache entry name"):
        cache.cached("no spaces", {}, _writer([]))
