"""Beam size and length penalty for a trained checkpoint, chosen on the validation set only.

Decodes Multi30k validation with greedy search and with beam search for every (beam size, GNMT length
penalty) pair of a grid, picks the pair with the best validation BLEU (cased, the number the book
reports), and only then decodes the test set once, with that pair and with the training CLI's
default (beam 4, penalty 0.6) beside it. The test scores choose nothing: a setting tuned on test 2016
would flatter the model on exactly the sentences it is judged on.

Usage:
    MULTI30K_DIR=/path/to/multi30k python benchmarks/tune_decoding.py --checkpoint runs/X/model.pt
    python benchmarks/tune_decoding.py --checkpoint CKPT --beams 2 4 8 --alphas 0 0.6 1.0 --json out.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from transformer_lib.translator import LENGTH_PENALTY, Translator, evaluate_bleu, read_multi30k_split  # noqa: E402

DEFAULT_BEAM = 4  # what `python -m transformer_lib.cli.train` and `translate --eval` report


def score(translator: Translator, pairs: list[tuple[str, str]], beam: int, alpha: float) -> dict[str, Any]:
    """BLEU (cased and lowercased, with signatures) of one decoding setting on ``pairs``."""
    [result] = evaluate_bleu(translator, pairs, beam_sizes=(beam,), length_penalty=alpha).values()
    return {
        "beam": beam, "length_penalty": alpha, "seconds": round(result["seconds"], 1),
        "bleu": round(result["bleu"].score, 2), "bleu_lowercased": round(result["bleu_lowercased"].score, 2),
        "signature": result["bleu"].signature, "signature_lowercased": result["bleu_lowercased"].signature,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--data-dir", default=None, help="Multi30k .gz files (default: $MULTI30K_DIR)")
    parser.add_argument("--beams", type=int, nargs="+", default=[2, 4, 6, 8])
    parser.add_argument("--alphas", type=float, nargs="+", default=[0.0, 0.6, 1.2, 1.8, 2.4, 3.0, 3.6])
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--json", default=None, help="write every score here")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    translator = Translator.from_checkpoint(args.checkpoint, device="cpu")
    src, tgt = translator.data["src_lang"], translator.data["tgt_lang"]
    val = read_multi30k_split("val", args.data_dir, src, tgt)
    start = time.perf_counter()
    grid = [score(translator, val, 1, 0.0)]
    grid += [score(translator, val, beam, alpha) for beam in args.beams for alpha in args.alphas]
    for row in grid:
        print(f"val  beam {row['beam']}  alpha {row['length_penalty']:.1f}: BLEU {row['bleu']:5.2f} "
              f"(lowercased {row['bleu_lowercased']:5.2f})  {row['seconds']:.0f} s", flush=True)
    chosen = max(grid, key=lambda row: row["bleu"])
    print(f"chosen on validation: beam {chosen['beam']}, length penalty {chosen['length_penalty']}")
    if chosen["beam"] > 1 and chosen["length_penalty"] in (min(args.alphas), max(args.alphas)):
        print("the best length penalty is at the edge of the grid: widen --alphas (on validation) and run again")
    test = read_multi30k_split("test", args.data_dir, src, tgt)
    settings = {(chosen["beam"], chosen["length_penalty"]), (DEFAULT_BEAM, LENGTH_PENALTY)}
    test_scores = [score(translator, test, beam, alpha) for beam, alpha in sorted(settings)]
    for row in test_scores:
        print(f"test beam {row['beam']}  alpha {row['length_penalty']:.1f}: BLEU {row['bleu']:5.2f} "
              f"(lowercased {row['bleu_lowercased']:5.2f})")
    print(f"signature: {chosen['signature']}  ({time.perf_counter() - start:.0f} s in all)")
    if args.json:
        report = {"checkpoint": str(args.checkpoint), "chosen_by": "validation BLEU, cased", "chosen": chosen,
                  "val": grid, "test": test_scores, "threads": torch.get_num_threads()}
        Path(args.json).write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
