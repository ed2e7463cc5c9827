"""Tests of transformer_lib.evaluation: detokenization, BLEU and chrF as sacrebleu computes them, WER and CER,
exact match."""

from __future__ import annotations

import gzip
import math
import random
from pathlib import Path

import pytest
import sacrebleu
import torch
from errors import raises

from transformer_lib.tokenizers import word_splitter
from transformer_lib.evaluation import (
    BleuScore, ChrfScore, bleu_scores, corpus_bleu, corpus_cer, corpus_chrf,
    corpus_wer, exact_match, paired_bootstrap, translation_metrics, word_edits
)
from transformer_lib.tokenizers import detokenize

# --------------------------------------------------------------------------------------------------
# Detokenization


@pytest.mark.parametrize(
    "tokens, text",
    [
        ("A man 's bike .", "A man's bike."),
        ("He is n't here , is he ?", "He isn't here, is he?"),
        ("I ca n't go ; it 's 5:30 .", "I can't go; it's 5:30."),
        ('She said " hello " to them .', 'She said "hello" to them.'),
        ("A man in a black t - shirt .", "A man in a black t-shirt."),
        ("A game of tug - of - war .", "A game of tug-of-war."),
        ("A 3 - year - old child .", "A 3-year-old child."),
        ("Two men ( one in red ) play .", "Two men (one in red) play."),
        ("They 're walking ; she 'll run !", "They're walking; she'll run!"),
        ("Dogs ' toys , cats ' toys .", "Dogs' toys, cats' toys."),
        ("A dog .", "A dog."),
    ],
)
def test_detokenize_english(tokens: str, text: str) -> None:
    assert detokenize(tokens.split(), "en") == text


@pytest.mark.parametrize(
    "tokens, text",
    [
        ("Ein Mann im T-Shirt fährt Fahrrad .", "Ein Mann im T-Shirt fährt Fahrrad."),
        ('Ein Kind , das " Hallo " sagt .', 'Ein Kind, das "Hallo" sagt.'),
    ],
)
def test_detokenize_german(tokens: str, text: str) -> None:
    assert detokenize(tokens.split(), "de") == text


def test_detokenize_is_not_joining_on_spaces() -> None:
    tokens = ["A", "man", "'s", "bike", "."]
    assert detokenize(tokens) != " ".join(tokens)


@pytest.mark.parametrize(
    "lang, sentence",
    [
        ("en", "A man in a blue t-shirt isn't smiling, but the dog's tail is wagging."),
        ("en", 'Two kids (twins?) play "tug-of-war" on a well-kept lawn.'),
        ("en", "A woman can't find her keys; she's looking under the mat!"),
        ("de", "Ein Mann in einem blauen T-Shirt lächelt nicht, aber der Hund wedelt mit dem Schwanz."),
        ("de", 'Zwei Kinder (Zwillinge?) spielen "Tauziehen" auf einem gepflegten Rasen.'),
    ],
)
def test_detokenize_inverts_the_spacy_tokenizer(lang: str, sentence: str) -> None:
    tokens = word_splitter(lang)(sentence)
    assert detokenize(tokens, lang) == sentence


@pytest.mark.multi30k
@pytest.mark.parametrize("lang", ["en", "de"])
def test_detokenize_round_trips_the_multi30k_test_set(lang: str, real_multi30k: Path) -> None:
    """detokenize(tokenize(s)) gives back s for at least 99% of the test sentences (the few that
    do not have stray spaces or quotes in the raw text)."""
    path = real_multi30k / f"test_2016_flickr.{lang}.gz"
    sentences = gzip.open(path, "rt", encoding="utf-8").read().splitlines()
    tokenize = word_splitter(lang)
    same = sum(detokenize(tokenize(s), lang) == s.strip() for s in sentences)
    assert same / len(sentences) >= 0.99


def test_detokenize_rejects_a_string() -> None:
    with raises(TypeError, "str"):
        detokenize("A man .")


# --------------------------------------------------------------------------------------------------
# BLEU

