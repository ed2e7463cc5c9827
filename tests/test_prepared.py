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
