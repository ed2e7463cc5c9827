"""Translate with a trained checkpoint, or measure its BLEU on Multi30k.

Command line::

    python -m transformer_lib.translate --checkpoint runs/multi30k/checkpoint.pt "Ein Mann fährt Fahrrad."
    python -m transformer_lib.translate --checkpoint CKPT --beam 4 "Ein Hund rennt." "Zwei Kinder spielen."
    python -m transformer_lib.translate --checkpoint CKPT --eval test --data-dir DIR   # or MULTI30K_DIR

From Python (the chapters do this)::

    translator = Translator.from_checkpoint("runs/multi30k/checkpoint.pt")
    translator.translate(["Ein Mann fährt Fahrrad."], beam_size=4)

This is the one module that joins the pieces: the model, the data pipeline (tokenizer, vocabularies),
decoding and evaluation. Bad input (a missing or incompatible checkpoint, an empty sentence, a
sentence longer than the model allows, symbols a toy-task model does not know, a device this
machine lacks) raises :class:`TranslationError`; a sentence of only unknown words warns. The
command line prints one line ``error: ...`` and exits with status 2, without a traceback
(``--debug`` or ``TRANSFORMER_LIB_DEBUG=1`` shows it).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor

from .checkpoint import CheckpointError, load_checkpoint
from .batching import SOURCE_FORMAT, pad_sequences
from .multi30k import load_multi30k
from .toy_tasks import TOY_TASKS
from .vocab import Vocab, tokenizer
from .decoding import beam_search, greedy_decode
from .device import default_device
from .distributed import get_rank, get_world_size
from .evaluation import BleuScore, bleu_scores, detokenize
from .masking import padding_mask
from .model import Transformer, TransformerConfig
from .subword import SubwordTokenizer
from .training import TrainingDiverged

__all__ = [
    "TranslationError",
    "Translator",
    "read_multi30k_split",
    "evaluate_bleu",
    "main",
    "DEBUG_ENV",
    "check_device",
    "run_command",
    "CommandLineParser",
]

# How a source sentence becomes the encoder's input, by the checkpoint's data["source_format"]:
# (add <bos>, add <eos>). Training writes batching.SOURCE_FORMAT (the layout batching.collate makes; a
# test checks the two agree), which is also the format of checkpoints that do not say.
SOURCE_FORMATS: dict[str, tuple[bool, bool]] = {
    "tokens+eos": (False, True),
    "bos+tokens+eos": (True, True),
    "tokens": (False, False),
}
# The decoder may write this many tokens more than the source has (t2t's decode_length default).
EXTRA_OUTPUT_TOKENS = 50
# Beam search's GNMT length penalty alpha (Wu et al. 2016; the Transformer paper's 0.6).
LENGTH_PENALTY = 0.6


class TranslationError(ValueError):
    """Input the translator cannot use: the message says what is wrong and what the limit is."""


@dataclass
class Translator:
    """A trained model with everything needed to turn text into text.

    Attributes:
        model: the :class:`Transformer`, in eval mode.
        src_vocab, tgt_vocab: the vocabularies it was trained with.
        task: ``"multi30k"`` (text, tokenized with spaCy), or ``"copy"``/``"reverse"`` (symbols
            separated by spaces, e.g. ``"3 1 4"``).
        data: how text became ids in training (``src_lang``, ``tgt_lang``, ``lowercase``,
            ``source_format``).
    """

    model: Transformer
    src_vocab: Vocab
    tgt_vocab: Vocab
    task: str
    data: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_checkpoint(cls, path: str | Path, device: str | torch.device = "cpu", task: str | None = None) -> Translator:
        """Rebuild the model from a checkpoint file; raises :class:`TranslationError` if it cannot.

        The file is read by :func:`transformer_lib.checkpoint.load_checkpoint` (``weights_only``, so
        no code runs while loading, and its checksum is verified); its errors become
        :class:`TranslationError` s. ``task``: refuse a checkpoint trained on another task.
        """
        device = check_device(device)
        try:
            checkpoint = load_checkpoint(path, map_location=device)
        except (FileNotFoundError, CheckpointError) as error:
            raise TranslationError(str(error)) from None
        try:
            config = TransformerConfig.from_dict(dict(checkpoint["model_config"]))
            src_vocab = Vocab.from_dict(checkpoint["src_vocab"])
            tgt_vocab = Vocab.from_dict(checkpoint["tgt_vocab"])
        except (TypeError, ValueError, KeyError) as error:
            raise TranslationError(f"{path} is an incompatible checkpoint: {error}") from None
        for side, vocab, size in (("src", src_vocab, config.src_vocab_size), ("tgt", tgt_vocab, config.tgt_vocab_size)):
            if len(vocab) != size:
                raise TranslationError(
                    f"{path} is an incompatible checkpoint: its {side}_vocab has {len(vocab)} tokens but "
                    f"model_config.{side}_vocab_size is {size}"
                )
        model = Transformer(config)
        try:
            model.load_state_dict(checkpoint["model_state"])
        except RuntimeError as error:
            reason = " ".join(str(error).split())[:300]
            raise TranslationError(f"{path} is an incompatible checkpoint: the weights do not fit its model_config ({reason})") from None
        data = dict(checkpoint.get("data") or {})
        task, expected_task = checkpoint["task"], task
        if task not in (*TOY_TASKS, "multi30k"):
            raise TranslationError(f"{path} is an incompatible checkpoint: unknown task {task!r}")
        if expected_task is not None and task != expected_task:
            raise TranslationError(f"{path} was trained on the {task!r} task, not {expected_task!r}")
        if task == "multi30k":
            for key in ("src_lang", "tgt_lang"):
                if key not in data:
                    raise TranslationError(f"{path} is an incompatible checkpoint: data[{key!r}] is missing")
        source_format = data.get("source_format", SOURCE_FORMAT)
        if source_format not in SOURCE_FORMATS:
            raise TranslationError(
                f"{path} is an incompatible checkpoint: data['source_format']={source_format!r}, "
                f"this version knows {sorted(SOURCE_FORMATS)}"
            )
        return cls(model.to(device).eval(), src_vocab, tgt_vocab, task, data)

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def max_source_tokens(self) -> int:
        """The longest input, in tokens with the specials the source format adds."""
        return self.model.config.max_len

    @cached_property
    def subword(self) -> SubwordTokenizer | None:
        """The checkpoint's BPE tokenizer (``data["subword_model"]``), or ``None`` for word-level data."""
        model = self.data.get("subword_model")
        return None if model is None else SubwordTokenizer.from_json(model)

    def tokenize(self, sentence: str) -> list[str]:
        """Source text to tokens: BPE pieces or spaCy words, or whitespace-separated symbols (toy tasks)."""
        if self.task in TOY_TASKS:
            return sentence.split()
        text = sentence.lower() if self.data.get("lowercase", False) else sentence
        if self.subword is not None:
            return self.subword.tokenize(text)
        return tokenizer(self.data["src_lang"])(text)

    def source_ids(self, sentences: Sequence[str]) -> list[list[int]]:
        """Each sentence as encoder input ids (with the specials of the checkpoint's source format).

        Raises:
            TranslationError: a sentence is empty, or longer than the model's ``config.max_len``.
        """
        if isinstance(sentences, str):
            raise TypeError("expected a list of sentences; wrap a single sentence in a list")
        if len(sentences) == 0:
            raise TranslationError("there is nothing to translate: no input sentence was given")
        rows = []
        for i, sentence in enumerate(sentences, start=1):
            tokens = self.tokenize(_check_text(sentence, i))
            if not tokens:
                raise TranslationError(f"input sentence {i} is empty; give some text to translate")
            self._check_known(tokens, i)
            ids = self.with_specials(self.src_vocab.encode(tokens))
            if len(ids) > self.max_source_tokens:
                raise TranslationError(
                    f"input sentence {i} is {len(ids)} tokens long (with its special tokens), more than this "
                    f"model allows: config.max_len={self.max_source_tokens}; split it into shorter sentences"
                )
            rows.append(ids)
        return rows

    def with_specials(self, ids: Sequence[int]) -> list[int]:
        """Source token ids (as prepared data hold them) with the specials of the checkpoint's source format."""
        return self.src_vocab.with_specials(ids, *SOURCE_FORMATS[self.data.get("source_format", SOURCE_FORMAT)])

    def _check_known(self, tokens: Sequence[str], i: int) -> None:
        """Toy tasks know only their symbols (refuse others); warn when a sentence is all unknown words."""
        unknown = [token for token in tokens if token not in self.src_vocab]
        if unknown and self.task in TOY_TASKS:
            symbols = " ".join(t for t in self.src_vocab.tokens if not t.startswith("<"))
            raise TranslationError(
                f"input sentence {i} has {len(unknown)} symbol(s) the {self.task!r} task does not know, e.g. "
                f"{unknown[0]!r}; this checkpoint copies or reverses the symbols {symbols} separated by spaces"
            )
        if len(unknown) == len(tokens):
            warnings.warn(
                f"input sentence {i}: every word is unknown to the model's {len(self.src_vocab)}-token source "
                f"vocabulary (e.g. {unknown[0]!r}), so its translation is a guess; is it in the source language "
                f"({self.data.get('src_lang', '?')})?",
                UserWarning, stacklevel=4,
            )

    def encode(self, sentences: Sequence[str]) -> tuple[Tensor, Tensor]:
        """Sentences to a padded source batch ``(B, S)`` and its padding mask ``(B, 1, 1, S)``."""
        return self._pad(self.source_ids(sentences))

    def _pad(self, rows: Sequence[Sequence[int]]) -> tuple[Tensor, Tensor]:
        src = pad_sequences(rows, self.src_vocab.pad_id).to(self.device)  # (B, S)
        return src, padding_mask(src, self.src_vocab.pad_id)  # (B, S), (B, 1, 1, S)

    def output_tokens(self, ids: Sequence[int]) -> list[str]:
        """Decoder output ids to target tokens (stops at ``<eos>``, drops padding)."""
        return self.tgt_vocab.decode(ids)

    def detokenize(self, tokens: Sequence[str]) -> str:
        """Output tokens to text: join BPE pieces, or Moses' rules for spaCy words (BLEU needs plain text)."""
        if self.task in TOY_TASKS:
            return " ".join(tokens)
        if self.subword is not None:
            return self.subword.detokenize(tokens)
        return detokenize(tokens, self.data["tgt_lang"])

    def translate_ids(self, src: Tensor, src_mask: Tensor, beam_size: int = 1, length_penalty: float = LENGTH_PENALTY) -> Tensor:
        """Decode one encoded batch: greedy for ``beam_size=1``, else beam search with this length
        penalty. ``(B, T_out)``."""
        max_len = min(self.model.config.max_len, src.size(1) + EXTRA_OUTPUT_TOKENS)
        # min_len=1: an empty output never translates a sentence; without it a wide beam (50+)
        # keeps the empty hypothesis finished at step 1, which then outscores every longer one.
        ids = dict(max_len=max_len, bos_id=self.tgt_vocab.bos_id, eos_id=self.tgt_vocab.eos_id, pad_id=self.tgt_vocab.pad_id, min_len=1)
        if beam_size == 1:
            return greedy_decode(self.model, src, src_mask, **ids)
        return beam_search(self.model, src, src_mask, beam_size=beam_size, length_penalty=length_penalty, **ids).sequences

    def translate_tokens(self, sentences: Sequence[str], beam_size: int = 1, batch_size: int = 64,
                         length_penalty: float = LENGTH_PENALTY) -> list[list[str]]:
        """Translate sentences (in batches of similar length); the output tokens of each, in order.

        Each list stops before ``<eos>``; :meth:`translate` turns them into text.
        """
        if isinstance(sentences, str):
            raise TypeError("translate expects a list of sentences; wrap a single sentence in a list")
        if isinstance(beam_size, bool) or not isinstance(beam_size, int) or beam_size < 1:
            raise TranslationError(f"beam size must be a positive integer, got {beam_size!r}")
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise TranslationError(f"batch size must be a positive integer, got {batch_size!r}")
        return self.decode_rows(self.source_ids(sentences), beam_size, batch_size, length_penalty)  # checks every sentence first

    def decode_rows(self, rows: Sequence[Sequence[int]], beam_size: int = 1, batch_size: int = 64,
                    length_penalty: float = LENGTH_PENALTY) -> list[list[str]]:
        """Decode encoder inputs (ids with their specials) in batches of similar length; output tokens, in order."""
        # Sorting by length puts similar lengths in a batch: less padding, fewer wasted steps.
        order = sorted(range(len(rows)), key=lambda i: len(rows[i]))
        out: list[list[str]] = [[] for _ in rows]
        for start in range(0, len(order), batch_size):
            chunk = order[start : start + batch_size]
            src, src_mask = self._pad([rows[i] for i in chunk])
            output = self.translate_ids(src, src_mask, beam_size, length_penalty).tolist()
            for i, row in zip(chunk, output):
                out[i] = self.output_tokens(row)
        return out

    def translate(self, sentences: Sequence[str], beam_size: int = 1, batch_size: int = 64,
                  length_penalty: float = LENGTH_PENALTY) -> list[str]:
        """Translate sentences (in batches of similar length) and return detokenized text, in order."""
        return [self.detokenize(t) for t in self.translate_tokens(sentences, beam_size, batch_size, length_penalty)]


