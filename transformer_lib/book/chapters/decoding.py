"""Chapter 6's shared set-up: the two trained models its sections decode with, the test set, its
decoded translations, and the trained model's committed outputs.

Both models are trained by the command-line trainer itself (``python -m transformer_lib.cli.train``,
called in this process), once: the first section that needs one trains it into the book's cache
(:mod:`transformer_lib.book.cache`) and the others load it from there. ``TRANSFORMER_BOOK_CHECKPOINT``
points the sections at a translation model of your own instead.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from transformer_lib.book.artifacts import load_artifacts, sources_digest
from transformer_lib.book.cache import cached
from transformer_lib.book.chapters.training import reverse_task
from transformer_lib.book.experiment import current_profile
from transformer_lib.evaluation import bleu_scores
from transformer_lib.multi30k import load_multi30k
from transformer_lib.translator import Translator, evaluate_bleu

__all__ = ["CHECKPOINT_ENV", "Committed", "TestSet", "committed_outputs", "decoded_test_set", "one_per_length",
           "reverse_translator", "test_set", "translation_model"]

CHECKPOINT_ENV = "TRANSFORMER_BOOK_CHECKPOINT"


def _train(args: list[str]) -> dict[str, Any]:
    """``python -m transformer_lib.cli.train ARGS`` in this process, its log kept off the page."""
    from transformer_lib.cli import train

    log = io.StringIO()
    with contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
        run = train.main(args)
    if not isinstance(run, dict):
        raise RuntimeError(f"python -m transformer_lib.cli.train {' '.join(args)} failed:\n{log.getvalue()[-2000:]}")
    return run


def reverse_translator(device: torch.device | str = "cpu") -> Translator:
    """The reverse model of ``python -m transformer_lib.cli.train --task reverse`` (the chapter-5 settings,
    until every held-out sequence comes out right), trained once and then loaded from the cache."""
    profile = current_profile()
    folder = cached("reverse-model", {"profile": profile},
                    lambda out: _train(["--task", "reverse", "--profile", profile, "--out", str(out), "--no-progress"]))
    return Translator.from_checkpoint(folder / "checkpoint.pt", device=device)


def one_per_length() -> list[str]:
    """One held-out reverse-task source of each length (the trainer's held-out set, never seen in
    training), shortest first, as text."""
    task = reverse_task()
    by_length = {len(src): src for src, _ in task.heldout}
    return [" ".join(task.vocab.decode(by_length[n])) for n in sorted(by_length)]


def translation_model(device: torch.device | str = "cpu") -> tuple[Translator, str]:
    """The Multi30k model the sections decode with, and a line saying which it is.

    ``$TRANSFORMER_BOOK_CHECKPOINT`` if set (``model.pt`` where a run wrote one, else
    ``checkpoint.pt``); else ``python -m transformer_lib.cli.train --task multi30k`` in the current
    profile, trained once (the run's own choice of weights: the last, or the average of the last five
    epochs) and then loaded from the cache.
    """
    checkpoint = os.environ.get(CHECKPOINT_ENV, "").strip()
    if checkpoint:
        where = f"the model from {CHECKPOINT_ENV}={checkpoint}"
        path = Path(checkpoint)
    else:
        profile = current_profile()
        folder = cached("multi30k-model", {"profile": profile},
                        lambda out: _train(["--task", "multi30k", "--profile", profile, "--out", str(out),
                                            "--no-progress"]))
        selection = json.loads((folder / "metrics.json").read_text())["selection"]
        path = folder / selection["checkpoint"]
        where = f"this page's model: `python -m transformer_lib.cli.train --task multi30k --profile {profile}`"
    translator = Translator.from_checkpoint(path, device=device)
    if translator.task != "multi30k":
        raise ValueError(f"{path} is a {translator.task!r} checkpoint, not multi30k")
    return translator, where


@dataclass(frozen=True)
class TestSet:
    """Multi30k's test 2016 in the model's direction: ``pairs`` of (source, reference) text."""

    pairs: list[tuple[str, str]]

    @property
    def sources(self) -> list[str]:
        return [source for source, _ in self.pairs]

    @property
    def references(self) -> list[str]:
        return [reference for _, reference in self.pairs]


def test_set(translator: Translator) -> TestSet:
    """The 1,000 test sentences (raw files: ``MULTI30K_DIR``, or a checksummed download)."""
    data = translator.data
    return TestSet(load_multi30k("test", src_lang=data["src_lang"], tgt_lang=data["tgt_lang"]))


def _file_digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


def decoded_test_set(translator: Translator, tests: TestSet, beam_sizes: tuple[int, ...] = (1, 2, 4)) -> dict[str, Any]:
    """:func:`~transformer_lib.translator.evaluate_bleu` of the model on the test set, greedy and for
    each beam size: decoded once per model (its weights' digest is the cache key), then the
    translations are read back and scored again.

    Returns the structure ``evaluate_bleu`` returns: ``{"greedy" | "beam N": {"bleu",
    "bleu_lowercased", "seconds", "translations", "tokens"}}`` (``seconds``: the decoding time when
    it was measured).
    """
    weights = hashlib.sha256()
    for name, tensor in translator.model.state_dict().items():
        weights.update(name.encode())
        weights.update(tensor.detach().cpu().numpy().tobytes())
    key = {"weights": weights.hexdigest()[:16], "sources": sources_digest(tests.sources), "beams": list(beam_sizes),
           "device": translator.device.type}

    def decode(folder: Path) -> None:
        results = evaluate_bleu(translator, tests.pairs, beam_sizes=beam_sizes)
        kept = {name: {k: r[k] for k in ("seconds", "translations", "tokens")} for name, r in results.items()}
        (folder / "decoded.json").write_text(json.dumps(kept, ensure_ascii=False), encoding="utf-8")

    kept = json.loads((cached("multi30k-decoded", key, decode) / "decoded.json").read_text(encoding="utf-8"))
    results = {}
    for name, r in kept.items():
        scores = bleu_scores(r["translations"], tests.references)
        results[name] = {"bleu": scores["cased"], "bleu_lowercased": scores["lowercased"], **r}
    return results


@dataclass(frozen=True)
class Committed:
    """The trained model's committed outputs (``transformer_lib/book/runs/artifacts/``), where they
    are installed, and whether the sections show them: in the fast profile, where this page's own
    model is too small to translate well."""

    artifacts: dict[str, Any] | None
    shown: bool

    @property
    def label(self) -> str:
        return "the trained model (committed)" if self.shown else "this page's model"


def committed_outputs(tests: TestSet) -> Committed:
    """The committed outputs, checked to be for these test sentences in this order."""
    artifacts = load_artifacts()
    if artifacts is not None and artifacts["test"]["sources_sha256"] != sources_digest(tests.sources):
        raise ValueError("the committed artifacts are for other test sentences than MULTI30K_DIR's test split")
    return Committed(artifacts, current_profile() == "fast" and artifacts is not None)
