"""Language-model batches, the next-token loss, perplexity and the training loop (chapter 7)."""

from __future__ import annotations

import math

import pytest
import torch
from errors import raises
import torch.nn.functional as F

from transformer_lib.language_models import (
    IGNORE_INDEX,
    lm_batch,
    lm_batches,
    next_token_loss,
    perplexity,
    train_steps,
)
from transformer_lib.model import DecoderOnlyTransformer
from transformer_lib.config import TransformerConfig

PAD, BOS, EOS = 0, 2, 3
V = 12
SENTENCES = [[4, 5, 6], [7], [8, 9, 10, 11], [5, 5], [6, 7, 8], [9, 4, 4, 4, 4]]


def tiny_lm() -> DecoderOnlyTransformer:
    return DecoderOnlyTransformer(TransformerConfig.decoder_only(
        "tiny", vocab_size=V, d_model=16, n_heads=2, n_decoder_layers=1, d_ff=32, dropout=0.0, max_len=16))


def test_lm_batch_shifts_by_one_and_hides_padding_from_the_loss() -> None:
    inputs, targets = lm_batch([[7, 8, 9], [10]], bos_id=BOS, eos_id=EOS, pad_id=PAD)
    assert inputs.tolist() == [[BOS, 7, 8, 9], [BOS, 10, PAD, PAD]]
    assert targets.tolist() == [[7, 8, 9, EOS], [10, EOS, IGNORE_INDEX, IGNORE_INDEX]]
    # what the model reads at t+1 is what it was asked to predict at t
    assert torch.equal(inputs[0, 1:], targets[0, :-1])


@pytest.mark.parametrize("bad", [[], [[4], []]])
def test_lm_batch_refuses_empty_input(bad) -> None:
    with raises(ValueError, "sentence"):
        lm_batch(bad, bos_id=BOS, eos_id=EOS, pad_id=PAD)


def test_lm_batches_cover_every_sentence_once_and_are_reproducible() -> None:
    ids = dict(bos_id=BOS, eos_id=EOS, pad_id=PAD)
    batches = lm_batches(SENTENCES, 4, seed=3, **ids)
    again = lm_batches(SENTENCES, 4, seed=3, **ids)
    assert all(torch.equal(a[0], b[0]) for a, b in zip(batches, again))
    seen = sorted(tuple(row[row != IGNORE_INDEX][:-1].tolist()) for _, targets in batches for row in targets)
    assert seen == sorted(tuple(s) for s in SENTENCES)
    in_order = lm_batches(SENTENCES, 4, shuffle=False, **ids)
    assert in_order[0][0][:, 1:2].flatten().tolist() == [s[0] for s in SENTENCES[:4]]


def test_perplexity_is_exp_of_the_mean_token_nll_computed_by_hand() -> None:
    model = tiny_lm().eval()
    batches = [lm_batch(SENTENCES[:2], bos_id=BOS, eos_id=EOS, pad_id=PAD),
               lm_batch(SENTENCES[2:], bos_id=BOS, eos_id=EOS, pad_id=PAD)]
    nll, count = 0.0, 0
    for inputs, targets in batches:  # by hand: log-softmax, pick the target, skip padding
        log_probs = model(inputs).log_softmax(-1)  # (B, T, V)
        for b in range(targets.size(0)):
            for t in range(targets.size(1)):
                if targets[b, t] != IGNORE_INDEX:
                    nll -= log_probs[b, t, targets[b, t]].item()
                    count += 1
    assert count == sum(len(s) + 1 for s in SENTENCES)
    assert perplexity(model, batches) == pytest.approx(math.exp(nll / count), rel=1e-5)


def test_a_uniform_model_has_perplexity_equal_to_the_vocabulary_size() -> None:
    model = tiny_lm()
    with torch.no_grad():
        for p in model.output_layer.parameters():
            p.zero_()  # tied: this also zeroes the embedding, so every logit is 0
    batch = lm_batch(SENTENCES, bos_id=BOS, eos_id=EOS, pad_id=PAD)
    assert perplexity(model, [batch]) == pytest.approx(V, rel=1e-5)


def test_next_token_loss_matches_cross_entropy_over_the_real_tokens() -> None:
    model = tiny_lm().eval()
    inputs, targets = lm_batch(SENTENCES, bos_id=BOS, eos_id=EOS, pad_id=PAD)
    real = targets != IGNORE_INDEX
    expected = F.cross_entropy(model(inputs)[real], targets[real])
    assert torch.allclose(next_token_loss(model, inputs, targets), expected)


def test_training_lowers_the_loss_and_perplexity_leaves_the_mode_alone() -> None:
    model = tiny_lm()
    batch = lm_batch(SENTENCES, bos_id=BOS, eos_id=EOS, pad_id=PAD)
    before = perplexity(model, [batch])
    assert model.training  # perplexity switches to eval and back
    losses = train_steps(model, [batch] * 60, lr=1e-2, warmup_steps=5)
    assert len(losses) == 60 and losses[-1] < 0.5 * losses[0]
    assert perplexity(model, [batch]) < before / 2


def test_perplexity_refuses_batches_without_scored_tokens() -> None:
    inputs = torch.tensor([[BOS, 4]])
    targets = torch.full_like(inputs, IGNORE_INDEX)
    with raises(ValueError, "tokens"):
        perplexity(tiny_lm(), [(inputs, targets)])


def test_caption_corpus_reads_one_side_of_the_fixture() -> None:
    from pathlib import Path

    from transformer_lib.language_models import caption_corpus
    from transformer_lib.vocab import SPECIALS
    from transformer_lib.tokenizers import word_splitter

    fixture = Path(__file__).parent / "fixtures" / "multi30k"
    checksums = {line.split()[1]: line.split()[0] for line in (fixture / "SHA256SUMS").read_text().splitlines()}
    corpus = caption_corpus(fixture, checksums=checksums, min_freq=1, extra_specials=("<mask>",))
    assert corpus.vocab.tokens[:5] == [*SPECIALS, "<mask>"]
    assert len(corpus.ids["train"]) == 60 and len(corpus.ids["val"]) == 8
    first = corpus.text["train"][0]
    assert corpus.vocab.decode(corpus.ids["train"][0]) == word_splitter("en")(first.lower())
    with raises(ValueError, "'train'"):
        caption_corpus(fixture, checksums=checksums, splits=("val",))
