"""Tests of transformer_lib.subword: the joint BPE tokenizer, its data, and BPE checkpoints.

Everything runs on tests/fixtures/multi30k (a tiny corpus in Multi30k's layout); one test reads the
real training split (skipped without MULTI30K_DIR, a failure under REQUIRE_MULTI30K=1 as in CI).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
import torch
from errors import raises

from transformer_lib.multi30k import load_multi30k
from transformer_lib.prepared import prepare_multi30k
from transformer_lib.vocab import SPECIALS, UNK, Vocab
from transformer_lib.model import Transformer
from transformer_lib.config import TransformerConfig
from transformer_lib.subword import WORD_START, SubwordTokenizer, check_merge_order
from transformer_lib.checkpoint import CHECKPOINT_FORMAT_VERSION, checkpoint_metadata, load_checkpoint, save_checkpoint
from transformer_lib.tokenizers import tokenizer_from_dict
from transformer_lib.translator import Translator

FIXTURE = Path(__file__).parent / "fixtures" / "multi30k"
FIXTURE_SHA256 = {line.split()[1]: line.split()[0] for line in (FIXTURE / "SHA256SUMS").read_text().splitlines()}


@pytest.fixture(scope="module")
def corpus() -> list[tuple[str, str]]:
    return load_multi30k("train", FIXTURE, checksums=FIXTURE_SHA256)


@pytest.fixture(scope="module")
def bpe(corpus) -> SubwordTokenizer:
    return SubwordTokenizer.train([s for pair in corpus for s in pair], vocab_size=120, min_frequency=2)


def test_specials_come_first_and_the_vocab_has_the_tokenizers_ids(bpe: SubwordTokenizer) -> None:
    assert tuple(bpe.vocab.tokens[: len(SPECIALS)]) == SPECIALS
    assert len(bpe) == len(bpe.vocab) <= 120
    sentence = "Ein Mann läuft vor einem großen, roten Gebäude."
    ids = bpe._tokenizer.encode(sentence).ids  # the library's own ids ...
    assert bpe.vocab.encode(bpe.tokenize(sentence)) == ids  # ... are the Vocab's


@pytest.mark.parametrize("text", [
    "Ein Mann läuft vor einem großen, roten Gebäude in der Stadt.",
    "Zwei Kinder spielen am Strand, und ein Hund lacht.",
    "A man is running in front of a big, red building.",
    "Ein Kindmann läuft vor dem Strandgebäude.",  # made-up words: spelled with pieces
])
def test_detokenize_inverts_tokenize(bpe: SubwordTokenizer, text: str) -> None:
    pieces = bpe.tokenize(text)
    assert UNK not in pieces  # every character was seen in training
    assert bpe.detokenize(pieces) == text


def test_every_validation_sentence_round_trips(real_multi30k: Path) -> None:
    """On the real data: decode(encode(s)) == s for all 2,028 validation sentences (both languages)."""
    train = load_multi30k("train", real_multi30k)
    bpe = SubwordTokenizer.train([s for pair in train for s in pair], vocab_size=8000)
    val = [s for pair in load_multi30k("val", real_multi30k) for s in pair]
    normalised = [" ".join(s.split()) for s in val]
    restored = [bpe.detokenize(pieces) for pieces in bpe.tokenize_batch(val)]
    assert len(val) == 2028
    assert [i for i, (a, b) in enumerate(zip(restored, normalised)) if a != b] == []


def test_spaces_are_normalised_and_words_start_with_the_marker(bpe: SubwordTokenizer) -> None:
    pieces = bpe.tokenize("  Ein   Mann\tläuft. ")
    assert bpe.detokenize(pieces) == "Ein Mann läuft."
    words = [p for p in pieces if p.startswith(WORD_START)]
    assert len(words) == 3  # one marker per word; the full stop attaches to the word before it


def test_frequent_words_are_one_piece_rare_words_several(bpe: SubwordTokenizer, corpus) -> None:
    counts = Counter(w for pair in corpus for s in pair for w in s.split())
    for word, _ in counts.most_common(5):  # the most frequent words are one piece each
        assert bpe.tokenize(word) == [WORD_START + word]
    rare = bpe.tokenize("Strandmannläufer")  # never seen: spelled with known pieces, no <unk>
    assert len(rare) > 1 and UNK not in rare
    assert bpe.detokenize(rare) == "Strandmannläufer"


def test_unseen_characters_become_unk(bpe: SubwordTokenizer) -> None:
    pieces = bpe.tokenize("Ein Mann 中")
    assert UNK in pieces  # no byte fallback: a character never seen in training is unknown


def test_merges_are_learned_most_frequent_pair_first() -> None:
    # "a b" occurs 3 times inside "ab", "c d" once: the first merge is ("a", "b").
    tokenizer = SubwordTokenizer.train(["ab ab ab cd"], vocab_size=len(SPECIALS) + 8, min_frequency=1)
    assert tokenizer.merges[0] in ((WORD_START, "a"), ("a", "b"))
    assert ("a", "b") in tokenizer.merges or (WORD_START + "a", "b") in tokenizer.merges


def test_dict_round_trip_gives_the_same_tokenizer(bpe: SubwordTokenizer, corpus) -> None:
    """A checkpoint holds the vocabulary and the merges; the rest (normalising, splitting) is the library's."""
    stored = bpe.to_dict()
    assert set(stored) == {"kind", "tokens", "merges", "lowercase"} and stored["kind"] == "bpe"
    again = tokenizer_from_dict(stored)
    texts = ["Zwei  Kinder spielen am Strand und lachen.", "Strandmannläufer!", *(s for pair in corpus for s in pair)]
    assert [again.tokenize(t) for t in texts] == [bpe.tokenize(t) for t in texts]
    assert again.vocab == bpe.vocab and again.merges == bpe.merges and again == bpe