HYPOTHESES = [
    "A man's bike is leaning against a wall.",
    "Two dogs run through the snow.",
    "a woman sings on a stage",
    "Children are playing in a park.",
]
REFERENCES = [
    "A man's bicycle leans against a wall.",
    "Two dogs are running through the snow.",
    "A woman is singing on stage.",
    "Children are playing in the park.",
]


def test_bleu_equals_sacrebleu_called_directly() -> None:
    ours = corpus_bleu(HYPOTHESES, REFERENCES)
    theirs = sacrebleu.corpus_bleu(HYPOTHESES, [REFERENCES])
    assert ours.score == theirs.score
    assert list(ours.precisions) == list(theirs.precisions)
    assert ours.brevity_penalty == theirs.bp
    assert (ours.sys_len, ours.ref_len) == (theirs.sys_len, theirs.ref_len)
    assert 0 < ours.score < 100


def test_lowercased_bleu_equals_sacrebleu_called_directly() -> None:
    ours = corpus_bleu(HYPOTHESES, REFERENCES, lowercase=True)
    theirs = sacrebleu.corpus_bleu(HYPOTHESES, [REFERENCES], lowercase=True)
    assert ours.score == theirs.score
    assert ours.score > corpus_bleu(HYPOTHESES, REFERENCES).score  # "a woman" now matches "A woman"


def test_tokenize_none_equals_sacrebleu_and_says_so() -> None:
    ours = corpus_bleu(HYPOTHESES, REFERENCES, tokenize="none")
    theirs = sacrebleu.corpus_bleu(HYPOTHESES, [REFERENCES], tokenize="none")
    assert ours.score == theirs.score and "tok:none" in ours.signature
    # "wall." is one token without 13a's tokenization, so matches are lost
    assert ours.score < corpus_bleu(HYPOTHESES, REFERENCES).score


def test_bleu_by_hand() -> None:
    """Hypothesis 'the cat sat on the mat' against 'the cat is on the mat': 5/6 unigrams, 3/5
    bigrams, 1/4 trigrams and 0/3 four-grams match; the zero count is smoothed to 1/(2*3)
    (sacrebleu's default 'exp' smoothing); same length, so no brevity penalty."""
    result = corpus_bleu(["the cat sat on the mat"], ["the cat is on the mat"])
    precisions = [5 / 6, 3 / 5, 1 / 4, 1 / 6]
    expected = 100 * math.exp(sum(math.log(p) for p in precisions) / 4)
    assert result.score == pytest.approx(expected, abs=1e-9)
    assert result.brevity_penalty == 1.0


def test_bleu_signature_and_label() -> None:
    scores = bleu_scores(HYPOTHESES, REFERENCES)
    cased, lower = scores["cased"], scores["lowercased"]
    assert isinstance(cased, BleuScore)
    assert "case:mixed" in cased.signature and "tok:13a" in cased.signature and "nrefs:1" in cased.signature
    assert f"version:{sacrebleu.__version__}" in cased.signature
    assert "case:lc" in lower.signature
    assert "lowercased, for comparison with older Multi30k papers" in str(lower)
    assert "lowercased" not in str(cased) and cased.signature in str(cased)


def test_detokenized_output_scores_higher_than_space_joined_tokens() -> None:
    tokenize = word_splitter("en")
    tokens = [tokenize(r) for r in REFERENCES]
    assert corpus_bleu([detokenize(t) for t in tokens], REFERENCES).score == pytest.approx(100.0)
    assert corpus_bleu([" ".join(t) for t in tokens], REFERENCES).score < 100.0


@pytest.mark.parametrize(
    "hypotheses, references, error, named",
    [
        (["a b"], ["a b", "c d"], ValueError, [1, 2]),
        ([], [], ValueError, []),
        ([["a", "b"]], ["a b"], TypeError, ["list"]),
        ("a b", "a b", TypeError, ["str"]),
    ],
)
def test_bleu_rejects_bad_input(hypotheses, references, error, named: list) -> None:
    with raises(error, *named):
        corpus_bleu(hypotheses, references)


