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

from .. import pretrained
from ..device import parse_device
from ..evaluation import BleuScore, corpus_chrf
from ..translator import LENGTH_PENALTY, TranslationError, Translator, evaluate_bleu, read_multi30k_split
from ..validation import check_int, check_number
from .common import DEBUG_ENV, EXIT_EPILOG, UsageError, MAX_THREADS, THREADS_DEFAULT_TEXT, CommandLineParser, add_version, check_at_most, default_threads, run_command, set_threads
from .console import add_logging_options, command_logging
from .nbest import format_n_best, n_best, open_output, read_lines
from .options import MAX_BEAM

__all__ = ["main"]

logger = logging.getLogger("transformer_lib.cli.translate")  # not __name__: "__main__" under python -m

MAX_BATCH = 4096  # sentences decoded together; more only fills memory
SCORED_BEAM = 4  # scoring a model that chose no beam: greedy and this beam (the paper's)


def _parser() -> argparse.ArgumentParser:
    parser = CommandLineParser(
        prog="transformer-translate",
        description="Translate sentences (arguments, --input, or standard input) with a trained checkpoint or the "
                    "pretrained model; or score it (BLEU, chrF) on Multi30k or on any pair of files.",
        epilog=EXIT_EPILOG,
    )
    add_version(parser)
    parser.add_argument("sentences", nargs="*", help="sentences to translate, one argument each (none: read --input, "
                                                     "else standard input, one sentence a line)")
    model = parser.add_mutually_exclusive_group(required=True)
    model.add_argument("--checkpoint", help="a checkpoint written by transformer-train")
    model.add_argument("--pretrained", action="store_true",
                       help="the pretrained Multi30k de->en model shipped with the library (transformer_lib.pretrained)")
    parser.add_argument("--input", metavar="FILE", help="sentences to translate, one a line (.gz too; - for stdin)")
    parser.add_argument("--output", metavar="FILE", help="write the translations here (.gz too; default: stdout)")
    parser.add_argument("--n-best", type=int, default=None, metavar="K",
                        help="the K best translations of each sentence with their scores, in the Moses n-best "
                             "format 'i ||| text ||| log_prob=L ||| score' (beam size at least K)")
    parser.add_argument("--beam-size", type=int, default=None, metavar="N",
                        help=f"beam size, at most {MAX_BEAM} (default: the model's chosen decoding: the pretrained "
                             "model's chosen beam with --pretrained, else 1, greedy; 4 beside greedy when scoring a "
                             "model without a chosen beam; at least K with --n-best K)")
    parser.add_argument("--length-penalty", type=float, default=None, metavar="ALPHA",
                        help=f"beam search's GNMT length penalty, 0 to 10 (default: the model's chosen one with "
                             f"--pretrained, else {LENGTH_PENALTY}; 0 = none)")
    scoring = parser.add_argument_group("scoring (BLEU and chrF, with sacreBLEU's signatures)")
    scoring.add_argument("--eval", choices=["val", "test"], help="score on this Multi30k split (greedy and beam)")
    scoring.add_argument("--src", metavar="FILE", help="score on this source file (.gz too), with --ref")
    scoring.add_argument("--ref", metavar="FILE", help="the reference translations of --src, line by line")
    scoring.add_argument("--data-dir", default=None,
                         help="with --eval: folder with the Multi30k .gz files (default: $MULTI30K_DIR, else the download cache)")
    scoring.add_argument("--limit", type=int, default=None, metavar="N", help="score only the first N sentences")
    parser.add_argument("--batch-size", type=int, default=64, metavar="N",
                        help=f"sentences decoded together, at most {MAX_BATCH} (default: 64)")
    parser.add_argument("--threads", type=int, default=None, metavar="N",
                        help=f"CPU threads (default: {THREADS_DEFAULT_TEXT})")
    parser.add_argument("--device", default="auto", help="auto (cuda when available), cpu, cuda or cuda:N (default: auto)")
    add_logging_options(parser)
    parser.add_argument("--debug", action="store_true", help=f"show the traceback of an error (or set {DEBUG_ENV}=1)")
    return parser


