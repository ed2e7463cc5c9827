"""Tests of transformer_lib.tokenizers: one interface (encode, decode, a dict with its kind) that the
word, symbol and BPE tokenizers all implement, and the table that rebuilds them from a checkpoint."""

from __future__ import annotations

import pytest
from errors import raises

from transformer_lib.subword import SubwordTokenizer
from transformer_lib.tokenizers import TOKENIZERS, SymbolTokenizer, WordTokenizer, tokenizer_from_dict, word_splitter
from transformer_lib.vocab import SPECIALS, Tokenizer, Vocab

SENTENCES = ["Ein Mann fährt Fahrrad.", "Zwei Hunde rennen durch den Schnee.", "Ein Hund rennt."]


def _tokenizers() -> dict[str, Tokenizer]:
    words = WordTokenizer(Vocab.build([word_splitter("de")(s) for s in SENTENCES]), "de")
    symbols = SymbolTokenizer(Vocab([*SPECIALS, "0", "1", "2"]))
    bpe = SubwordTokenizer.train(SENTENCES * 3, vocab_size=60, min_frequency=1)
    return {"words": words, "symbols": symbols, "bpe": bpe}


def test_every_kind_is_in_the_table_and_implements_the_interface() -> None:
    made = _tokenizers()
    assert set(TOKENIZERS) == set(made)
    for kind, tokenizer in made.items():
        assert isinstance(tokenizer, Tokenizer) and tokenizer.kind == kind and TOKENIZERS[kind].tokenizer is type(tokenizer)


@pytest.mark.parametrize("kind", ["words", "symbols", "bpe"])
def test_a_tokenizer_round_trips_through_its_dict(kind: str) -> None:
    tokenizer = _tokenizers()[kind]
    stored = tokenizer.to_dict()
    assert stored["kind"] == kind
    again = tokenizer_from_dict(stored)
    assert type(again) is type(tokenizer) and again == tokenizer and again.vocab == tokenizer.vocab
    text = "2 1 0 1" if kind == "symbols" else SENTENCES[1]
    assert again.encode(text) == tokenizer.encode(text)


@pytest.mark.parametrize("kind", ["words", "symbols", "bpe"])
def test_decode_inverts_encode(kind: str) -> None:
    tokenizer = _tokenizers()[kind]
    text = "2 1 0" if kind == "symbols" else SENTENCES[0]
    ids = tokenizer.encode(text)
    assert all(0 <= i < len(tokenizer.vocab) for i in ids)
    eos, pad = tokenizer.vocab.eos_id, tokenizer.vocab.pad_id
    assert tokenizer.decode([*ids, eos, pad, pad]) == text  # stops at <eos>


def test_an_unknown_kind_is_an_error_naming_it() -> None:
    with raises(ValueError, "'sentencepiece'", "bpe", "symbols", "words"):
        tokenizer_from_dict({"kind": "sentencepiece", "tokens": list(SPECIALS)})
    with raises(ValueError, "None"):
        tokenizer_from_dict({"tokens": list(SPECIALS)})  # no kind at all: not guessed


def test_symbols_outside_the_alphabet_are_refused_not_unknown() -> None:
    symbols = _tokenizers()["symbols"]
    with raises(ValueError, "'x'"):
        symbols.encode("1 x 2")


def test_the_bpe_dict_holds_data_only_never_a_pipeline() -> None:
    """The stored BPE tokenizer is its vocabulary and merges: how text is normalised and split comes
    from the library, so a file cannot change it (a checkpoint from elsewhere carries no regexes)."""
    stored = _tokenizers()["bpe"].to_dict()
    assert set(stored) == {"kind", "tokens", "merges", "lowercase"}
    assert all(isinstance(t, str) for t in stored["tokens"])
    assert all(isinstance(pair, list) and len(pair) == 2 and all(isinstance(p, str) for p in pair) for pair in stored["merges"])