# --------------------------------------------------------------------------------------------------
# chrF, WER and CER


def test_chrf_equals_sacrebleu_called_directly() -> None:
    ours = corpus_chrf(HYPOTHESES, REFERENCES)
    theirs = sacrebleu.corpus_chrf(HYPOTHESES, [REFERENCES])
    assert isinstance(ours, ChrfScore)
    assert ours.score == theirs.score and 0 < ours.score < 100
    assert "nc:6" in ours.signature and "nw:0" in ours.signature and "nrefs:1" in ours.signature
    assert ours.signature in str(ours) and str(ours).startswith("chrF = ")


def test_identical_text_scores_perfectly_on_every_metric() -> None:
    scores = translation_metrics(REFERENCES, REFERENCES)
    assert scores == pytest.approx({"BLEU": 100.0, "chrF": 100.0, "WER": 0.0, "CER": 0.0}, abs=1e-9)


def test_one_substituted_word_in_four() -> None:
    """One word of four replaced: WER 1/4; CER counts the characters changed, 'dog' -> 'cat' is
    3 substitutions in the reference's 15 characters (spaces included)."""
    assert corpus_wer(["a cat runs fast"], ["a dog runs fast"]) == pytest.approx(0.25)
    assert corpus_cer(["a cat runs fast"], ["a dog runs fast"]) == pytest.approx(3 / 15)


def test_error_rates_divide_by_the_reference_not_the_hypothesis() -> None:
    """One inserted word: 1 edit over the reference's 4 words (1/5 if the arguments were swapped)."""
    assert corpus_wer(["a b c d e"], ["a b c d"]) == pytest.approx(1 / 4)
    assert corpus_cer(["ab"], ["a"]) == pytest.approx(1.0)  # one insertion, one reference character


def test_wer_is_pooled_over_the_corpus_not_averaged() -> None:
    """1 edit in 6 reference words is 1/6; the mean of the sentence rates would be (1/2 + 0) / 2."""
    assert corpus_wer(["a b", "a b c d"], ["a x", "a b c d"]) == pytest.approx(1 / 6)


def test_chrf_credits_a_wrong_ending_where_wer_does_not() -> None:
    """A right stem with the wrong ending and an unrelated word are the same one error for WER;
    chrF gives the stem credit."""
    reference = ["The dog is rolling in the grass."]
    ending, other = ["The dog is rolls in the grass."], ["The dog is asleep in the grass."]
    assert corpus_wer(ending, reference) == corpus_wer(other, reference) == pytest.approx(1 / 7)
    assert corpus_chrf(ending, reference).score > corpus_chrf(other, reference).score + 5
    assert corpus_cer(ending, reference) < corpus_cer(other, reference)


@pytest.mark.parametrize("metric", [corpus_chrf, corpus_wer, corpus_cer])
@pytest.mark.parametrize(
    "hypotheses, references, error, named",
    [
        (["a b"], ["a b", "c d"], ValueError, [1, 2]),
        ([], [], ValueError, []),
        ([["a", "b"]], ["a b"], TypeError, ["list"]),
        ("a b", "a b", TypeError, ["str"]),
    ],
)
def test_other_metrics_reject_bad_input(metric, hypotheses, references, error, named: list) -> None:
    with raises(error, *named):
        metric(hypotheses, references)


@pytest.mark.parametrize("metric, name", [(corpus_wer, "WER"), (corpus_cer, "CER")])
def test_error_rates_reject_an_empty_reference(metric, name: str) -> None:
    with raises(ValueError, "references[1]", name):
        metric(["a b", "c"], ["a b", " "])


def test_word_edits_name_each_edit() -> None:
    assert word_edits("a cat runs", "a dog runs fast") == [("substitution", "dog", "cat"), ("deletion", "fast", "")]
    assert word_edits("a big dog runs", "a dog runs") == [("insertion", "", "big")]
    assert word_edits("a dog runs", "a dog runs") == []


