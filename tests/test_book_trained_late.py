"""Chapters 5 to 7 on the shipped model: the helpers in ``transformer_lib.book.chapters`` that the
sections use to show it (the test subset per profile, the beam-beats-greedy search, the per-head
profile and the batched head removal) and the full profile's recipe, checked against the shipped
record. The model is package data, so none of these needs a network or the Multi30k files."""

from __future__ import annotations

import pytest
import torch

from transformer_lib.book import trained
from transformer_lib.book.chapters import decoding, training
from transformer_lib.cli.profiles import DEFAULTS, PROFILE_ENV

FAKE = [(f"Ein Hund Nummer {i} rennt.", f"A dog number {i} runs.") for i in range(150)]


@pytest.mark.parametrize(("profile", "size"), [("fast", 100), ("full", 150)])
def test_test_set_decodes_as_many_sentences_as_the_profile_says(profile: str, size: int,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PROFILE_ENV, profile)
    monkeypatch.setattr(decoding, "load_multi30k", lambda split, **_: list(FAKE))
    tests = decoding.test_set(trained.translator())
    assert tests.pairs == FAKE[:size]
    assert decoding.test_set(trained.translator(), size=3).sources == [s for s, _ in FAKE[:3]]
    with pytest.raises(ValueError, match="0"):
        decoding.test_set(trained.translator(), size=0)


def test_the_full_profile_trains_the_shipped_models_recipe() -> None:
    """Chapter 5's full profile runs the command line's full defaults; they must be the settings
    the shipped model was trained with, or the chapter would show one recipe and train another."""
    shipped = training.shipped_run()["settings"]
    full = DEFAULTS["multi30k"]["full"]
    recipe = ("preset", "tokenizer", "vocab_size", "batch_size", "schedule", "lr", "warmup_steps",
              "label_smoothing", "clip_norm", "epochs", "keep_weights", "train_size")
    assert {k: full[k] for k in recipe} == {k: shipped[k] for k in recipe}
    config = trained.record().config  # joint BPE: one vocabulary, shared and tied
    assert config.share_embeddings and config.tie_output and config.src_vocab_size == full["vocab_size"]
    assert config.norm_first  # Pre-LN, as the chapter says


def test_beam_beats_greedy_finds_exactly_the_sentences_where_beam_scores_higher() -> None:
    model = trained.translator()
    sources = list(trained.SENTENCES)
    beam = model.translate(sources, beam_size=3, length_penalty=0.6)
    greedy = model.translate(sources, beam_size=1)
    # With the beam's own output as the reference, beam scores 100 wherever greedy differs.
    found = decoding.beam_beats_greedy(model, decoding.TestSet(list(zip(sources, beam))), beam_size=3,
                                       max_source_tokens=100)
    assert sorted(r["index"] for r in found) == [i for i, (g, b) in enumerate(zip(greedy, beam)) if g != b]
    assert all(r["beam_bleu"] > r["greedy_bleu"] for r in found)
    # With greedy's output as the reference, beam never wins.
    assert decoding.beam_beats_greedy(model, decoding.TestSet(list(zip(sources, greedy))), beam_size=3,
                                      max_source_tokens=100) == []


def test_head_profile_measures_what_head_statistics_measures() -> None:
    """Given the model's own translations as references, the teacher-forced profile sees the maps
    that ``trained.head_statistics`` sees, so their entropies and mean offsets agree."""
    sentences = list(trained.SENTENCES[:2])
    pairs = list(zip(sentences, trained.translate(sentences)))
    profile = decoding.head_profile(pairs)
    assert len(profile) == 3 * 3 * 8
    for kind in ("encoder_self", "decoder_cross"):
        expected = trained.head_statistics(sentences, kind)
        ours = [r for r in profile if r["kind"] == kind]
        for a, b in zip(ours, expected):
            assert (a["layer"], a["head"]) == (b["layer"], b["head"])
            assert a["entropy_bits"] == pytest.approx(b["entropy_bits"], abs=1e-5)
            if kind == "encoder_self":
                assert a["mean_offset"] == pytest.approx(b["mean_offset"], abs=1e-5)
                assert 0 < a["modal_share"] <= 1
            else:
                assert a["modal_share"] is None


def test_keep_masks_zero_one_heads_slice_in_its_own_block_only() -> None:
    heads = [None, ("encoder_self", 1, 2), ("decoder_cross", 0, 7)]
    masks = decoding._keep_masks(heads, n=2, width=4, n_heads=8)
    assert set(masks) == {("encoder_self", 1), ("decoder_cross", 0)}
    encoder = masks["encoder_self", 1]
    assert encoder.shape == (6, 1, 32)
    assert torch.all(encoder[2:4, :, 8:12] == 0) and int((encoder == 0).sum()) == 2 * 4
    assert int((masks["decoder_cross", 0][4:6, :, 28:32] == 0).sum()) == 2 * 4


def test_removing_heads_in_one_batch_equals_removing_each_alone() -> None:
    pairs = list(zip(trained.SENTENCES, trained.translate(trained.SENTENCES, beam_size=1)))
    heads = [("encoder_self", 0, 0), ("decoder_cross", 2, 5), ("decoder_self", 1, 3)]
    scores = decoding.bleu_without_each_head(trained.translator(), pairs, heads, max_rows=8)
    assert scores[None] == pytest.approx(100.0)  # the references are its own greedy output
    for head in heads:
        alone = trained.bleu(pairs, change=lambda head=head: trained.without_head(*head))
        assert scores[head] == pytest.approx(alone, abs=1e-9), head
