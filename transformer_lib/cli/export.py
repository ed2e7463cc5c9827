"""Turn a finished training run into the book's pretrained-model file: ``python -m transformer_lib.cli.export``.

    python -m transformer_lib.cli.export RUN_DIR --tuning TUNING.json --out transformer_lib/weights/multi30k-de-en.safetensors

``RUN_DIR`` is the ``--out`` folder of ``python -m transformer_lib.cli.train`` (its ``metrics.json`` names
the selected weights); ``TUNING.json`` is what ``benchmarks/tune_decoding.py --json`` wrote for them
(the decoding chosen on validation, and test BLEU with it). The file's SHA-256 is written to
``SHA256SUMS`` beside it, which :func:`transformer_lib.pretrained.load` checks.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .. import pretrained
from ..translator import Translator
from .common import CommandLineParser, run_command

__all__ = ["main", "tuning_record"]


def tuning_record(grid: dict[str, Any]) -> dict[str, Any]:
    """The tuning report of ``benchmarks/tune_decoding.py`` as the file records it: the chosen
    decoding as :meth:`Translator.translate` keywords, its validation and test scores, and the grid."""
    def entry(row: dict[str, Any]) -> dict[str, Any]:
        return {"beam_size": row["beam"], **{k: v for k, v in row.items() if k != "beam"}}

    chosen = entry(grid["chosen"])
    test = [entry(row) for row in grid["test"]]
    same = [row for row in test if (row["beam_size"], row["length_penalty"]) == (chosen["beam_size"], chosen["length_penalty"])]
    if not same:
        raise ValueError(f"the tuning report has no test score for beam {chosen['beam_size']}, "
                         f"length penalty {chosen['length_penalty']}")
    return {"chosen_by": grid["chosen_by"], "chosen": chosen, "test": same[0], "test_other": test,
            "val": [entry(row) for row in grid["val"]], "threads": grid.get("threads")}


def main(argv: Sequence[str] | None = None) -> int:
    parser = CommandLineParser(prog="python -m transformer_lib.cli.export", description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path, help="the training run's folder (with metrics.json)")
    parser.add_argument("--tuning", type=Path, required=True, help="benchmarks/tune_decoding.py --json output")
    parser.add_argument("--out", type=Path, default=pretrained.shipped_path())
    args = parser.parse_args(argv)

    def export() -> None:
        run = json.loads((args.run / "metrics.json").read_text())
        translator = Translator.from_checkpoint(args.run / run["selection"]["checkpoint"])
        digest = pretrained.save(translator, args.out, run, tuning_record(json.loads(args.tuning.read_text())))
        sums = args.out.parent / "SHA256SUMS"
        lines = [line for line in (sums.read_text().splitlines() if sums.is_file() else []) if not line.endswith("  " + args.out.name)]
        sums.write_text("\n".join(sorted(lines + [f"{digest}  {args.out.name}"])) + "\n")
        print(f"{args.out}: {args.out.stat().st_size:,} bytes, sha256 {digest}")

    return run_command(export, argv)


if __name__ == "__main__":
    raise SystemExit(main())
