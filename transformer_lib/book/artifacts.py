"""What a fully trained translation model does, small enough to commit with the book.

The website is built in the fast profile, whose model trains for a minute: it shows the mechanics,
not what a trained Transformer does. This module records, from a trained checkpoint, what
chapters 5 and 6 show of the trained model: its translations of the Multi30k test set (greedy and
beam search), the beam's alternatives and a few seeded samples for some sentences, and every
attention weight (encoder self, decoder self and cross; every layer and head) for a few short
test sentences. The file is JSON with numbers rounded to 3 decimals, a few hundred KB, and says
what produced it. Regenerate it when a better run lands::

    python -m transformer_lib.book.artifacts --checkpoint runs/multi30k/model.pt \\
        --metrics transformer_lib/book/runs/multi30k_full_metrics.json \\
        --out transformer_lib/book/runs/artifacts/multi30k_full.json

The test sentences come from ``--data-dir`` (else ``MULTI30K_DIR``, else the download cache).
The file holds the model's output and the few source sentences it shows, not the references:
chapters read those from the data (``load_multi30k``).
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import re
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from ..beam_search import beam_search
from ..cli.common import CommandLineParser, run_command
from ..decoding import sample
from ..device import default_device
from ..translator import EXTRA_OUTPUT_TOKENS, Translator, evaluate_bleu, read_multi30k_split
from .results import COMMITTED_RUNS

__all__ = [
    "ARTIFACTS_FORMAT",
    "load_artifacts",
    "sources_digest",
    "attention_weights",
    "beam_alternatives",
    "attention_sentences",
    "sampled_translations",
    "cross_attention_alignment",
    "make_artifacts",
    "dumps",
    "main",
]

ARTIFACTS_FORMAT = 1
DECIMALS = 3  # attention weights; rows still sum to 1 within S * 0.0005
# The headline run's artifacts: package data, like the runs they come from.
COMMITTED_ARTIFACTS = COMMITTED_RUNS / "artifacts" / "multi30k_full.json"
# Sentences shown by default (indices into the test set): 162 is chapter 6's running example
# ("Zwei Hunde spielen an einem Baum."); the others are short, for readable attention maps.
EXAMPLE = 162
ATTENTION_SENTENCES = 6
MAX_ATTENTION_TOKENS = 11  # source tokens with <eos>
ALTERNATIVES = 6
SAMPLE_SETTINGS = (
    {"temperature": 0.5, "top_p": 0.9},
    {"temperature": 1.0, "top_p": 0.9},
    {"temperature": 1.0},
    {"temperature": 1.5, "top_k": 10},
)
KINDS = ("encoder_self", "decoder_self", "decoder_cross")


def load_artifacts(path: str | Path = COMMITTED_ARTIFACTS) -> dict[str, Any] | None:
    """The artifacts file at ``path`` (default: the headline run's, package data beside the committed
    runs), or ``None`` where it is missing.

    Raises:
        ValueError: the file is not JSON, or not an artifacts file of this format.
    """
    path = Path(path)
    if not path.is_file():
        return None
    try:
        artifacts = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise ValueError(f"{path} is not valid JSON ({error}); regenerate it with python -m transformer_lib.book.artifacts") from None
    if not isinstance(artifacts, dict) or artifacts.get("artifacts_format") != ARTIFACTS_FORMAT:
        raise ValueError(f"{path} is not an artifacts file of format {ARTIFACTS_FORMAT}; regenerate it")
    return artifacts


def sources_digest(sources: Sequence[str]) -> str:
    """SHA-256 of the source sentences, one a line: the file's translations are for these, in order."""
    return hashlib.sha256("\n".join(sources).encode("utf-8")).hexdigest()


def _rounded(weights: torch.Tensor) -> list[Any]:
    # in float64: float32's nearest value to 0.979 prints as 0.9789999723434448
    return torch.round(weights.double().cpu(), decimals=DECIMALS).tolist()


