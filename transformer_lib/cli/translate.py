"""Translate with a trained checkpoint, or measure its BLEU on Multi30k: ``python -m transformer_lib.cli.translate``.

Examples::

    python -m transformer_lib.cli.translate --checkpoint runs/multi30k/checkpoint.pt "Ein Mann fährt Fahrrad."
    python -m transformer_lib.cli.translate --checkpoint CKPT --beam-size 4 "Ein Hund rennt." "Zwei Kinder spielen."
    python -m transformer_lib.cli.translate --checkpoint CKPT --eval test --data-dir DIR   # or MULTI30K_DIR
    python -m transformer_lib.cli.translate --pretrained "Ein Hund rennt."   # the model the book ships

With ``--pretrained`` the beam size and length penalty default to the ones chosen for it on validation.

Bad input (a missing or incompatible checkpoint, an empty sentence, a sentence longer than the
model allows, symbols a toy-task model does not know, a device this machine lacks) prints one line
``error: ...`` and exits with status 2, without a traceback (``--debug`` or
``TRANSFORMER_LIB_DEBUG=1`` shows it); a sentence of only unknown words warns.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from .. import pretrained
from ..evaluation import BleuScore
from ..translator import LENGTH_PENALTY, TranslationError, Translator, evaluate_bleu, read_multi30k_split
from ..validation import check_int, check_number
from .common import DEBUG_ENV, CommandLineParser, run_command

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = CommandLineParser(
        prog="python -m transformer_lib.cli.translate",
        description="Translate sentences with a trained checkpoint, or report its BLEU on Multi30k.",
    )
    parser.add_argument("sentences", nargs="*", help="sentences to translate, one argument each")
    model = parser.add_mutually_exclusive_group(required=True)
    model.add_argument("--checkpoint", help="a checkpoint written by python -m transformer_lib.cli.train")
    model.add_argument("--pretrained", action="store_true",
                       help="the pretrained Multi30k de->en model shipped with the library (transformer_lib.pretrained)")
    parser.add_argument("--beam-size", type=int, default=None, metavar="N",
                        help="beam size (default: 1, greedy, when translating; 4 next to greedy with --eval)")
    parser.add_argument("--length-penalty", type=float, default=None, metavar="ALPHA",
                        help=f"beam search's GNMT length penalty (default {LENGTH_PENALTY}, or the pretrained model's; 0 = none)")
    parser.add_argument("--eval", choices=["val", "test"], help="report BLEU on this Multi30k split (greedy and beam)")
    parser.add_argument("--data-dir", default=None,
                        help="folder with the Multi30k .gz files (default: $MULTI30K_DIR, else the download cache)")
    parser.add_argument("--limit", type=int, default=None, metavar="N", help="with --eval: only the first N sentences")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--device", default="auto", help="auto (cuda when available), cpu, cuda or cuda:N")
    parser.add_argument("--debug", action="store_true", help=f"show the traceback of an error (or set {DEBUG_ENV}=1)")
    return parser


def _check_options(args: argparse.Namespace) -> None:
    try:
        check_int("--beam-size", args.beam_size, optional=True)
        check_int("--batch-size", args.batch_size)
        check_int("--limit", args.limit, optional=True)
        if args.length_penalty is not None:
            check_number("--length-penalty", args.length_penalty, 0, 10, high_open=False)
    except ValueError as error:
        raise TranslationError(str(error)) from None
    if args.eval is None and not args.sentences:
        raise TranslationError('give a sentence to translate, e.g. "Ein Mann fährt Fahrrad.", or --eval val|test')
    if args.eval is not None and args.sentences:
        raise TranslationError("give either sentences to translate or --eval, not both")


def _run(args: argparse.Namespace) -> None:
    _check_options(args)
    if args.pretrained:
        decoding = pretrained.info().decoding
        translator = pretrained.load(device=args.device)
        args.checkpoint = "the pretrained model"
        args.beam_size = args.beam_size or decoding["beam_size"]
        args.length_penalty = decoding["length_penalty"] if args.length_penalty is None else args.length_penalty
    else:
        translator = Translator.from_checkpoint(args.checkpoint, device=args.device)
    if args.length_penalty is None:
        args.length_penalty = LENGTH_PENALTY
    if args.eval is None:
        for line in translator.translate(args.sentences, beam_size=args.beam_size or 1, batch_size=args.batch_size,
                                         length_penalty=args.length_penalty):
            print(line)
        return
    if translator.task != "multi30k":
        raise TranslationError(f"--eval needs a Multi30k checkpoint; {args.checkpoint} was trained on the {translator.task!r} task")
    src_lang, tgt_lang = translator.data["src_lang"], translator.data["tgt_lang"]
    pairs = read_multi30k_split(args.eval, args.data_dir, src_lang, tgt_lang)[: args.limit]
    beam = args.beam_size or 4
    results = evaluate_bleu(translator, pairs, beam_sizes=(1, beam) if beam > 1 else (1,), batch_size=args.batch_size,
                            length_penalty=args.length_penalty)
    print(f"Multi30k {args.eval}: {len(pairs)} sentences, {src_lang}->{tgt_lang}, {args.checkpoint} on {translator.device}")
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