def _check_text(sentence: object, i: int) -> str:
    if not isinstance(sentence, str):
        raise TranslationError(f"input sentence {i} is a {type(sentence).__name__}, not text (str)")
    try:
        sentence.encode("utf-8")
    except UnicodeEncodeError:  # undecodable bytes from the command line arrive as lone surrogates
        raise TranslationError(f"input sentence {i} is not valid UTF-8 text: {ascii(sentence)[:80]}") from None
    return sentence


def check_device(name: str | torch.device) -> torch.device:
    """``name`` as a device this machine has; :class:`TranslationError` (a ``ValueError``) if it has not."""
    try:
        device = torch.device(name)
    except (RuntimeError, TypeError) as error:
        raise TranslationError(f"--device {name}: not a device ({error}); use cpu, cuda or cuda:N") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise TranslationError(f"--device {name}: this machine has no CUDA GPU (torch.cuda.is_available() is False); use --device cpu")
    if device.type == "cuda" and device.index is not None and device.index >= torch.cuda.device_count():
        raise TranslationError(f"--device {name}: this machine has {torch.cuda.device_count()} GPU(s), cuda:0 to cuda:{torch.cuda.device_count() - 1}")
    return device


def read_multi30k_split(split: str, data_dir: str | Path | None, src_lang: str, tgt_lang: str) -> list[tuple[str, str]]:
    """``(source, reference)`` pairs of a Multi30k split, by :func:`transformer_lib.multi30k.load_multi30k`.

    That function finds the files (``data_dir``, else the folder in ``MULTI30K_DIR``, else the
    download cache) and checks their SHA-256; here its errors become :class:`TranslationError` s,
    which the command line reports without a traceback.

    Args:
        split: ``"val"``, ``"test"`` (test_2016_flickr) or ``"train"``.
        data_dir: the folder with the ``.gz`` files, or ``None``.
    """
    try:
        return load_multi30k(split, data_dir, src_lang=src_lang, tgt_lang=tgt_lang)
    except (FileNotFoundError, ValueError) as error:  # missing files, bad checksums, unknown split
        raise TranslationError(str(error)) from None