@torch.no_grad()
def attention_weights(translator: Translator, source: str) -> dict[str, Any]:
    """Every attention weight of one sentence, fed the model's own greedy translation.

    Returns:
        ``source_tokens`` (``S``, with ``<eos>``), ``output_tokens`` (``T``: what the decoder writes
        at each step, ending with ``<eos>``), ``decoder_input_tokens`` (``T``: what it reads,
        ``<bos>`` first), and ``encoder_self`` ``(N, H, S, S)``, ``decoder_self`` ``(N, H, T, T)``,
        ``decoder_cross`` ``(N, H, T, S)`` as nested lists rounded to 3 decimals (queries on rows).
    """
    model, vocab = translator.model, translator.tgt_vocab
    src, src_mask = translator.encode([source])  # (1, S)
    out = translator.translate_ids(src, src_mask)  # (1, T), greedy
    out = out[:, : int((out[0] != vocab.pad_id).sum())]  # drop trailing padding
    tgt_in = torch.cat([torch.full_like(out[:, :1], vocab.bos_id), out[:, :-1]], 1)  # (1, T)
    maps = model.attention_maps(src, tgt_in)
    return {
        "source": source,
        "translation": translator.translate([source], beam_size=1)[0],  # greedy, as the maps are
        "source_tokens": translator.src_vocab.decode(src[0].tolist(), strip_specials=False),
        "output_tokens": vocab.decode(out[0].tolist(), strip_specials=False),
        "decoder_input_tokens": vocab.decode(tgt_in[0].tolist(), strip_specials=False),
        **{kind: [_rounded(w[0]) for w in getattr(maps, kind)] for kind in KINDS},
    }


@torch.no_grad()
def beam_alternatives(translator: Translator, source: str, beam_size: int = 4, length_penalty: float = 0.6) -> list[dict[str, Any]]:
    """Every finished hypothesis of beam search for one sentence, best first: text, log P, score."""
    vocab = translator.tgt_vocab
    src, src_mask = translator.encode([source])
    max_len = min(translator.model.config.max_len, src.size(1) + EXTRA_OUTPUT_TOKENS)  # as Translator decodes
    result = beam_search(translator.model, src, src_mask, beam_size=beam_size, max_new_tokens=max_len, bos_id=vocab.bos_id,
                         eos_id=vocab.eos_id, pad_id=vocab.pad_id, length_penalty=length_penalty, min_new_tokens=1)
    return [
        {"text": translator.detokenize(translator.output_tokens(h.tokens)),
         "log_prob": round(h.log_prob, 3), "score": round(h.score, 3)}
        for h in result.hypotheses[0]
    ]


@torch.no_grad()
def sampled_translations(translator: Translator, source: str, n: int = 5, seed: int = 0, **knobs: Any) -> list[str]:
    """``n`` translations of one sentence drawn by :func:`~transformer_lib.decoding.sample` (seeded)."""
    vocab = translator.tgt_vocab
    src, src_mask = translator.encode([source] * n)
    max_len = min(translator.model.config.max_len, src.size(1) + EXTRA_OUTPUT_TOKENS)
    generator = torch.Generator(device=src.device).manual_seed(seed)
    out = sample(translator.model, src, src_mask, max_new_tokens=max_len, bos_id=vocab.bos_id, eos_id=vocab.eos_id,
                 pad_id=vocab.pad_id, generator=generator, **knobs)
    return [translator.detokenize(translator.output_tokens(row)) for row in out.tolist()]


def cross_attention_alignment(cross: Any, source_tokens: Sequence[str], output_tokens: Sequence[str], layer: int = -1) -> dict[str, float]:
    """How sharply one sentence's cross-attention picks a source token for each output token.

    The weights of ``layer`` (default the last), averaged over heads, for the output tokens that
    are words (not ``<eos>``, not punctuation), over the source tokens that are words (the
    source's ``<eos>`` and punctuation are where heads park when they need nothing: left out, and
    the rows renormalised). For each output token, the largest weight is the mass on the source
    token it aligns to; a head that attends at random puts ``1/S`` there on average (``S`` source
    words).

    Args:
        cross: ``(N, H, T, S)`` cross-attention weights of one sentence (nested lists or a tensor).

    Returns:
        ``mass`` (mean over output words of the aligned weight), ``uniform`` (``1/S``), ``ratio``
        (their quotient) and ``monotone`` (the share of consecutive output words whose aligned
        source positions do not go backwards: German and English mostly keep the order).
    """
    w = torch.as_tensor(cross, dtype=torch.float64)[layer].mean(0)  # (T, S)
    words_in = [i for i, t in enumerate(source_tokens) if _is_word(t)]
    words_out = [i for i, t in enumerate(output_tokens) if _is_word(t)]
    w = w[words_out][:, words_in]  # (T', S')
    w = w / w.sum(-1, keepdim=True)
    mass, aligned = w.max(-1)
    uniform = 1 / len(words_in)
    steps = list(zip(aligned.tolist(), aligned.tolist()[1:]))
    monotone = sum(b >= a for a, b in steps) / max(len(steps), 1)
    return {"mass": float(mass.mean()), "uniform": uniform, "ratio": float(mass.mean()) / uniform, "monotone": monotone}