def _check_options(args: argparse.Namespace) -> None:
    """Every option's type and bounds, and how they combine, before a model is loaded."""
    try:
        check_int("--beam-size", args.beam_size, optional=True)
        check_at_most("--beam-size", args.beam_size, MAX_BEAM)
        check_int("--n-best", args.n_best, optional=True)
        check_at_most("--n-best", args.n_best, MAX_BEAM)
        check_int("--batch-size", args.batch_size)
        check_at_most("--batch-size", args.batch_size, MAX_BATCH)
        check_int("--limit", args.limit, optional=True)
        if args.threads is not None:  # None: the default for the model's size
            check_int("--threads", args.threads)
        check_at_most("--threads", args.threads, MAX_THREADS)
        if args.length_penalty is not None:
            check_number("--length-penalty", args.length_penalty, 0, 10, high_open=False)
    except ValueError as error:
        raise TranslationError(str(error)) from None
    try:  # a device this machine lacks, before a model is loaded onto it
        parse_device(args.device)
    except ValueError as error:
        raise TranslationError(f"--device {args.device}: {error}") from None
    if args.n_best is not None and args.beam_size is not None and args.beam_size < args.n_best:
        raise TranslationError(f"--n-best {args.n_best} needs --beam-size of at least {args.n_best}, got {args.beam_size}")
    if (args.src is None) != (args.ref is None):
        raise TranslationError("--src and --ref go together: the sentences and their reference translations")
    scoring = [name for name, given in (("--eval", args.eval), ("--src", args.src)) if given is not None]
    inputs = [name for name, given in (("sentences", args.sentences), ("--input", args.input)) if given]
    if len(scoring) > 1 or (scoring and (inputs or args.n_best is not None or args.output is not None)):
        raise TranslationError(f"{' and '.join(scoring + inputs)}: score (--eval, or --src/--ref) or translate "
                               "(sentences, --input, --n-best, --output), not both")
    if len(inputs) > 1:
        raise TranslationError("give sentences as arguments or --input FILE, not both")
    if args.limit is not None and not scoring:
        raise TranslationError(f"--limit {args.limit} applies to scoring (--eval, or --src/--ref)")


def _load(args: argparse.Namespace) -> Translator:
    """The model. Its own decoding (``Translator.decoding``: the pretrained model's chosen beam) is the
    default of ``--beam-size`` and ``--length-penalty``, resolved by the translator as the library does."""
    if args.pretrained:
        args.checkpoint = "the pretrained model"
        return pretrained.load(device=args.device)
    return Translator.from_checkpoint(args.checkpoint, device=args.device)


def _sentences(args: argparse.Namespace) -> list[str]:
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


def _translate(args: argparse.Namespace, translator: Translator, sentences: list[str]) -> None:
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


def _pairs(args: argparse.Namespace, translator: Translator) -> tuple[str, list[tuple[str, str]]]:
    """What is scored: a name and its ``(source, reference)`` pairs."""
    if args.src is not None:
        sources, references = read_lines(args.src), read_lines(args.ref)
        if len(sources) != len(references):
            raise TranslationError(f"--src {args.src} has {len(sources)} lines but --ref {args.ref} has "
                                   f"{len(references)}: they must pair line by line")
        return f"{args.src} -> {args.ref}: {{n}} sentences", list(zip(sources, references))[: args.limit]
    if translator.task != "multi30k":
        raise TranslationError(f"--eval needs a Multi30k checkpoint; {args.checkpoint} was trained on the {translator.task!r} task")
    src_lang, tgt_lang = translator.data["src_lang"], translator.data["tgt_lang"]
    pairs = read_multi30k_split(args.eval, args.data_dir, src_lang, tgt_lang)[: args.limit]
    return f"Multi30k {args.eval}: {{n}} sentences, {src_lang}->{tgt_lang}", pairs


def _score(args: argparse.Namespace, translator: Translator, threads: int) -> None:
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


def _run(args: argparse.Namespace) -> None:
    # Information on standard error, as "info: ...": standard output holds only the results.
    with command_logging(args.quiet, args.log_file, args.log_level, info_stream="stderr", prefix_info=True):
        _translate_or_score(args)


def _translate_or_score(args: argparse.Namespace) -> None:
    try:
        _check_options(args)
    except TranslationError as error:
        raise UsageError(str(error)) from None
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
    args = _parser().parse_args(argv)
    return run_command(lambda: _run(args), argv)


if __name__ == "__main__":
    sys.exit(main())