@torch.no_grad()
def evaluate_bleu(
    translator: Translator,
    pairs: Sequence[tuple[str | Sequence[int], str]],
    beam_sizes: Sequence[int] = (1, 4),
    batch_size: int = 64,
    length_penalty: float = LENGTH_PENALTY,
) -> dict[str, dict[str, Any]]:
    """Translate the sources with each beam size and score against the raw references (sacrebleu).

    Args:
        pairs: ``(source, reference)``; the source is a sentence, or its token ids without specials
            (prepared data, as the trainer holds them: no tokenizer runs).
        beam_sizes: 1 is greedy decoding, more is beam search.
        length_penalty: beam search's GNMT length penalty alpha.

    With several processes (a process group), each decodes every ``world_size``-th sentence and all
    of them get every translation back, so each returns the same scores.

    Returns:
        ``{"greedy" | "beam N": {"bleu": BleuScore, "bleu_lowercased": BleuScore, "seconds": float,
        "translations": list[str], "tokens": list[list[str]]}}``: the translations detokenized (what
        BLEU scores) and as the model's tokens.
    """
    sources = [source for source, _ in pairs]
    references = [reference for _, reference in pairs]
    kinds = {isinstance(source, str) for source in sources}
    if len(kinds) > 1:
        raise TypeError("pairs mix sentences and token-id lists as sources: give one kind")
    if kinds == {True}:
        rows = translator.source_ids(sources)  # type: ignore[arg-type]
    else:
        rows = [translator.with_specials(source) for source in sources]  # type: ignore[arg-type]
    results: dict[str, dict[str, Any]] = {}
    for beam_size in beam_sizes:
        start = time.perf_counter()
        tokens = _decode_shared(translator, rows, beam_size, batch_size, length_penalty)
        hypotheses = [translator.detokenize(t) for t in tokens]
        seconds = time.perf_counter() - start  # decoding time, without scoring
        scores = bleu_scores(hypotheses, references)
        name = "greedy" if beam_size == 1 else f"beam {beam_size}"
        results[name] = {
            "bleu": scores["cased"],
            "bleu_lowercased": scores["lowercased"],
            "seconds": seconds,
            "translations": hypotheses,
            "tokens": tokens,
        }
    return results


