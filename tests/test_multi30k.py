"""Tests of transformer_lib.multi30k: finding, downloading, checking and reading the Multi30k files.

Everything here runs without the dataset and without a network: tests/fixtures/multi30k is a tiny
made-up corpus in Multi30k's layout with its own checksums. The test marked ``multi30k`` reads the
real files from MULTI30K_DIR; it skips without them, unless REQUIRE_MULTI30K=1 (CI), where a
missing dataset is a failure.
"""

from __future__ import annotations

import gzip
import shutil
import urllib.error
from pathlib import Path

import pytest
from errors import raises

from transformer_lib import multi30k
from transformer_lib.multi30k import MULTI30K_SHA256, ChecksumError, load_multi30k, multi30k_dir

FIXTURE = Path(__file__).parent / "fixtures" / "multi30k"
FIXTURE_SHA256 = {line.split()[1]: line.split()[0] for line in (FIXTURE / "SHA256SUMS").read_text().splitlines()}


@pytest.fixture
def no_multi30k_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No MULTI30K_DIR, and an empty user cache in tmp_path."""
    monkeypatch.delenv(multi30k.MULTI30K_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path / "cache" / "transformer_lib" / "multi30k"


def test_loader_reads_a_local_folder() -> None:
    pairs = load_multi30k("train", FIXTURE, checksums=FIXTURE_SHA256)
    assert len(pairs) == 60
    with gzip.open(FIXTURE / "train.de.gz", "rt", encoding="utf-8") as de, gzip.open(FIXTURE / "train.en.gz", "rt", encoding="utf-8") as en:
        assert pairs[0] == (de.readline().rstrip("\n"), en.readline().rstrip("\n"))
    reverse = load_multi30k("val", FIXTURE, src_lang="en", tgt_lang="de", checksums=FIXTURE_SHA256)
    assert reverse == [(t, s) for s, t in load_multi30k("val", FIXTURE, checksums=FIXTURE_SHA256)]


def test_loader_reads_the_folder_in_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(multi30k.MULTI30K_ENV, str(FIXTURE))
    assert len(load_multi30k("test", checksums=FIXTURE_SHA256)) == 8


def test_loader_detects_a_corrupted_file(tmp_path: Path) -> None:
    folder = tmp_path / "m30k"
    shutil.copytree(FIXTURE, folder)
    blob = bytearray((folder / "val.en.gz").read_bytes())
    blob[-5] ^= 0xFF  # one flipped byte, as a bad disk or an interrupted copy would leave
    (folder / "val.en.gz").write_bytes(bytes(blob))
    with raises(ChecksumError, "val.en.gz", FIXTURE_SHA256["val.en.gz"]):
        load_multi30k("train", folder, checksums=FIXTURE_SHA256)


def test_loader_refuses_the_real_checksums_for_other_files() -> None:
    """The hard-coded SHA-256 values are what a folder is checked against by default."""
    with raises(ChecksumError, "SHA-256"):
        multi30k_dir(FIXTURE)


def test_missing_files_in_a_given_folder_say_where_to_put_them(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "train.de.gz").write_bytes((FIXTURE / "train.de.gz").read_bytes())
    monkeypatch.setattr(multi30k, "_download", _no_network)  # a given folder must never be downloaded into
    with pytest.raises(FileNotFoundError) as error:
        load_multi30k("train", tmp_path, checksums=FIXTURE_SHA256)
    message = str(error.value)
    assert str(tmp_path) in message and "MULTI30K_DIR" in message and "train.en.gz" in message
    assert "train.de.gz'" not in message.split("missing")[0]  # the file that is there is not listed


def _no_network(url: str, destination: Path, timeout: float = 60.0) -> None:
    raise urllib.error.URLError("no network in this test")


def test_no_data_and_no_network_gives_a_clear_error(no_multi30k_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(multi30k, "_download", _no_network)
    with pytest.raises(FileNotFoundError) as error:
        load_multi30k("train", checksums=FIXTURE_SHA256)
    message = str(error.value)
    for expected in ("MULTI30K_DIR", str(no_multi30k_env), multi30k.MULTI30K_URL, "no network in this test", "internet"):
        assert expected in message
    assert not any(no_multi30k_env.glob("*"))  # nothing half-downloaded left behind


def test_download_fills_the_cache_once_and_verifies(no_multi30k_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The download path, served from the fixture folder through a file:// URL."""
    fetched: list[str] = []
    real_download = multi30k._download

    def counting_download(url: str, destination: Path, timeout: float = 60.0) -> None:
        fetched.append(url)
        real_download(url, destination, timeout)

    monkeypatch.setattr(multi30k, "_download", counting_download)
    base_url = FIXTURE.resolve().as_uri() + "/"
    pairs = load_multi30k("val", base_url=base_url, checksums=FIXTURE_SHA256)
    assert pairs == load_multi30k("val", FIXTURE, checksums=FIXTURE_SHA256)
    assert sorted(fetched) == sorted(base_url + name for name in FIXTURE_SHA256)
    assert sorted(p.name for p in no_multi30k_env.iterdir()) == sorted(FIXTURE_SHA256)
    load_multi30k("test", base_url=base_url, checksums=FIXTURE_SHA256)
    assert len(fetched) == 6  # the second call reads the cache


def test_a_corrupted_download_is_deleted(no_multi30k_env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    server = tmp_path / "server"
    shutil.copytree(FIXTURE, server)
    (server / "train.en.gz").write_bytes(b"<html>rate limited</html>")
    with raises(ChecksumError, "train.en.gz"):
        load_multi30k("train", base_url=server.as_uri() + "/", checksums=FIXTURE_SHA256)
    assert not (no_multi30k_env / "train.en.gz").exists()


def test_download_false_does_not_download(no_multi30k_env: Path) -> None:
    with raises(FileNotFoundError, 'download=False'):
        multi30k_dir(download=False, checksums=FIXTURE_SHA256)


def test_the_published_urls_and_checksums_are_complete() -> None:
    assert multi30k.MULTI30K_URL == "https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw/"
    stems = set(multi30k.MULTI30K_SPLITS.values())
    assert set(MULTI30K_SHA256) == {f"{stem}.{lang}.gz" for stem in stems for lang in ("de", "en")}
    assert all(len(digest) == 64 and int(digest, 16) >= 0 for digest in MULTI30K_SHA256.values())


@pytest.mark.parametrize(("kwargs", "named"), [({"split": "dev"}, ["'dev'"]), ({"split": "train", "src_lang": "fr"}, ["fr"]),
                                              ({"split": "train", "tgt_lang": "de"}, ["de"])])
def test_loader_rejects_bad_arguments(kwargs: dict, named: list) -> None:
    with raises(ValueError, *named):
        load_multi30k(root=FIXTURE, checksums=FIXTURE_SHA256, **kwargs)


@pytest.mark.multi30k
def test_real_multi30k_sizes_and_checksums(real_multi30k: Path) -> None:
    sizes = {split: len(load_multi30k(split, real_multi30k)) for split in ("train", "val", "test")}
    assert sizes == {"train": 29000, "val": 1014, "test": 1000}  # the dataset's README
