"""Tests of transformer_lib.vocab: the spaCy word tokenizers and Vocab."""

from __future__ import annotations

from pathlib import Path

import pytest
from errors import raises

import transformer_lib.tokenizers
from transformer_lib.vocab import BOS, EOS, PAD, SPECIALS, UNK, Vocab
from transformer_lib.tokenizers import word_splitter


def test_tokenizer_splits_punctuation_and_keeps_abbreviations() -> None:
    assert word_splitter("de")("Ein Mann, z.B. hier.") == ["Ein", "Mann", ",", "z.B.", "hier", "."]
    assert word_splitter("en")("It isn't red.") == ["It", "is", "n't", "red", "."]


def test_spacy_tokens_keep_whitespace_for_detokenization() -> None:
    doc = transformer_lib.tokenizers._blank_pipeline("en").tokenizer("A man, running.")
    assert "".join(token.text + token.whitespace_ for token in doc) == "A man, running."


def test_vocab_specials_first_min_freq_and_tie_order() -> None:
    vocab = Vocab.build([["b", "a", "b"], ["a", "c", "b"]], min_freq=2)
    assert vocab.tokens == [*SPECIALS, "b", "a"]  # b (3) before a (2); c (1) is below min_freq
    assert (vocab.pad_id, vocab.unk_id, vocab.bos_id, vocab.eos_id) == (0, 1, 2, 3)
    ties = Vocab.build([["z", "y", "x"]])
    assert ties.tokens[4:] == ["x", "y", "z"]  # equal counts: alphabetical, so ids are reproducible


def test_vocab_unknown_tokens_map_to_unk_and_ids_round_trip() -> None:
    vocab = Vocab.build([["hallo", "welt"]])
    ids = vocab.encode(["hallo", "mond", "welt"], add_bos=True, add_eos=True)
    assert ids == [vocab.bos_id, vocab.token_to_id("hallo"), vocab.unk_id, vocab.token_to_id("welt"), vocab.eos_id]
    assert vocab.decode(ids) == ["hallo", UNK, "welt"]
    assert vocab.decode([*ids, 4], strip_specials=True)[-1] == "welt"  # stops at <eos>
    assert vocab.decode(ids, strip_specials=False) == [BOS, "hallo", UNK, "welt", EOS]


def test_vocab_save_load_and_dict_round_trip(tmp_path: Path) -> None:
    vocab = Vocab.build([["Straße", "Mädchen", "Straße"]])
    vocab.save(tmp_path / "vocab.json")
    assert Vocab.load(tmp_path / "vocab.json") == vocab
    assert Vocab.from_dict(vocab.to_dict()) == vocab
    assert [p.name for p in tmp_path.iterdir()] == ["vocab.json"]  # written through a temporary file, renamed


def test_a_failed_vocab_save_leaves_the_earlier_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "vocab.json"
    Vocab.build([["a"]]).save(path)
    before = path.read_bytes()

    real_write_text = Path.write_text

    def disk_full(self: Path, text: str, *args, **kwargs):  # the first bytes go out, then the disk is full
        real_write_text(self, text[:5], *args, **kwargs)
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Path, "write_text", disk_full)
    with pytest.raises(OSError):
        Vocab.build([["b", "c"]]).save(path)
    assert path.read_bytes() == before and [p.name for p in tmp_path.iterdir()] == ["vocab.json"]


@pytest.mark.parametrize(
    ("call", "named"),
    [
        (lambda: Vocab([PAD, "a", "a", UNK]), ["'a'", 1, 2]),
        (lambda: Vocab([PAD, "a"]), [f"{UNK!r}"]),
        (lambda: Vocab.build([["a"]], min_freq=0), ["min_freq", 0]),
        (lambda: Vocab.build([["a"]]).id_to_token(99), [99]),
    ],
)
def test_vocab_rejects_bad_input(call, named: list) -> None:
    with raises(ValueError, *named):
        call()