def _is_word(token: str) -> bool:
    return not (token.startswith("<") and token.endswith(">")) and re.search(r"\w", token) is not None


def attention_sentences(translator: Translator, sources: Sequence[str], n: int = ATTENTION_SENTENCES,
                        example: int = EXAMPLE, lengths: tuple[int, int] = (6, MAX_ATTENTION_TOKENS)) -> list[int]:
    """Which sentences get attention maps: ``example`` (where ``sources`` has it: a subset of the
    test set may not) and the first others whose source has ``lengths[0]`` to ``lengths[1]`` tokens
    (with ``<eos>``), short enough to read, ``n`` in all."""
    shortest, longest = lengths
    chosen = [example] if 0 <= example < len(sources) else []
    short = [i for i, row in enumerate(translator.source_ids(sources)) if shortest <= len(row) <= longest and i != example]
    return [*chosen, *short[: n - len(chosen)]]


def _test_translations(translator: Translator, pairs: Sequence[tuple[str, str]], beam_size: int) -> dict[str, Any]:
    results = evaluate_bleu(translator, pairs, beam_sizes=(1, beam_size))
    return {
        name: {"bleu": round(r["bleu"].score, 4), "bleu_lowercased": round(r["bleu_lowercased"].score, 4),
               "signature": r["bleu"].signature, "translations": r["translations"]}
        for name, r in results.items()
    }


def make_artifacts(translator: Translator, pairs: Sequence[tuple[str, str]], beam_size: int = 4, example: int = EXAMPLE,
                   n_attention: int = ATTENTION_SENTENCES, n_alternatives: int = ALTERNATIVES,
                   lengths: tuple[int, int] = (6, MAX_ATTENTION_TOKENS)) -> dict[str, Any]:
    """Everything the file holds but where it came from (:func:`main` adds that).

    ``example`` (a test-set index) gets the beam's alternatives, the samples and attention maps;
    the beam's alternatives also for the first ``n_alternatives - 1`` sentences where beam search
    and greedy decoding disagree; the attention maps for :func:`attention_sentences`.
    """
    sources = [source for source, _ in pairs]
    test = _test_translations(translator, pairs, beam_size)
    beam = f"beam {beam_size}"
    differs = [i for i, (g, b) in enumerate(zip(test["greedy"]["translations"], test[beam]["translations"])) if g != b]
    alternatives = [example, *[i for i in differs if i != example][: n_alternatives - 1]]
    settings = [dict(s) for s in SAMPLE_SETTINGS]
    return {
        "test": {"split": "test", "n_sentences": len(sources), "sources_sha256": sources_digest(sources), **test},
        "beam_alternatives": [
            {"index": i, "source": sources[i], "beam_size": beam_size, "length_penalty": 0.6,
             "hypotheses": beam_alternatives(translator, sources[i], beam_size)}
            for i in alternatives
        ],
        "samples": [
            {"index": example, "source": sources[example], "seed": 0, **s,
             "translations": sampled_translations(translator, sources[example], n=5, seed=0, **s)}
            for s in settings
        ],
        "attention": [
            {"index": i, **attention_weights(translator, sources[i])}
            for i in attention_sentences(translator, sources, n_attention, example, lengths)
        ],
    }


def dumps(artifacts: Mapping[str, Any]) -> str:
    """JSON, one entry a line, with each list of numbers on one line (small, and diffs stay readable)."""
    text = json.dumps(artifacts, indent=1, ensure_ascii=False)
    number_list = re.compile(r"\[\s*(-?[\d.e+-]+(?:,\s*-?[\d.e+-]+)*)\s*\]")
    return number_list.sub(lambda m: "[" + ",".join(x.strip() for x in m.group(1).split(",")) + "]", text) + "\n"