@pytest.mark.parametrize("hypothesis, reference", list(zip(HYPOTHESES, REFERENCES)))
def test_word_edits_are_what_wer_counts(hypothesis: str, reference: str) -> None:
    edits = word_edits(hypothesis, reference)
    assert len(edits) / len(reference.split()) == pytest.approx(corpus_wer([hypothesis], [reference]))
    assert len(edits) > 0


def test_word_edits_reject_an_empty_reference() -> None:
    with raises(ValueError, '0'):
        word_edits("a b", "")


# --------------------------------------------------------------------------------------------------
# Exact match


def test_exact_match() -> None:
    assert exact_match([[5, 6], [7, 8], [9]], [[5, 6], [7, 9], [9]]) == pytest.approx(2 / 3)
    assert exact_match([["a", "b"]], [["a", "b"]]) == 1.0
    assert exact_match([[5, 6]], [[5, 6, 7]]) == 0.0  # a missing token is wrong
    assert exact_match([torch.tensor([5, 6]), torch.tensor([1])], [[5, 6], [2]]) == 0.5


def test_exact_match_rejects_mismatched_lengths() -> None:
    with raises(ValueError, '2', '1'):
        exact_match([[1], [2]], [[1]])


# --- paired bootstrap resampling -------------------------------------------------------------------

WORDS = "a the dog cat man woman runs sits walks on over mat park street red blue big small".split()


def _corpus(n: int = 80, seed: int = 0) -> tuple[list[str], list[str], list[str]]:
    """References, a good system (every other sentence loses its last two words) and a bad one (random
    words), as plain strings: synthetic, so the test needs no data."""
    rng = random.Random(seed)
    references = [" ".join(rng.choice(WORDS) for _ in range(9)) + " ." for _ in range(n)]
    good = [r if i % 2 else " ".join(r.split()[:-3]) + " ." for i, r in enumerate(references)]
    bad = [" ".join(rng.choice(WORDS) for _ in range(9)) + " ." for _ in range(n)]
    return references, good, bad


@pytest.mark.parametrize("metric", ["bleu", "chrf"])
def test_paired_bootstrap_finds_identical_systems_indistinguishable(metric: str) -> None:
    references, good, _ = _corpus()
    result = paired_bootstrap(good, list(good), references, metric=metric)
    assert result.p_value == 1.0 and result.verdict() == "indistinguishable"
    assert result.baseline == result.system
    whole = corpus_bleu(good, references) if metric == "bleu" else corpus_chrf(good, references)
    assert result.system.score == pytest.approx(whole.score, abs=1e-9)
    low, high = result.system.interval
    assert low < result.system.mean < high and low < result.system.score < high
    assert "bs:1000" in result.signature and "seed:" in result.signature


def test_paired_bootstrap_finds_a_clearly_better_system_and_not_a_one_word_change() -> None:
    references, good, bad = _corpus()
    clear = paired_bootstrap(bad, good, references, n_samples=500)
    assert clear.p_value <= 2 / 501 and clear.verdict() == "system better"  # at most one draw in 500 against
    assert clear.baseline.interval[1] < clear.system.interval[0], "the 95% intervals do not overlap"
    assert paired_bootstrap(good, bad, references, n_samples=500).verdict() == "baseline better"
    one_word = list(good)
    one_word[1] = one_word[1].replace(one_word[1].split()[0], "zebra", 1)
    close = paired_bootstrap(good, one_word, references, n_samples=500)
    assert close.system.score < close.baseline.score and close.p_value > 0.05
    assert close.verdict() == "indistinguishable"


def test_paired_bootstrap_rejects_bad_input() -> None:
    references, good, _ = _corpus(5)
    with raises(ValueError, 4, 5):
        paired_bootstrap(good[:4], good, references)
    with raises(ValueError, "n_samples", 0):
        paired_bootstrap(good, good, references, n_samples=0)
    with raises(ValueError, "'ter'"):
        paired_bootstrap(good, good, references, metric="ter")
