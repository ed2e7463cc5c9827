"""Scoring output: corpus BLEU on detokenized text (via sacrebleu), and exact match for toy tasks.

BLEU is only comparable between papers when it is computed the same way (Post 2018, "A Call for
Clarity in Reporting BLEU Scores"). So we follow sacrebleu's rules: the model's output is turned
back into ordinary text (:func:`detokenize`), scored against the *raw* reference sentences, and
sacrebleu tokenizes both itself. Every score carries sacrebleu's *signature*, the string that says
exactly how it was computed (``nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0``).

Older Multi30k papers often report BLEU on lowercased, pre-tokenized text, which gives higher
numbers; :func:`bleu_scores` reports a lowercased score next to the cased one, labelled as such.

Results of longer runs, committed with the book as ``book/results/*.json``, are read and shown by
:func:`committed_results`, :func:`describe_run`, :func:`results_table` and :func:`bleu_table`
(chapters 5 and 6).

This module imports nothing from the model.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

__all__ = [
    "detokenize",
    "BleuScore",
    "corpus_bleu",
    "bleu_scores",
    "exact_match",
    "RESULTS_DIR",
    "committed_results",
    "describe_run",
    "results_table",
    "bleu_table",
    "recipe",
    "recipe_table",
]

_WORD_END = re.compile(r"[^\W_]$")  # the token ends with a letter or digit
_WORD_START = re.compile(r"^[^\W_]")  # the token starts with a letter or digit


@lru_cache(maxsize=None)
def _moses_detokenizer(lang: str) -> Any:
    from sacremoses import MosesDetokenizer  # imported lazily: only detokenizing needs it

    return MosesDetokenizer(lang=lang)


def _undo_spacy_splits(tokens: Sequence[str]) -> list[str]:
    """Re-join the two splits spaCy makes inside words, which Moses' rules do not know.

    - ``"n't"`` belongs to the word before it: spaCy splits "isn't" into ``is`` + ``n't`` and
      "can't" into ``ca`` + ``n't``, so gluing gives back the original spelling.
    - spaCy's English tokenizer splits hyphens *inside* words ("t-shirt" -> ``t`` ``-`` ``shirt``).
      A ``-`` token between two word tokens is re-joined. This also joins a dash that stood between
      spaces in the original ("a - b"), but in Multi30k's English training text hyphens inside
      words outnumber such dashes 200 to 1.
    """
    out: list[str] = []
    i = 0
    while i < len(tokens):
        token = tokens[i]
        if token.lower() == "n't" and out:
            out[-1] += token
        elif (
            token == "-"
            and out
            and i + 1 < len(tokens)
            and _WORD_END.search(out[-1])
            and _WORD_START.search(tokens[i + 1])
        ):
            out[-1] += "-" + tokens[i + 1]
            i += 1
        else:
            out.append(token)
        i += 1
    return out


def detokenize(tokens: Sequence[str], lang: str = "en") -> str:
    """Turn a list of tokens back into ordinary text, the inverse of the spaCy tokenizer.

    A model outputs tokens without the whitespace between them, so joining on spaces gives
    ``"A man 's bike ."`` where the reference says ``"A man's bike."``; sacrebleu would then count
    mismatches that are only spacing. We use the Moses detokenizer (``sacremoses``, the reference
    rules of the Moses SMT toolkit: punctuation, quotes, brackets, clitics such as ``'s``) after
    re-joining the two splits spaCy makes inside words (``n't`` and intra-word hyphens).

    On Multi30k's 1,000 English test sentences, ``detokenize(tokenizer("en")(s)) == s`` holds for
    more than 99% of them (checked in ``tests/test_evaluation.py``).

    Args:
        tokens: the tokens of one sentence, e.g. from :meth:`transformer_lib.data.Vocab.decode`.
        lang: language code for Moses' language-specific rules (``"en"``, ``"de"``, ...).

    Returns:
        The sentence as a string.

    Example:
        >>> detokenize(["A", "man", "'s", "t", "-", "shirt", "is", "n't", "red", "."])
        "A man's t-shirt isn't red."
    """
    if isinstance(tokens, str):
        raise TypeError("detokenize expects a list of tokens, not a string; split it first or use it as is")
    joined = _undo_spacy_splits(tokens)
    # unescape=False: our tokens are plain text, not Moses' XML-escaped tokens (&amp; stays &amp;).
    return _moses_detokenizer(lang).detokenize(joined, unescape=False)


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


def _check_pairs(hypotheses: Sequence[str], references: Sequence[str]) -> None:
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
        raise ValueError("cannot compute BLEU on an empty corpus")


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


# --------------------------------------------------------------------------------------------------
# Results of longer runs, committed with the book

# book/results/ of the repository this package sits in (a clone, or the website build). Installed
# from git (Colab) the package has no such folder, and there are no committed results to show.
RESULTS_DIR = Path(__file__).resolve().parent.parent / "book" / "results"
_RUN_KEYS = ("command", "hardware", "final")


def committed_results(folder: str | Path | None = None) -> dict[str, dict[str, Any]]:
    """The metrics files committed with the book, by name (the file name without ``.json``).

    Each file is the ``metrics.json`` that ``python -m transformer_lib.train`` writes (the command,
    the hardware, the settings, the final metrics per split, the loss history and, with ``--bleu``,
    the BLEU of greedy and beam decoding), copied into ``book/results/``, e.g.
    ``multi30k_full_metrics.json``.

    Args:
        folder: where to look (default :data:`RESULTS_DIR`).

    Returns:
        ``{name: metrics}`` sorted by name; empty when the folder does not exist.

    Raises:
        ValueError: a file is not JSON, or lacks the entries every run has (``command``,
            ``hardware``, ``final``).
    """
    folder = RESULTS_DIR if folder is None else Path(folder)
    if not folder.is_dir():
        return {}
    results: dict[str, dict[str, Any]] = {}
    for path in sorted(folder.glob("*.json")):
        try:
            metrics = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as error:
            raise ValueError(f"{path} is not valid JSON ({error}); it should be a metrics.json of the train CLI") from None
        missing = [key for key in _RUN_KEYS if not isinstance(metrics, dict) or key not in metrics]
        if missing:
            raise ValueError(
                f"{path} lacks {missing}: results files are the metrics.json that "
                "`python -m transformer_lib.train` writes"
            )
        results[path.stem] = metrics
    return results


def describe_run(metrics: Mapping[str, Any]) -> str:
    """How a run was made: its command, its hardware, its size and duration (and, when it was
    scored, the sacreBLEU signature of its test BLEU).

    Example:
        >>> print(describe_run({"command": "python -m transformer_lib.train --task reverse --out r",
        ...                     "hardware": {"device": "cpu", "torch": "2.5.0"}, "parameters": 1000,
        ...                     "steps": 650, "training_time_s": 90.0, "final": {}}))
        command:  python -m transformer_lib.train --task reverse --out r
        hardware: cpu | torch 2.5.0
        1,000 parameters, 650 steps, 1.5 min of training
    """
    hardware = metrics["hardware"]
    where = hardware.get("gpu", hardware.get("device", "unknown device"))
    size = []
    if "parameters" in metrics:
        size.append(f"{metrics['parameters']:,} parameters")
    if "steps" in metrics:
        size.append(f"{metrics['steps']:,} steps")
    if "training_time_s" in metrics:
        size.append(f"{metrics['training_time_s'] / 60:.1f} min of training")
    lines = [f"command:  {metrics['command']}", f"hardware: {where} | torch {hardware.get('torch', '?')}"]
    if size:
        lines.append(", ".join(size))
    test_bleu = (metrics.get("bleu") or {}).get("test") or {}
    if "greedy" in test_bleu:
        lines.append(f"sacreBLEU: {test_bleu['greedy']['cased']['signature']}")
    return "\n".join(lines)


def results_table(metrics: Mapping[str, Any]) -> Any:
    """A run's final metrics as a ``pandas.DataFrame``, one row per split.

    Columns: ``loss`` (cross-entropy per target token), ``ppl``, ``token_accuracy``, and for toy
    tasks ``exact_match`` (no translation is ever exactly its reference); rounded to 3 decimals.
    """
    import pandas as pd  # imported lazily: only showing results needs it

    columns = ["loss", "ppl", "token_accuracy"]
    if metrics.get("task") != "multi30k":
        columns.append("exact_match")
    frame = pd.DataFrame.from_dict(dict(metrics["final"]), orient="index")
    frame.index.name = "split"
    return frame[[c for c in columns if c in frame.columns]].round(3)


def bleu_table(metrics: Mapping[str, Any], split: str = "test") -> Any:
    """A run's BLEU on ``split``, one row per decoding (``greedy``, ``beam 4``, ...), or ``None``.

    Columns ``BLEU`` (cased: the number to report) and ``BLEU, lowercased`` (for older papers);
    :func:`describe_run` gives the signature. ``None`` when the run was not scored (``--bleu off``).
    """
    import pandas as pd  # imported lazily: only showing results needs it

    scored = (metrics.get("bleu") or {}).get(split)
    if not scored:
        return None
    rows = {name: {"BLEU": r["cased"]["score"], "BLEU, lowercased": r["lowercased"]["score"]} for name, r in scored.items()}
    frame = pd.DataFrame.from_dict(rows, orient="index").round(2)
    frame.index.name = "decoding"
    return frame


def recipe(metrics: Mapping[str, Any]) -> dict[str, Any]:
    """The choices a run made that the recipe comparison varies, read from its results file.

    Example:
        >>> recipe({"data": {"tokenizer": "bpe", "vocab_size": 8000}, "model_config": {"norm_first": False,
        ...         "dropout": 0.1}, "settings": {"schedule": "noam", "lr": 0.0022, "warmup": 800}})
        {'tokens': 'BPE 8,000', 'LayerNorm': 'Post-LN', 'schedule': 'noam', 'peak lr': 0.0022, 'warm-up': 800, 'dropout': 0.1}
    """
    data, config, settings = metrics["data"], metrics["model_config"], metrics["settings"]
    tokens = f"BPE {data['vocab_size']:,}" if data.get("tokenizer") == "bpe" else "words (spaCy)"
    return {
        "tokens": tokens,
        "LayerNorm": "Pre-LN" if config["norm_first"] else "Post-LN",
        "schedule": settings["schedule"],
        "peak lr": settings["lr"],
        "warm-up": settings["warmup"],
        "dropout": config["dropout"],
    }


def recipe_table(runs: Mapping[str, Mapping[str, Any]]) -> Any:
    """Runs side by side, best validation BLEU (beam, lowercased) first: what each chose, and how it did.

    Only validation numbers: the comparison chooses the recipe, and the test set must not take part
    in a choice. Columns: the :func:`recipe` choices, the seed, the validation BLEU (greedy and beam,
    lowercased) of the weights the run selected, the best greedy validation BLEU during training, and
    the final validation loss.
    """
    import pandas as pd  # imported lazily: only showing results needs it

    rows = {}
    for name, metrics in runs.items():
        val = metrics["bleu"]["val"]
        beam = next(key for key in val if key.startswith("beam"))
        during = [row["val_bleu_lowercased"] for row in metrics["per_epoch"] if "val_bleu_lowercased" in row]
        rows[name] = {
            **recipe(metrics),
            "seed": metrics["settings"].get("seed", 0),
            "val BLEU greedy": val["greedy"]["lowercased"]["score"],
            f"val BLEU {beam}": val[beam]["lowercased"]["score"],
            "best epoch BLEU": max(during) if during else float("nan"),
            "val loss": metrics["final"]["val"]["loss"],
        }
    frame = pd.DataFrame.from_dict(rows, orient="index").sort_values(f"val BLEU {beam}", ascending=False)
    frame.index.name = "run"
    return frame.round({"val BLEU greedy": 2, f"val BLEU {beam}": 2, "best epoch BLEU": 2, "val loss": 3})
