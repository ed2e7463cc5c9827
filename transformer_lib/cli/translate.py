"""Translate with a trained checkpoint, or score it on a test set: ``transformer-translate``
(or ``python -m transformer_lib.cli.translate``).

Examples::

    transformer-translate --pretrained "Ein Mann fährt Fahrrad."            # the model the book ships
    echo "Ein Hund rennt." | transformer-translate --pretrained                # sentences from stdin, one a line
    transformer-translate --pretrained --input de.txt --output en.txt         # files (.gz too)
    transformer-translate --pretrained --n-best 3 "Zwei Kinder spielen."      # 3 best, with scores (Moses format)
    transformer-translate --pretrained --src test.de.gz --ref test.en.gz      # BLEU and chrF on any file pair
    transformer-translate --checkpoint runs/m30k/checkpoint.pt --eval test    # Multi30k's test split ($MULTI30K_DIR)

The beam size and length penalty default to the model's own (``Translator.decoding``): for
``--pretrained`` the ones chosen for it on validation, exactly what ``pretrained.load().translate``
uses; for a checkpoint greedy decoding. Scores are sacreBLEU's BLEU and chrF, each printed with its
signature.

A blank input line (empty, or only white space) gives a blank output line, so output line N is
the translation of input line N; in an n-best list it has one entry, the empty translation with
log-probability and score 0. Scoring (``--src``/``--ref``) keeps the pairs too: a blank source line
is an empty hypothesis, scored against its reference.

Bad input prints one line ``error: ...``, without a traceback (``--debug`` or
``TRANSFORMER_LIB_DEBUG=1`` shows it), and exits with status 2 for a bad command line (an option out
of its bounds, options that do not go together, nothing to translate) or 1 for a failure (a missing
or incompatible checkpoint or file, a sentence longer than the model allows, symbols a toy-task model
does not know, a device this machine lacks); Ctrl-C exits 130, SIGTERM 143. A sentence of only
unknown words warns.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import cast

from .. import pretrained
from ..device import parse_device
from ..evaluation import BleuScore, corpus_chrf
from ..translator import LENGTH_PENALTY, TranslationError, Translator, evaluate_bleu, read_multi30k_split
from ..validation import check_int, check_number
from .common import DEBUG_ENV, EXIT_EPILOG, UsageError, MAX_THREADS, THREADS_DEFAULT_TEXT, CommandLineParser, add_version, default_threads, run_command, set_threads
from .console import LEVELS, command_logging
from .nbest import format_n_best, n_best, open_output, read_lines
from .options import MAX_BEAM, add_options, check_maxima, flag, option

__all__ = ["TranslateOptions", "main"]

logger = logging.getLogger("transformer_lib.cli.translate")  # not __name__: "__main__" under python -m

MAX_BATCH = 4096  # sentences decoded together; more only fills memory
SCORED_BEAM = 4  # scoring a model that chose no beam: greedy and this beam (the paper's)


_SCORING = "scoring (BLEU and chrF, with sacreBLEU's signatures)"


@dataclass
class TranslateOptions:
    """Every option of ``transformer-translate``, one field each (the parser is made from them, as the
    training command line's), checked together when created, before a model is loaded."""

    sentences: list[str] = option("sentences to translate, one argument each (none: read --input, else standard input, "
                                  "one sentence a line)", positional=True)
    checkpoint: str | None = option("a checkpoint written by transformer-train", one_of="model")
    pretrained: bool = option("the pretrained Multi30k de->en model shipped with the library "
                              "(transformer_lib.pretrained)", False, one_of="model")
    input: str | None = option("sentences to translate, one a line (.gz too; - for stdin)", metavar="FILE")
    output: str | None = option("write the translations here (.gz too; default: stdout)", metavar="FILE")
    n_best: int | None = option("the K best translations of each sentence with their scores, in the Moses n-best format "
                                "'i ||| text ||| log_prob=L ||| score' (beam size at least K)", metavar="K", maximum=MAX_BEAM)
    beam_size: int | None = option(f"beam size, at most {MAX_BEAM} (default: the model's chosen decoding: the pretrained "
                                   "model's chosen beam with --pretrained, else 1, greedy; 4 beside greedy when scoring a "
                                   "model without a chosen beam; at least K with --n-best K)", metavar="N", maximum=MAX_BEAM)
    length_penalty: float | None = option(f"beam search's GNMT length penalty, 0 to 10 (default: the model's chosen one "
                                          f"with --pretrained, else {LENGTH_PENALTY}; 0 = none)", metavar="ALPHA")
    eval: str | None = option("score on this Multi30k split (greedy and beam)", choices=("val", "test"), group=_SCORING)
    src: str | None = option("score on this source file (.gz too), with --ref", metavar="FILE", group=_SCORING)
    ref: str | None = option("the reference translations of --src, line by line", metavar="FILE", group=_SCORING)
    data_dir: str | None = option("with --eval: folder with the Multi30k .gz files (default: $MULTI30K_DIR, else the "
                                  "download cache)", group=_SCORING)
    limit: int | None = option("score only the first N sentences", metavar="N", group=_SCORING)
    batch_size: int = option(f"sentences decoded together, at most {MAX_BATCH} (default: 64)", 64, metavar="N",
                             maximum=MAX_BATCH)
    threads: int | None = option(f"CPU threads (default: {THREADS_DEFAULT_TEXT})", metavar="N", maximum=MAX_THREADS)
    device: str = option("auto (cuda when available), cpu, cuda or cuda:N (default: auto)", "auto")
    quiet: bool = option("only warnings and errors on the console: no information lines, no progress", False)
    log_file: str | None = option("also append every message (at --log-level or above, with its time) to FILE",
                                  metavar="FILE")
    log_level: str = option("the least important messages shown and logged (default: info)", "info", choices=LEVELS,
                            convert=str.lower)
    debug: bool = option(f"show the traceback of an error (or set {DEBUG_ENV}=1)", False)

    def __post_init__(self) -> None:
        """Every option's type and bounds, and how they combine (``UsageError``: exit status 2)."""
        try:
            for name in ("beam_size", "n_best", "limit", "threads"):
                check_int(flag(name), getattr(self, name), optional=True)
            check_int("--batch-size", self.batch_size)
            check_maxima(self)
            if self.length_penalty is not None:
                check_number("--length-penalty", self.length_penalty, 0, 10, high_open=False)
        except ValueError as error:
            raise UsageError(str(error)) from None
        try:  # a device this machine lacks, before a model is loaded onto it
            parse_device(self.device)
        except ValueError as error:
            raise UsageError(f"--device {self.device}: {error}") from None
        self._check_combinations()

    def _check_combinations(self) -> None:
        if self.n_best is not None and self.beam_size is not None and self.beam_size < self.n_best:
            raise UsageError(f"--n-best {self.n_best} needs --beam-size of at least {self.n_best}, got {self.beam_size}")
        if (self.src is None) != (self.ref is None):
            raise UsageError("--src and --ref go together: the sentences and their reference translations")
        scoring = [name for name, given in (("--eval", self.eval), ("--src", self.src)) if given is not None]
        inputs = [name for name, given in (("sentences", self.sentences), ("--input", self.input)) if given]
        if len(scoring) > 1 or (scoring and (inputs or self.n_best is not None or self.output is not None)):
            raise UsageError(f"{' and '.join(scoring + inputs)}: score (--eval, or --src/--ref) or translate "
                             "(sentences, --input, --n-best, --output), not both")
        if len(inputs) > 1:
            raise UsageError("give sentences as arguments or --input FILE, not both")
        if self.limit is not None and not scoring:
            raise UsageError(f"--limit {self.limit} applies to scoring (--eval, or --src/--ref)")


def _parser() -> argparse.ArgumentParser:
    parser = CommandLineParser(
        prog="transformer-translate",
        description="Translate sentences (arguments, --input, or standard input) with a trained checkpoint or the "
                    "pretrained model; or score it (BLEU, chrF) on Multi30k or on any pair of files.",
        epilog=EXIT_EPILOG,
    )
    add_version(parser)
    add_options(parser, TranslateOptions, left_out="default")
    return parser


def _load(args: TranslateOptions) -> Translator:
    """The model. Its own decoding (``Translator.decoding``: the pretrained model's chosen beam) is the
    default of ``--beam-size`` and ``--length-penalty``, resolved by the translator as the library does."""
    if args.pretrained:
        args.checkpoint = "the pretrained model"
        return pretrained.load(device=args.device)
    return Translator.from_checkpoint(cast(str, args.checkpoint), device=args.device)


def _sentences(args: TranslateOptions) -> list[str]:
    """The arguments, else the lines of ``--input``, else of standard input (unless it is a terminal)."""
    if args.sentences:
        return list(args.sentences)
    if args.input is not None:
        return read_lines(args.input)
    piped: list[str] = []
    if not sys.stdin.isatty():
        try:
            piped = read_lines("-")
        except TranslationError:  # standard input closed or unreadable: as if empty
            piped = []
    if not piped:
        raise UsageError('give a sentence to translate, e.g. "Ein Mann fährt Fahrrad.", --input FILE, '
                               "lines on standard input, or --eval val|test (or --src/--ref) to score")
    return piped


def _translate(args: TranslateOptions, translator: Translator, sentences: list[str]) -> None:
    if args.n_best is not None:
        beam, length_penalty = translator.decoding_settings(args.beam_size, args.length_penalty)
        beam = max(beam, args.n_best)
        lines = list(format_n_best(n_best(translator, sentences, args.n_best, beam, length_penalty, args.batch_size)))
    else:  # None: the model's own decoding, as Translator.translate defaults to it
        lines = translator.translate(sentences, beam_size=args.beam_size, batch_size=args.batch_size,
                                     length_penalty=args.length_penalty)
    with open_output(args.output) as out:
        for line in lines:
            out.write(line + "\n")


def _pairs(args: TranslateOptions, translator: Translator) -> tuple[str, list[tuple[str, str]]]:
    """What is scored: a name and its ``(source, reference)`` pairs."""
    if args.src is not None:
        sources, references = read_lines(args.src), read_lines(cast(str, args.ref))
        if len(sources) != len(references):
            raise TranslationError(f"--src {args.src} has {len(sources)} lines but --ref {args.ref} has "
                                   f"{len(references)}: they must pair line by line")
        return f"{args.src} -> {args.ref}: {{n}} sentences", list(zip(sources, references))[: args.limit]
    if translator.task != "multi30k":
        raise TranslationError(f"--eval needs a Multi30k checkpoint; {args.checkpoint} was trained on the {translator.task!r} task")
    src_lang, tgt_lang = translator.data["src_lang"], translator.data["tgt_lang"]
    pairs = read_multi30k_split(cast(str, args.eval), args.data_dir, src_lang, tgt_lang)[: args.limit]
    return f"Multi30k {args.eval}: {{n}} sentences, {src_lang}->{tgt_lang}", pairs


def _score(args: TranslateOptions, translator: Translator, threads: int) -> None:
    name, pairs = _pairs(args, translator)
    if not pairs:
        raise TranslationError(f"{name.format(n=0)}: nothing to score")
    chosen, length_penalty = translator.decoding_settings(args.beam_size, args.length_penalty)
    beam = chosen if chosen > 1 or args.beam_size is not None else SCORED_BEAM
    results = evaluate_bleu(translator, pairs, beam_sizes=(1, beam) if beam > 1 else (1,), batch_size=args.batch_size,
                            length_penalty=length_penalty)
    references = [reference for _, reference in pairs]
    print(f"{name.format(n=len(pairs))}, {args.checkpoint} on {translator.device}, {_threads_text(threads)}", flush=True)
    chrf_signature = ""
    for decoding, result in results.items():
        cased: BleuScore = result["bleu"]
        chrf = corpus_chrf(result["translations"], references)
        chrf_signature = chrf.signature
        print(f"{decoding:>8}: BLEU {cased.score:5.2f}   chrF {chrf.score:5.2f}   lowercased BLEU "
              f"{result['bleu_lowercased'].score:5.2f}   ({result['seconds']:.1f} s)")
    first = next(iter(results.values()))
    print(f"BLEU signature: {first['bleu'].signature}")
    print(f"chrF signature: {chrf_signature}")
    print(f"lowercased BLEU ({first['bleu_lowercased'].signature}) is for comparison with older Multi30k papers only")


def _run(args: TranslateOptions) -> None:
    # Information on standard error, as "info: ...": standard output holds only the results.
    with command_logging(args.quiet, args.log_file, args.log_level, info_stream="stderr", prefix_info=True):
        _translate_or_score(args)


def _translate_or_score(args: TranslateOptions) -> None:
    sentences = None if (args.eval or args.src) else _sentences(args)  # read (and checked) before the model loads
    translator = _load(args)
    small = translator.model.config.d_model <= 64
    threads = args.threads if args.threads is not None else default_threads(small_model=small)
    set_threads(threads)
    if sentences is None:
        _score(args, translator, threads)
        return
    translator.source_ids(sentences, blanks=True)  # every sentence checked before anything is printed
    # On standard error: standard output holds only the translations (a filter in a pipe).
    logger.info(f"{_threads_text(threads)}, device {translator.device}")
    _translate(args, translator, sentences)


def _threads_text(threads: int) -> str:
    return f"{threads} CPU thread{'s' * (threads > 1)} (--threads)"


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point; returns the exit status (0 ok; 2 a bad command line, 1 a failure: one line
    ``error: ...``; 130/143 Ctrl-C/SIGTERM)."""
    given = vars(_parser().parse_args(argv))
    return run_command(lambda: _run(TranslateOptions(**given)), argv)


if __name__ == "__main__":
    sys.exit(main())