def test_a_lowercasing_tokenizer_keeps_its_lowercasing(corpus) -> None:
    texts = [s for pair in corpus for s in pair]
    lower = SubwordTokenizer.train(texts, vocab_size=100, lowercase=True)
    assert all(piece == piece.lower() for piece in lower.vocab.tokens[len(SPECIALS):])
    again = tokenizer_from_dict(lower.to_dict())
    assert again.tokenize("Ein MANN.") == lower.tokenize("ein mann.") == again.tokenize("ein mann.")


def test_training_is_deterministic(corpus) -> None:
    texts = [s for pair in corpus for s in pair]
    assert SubwordTokenizer.train(texts, vocab_size=100).to_dict() == SubwordTokenizer.train(texts, vocab_size=100).to_dict()


@pytest.mark.parametrize("vocab_size", [0, 4])
def test_too_small_a_vocabulary_is_refused(vocab_size: int) -> None:
    with raises(ValueError, "vocab_size", vocab_size, 4):
        SubwordTokenizer.train(["a b"], vocab_size=vocab_size)


def test_prepare_learns_one_vocabulary_from_the_training_split_only(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[list[str]] = []
    train = SubwordTokenizer.train.__func__

    def spy(cls, texts, *args, **kwargs):
        texts = list(texts)
        seen.append(texts)
        return train(cls, texts, *args, **kwargs)

    monkeypatch.setattr(SubwordTokenizer, "train", classmethod(spy))
    prepared = prepare_multi30k(FIXTURE, checksums=FIXTURE_SHA256, tokenizer="bpe", vocab_size=150)
    pairs = load_multi30k("train", FIXTURE, checksums=FIXTURE_SHA256)
    assert seen == [[s for s, _ in pairs] + [t for _, t in pairs]]  # both sides of train, nothing else
    assert prepared.src_tokenizer is prepared.tgt_tokenizer  # one joint vocabulary
    assert prepared.settings["tokenizer"] == "bpe" and prepared.settings["vocab_size"] == len(prepared.src_vocab)
    bpe = prepared.src_tokenizer
    for split in ("train", "val", "test"):
        source, target = prepared.text[split][0]
        ids_src, ids_tgt = prepared.splits[split][0]
        assert bpe.detokenize(prepared.src_vocab.decode(ids_src)) == source
        assert bpe.detokenize(prepared.tgt_vocab.decode(ids_tgt)) == target


def test_a_bpe_vocabulary_is_only_the_training_splits(real_multi30k: Path) -> None:
    """On the real data: words that occur only in test never become one piece of their own."""
    train = load_multi30k("train", real_multi30k)
    test = load_multi30k("test", real_multi30k)
    bpe = SubwordTokenizer.train([s for pair in train for s in pair], vocab_size=8000)
    train_words = {w for pair in train for s in pair for w in s.split()}
    test_only = {w.strip(".,!?\"") for _, t in test for w in t.split()} - {w.strip(".,!?\"") for w in train_words}
    test_only = {w for w in test_only if len(w) > 6}
    assert test_only, "the test split has words the training split lacks"
    assert all(WORD_START + w not in bpe.vocab for w in test_only)


def _checkpoint(tokenizer: str, tmp_path: Path) -> Path:
    prepared = prepare_multi30k(FIXTURE, checksums=FIXTURE_SHA256, tokenizer=tokenizer, vocab_size=150, min_freq=1)
    joint = tokenizer == "bpe"
    config = TransformerConfig(
        src_vocab_size=len(prepared.src_vocab), tgt_vocab_size=len(prepared.tgt_vocab), d_model=32, n_heads=4,
        n_encoder_layers=1, n_decoder_layers=1, d_ff=64, max_len=48, share_embeddings=joint,
    )
    model = Transformer(config)
    path = tmp_path / f"{tokenizer}.pt"
    save_checkpoint(path, {
        "format_version": CHECKPOINT_FORMAT_VERSION,
        **checkpoint_metadata(config, prepared.src_tokenizer, prepared.tgt_tokenizer, "multi30k", prepared.settings),
        "model_state": model.state_dict(), "optimizer_state": {}, "scheduler_state": {}, "train_config": {},
        "step": 0, "epoch": 0, "rng_state": {}, "metrics": {},
    })
    return path


@pytest.mark.parametrize("tokenizer", ["words", "bpe"])
def test_checkpoints_of_both_kinds_translate(tokenizer: str, tmp_path: Path) -> None:
    path = _checkpoint(tokenizer, tmp_path)
    assert load_checkpoint(path)["tokenizers"]["src"]["kind"] == tokenizer  # the checkpoint records the kind
    translator = Translator.from_checkpoint(path)
    sentence = "Ein Mann läuft am Strand."
    tokens = translator.src_tokenizer.tokenize(sentence)
    assert translator.src_tokenizer.kind == tokenizer
    if tokenizer == "bpe":
        assert tokens[0] == WORD_START + "Ein"
        assert translator.model.src_embed is translator.model.tgt_embed  # one matrix ...
        assert translator.model.output_layer.weight is translator.model.tgt_embed.weight  # ... three uses
    else:
        assert tokens == ["Ein", "Mann", "läuft", "am", "Strand", "."]
    out = translator.translate([sentence, "Ein Kind lacht."], beam_size=2)
    assert len(out) == 2 and all(isinstance(t, str) for t in out)
    # the output text is the detokenized output tokens, whichever tokenizer
    tokens_out = translator.translate_tokens([sentence])[0]
    assert translator.translate([sentence])[0] == translator.detokenize(tokens_out)
    assert load_checkpoint(path)["data"]["tokenizer"] == tokenizer


def test_merges_out_of_their_learned_order_are_refused(bpe: SubwordTokenizer, corpus) -> None:
    """BPE applies merges by rank: a reordered list passed every check and split text differently."""
    stored = bpe.to_dict()
    check_merge_order(stored["tokens"], stored["merges"])  # as learned: accepted
    swapped = list(stored["merges"])
    swapped[3], swapped[4] = swapped[4], swapped[3]
    with raises(ValueError, "merges[3]", repr(list(swapped[3]))):
        tokenizer_from_dict({**stored, "merges": swapped})
    with raises(ValueError, "merges[0]"):
        SubwordTokenizer.from_dict({**stored, "merges": stored["merges"][1:] + stored["merges"][:1]})
