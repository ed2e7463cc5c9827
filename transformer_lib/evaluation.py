"""Scoring output: corpus BLEU and chrF on detokenized text (via sacrebleu), word and character
error rates (via jiwer), and exact match for toy tasks.

BLEU is only comparable between papers when it is computed the same way (Post 2018, "A Call for
Clarity in Reporting BLEU Scores"). So we follow sacrebleu's rules: the model's output is turned
back into ordinary text (:func:`transformer_lib.tokenizers.detokenize`, or a tokenizer's
``decode``), scored against the *raw* reference sentences, and
sacrebleu tokenizes both itself. Every score carries sacrebleu's *signature*, the string that says
exactly how it was computed (``nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0``).

Older Multi30k papers often report BLEU on lowercased, pre-tokenized text, which gives higher
numbers; :func:`bleu_scores` reports a lowercased score next to the cased one, labelled as such.

BLEU counts whole words, so "dried" for "dry" earns nothing. Three other measures score the same
text: chrF (Popović 2015, character n-grams, with sacrebleu's signature), and the word and
character error rates WER and CER (edit distances, as in speech recognition) from ``jiwer``, a small,
maintained package made for exactly these two measures.

Whether one system's BLEU is really higher than another's, or only on this test set, is asked by
:func:`paired_bootstrap` (Koehn 2004): sacrebleu's own paired bootstrap resampling gives each
system's mean and 95% interval over resampled test sets, and the p-value of the difference.

The book's committed results of longer runs are shown by :mod:`transformer_lib.book.results`.

This module imports nothing from the model.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

from .validation import check_int

__all__ = [
    "BleuScore",
    "corpus_bleu",
    "bleu_scores",
    "ChrfScore",
    "corpus_chrf",
    "corpus_wer",
    "corpus_cer",
    "translation_metrics",
    "SystemScore",
    "PairedBootstrap",
    "paired_bootstrap",
    "word_edits",
    "exact_match",
]

@dataclass(frozen=True)
class BleuScore:
    """A corpus BLEU score and how it was computed.

    Attributes:
        score: BLEU on the 0-100 scale.
        signature: sacrebleu's signature string; report it with the score.
        precisions: the four n-gram precisions (percent).
        brevity_penalty: the brevity penalty (1.0 when the output is not shorter than the references).
        sys_len, ref_len: total length of the output and of the references (in sacrebleu's tokens).
        lowercase: whether the score was computed on lowercased text.
    """

    score: float
    signature: str
    precisions: tuple[float, ...]
    brevity_penalty: float
    sys_len: int
    ref_len: int
    lowercase: bool

    def __str__(self) -> str:
        label = " (lowercased, for comparison with older Multi30k papers)" if self.lowercase else ""
        return f"BLEU = {self.score:.2f}{label}  [{self.signature}]"


def _check_pairs(hypotheses: Sequence[str], references: Sequence[str], metric: str = "BLEU") -> None:
    for name, texts in (("hypotheses", hypotheses), ("references", references)):
        if isinstance(texts, str):
            raise TypeError(f"{name} must be a list of sentences, not one string")
        for i, text in enumerate(texts):
            if not isinstance(text, str):
                raise TypeError(
                    f"{name}[{i}] is a {type(text).__name__}, not a string; detokenize token lists "
                    "first (see detokenize)"
                )
    if len(hypotheses) != len(references):
        raise ValueError(
            f"got {len(hypotheses)} hypotheses but {len(references)} references; there must be one "
            "reference per hypothesis"
        )
    if len(hypotheses) == 0:
        raise ValueError(f"cannot compute {metric} on an empty corpus")


def corpus_bleu(
    hypotheses: Sequence[str], references: Sequence[str], lowercase: bool = False, tokenize: str = "13a"
) -> BleuScore:
    """Corpus-level BLEU with sacrebleu's default settings (13a tokenization, exponential smoothing).

    Args:
        hypotheses: the system's detokenized output, one string per sentence.
        references: the raw reference sentences, one per hypothesis.
        lowercase: score lowercased text (higher numbers; only for comparison with papers that did).
        tokenize: sacrebleu's tokenizer. Keep the default ``"13a"`` for numbers to report;
            ``"none"`` scores text split on spaces only, i.e. already tokenized text as older
            scripts (``multi-bleu.perl``) did, which chapter 6 measures for comparison.

    Returns:
        A :class:`BleuScore`.

    Example:
        >>> round(corpus_bleu(["A man rides a bike."], ["A man rides a bike."]).score, 2)
        100.0
    """
    from sacrebleu.metrics import BLEU

    _check_pairs(hypotheses, references)
    metric = BLEU(lowercase=lowercase, tokenize=tokenize)
    result = metric.corpus_score(list(hypotheses), [list(references)])
    return BleuScore(
        score=float(result.score),
        signature=str(metric.get_signature()),
        precisions=tuple(float(p) for p in result.precisions),
        brevity_penalty=float(result.bp),
        sys_len=int(result.sys_len),
        ref_len=int(result.ref_len),
        lowercase=lowercase,
    )


def bleu_scores(hypotheses: Sequence[str], references: Sequence[str]) -> dict[str, BleuScore]:
    """Cased BLEU (the number to report) and lowercased BLEU (for older Multi30k papers).

    Returns:
        ``{"cased": BleuScore, "lowercased": BleuScore}``.
    """
    return {
        "cased": corpus_bleu(hypotheses, references),
        "lowercased": corpus_bleu(hypotheses, references, lowercase=True),
    }


@dataclass(frozen=True)
class ChrfScore:
    """A corpus chrF score and how it was computed.

    Attributes:
        score: chrF on the 0-100 scale.
        signature: sacrebleu's signature string; report it with the score.
    """

    score: float
    signature: str

    def __str__(self) -> str:
        return f"chrF = {self.score:.2f}  [{self.signature}]"


def corpus_chrf(
    hypotheses: Sequence[str], references: Sequence[str]
) -> ChrfScore:
    """Corpus-level chrF (Popović 2015) with sacrebleu's default settings.

    chrF is an F-score of character n-grams, n = 1 to 6, spaces left out, with recall weighted
    more than precision (beta = 2): a word with the right stem and the wrong ending ("rolls" for
    "rolling") still shares many character n-grams with the reference, where BLEU counts it wrong.

    Args:
        hypotheses: the system's detokenized output, one string per sentence.
        references: the raw reference sentences, one per hypothesis.

    Returns:
        A :class:`ChrfScore`.

    Example:
        >>> corpus_chrf(["A man rides a bike."], ["A man rides a bike."]).score
        100.0
    """
    from sacrebleu.metrics import CHRF

    _check_pairs(hypotheses, references, "chrF")
    metric = CHRF()
    result = metric.corpus_score(list(hypotheses), [list(references)])
    signature = str(metric.get_signature())
    return ChrfScore(score=float(result.score), signature=signature)


@dataclass(frozen=True)
class SystemScore:
    """One system's score on the test set and over its bootstrap resamples.

    Attributes:
        score: the metric on the whole test set.
        mean: its mean over the resampled test sets.
        interval: the 95% interval of the resampled scores, ``(low, high)``: sacrebleu's ``mean`` plus
            and minus its half-width (the 2.5th to the 97.5th percentile, halved).
    """

    score: float
    mean: float
    interval: tuple[float, float]


@dataclass(frozen=True)
class PairedBootstrap:
    """The result of :func:`paired_bootstrap`: both systems, and how likely their difference is chance.

    Attributes:
        baseline, system: each system's :class:`SystemScore`.
        p_value: the probability of a difference at least this large if the two were equally good.
        n_samples: resampled test sets.
        signature: sacrebleu's signature of the metric and the test (``bs:1000``, ``seed:12345``).
    """

    baseline: SystemScore
    system: SystemScore
    p_value: float
    n_samples: int
    signature: str

    def verdict(self, alpha: float = 0.05) -> str:
        """``"indistinguishable"`` unless ``p_value < alpha``; then which system is better."""
        if self.p_value >= alpha:
            return "indistinguishable"
        return "system better" if self.system.score > self.baseline.score else "baseline better"

    def __str__(self) -> str:
        def fmt(s: SystemScore) -> str:
            return f"{s.score:.2f} (mean {s.mean:.2f}, 95% interval {s.interval[0]:.2f} to {s.interval[1]:.2f})"

        return (f"baseline {fmt(self.baseline)}; system {fmt(self.system)}; p = {self.p_value:.4f}: "
                f"{self.verdict()}  [{self.signature}]")


def paired_bootstrap(
    baseline: Sequence[str], system: Sequence[str], references: Sequence[str], *, metric: str = "bleu",
    n_samples: int = 1000,
) -> PairedBootstrap:
    """Paired bootstrap resampling (Koehn 2004) with sacrebleu's implementation
    (``sacrebleu.significance.PairedTest(test_type="bs")``, as ``sacrebleu --paired-bs`` runs it).

    The test set's sentences are drawn with replacement ``n_samples`` times; both systems are scored
    on each draw (the same sentences for both: paired), which gives each system's mean and 95%
    interval, and the p-value of their difference. The draws are seeded (sacrebleu's seed, 12345,
    or ``$SACREBLEU_SEED``), so the numbers repeat.

    Two identical outputs get ``p_value = 1.0``: sacrebleu counts the resampled differences strictly
    above the observed one, so identical systems (every difference 0) would get its smallest
    p-value, ``1 / (n_samples + 1)``, by the convention it takes from multeval (see
    jhclark/multeval#5); outputs that are the same cannot be told apart.

    Args:
        baseline, system: two systems' detokenized outputs, one string per sentence each.
        references: the raw reference sentences, one per hypothesis.
        metric: ``"bleu"`` or ``"chrf"`` (sacrebleu's defaults, as :func:`corpus_bleu`, :func:`corpus_chrf`).
        n_samples: resampled test sets; the p-value cannot go below ``1 / (n_samples + 1)``.

    Returns:
        A :class:`PairedBootstrap`.
    """
    from sacrebleu.metrics import BLEU, CHRF
    from sacrebleu.significance import PairedTest

    metrics = {"bleu": BLEU, "chrf": CHRF}
    if metric not in metrics:
        raise ValueError(f"metric must be one of {sorted(metrics)}, got {metric!r}")
    check_int("n_samples", n_samples)
    _check_pairs(baseline, references, metric)
    _check_pairs(system, references, metric)
    test = PairedTest([("baseline", list(baseline)), ("system", list(system))], {metric: metrics[metric]()},
                      [list(references)], test_type="bs", n_samples=n_samples)
    signatures, results = test()
    name = next(key for key in results if key != "System")  # sacrebleu's name: "BLEU", "chrF2"
    rows = cast("list[Any]", results[name])  # sacrebleu's Result objects, baseline first
    scores = [SystemScore(float(r.score), float(r.mean), (float(r.mean - r.ci), float(r.mean + r.ci))) for r in rows]
    p_value = 1.0 if list(baseline) == list(system) else float(rows[1].p_value)
    return PairedBootstrap(scores[0], scores[1], p_value, n_samples, str(signatures[name]))


def _check_error_rate_pairs(hypotheses: Sequence[str], references: Sequence[str], metric: str) -> None:
    _check_pairs(hypotheses, references, metric)
    for i, reference in enumerate(references):
        if not reference.strip():
            raise ValueError(
                f"references[{i}] is empty; {metric} divides by the reference's length, so every "
                "reference needs at least one word"
            )


def corpus_wer(
    hypotheses: Sequence[str], references: Sequence[str]
) -> float:
    """Corpus word error rate: word edits (substitutions, deletions, insertions) per reference word.

    The edits are summed over the corpus, then divided by the references' total length (``jiwer``'s
    rule), so it is not the mean of per-sentence rates. Words are what whitespace separates, case
    and punctuation included: ``"bike."`` and ``"bike"`` are different words. Lower is better; it
    exceeds 1 when the output has many more words than the reference.

    Args:
        hypotheses: the system's output, one string per sentence.
        references: the reference sentences, one non-empty string per hypothesis.

    Returns:
        The rate (0 when every hypothesis equals its reference).

    Example:
        >>> corpus_wer(["a man rides a horse"], ["a man rides a bike"])
        0.2
    """
    import jiwer  # imported lazily: only the error rates need it

    _check_error_rate_pairs(hypotheses, references, "WER")
    # jiwer takes the reference first
    return float(jiwer.wer(list(references), list(hypotheses)))


def corpus_cer(
    hypotheses: Sequence[str], references: Sequence[str]
) -> float:
    """Corpus character error rate: :func:`corpus_wer` with characters (spaces included) for words.

    Args:
        hypotheses: the system's output, one string per sentence.
        references: the reference sentences, one non-empty string per hypothesis.

    Returns:
        The rate (0 when every hypothesis equals its reference).

    Example:
        >>> round(corpus_cer(["a cat"], ["a bat"]), 2)
        0.2
    """
    import jiwer

    _check_error_rate_pairs(hypotheses, references, "CER")
    return float(jiwer.cer(list(references), list(hypotheses)))


def translation_metrics(hypotheses: Sequence[str], references: Sequence[str]) -> dict[str, float]:
    """BLEU, chrF (both 0-100, higher is better), WER and CER (lower is better) of the same output.

    Returns:
        ``{"BLEU": ..., "chrF": ..., "WER": ..., "CER": ...}``.
    """
    return {
        "BLEU": corpus_bleu(hypotheses, references).score,
        "chrF": corpus_chrf(hypotheses, references).score,
        "WER": corpus_wer(hypotheses, references),
        "CER": corpus_cer(hypotheses, references),
    }


_EDIT_NAMES = {"substitute": "substitution", "delete": "deletion", "insert": "insertion"}


def word_edits(hypothesis: str, reference: str) -> list[tuple[str, str, str]]:
    """The word edits that :func:`corpus_wer` counts for one sentence, in order.

    Args:
        hypothesis: the system's output for one sentence.
        reference: its reference sentence (not empty).

    Returns:
        One ``(edit, reference word, output word)`` per edit, ``edit`` being ``"substitution"``,
        ``"deletion"`` (no output word: ``""``) or ``"insertion"`` (no reference word: ``""``).
        Their number divided by the reference's word count is the sentence's WER.

    Example:
        >>> word_edits("a cat runs", "a dog runs fast")
        [('substitution', 'dog', 'cat'), ('deletion', 'fast', '')]
    """
    import jiwer

    _check_error_rate_pairs([hypothesis], [reference], "WER")
    aligned = jiwer.process_words(reference, hypothesis)  # jiwer: reference first
    ref_words, hyp_words = aligned.references[0], aligned.hypotheses[0]
    edits = []
    for chunk in aligned.alignments[0]:
        if chunk.type == "equal":
            continue
        ref = ref_words[chunk.ref_start_idx:chunk.ref_end_idx]
        hyp = hyp_words[chunk.hyp_start_idx:chunk.hyp_end_idx]
        for i in range(max(len(ref), len(hyp))):  # a substitution chunk pairs words one to one
            edits.append((_EDIT_NAMES[chunk.type], ref[i] if ref else "", hyp[i] if hyp else ""))
    return edits


def exact_match(predictions: Sequence[Sequence[Any]], references: Sequence[Sequence[Any]]) -> float:
    """Fraction of predictions equal to their reference, element by element (for toy tasks).

    Compare sequences with special tokens removed (``Vocab.decode`` stops at ``<eos>`` and drops
    ``<pad>``/``<bos>``); one wrong, missing or extra token makes the whole sequence wrong.

    Args:
        predictions: one sequence (list of tokens or ids, or a 1-D tensor) per example.
        references: the expected sequences, as many as ``predictions``.

    Returns:
        A number in ``[0, 1]``.

    Example:
        >>> exact_match([[5, 6], [7, 8]], [[5, 6], [7, 9]])
        0.5
    """
    if len(predictions) != len(references):
        raise ValueError(f"got {len(predictions)} predictions but {len(references)} references")
    if len(predictions) == 0:
        raise ValueError("exact_match needs at least one prediction")
    correct = sum(_as_list(p) == _as_list(r) for p, r in zip(predictions, references))
    return correct / len(predictions)


def _as_list(sequence: Sequence[Any]) -> list[Any]:
    tolist = getattr(sequence, "tolist", None)  # tensors and arrays
    return list(tolist()) if callable(tolist) else list(sequence)
