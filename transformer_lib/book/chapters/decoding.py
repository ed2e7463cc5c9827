"""Chapter 6's shared set-up: the two models its sections decode with, the test set and its
decoded translations.

The reverse model (every decision checkable by eye) is trained by the command-line trainer itself
(``python -m transformer_lib.cli.train``, called in this process), once: the first section that needs
it trains it into the book's cache (:mod:`transformer_lib.book.cache`) and the others load it from
there. The translation model is the trained model that ships with the book
(:mod:`transformer_lib.pretrained`), in both profiles; ``TRANSFORMER_BOOK_CHECKPOINT`` points the
sections at a translation model of your own instead. The profile decides how much of the test set
is decoded: the first 100 sentences in the fast profile, all 1,000 in the full one.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
from dataclasses import dataclass
from pathlib import Path
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from transformer_lib.book.artifacts import sources_digest
from transformer_lib.book.cache import cached
from transformer_lib.book.chapters.training import reverse_task
from transformer_lib.book.experiment import current_profile
from transformer_lib.evaluation import bleu_scores
from transformer_lib.multi30k import load_multi30k
from transformer_lib.translator import Translator, evaluate_bleu

__all__ = ["CHECKPOINT_ENV", "TEST_SENTENCES", "TestSet", "decoded_test_set",
           "one_per_length", "reverse_translator", "top_choices", "test_set", "translation_model", "beam_beats_greedy",
           "HEAD_SENTENCES", "KINDS", "validation_pairs", "head_profile", "bleu_without_each_head", "head_chart"]

CHECKPOINT_ENV = "TRANSFORMER_BOOK_CHECKPOINT"
# How many test-2016 sentences a profile decodes: a CPU decodes 100 with beam 4 in seconds.
TEST_SENTENCES = {"fast": 100, "full": None}


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


def top_choices(vocab: Any, tokens: Sequence[int], probabilities: Sequence[Tensor], k: int = 3) -> Any:
    """The steps of a decoding loop as a table, a row per step: the prefix the decoder read and the
    ``k`` likeliest next tokens with their probabilities (section 6.1's loop written out).

    Args:
        vocab: the target vocabulary (its ``tokens`` name the ids).
        tokens: the decoded sequence, ``<bos>`` first; step ``s`` (from 1) read its first ``s`` tokens.
        probabilities: one ``(V,)`` distribution over the next token per step.
    """
    import pandas as pd

    rows = []
    for step, probs in enumerate(probabilities, start=1):
        best = probs.topk(k)
        rows.append({"step": step, "prefix": " ".join(vocab.tokens[i] for i in tokens[:step]), **{
            f"choice {rank + 1}": f"{vocab.tokens[int(i)]}  ({float(p):.3f})"
            for rank, (p, i) in enumerate(zip(best.values, best.indices))}})
    return pd.DataFrame(rows)


def translation_model(device: torch.device | str = "cpu") -> tuple[Translator, str]:
    """The Multi30k model the sections decode with, and a line saying which it is.

    ``$TRANSFORMER_BOOK_CHECKPOINT`` if set (``model.pt`` where a run wrote one, else
    ``checkpoint.pt``); else the trained model shipped with the book (:func:`transformer_lib.pretrained.load`),
    in both profiles: the recipe of chapter 5's full profile, trained once.
    """
    checkpoint = os.environ.get(CHECKPOINT_ENV, "").strip()
    if not checkpoint:
        from transformer_lib import pretrained
        from transformer_lib.book import trained

        translator = trained.translator() if torch.device(device).type == "cpu" else pretrained.load(device=device)
        return translator, "the trained model shipped with the book (transformer_lib.pretrained.load())"
    path = Path(checkpoint)
    translator = Translator.from_checkpoint(path, device=device)
    if translator.task != "multi30k":
        raise ValueError(f"{path} is a {translator.task!r} checkpoint, not multi30k")
    return translator, f"the model from {CHECKPOINT_ENV}={checkpoint}"


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


def test_set(translator: Translator, size: int | None | str = "profile") -> TestSet:
    """Test 2016 in the model's direction (raw files: ``MULTI30K_DIR``, or a checksummed download):
    its first ``size`` sentences, by default as many as the profile decodes (:data:`TEST_SENTENCES`);
    ``None``: all 1,000."""
    if size == "profile":
        size = TEST_SENTENCES[current_profile()]
    if size is not None and (not isinstance(size, int) or size < 1):
        raise ValueError(f"size={size!r}: give a positive number of sentences, or None for all")
    data = translator.data
    pairs = load_multi30k("test", src_lang=data["src_lang"], tgt_lang=data["tgt_lang"])
    return TestSet(list(pairs)[:size])


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


def beam_beats_greedy(translator: Translator, tests: TestSet, beam_size: int = 3, length_penalty: float = 0.6,
                      max_source_tokens: int = 12) -> list[dict[str, Any]]:
    """The test sentences (of at most ``max_source_tokens`` source tokens, for a table that fits a
    page) where beam search's translation scores a higher sentence BLEU against the reference than
    greedy decoding's, largest gain first: ``index``, ``greedy``, ``beam``, both sentence BLEUs."""
    from sacrebleu.metrics import BLEU

    scorer = BLEU(effective_order=True)
    short = [i for i, source in enumerate(tests.sources) if len(translator.source_ids([source])[0]) <= max_source_tokens]
    sources = [tests.sources[i] for i in short]
    greedy = translator.translate(sources, beam_size=1)
    beam = translator.translate(sources, beam_size=beam_size, length_penalty=length_penalty)
    found = []
    for i, g, b in zip(short, greedy, beam):
        reference = [tests.references[i]]
        g_bleu, b_bleu = scorer.sentence_score(g, reference).score, scorer.sentence_score(b, reference).score
        if b_bleu > g_bleu:
            found.append({"index": i, "greedy": g, "beam": b, "greedy_bleu": g_bleu, "beam_bleu": b_bleu})
    return sorted(found, key=lambda row: row["beam_bleu"] - row["greedy_bleu"], reverse=True)


# --- Section 6.7: what the trained model's heads do -------------------------------------------------

KINDS = ("encoder_self", "decoder_self", "decoder_cross")
# Validation sentences a profile measures the heads on: removing each of the 72 heads in turn means
# 72 decodes of them, so the fast profile takes 12 (seconds on a CPU); the full profile takes all.
HEAD_SENTENCES = {"fast": 12, "full": None}


def validation_pairs(translator: Translator, size: int | None | str = "profile") -> list[tuple[str, str]]:
    """Multi30k's validation pairs in the model's direction: the first ``size`` (by default as many
    as the profile measures the heads on, :data:`HEAD_SENTENCES`; ``None``: all 1,014)."""
    if size == "profile":
        size = HEAD_SENTENCES[current_profile()]
    if isinstance(size, str):
        raise ValueError(f"size must be a number of pairs, None (all) or 'profile', got {size!r}")
    data = translator.data
    return list(load_multi30k("val", src_lang=data["src_lang"], tgt_lang=data["tgt_lang"]))[:size]


def head_profile(pairs: Sequence[tuple[str, str]]) -> list[dict[str, Any]]:
    """Per kind of attention, layer and head of the shipped model, teacher-forced on the references
    of ``pairs`` (one pass per sentence): the mean entropy of a query's attention (bits), the mean
    signed offset from query to key (as :func:`transformer_lib.book.trained.head_statistics`), and
    the *modal offset*, the offset where most queries put their largest weight, with the share of
    queries that do (``modal_share``; 1 = a purely positional head), and the share of queries whose
    largest weight is on the current or the previous token (``local_share``: offset 0 or -1).
    Cross-attention has no offsets. Layers and heads are numbered from 1, as the book's charts show
    them (the library's functions index them from 0)."""
    from transformer_lib.book import trained

    maps = [trained.attention(source, reference) for source, reference in pairs]
    rows = []
    for kind in KINDS:
        for layer in range(len(getattr(maps[0], kind))):
            for head in range(getattr(maps[0], kind)[layer].size(0)):
                entropy, distance, count = 0.0, 0.0, 0
                argmax_offsets: list[int] = []
                for m in maps:
                    w = getattr(m, kind)[layer][head]  # (queries, keys)
                    entropy += float(-(w * w.clamp_min(1e-12).log2()).sum())
                    count += w.size(0)
                    if kind != "decoder_cross":
                        offsets = torch.arange(w.size(1)) - torch.arange(w.size(0))[:, None]
                        distance += float((w * offsets).sum())
                        argmax_offsets += (w.argmax(dim=1) - torch.arange(w.size(0))).tolist()
                row = {"kind": kind, "layer": layer + 1, "head": head + 1, "entropy_bits": entropy / count,
                       "mean_offset": None, "modal_offset": None, "modal_share": None, "local_share": None}
                if argmax_offsets:
                    offsets_seen = torch.tensor(argmax_offsets)
                    values, counts = offsets_seen.unique(return_counts=True)
                    row.update(mean_offset=distance / count, modal_offset=int(values[counts.argmax()]),
                               modal_share=float(counts.max()) / len(argmax_offsets),
                               local_share=float(((offsets_seen == 0) | (offsets_seen == -1)).float().mean()))
                rows.append(row)
    return rows


def _keep_masks(heads: Sequence[tuple[str, int, int] | None], n: int, width: int, n_heads: int) -> dict[tuple[str, int], Tensor]:
    """For each attention module that loses a head somewhere in the batch, a ``(B, 1, H * Dh)``
    mask: 0 on the rows of the block that removes one of its heads, on that head's slice."""
    masks: dict[tuple[str, int], Tensor] = {}
    for block, removed in enumerate(heads):
        if removed is None:
            continue
        kind, layer, head = removed
        mask = masks.setdefault((kind, layer), torch.ones(len(heads) * n, 1, n_heads * width))
        mask[block * n:(block + 1) * n, :, head * width:(head + 1) * width] = 0
    return masks


@torch.no_grad()
def bleu_without_each_head(translator: Translator, pairs: Sequence[tuple[str, str]],
                           heads: Sequence[tuple[str, int, int]], max_rows: int = 1024) -> dict[Any, float]:
    """Cased BLEU of greedy translations of ``pairs`` with each of ``heads`` (kind, layer, head;
    0-based) removed in turn, as :func:`transformer_lib.book.trained.without_head` removes one (its
    slice of the concatenated heads zeroed before the output projection), and with none (key
    ``None``). Removals decode together, in blocks of ``len(pairs)`` rows and batches of at most
    ``max_rows`` rows, so the 72 heads of the shipped model cost a few batched decodes."""
    from transformer_lib.book import trained

    rows = translator.source_ids([source for source, _ in pairs])
    references = [reference for _, reference in pairs]
    n = len(rows)
    blocks: list[tuple[str, int, int] | None] = [None, *heads]
    per_batch = max(1, max_rows // n)
    scores: dict[Any, float] = {}
    for start in range(0, len(blocks), per_batch):
        group = blocks[start:start + per_batch]
        src, src_mask = translator._pad([row for _ in group for row in rows])
        modules = {(kind, layer): trained.attention_modules(kind)[layer] for kind in KINDS
                   for layer in range(len(trained.attention_modules(kind)))}
        any_module = next(iter(modules.values()))
        masks = _keep_masks(group, n, any_module.d_v, any_module.n_heads)
        handles = []
        for key, mask in masks.items():
            mask = mask.to(src.device)

            def zero(_: torch.nn.Module, inputs: tuple[Tensor, ...], mask: Tensor = mask) -> tuple[Tensor, ...]:
                return (inputs[0] * mask[: inputs[0].size(0)], *inputs[1:])

            handles.append(modules[key].out_proj.register_forward_pre_hook(zero))
        try:
            output = translator.translate_ids(src, src_mask).tolist()
        finally:
            for handle in handles:
                handle.remove()
        texts = [translator.detokenize(translator.output_tokens(row)) for row in output]
        for block, removed in enumerate(group):
            hypotheses = texts[block * n:(block + 1) * n]
            scores[removed] = bleu_scores(hypotheses, references)["cased"].score
    return scores


def head_chart(frame: Any, value: str, title: str, diverging: bool = False) -> Any:
    """A grid of the 72 heads (heads across, layers down, one panel per kind of attention), coloured
    by ``value`` of ``frame`` (a :func:`head_profile` table with more columns), its value on hover."""
    import altair as alt

    from transformer_lib.book import style

    scale = alt.Scale(scheme=style.DIVERGING, domainMid=0) if diverging else alt.Scale(scheme=style.SEQUENTIAL)
    return alt.Chart(frame).mark_rect().encode(
        x=alt.X("head:O", title="head"), y=alt.Y("layer:O", title="layer"),
        color=alt.Color(f"{value}:Q", scale=scale, title=value.replace("_", " ")),
        column=alt.Column("kind:N", title=None, sort=list(KINDS)),
        tooltip=["kind", "layer", "head", alt.Tooltip(f"{value}:Q", format=".2f")],
    ).properties(width=150, height=90, title=title)