def _decode_shared(translator: Translator, rows: list[list[int]], beam_size: int, batch_size: int,
                   length_penalty: float = LENGTH_PENALTY) -> list[list[str]]:
    """:meth:`Translator.decode_rows`, the work shared among the processes of a process group, if any."""
    rank, world_size = get_rank(), get_world_size()
    if world_size == 1:
        return translator.decode_rows(rows, beam_size, batch_size, length_penalty)
    order = sorted(range(len(rows)), key=lambda i: len(rows[i]))[rank::world_size]  # similar lengths per process
    mine = dict(zip(order, translator.decode_rows([rows[i] for i in order], beam_size, batch_size, length_penalty)))
    gathered: list[Any] = [None] * world_size
    dist.all_gather_object(gathered, mine)
    tokens = {i: row for part in gathered for i, row in part.items()}
    return [tokens[i] for i in range(len(rows))]


# Set to 1 for full tracebacks from the command lines (as --debug does).
DEBUG_ENV = "TRANSFORMER_LIB_DEBUG"


class CommandLineParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose usage errors are one line, ``error: ...``, with exit status 2."""

    def error(self, message: str) -> Any:  # type: ignore[override]
        self.exit(2, f"error: {message} (see {self.prog} --help)\n")


def run_command(run: Callable[[], Any], argv: Sequence[str] | None) -> int:
    """Call ``run()``; a user error (bad value, missing or unreadable file, diverged training) prints
    one line ``error: ...`` and returns 2, a success returns 0. ``--debug`` in ``argv`` (or
    ``TRANSFORMER_LIB_DEBUG=1``) lets the traceback through instead."""
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv or os.environ.get(DEBUG_ENV, "") not in ("", "0")
    caught: list[warnings.WarningMessage] = []
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", UserWarning)
            run()
    except (ValueError, OSError, TrainingDiverged) as error:
        if debug:
            raise
        message = " ".join(str(error).split()) or type(error).__name__
        print(f"error: {message}", file=sys.stderr)
        return 2
    finally:
        for warning in caught:
            print(f"warning: {warning.message}", file=sys.stderr)
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = CommandLineParser(
        prog="python -m transformer_lib.translate",
        description="Translate sentences with a trained checkpoint, or report its BLEU on Multi30k.",
    )
    parser.add_argument("sentences", nargs="*", help="sentences to translate, one argument each")
    parser.add_argument("--checkpoint", required=True, help="a checkpoint written by python -m transformer_lib.train")
    parser.add_argument("--beam", type=int, default=None, metavar="N",
                        help="beam size (default: 1, greedy, when translating; 4 next to greedy with --eval)")
    parser.add_argument("--length-penalty", type=float, default=LENGTH_PENALTY, metavar="ALPHA",
                        help=f"beam search's GNMT length penalty (default {LENGTH_PENALTY}; 0 = none)")
    parser.add_argument("--eval", choices=["val", "test"], help="report BLEU on this Multi30k split (greedy and beam)")
    parser.add_argument("--data-dir", default=None,
                        help="folder with the Multi30k .gz files (default: $MULTI30K_DIR, else the download cache)")
    parser.add_argument("--limit", type=int, default=None, metavar="N", help="with --eval: only the first N sentences")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--device", default=None, help="cpu or cuda (default: cuda when available)")
    parser.add_argument("--debug", action="store_true", help=f"show the traceback of an error (or set {DEBUG_ENV}=1)")
    return parser


def _run(args: argparse.Namespace) -> None:
    if args.beam is not None and args.beam < 1:
        raise TranslationError(f"--beam must be a positive integer, got {args.beam}")
    if args.batch_size < 1:
        raise TranslationError(f"--batch-size must be a positive integer, got {args.batch_size}")
    if not 0.0 <= args.length_penalty <= 10.0:
        raise TranslationError(f"--length-penalty must be between 0 and 10, got {args.length_penalty}")
    if args.eval is None and not args.sentences:
        raise TranslationError('give a sentence to translate, e.g. "Ein Mann fährt Fahrrad.", or --eval val|test')
    if args.eval is not None and args.sentences:
        raise TranslationError("give either sentences to translate or --eval, not both")
    device = args.device or default_device()
    translator = Translator.from_checkpoint(args.checkpoint, device=device)

    if args.eval is None:
        for line in translator.translate(args.sentences, beam_size=args.beam or 1, batch_size=args.batch_size,
                                         length_penalty=args.length_penalty):
            print(line)
        return

    if translator.task != "multi30k":
        raise TranslationError(f"--eval needs a Multi30k checkpoint; {args.checkpoint} was trained on the {translator.task!r} task")
    src_lang, tgt_lang = translator.data["src_lang"], translator.data["tgt_lang"]
    pairs = read_multi30k_split(args.eval, args.data_dir, src_lang, tgt_lang)
    if args.limit is not None:
        if args.limit < 1:
            raise TranslationError(f"--limit must be a positive integer, got {args.limit}")
        pairs = pairs[: args.limit]
    beam = args.beam or 4
    results = evaluate_bleu(translator, pairs, beam_sizes=(1, beam) if beam > 1 else (1,), batch_size=args.batch_size,
                            length_penalty=args.length_penalty)
    print(f"Multi30k {args.eval}: {len(pairs)} sentences, {src_lang}->{tgt_lang}, {args.checkpoint} on {device}")
    for name, result in results.items():
        cased: BleuScore = result["bleu"]
        lower: BleuScore = result["bleu_lowercased"]
        print(f"{name:>8}: BLEU {cased.score:5.2f}   lowercased {lower.score:5.2f}   ({result['seconds']:.1f} s)")
    first = next(iter(results.values()))
    print(f"BLEU signature: {first['bleu'].signature}")
    print(f"lowercased BLEU ({first['bleu_lowercased'].signature}) is for comparison with older Multi30k papers only")


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point; returns the exit status (0 ok, 2 bad input: one line ``error: ...``)."""
    args = _parser().parse_args(argv)
    return run_command(lambda: _run(args), argv)


if __name__ == "__main__":
    sys.exit(main())
