"""Chapter 7's page helpers (``transformer_lib.book.chapters.beyond``): the reversal sequences of
section 7.4 and the caption samples of section 7.5."""

from __future__ import annotations

import torch

from transformer_lib.book.chapters.beyond import reversal_sequences, sample_captions, sequence_table
from transformer_lib.config import TransformerConfig
from transformer_lib.language_models import IGNORE_INDEX
from transformer_lib.model import DecoderOnlyTransformer
from transformer_lib.vocab import SPECIALS, Vocab

LETTERS = Vocab([*SPECIALS, *"abcdefghij"])


def test_a_reversal_sequence_is_the_question_bos_the_answer_eos() -> None:
    inputs, targets = reversal_sequences(LETTERS, 4, 16, torch.Generator().manual_seed(0))
    assert inputs.shape == targets.shape == (16, 9)
    question = inputs[:, :4]
    assert (question >= len(SPECIALS)).all()
    assert (inputs[:, 4] == LETTERS.bos_id).all()
    assert torch.equal(inputs[:, 5:], question.flip(1)[:, :4])
    assert (targets[:, :4] == IGNORE_INDEX).all()  # the question is not scored
    assert torch.equal(targets[:, 4:8], question.flip(1))  # the answer is, then <eos>
    assert (targets[:, 8] == LETTERS.eos_id).all()


def test_reversal_sequences_follow_their_generator() -> None:
    first = reversal_sequences(LETTERS, 3, 8, torch.Generator().manual_seed(5))
    again = reversal_sequences(LETTERS, 3, 8, torch.Generator().manual_seed(5))
    assert all(torch.equal(a, b) for a, b in zip(first, again))


def test_the_sequence_table_marks_what_is_not_scored() -> None:
    inputs, targets = reversal_sequences(LETTERS, 2, 1, torch.Generator().manual_seed(1))
    table = sequence_table(LETTERS, inputs[0].tolist(), targets[0].tolist())
    assert list(table["position"]) == list(range(5))
    assert list(table["reads"])[2] == "<bos>"
    assert list(table["predicts"])[:2] == ["not scored", "not scored"]
    assert list(table["predicts"])[-1] == "<eos>"


def test_sampled_captions_start_with_the_prompt_and_repeat_with_the_seed() -> None:
    words = Vocab([*SPECIALS, "a", "man", "in", "red", "shirt"])
    torch.manual_seed(0)
    model = DecoderOnlyTransformer(TransformerConfig.decoder_only(
        "tiny", vocab_size=len(words), d_model=16, d_ff=32, max_len=16)).eval()
    prompt = ["a", "man"]
    captions = sample_captions(model, words, prompt, n=4, seed=3, max_new_tokens=5, temperature=2.0)
    assert len(captions) == 4
    assert all(caption[:2] == prompt and len(caption) <= 2 + 5 for caption in captions)
    assert sample_captions(model, words, prompt, n=4, seed=3, max_new_tokens=5, temperature=2.0) == captions