def _git(*args: str) -> str | None:
    """The output of a git command in this package's checkout, or ``None`` (not a checkout, no git)."""
    try:
        out = subprocess.run(["git", *args], cwd=Path(__file__).parent, capture_output=True, text=True, timeout=10)
    except OSError:
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def _provenance(args: argparse.Namespace, translator: Translator, metrics: Mapping[str, Any] | None) -> dict[str, Any]:
    command = ["python -m transformer_lib.book.artifacts", f"--checkpoint {args.checkpoint}", f"--out {args.out}"]
    if args.metrics:
        command.insert(2, f"--metrics {args.metrics}")
    command += [f"--beam {args.beam}"] * (args.beam != 4) + [f"--example {args.example}"] * (args.example != EXAMPLE)
    run = {}
    if metrics is not None:
        run = {"metrics_file": Path(args.metrics).name, "command": metrics["command"],
               "git_commit": metrics.get("software", {}).get("git_commit"),
               "chosen": metrics.get("selection", {}).get("chosen"),
               "test_bleu": {name: r["cased"]["score"] for name, r in metrics["bleu"]["test"].items()}}
    return {
        "command": " ".join(command),
        "checkpoint": Path(args.checkpoint).name,
        "run": run,
        "parameters": sum(p.numel() for p in translator.model.parameters()),
        "model_config": dataclasses.asdict(translator.model.config),
        "generator_git_commit": _git("rev-parse", "HEAD"),
        "generator_uncommitted_changes": bool(_git("status", "--porcelain", "--untracked-files=no", "--", "transformer_lib")),
        "torch": torch.__version__,
    }


def _parser() -> argparse.ArgumentParser:
    parser = CommandLineParser(prog="python -m transformer_lib.book.artifacts",
                               description="Record a trained Multi30k model's translations, samples and attention weights.")
    parser.add_argument("--checkpoint", required=True, help="the trained model (model.pt: the weights the run chose)")
    parser.add_argument("--metrics", default=None, help="the run's metrics.json (recorded, and its test BLEU checked)")
    parser.add_argument("--data-dir", default=None, help="folder with the Multi30k .gz files (default: $MULTI30K_DIR)")
    parser.add_argument("--out", required=True, help="the JSON file to write")
    parser.add_argument("--beam", type=int, default=4)
    parser.add_argument("--example", type=int, default=EXAMPLE, help="the test sentence shown in most detail (its index)")
    parser.add_argument("--device", default=None)
    return parser


def _run(args: argparse.Namespace) -> None:
    translator = Translator.from_checkpoint(args.checkpoint, device=args.device or default_device())
    if translator.task != "multi30k":
        raise ValueError(f"{args.checkpoint} was trained on the {translator.task!r} task, not multi30k")
    metrics = json.loads(Path(args.metrics).read_text(encoding="utf-8")) if args.metrics else None
    pairs = read_multi30k_split("test", args.data_dir, translator.data["src_lang"], translator.data["tgt_lang"])
    artifacts = {"artifacts_format": ARTIFACTS_FORMAT, "produced_by": _provenance(args, translator, metrics),
                 **make_artifacts(translator, pairs, args.beam, args.example)}
    for name, reported in artifacts["produced_by"]["run"].get("test_bleu", {}).items():
        ours = artifacts["test"].get(name, {}).get("bleu")
        if ours is not None and abs(ours - reported) > 0.01:
            print(f"warning: {name} BLEU {ours:.2f} differs from the metrics file's {reported:.2f}", file=sys.stderr)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(dumps(artifacts), encoding="utf-8")
    size = Path(args.out).stat().st_size
    print(f"wrote {args.out} ({size / 1024:.0f} KB): " + ", ".join(
        f"{name} BLEU {artifacts['test'][name]['bleu']:.2f}" for name in ("greedy", f"beam {args.beam}")))


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point; returns the exit status (0 ok, 2 bad input: one line ``error: ...``)."""
    args = _parser().parse_args(argv)
    return run_command(lambda: _run(args), argv)


if __name__ == "__main__":
    sys.exit(main())
