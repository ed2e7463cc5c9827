"""The chapters' shared set-up (``transformer_lib.book.chapters``): what several sections build on.

The trained models are exercised by the sections that use them (the site build and
``tests/test_colab.py`` run every section); here, the example data and settings they start from.
"""

from __future__ import annotations

import pytest

from transformer_lib.book.chapters import beyond, decoding, embeddings, masking, training
from transformer_lib.book.experiment import PROFILE_ENV
from transformer_lib.cli import train as train_cli
from transformer_lib.cli.profiles import DEFAULTS


def test_the_masking_example_is_a_padded_batch_labelled_by_its_tokens() -> None:
    batch = masking.example_batch()
    assert batch.src.shape[0] == batch.tgt.shape[0] == len(masking.EXAMPLE_PAIRS) == 2
    assert (batch.src[0] == batch.pad_id).any() and not (batch.src[1] == batch.pad_id).any()
    for ids, tokens in [(batch.src, batch.src_tokens), (batch.tgt, batch.tgt_tokens)]:
        assert [[batch.vocab.token_to_id(t) for t in row] for row in tokens] == ids.tolist()
        assert all(row[0] == "<bos>" and "<eos>" in row for row in tokens)


def test_the_caption_example_is_section_3_1s_batch() -> None:
    example = embeddings.caption_example()
    assert len(example.de_tokens) == len(example.en_tokens) == len(embeddings.CAPTION_PAIRS) == 8
    assert example.src.shape[0] == 4
    assert (example.src[:, 0] == example.vocab_de.bos_id).all()
    assert example.vocab_de.decode(example.src[3].tolist()) == example.de_tokens[3]


@pytest.mark.parametrize("profile", ["fast", "full"])
def test_the_reverse_task_is_the_trainers(profile: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PROFILE_ENV, profile)
    if profile == "full":  # the full task is large: its settings suffice
        monkeypatch.setitem(DEFAULTS["toy"]["full"], "n_train", 200)
    task = training.reverse_task()
    assert task.settings == DEFAULTS["toy"][profile]
    assert len(task.vocab) == 4 + task.settings["n_symbols"]
    seen = {tuple(src) for src, _ in task.train}
    assert not any(tuple(src) in seen for src, _ in task.heldout), "held-out sequences never occur in training"
    assert all(list(tgt) == list(src)[::-1] for src, tgt in list(task.train)[:50])
    if profile == "fast":  # the command line's own pairs, its short lengths repeated the same way
        data = train_cli._toy_data(task.run_config())
        assert data.splits["train"].src == task.train.src and data.splits["val"].src == task.heldout.src


def test_one_held_out_source_per_length_shortest_first() -> None:
    sources = decoding.one_per_length()
    lengths = [len(s.split()) for s in sources]
    settings = DEFAULTS["toy"]["fast"]
    # every length is held out, the shortest too (5 of the 10 sequences of one digit: toy_task)
    assert lengths == list(range(settings["shortest"], settings["longest"] + 1))


@pytest.mark.parametrize(("profile", "layers", "steps"), [("fast", 2, 200), ("full", 4, 3000)])
def test_both_caption_models_share_one_size(profile: str, layers: int, steps: int,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PROFILE_ENV, profile)
    size = beyond.caption_model_size()
    assert (size["n_layers"], size["steps"]) == (layers, steps)


def test_accumulated_micro_batches_match_one_batch_within_rounding_and_the_check_can_fail() -> None:
    """Chapter 5.10's check: three uneven micro-batches give the gradient of their union within the
    float32 bound; with dropout on (different masks in the two runs) the same check fails."""
    import torch

    from transformer_lib.book.chapters.training import accumulation_gap
    from transformer_lib.config import TransformerConfig
    from transformer_lib.model import Transformer

    pairs = [([4 + (i * j) % 20 for j in range(1 + i % 7)], [5 + (i + j) % 20 for j in range(2 + i % 5)]) for i in range(24)]

    def model(dropout: float):
        def make():
            torch.manual_seed(0)
            return Transformer(TransformerConfig.from_preset("tiny", src_vocab_size=30, tgt_vocab_size=30, dropout=dropout))
        return make

    exact = accumulation_gap(model(0.0), [pairs[:3], pairs[3:10], pairs[10:]])
    assert exact["gap"] <= exact["bound"] and exact["micro_batches"] == 3
    noisy = accumulation_gap(model(0.3), [pairs[:3], pairs[3:10], pairs[10:]])
    assert noisy["gap"] > noisy["bound"]
