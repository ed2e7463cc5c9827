"""Tests of transformer_lib.prepared: Multi30k tokenized into ids, saved and loaded.

Runs on tests/fixtures/multi30k, a tiny made-up corpus in Multi30k's layout with its own checksums.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from errors import raises

from transformer_lib.prepared import PreparedTranslation, prepare_multi30k
from transformer_lib.tokenizers import word_splitter

FIXTURE = Path(__file__).parent / "fixtures" / "multi30k"
FIXTURE_SHA256 = {line.split()[1]: line.split()[0] for line in (FIXTURE / "SHA256SUMS").read_text().splitlines()}


def test_prepare_builds_vocabularies_on_train_and_round_trips(tmp_path: Path) -> None:
    prepared = prepare_multi30k(FIXTURE, checksums=FIXTURE_SHA256, min_freq=1)
    assert set(prepared.splits) == {"train", "val", "test"}
    assert prepared.settings["src_lang"] == "de" and prepared.settings["lowercase"] is False
    src, tgt = prepared.text["train"][1]
    ids_src, ids_tgt = prepared.splits["train"][1]
    assert prepared.src_vocab.decode(ids_src) == word_splitter("de")(src)
    assert prepared.tgt_vocab.decode(ids_tgt) == word_splitter("en")(tgt)
    prepared.save(tmp_path / "data.pt")
    loaded = PreparedTranslation.load(tmp_path / "data.pt")
    assert loaded.src_vocab == prepared.src_vocab and loaded.tgt_vocab == prepared.tgt_vocab
    assert all(loaded.splits[s].src == prepared.splits[s].src and loaded.splits[s].tgt == prepared.splits[s].tgt for s in prepared.splits)
    assert loaded.text == prepared.text and loaded.settings == prepared.settings


def test_prepare_subset_and_lowercase() -> None:
    prepared = prepare_multi30k(FIXTURE, checksums=FIXTURE_SHA256, train_size=20, lowercase=True, splits=("train",))
    assert len(prepared.splits["train"]) == 20
    assert all(token == token.lower() for token in prepared.tgt_vocab.tokens)
    assert "Ein" not in prepared.src_vocab and "ein" in prepared.src_vocab


def test_prepared_load_rejects_other_files(tmp_path: Path) -> None:
    torch.save({"weights": torch.zeros(2)}, tmp_path / "other.pt")
    with raises(ValueError, "other.pt"):
        PreparedTranslation.load(tmp_path / "other.pt")
    with raises(FileNotFoundError, '--prepare-only'):
        PreparedTranslation.load(tmp_path / "missing.pt")


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The fixture corpus prepared and saved once; tests copy or edit the file."""
    path = tmp_path_factory.mktemp("prepared") / "data.pt"
    prepare_multi30k(FIXTURE, checksums=FIXTURE_SHA256, min_freq=1).save(path)
    return path


def test_prepared_data_carry_a_checksum_that_catches_flipped_bytes(saved: Path, tmp_path: Path) -> None:
    payload = torch.load(saved, weights_only=True)
    assert set(payload["checksum"]) == {"sha256"}
    data = bytearray(saved.read_bytes())
    ids = payload["splits"]["train"]["src_ids"].numpy().tobytes()
    start = bytes(data).index(ids[:64])  # inside the training ids, as a disk error would strike
    data[start : start + 400] = bytes(b ^ 0xFF for b in data[start : start + 400])
    (tmp_path / "data.pt").write_bytes(bytes(data))
    with raises(ValueError, str(tmp_path / "data.pt"), "SHA-256"):
        PreparedTranslation.load(tmp_path / "data.pt")


def _edited(saved: Path, tmp_path: Path, edit) -> Path:
    """``saved`` with ``edit(payload)`` applied and a checksum that matches again: only validation can catch it."""
    from transformer_lib.validation import content_sha256

    payload = torch.load(saved, weights_only=True)
    edit(payload)
    payload["checksum"] = {"sha256": content_sha256({k: v for k, v in payload.items() if k != "checksum"})}
    torch.save(payload, tmp_path / "edited.pt")
    return tmp_path / "edited.pt"


def _set(payload: dict, split: str, key: str, value) -> None:
    payload["splits"][split][key] = value


EDITS = [
    (lambda p: p["splits"]["val"]["tgt_ids"].__setitem__(0, 10**6), ["'val'", "tgt_ids", 1000000]),
    (lambda p: p["splits"]["test"]["src_ids"].__setitem__(-1, -84), ["'test'", "src_ids", -84]),
    (lambda p: _set(p, "train", "src_lengths", p["splits"]["train"]["src_lengths"] + 1), ["'train'", "src_lengths"]),
    (lambda p: _set(p, "val", "tgt_lengths", p["splits"]["val"]["tgt_lengths"][:-1]), ["'val'", "target"]),
    (lambda p: _set(p, "train", "src_ids", p["splits"]["train"]["src_ids"].float()), ["'train'", "src_ids", "torch.float32"]),
    (lambda p: p["splits"].pop("train"), ["'splits'", "'train'"]),
    (lambda p: p["text"]["val"]["src"].pop(), ["'val'", "text"]),
    (lambda p: p["tokenizers"]["src"]["tokens"].__setitem__(5, 5), ["tokenizers['src']", "['tokens'][5]"]),
    (lambda p: p["tokenizers"]["tgt"].__setitem__("lang", "klingon"), ["tokenizers['tgt']", "'klingon'"]),
]


@pytest.mark.parametrize(("edit", "named"), EDITS, ids=[str(n[:2]) for _, n in EDITS])
def test_prepared_load_validates_every_split_and_names_it(saved: Path, tmp_path: Path, edit, named: list) -> None:
    path = _edited(saved, tmp_path, edit)
    with raises(ValueError, str(path), *named):
        PreparedTranslation.load(path)


def test_the_edits_are_caught_by_validation_not_by_the_checksum(saved: Path, tmp_path: Path) -> None:
    loaded = PreparedTranslation.load(_edited(saved, tmp_path, lambda payload: None))
    assert len(loaded.splits["train"]) == len(PreparedTranslation.load(saved).splits["train"])


def test_prepare_refuses_a_yes_no_setting_that_is_not_a_boolean() -> None:
    with raises(ValueError, "lowercase", "'no'"):  # "no" is truthy: it lower-cased every sentence
        prepare_multi30k(FIXTURE, checksums=FIXTURE_SHA256, lowercase="no")
