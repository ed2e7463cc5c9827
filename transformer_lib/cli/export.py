"""Turn a finished training run into the book's pretrained-model file: ``python -m transformer_lib.cli.export``.

    python -m transformer_lib.cli.export RUN_DIR --out model.safetensors
    python -m transformer_lib.cli.export RUN_DIR --tuning TUNING.json --out model.safetensors

``RUN_DIR`` is the ``--out`` folder of ``transformer-train`` (its ``metrics.json`` names the selected
weights). The file records the model's default decoding: without ``--tuning``, the one of the decodings
the training run scored on validation (greedy, and the beam of its ``--beam-size``, length penalty 0.6)
with the best cased BLEU there, with that decoding's test BLEU; greedy decoding for a run that scored no
BLEU (a toy task). ``TUNING.json`` is what ``benchmarks/tune_decoding.py --json`` (in the repository, not
the wheel) wrote for the weights: a finer grid of beams and length penalties, chosen on validation. The
file carries its own checksum and a model card (:mod:`transformer_lib.pretrained`), so
``pretrained.load(FILE)`` loads a copy anywhere; its SHA-256 is also written to ``SHA256SUMS`` beside it.

``--out`` has no default: the package's own file is replaced only when named. The file is written whole
or not at all (to a temporary file beside ``--out``, read back and size-checked, then renamed), and a
file already at ``--out`` is replaced only by a model of the same task and language pair. An unfinished
run and a tuning report without the chosen decoding or its test score are refused before anything is
written.
"""

from __future__ import annotations

import json
import numbers
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .. import pretrained
from ..checkpoint import atomic_write
from ..translator import LENGTH_PENALTY, Translator
from .common import CommandLineParser, run_command

__all__ = ["main", "tuning_record", "run_tuning", "read_run", "read_tuning", "check_replaceable"]


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


def run_tuning(run: dict[str, Any]) -> dict[str, Any]:
    """The default decoding a run's own record supports, as :func:`tuning_record` shapes a tuning report:
    among the decodings the run scored on validation (``metrics.json``'s ``bleu.val``: greedy and
    ``beam N``, both at the library's length penalty), the one with the best cased BLEU, with its test
    BLEU; greedy decoding, stated as a default, when the run scored no BLEU."""
    def decoding(name: str) -> int:
        return 1 if name == "greedy" else int(name.split()[-1])

    scored = run.get("bleu") or {}
    val, test = scored.get("val") or {}, scored.get("test") or {}

    def row(name: str, result: dict[str, Any]) -> dict[str, Any]:
        return {"beam_size": decoding(name), "length_penalty": LENGTH_PENALTY,
                "bleu": result["cased"]["score"], "bleu_lowercased": result["lowercased"]["score"],
                "signature": result["cased"]["signature"], "signature_lowercased": result["lowercased"]["signature"]}

    try:
        rows = {name: row(name, result) for name, result in val.items()}
        tests = {name: row(name, result) for name, result in test.items()}
    except (KeyError, TypeError, ValueError, IndexError) as error:
        raise ValueError(f"the run's metrics.json has a BLEU record this version cannot read ({error!r})") from None
    if not rows:
        chosen = {"beam_size": 1, "length_penalty": LENGTH_PENALTY}
        return {"chosen_by": "default: greedy decoding (the run scored no BLEU to choose a decoding by)",
                "chosen": chosen, "test": None, "test_other": [], "val": [], "threads": None}
    best = max(rows, key=lambda name: (rows[name]["bleu"], -rows[name]["beam_size"]))
    return {"chosen_by": "validation BLEU, cased, among the decodings the training run scored "
                         f"({', '.join(rows)}; length penalty {LENGTH_PENALTY})",
            "chosen": rows[best], "test": tests.get(best), "test_other": list(tests.values()),
            "val": list(rows.values()), "threads": None}


def _read_json(path: Path, what: str) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ValueError(f"no {what} at {path}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"{path} is not a {what} (not JSON: {error})") from None


def read_run(folder: Path) -> dict[str, Any]:
    """``FOLDER/metrics.json`` of a finished run; a folder without one, or an unfinished run, is refused."""
    if not folder.is_dir():
        raise ValueError(f"{folder} is not a folder: give the --out folder of a training run")
    run = _read_json(folder / "metrics.json", "training run's metrics.json")
    if not isinstance(run, dict) or "selection" not in run or "steps" not in run:
        raise ValueError(f"{folder / 'metrics.json'} is not the metrics.json of transformer-train (no 'selection' or 'steps')")
    if not isinstance(run["selection"], dict) or not isinstance(run["selection"].get("checkpoint"), str):
        raise ValueError(f"{folder} is an unfinished run (stopped at step {run['steps']}, no weights selected): "
                         "run its command again to finish it, then export")
    return run


def read_tuning(path: Path) -> dict[str, Any]:
    """The tuning report at ``path`` as :func:`tuning_record` makes it, every field it needs checked."""
    grid = _read_json(path, "tuning report of benchmarks/tune_decoding.py --json")

    def refuse(what: str) -> ValueError:
        return ValueError(f"{path} is not a tuning report of benchmarks/tune_decoding.py --json: {what}")

    if not isinstance(grid, dict):
        raise refuse(f"it holds a {type(grid).__name__}, not an object")
    missing = [key for key in ("chosen_by", "chosen", "val", "test") if key not in grid]
    if missing:
        raise refuse(f"it lacks {missing}")
    rows = [("chosen", grid["chosen"])]
    for split in ("val", "test"):
        if not isinstance(grid[split], list) or not grid[split]:
            raise refuse(f"'{split}' must be a non-empty list of rows, got {grid[split]!r:.60}")
        rows += [(f"{split}[{i}]", row) for i, row in enumerate(grid[split])]
    for name, row in rows:
        if not isinstance(row, dict):
            raise refuse(f"{name} must be an object, got {row!r:.60}")
        beam, penalty = row.get("beam"), row.get("length_penalty")
        if not isinstance(beam, int) or isinstance(beam, bool) or beam < 1:
            raise refuse(f"{name}.beam must be a whole number >= 1, got {beam!r}")
        if not isinstance(penalty, numbers.Real) or isinstance(penalty, bool) or not 0 <= float(penalty) <= 10:
            raise refuse(f"{name}.length_penalty must be a number from 0 to 10, got {penalty!r}")
    return tuning_record(grid)


def _recorded(path: Path) -> tuple[str, dict[str, Any]]:
    """The task and data description a pretrained file at ``path`` records (its checksum not checked:
    this is what it claims to be, to refuse replacing it with something else)."""
    try:
        metadata = pretrained._metadata(path)
        return metadata["task"], dict(json.loads(metadata["data"]))
    except (KeyError, TypeError, ValueError) as error:
        raise ValueError(f"{path} exists and is not a pretrained-model file ({error}); "
                         "it is left as it is: choose another --out, or move it away first") from None


def check_replaceable(path: Path, translator: Translator) -> None:
    """Refuse to replace a file at ``path`` that is not a pretrained-model file, or is one of another
    task or language pair than ``translator``'s (a new file may be of any)."""
    if not path.exists():
        return
    if not path.is_file():
        raise ValueError(f"--out {path} is a folder; give the file to write")
    task, data = _recorded(path)
    new = (translator.task, translator.data.get("src_lang"), translator.data.get("tgt_lang"))
    old = (task, data.get("src_lang"), data.get("tgt_lang"))
    if new != old:
        def text(task: str, src: Any, tgt: Any) -> str:
            return f"{task!r}" + (f" {src}->{tgt}" if src or tgt else "")

        raise ValueError(f"{path} holds a {text(*old)} model and this run is {text(*new)}: export it to another --out "
                         "(the file is replaced only by a model of the same task and languages)")


def export(run_dir: Path, tuning_path: Path | None, out: Path) -> str:
    """Write ``run_dir``'s selected weights with the tuning report (``None``: :func:`run_tuning`) to ``out``
    (whole or not at all) and its checksum to ``SHA256SUMS`` beside it; returns the SHA-256. Every check
    runs before ``out`` changes."""
    run = read_run(run_dir)
    tuning = read_tuning(tuning_path) if tuning_path is not None else run_tuning(run)
    translator = Translator.from_checkpoint(run_dir / run["selection"]["checkpoint"])
    check_replaceable(out, translator)

    def read_back(staged: Path) -> None:  # the whole file loads, by the checksum it carries, before it replaces out
        pretrained.load(staged)

    digest = {"sha256": pretrained.save(translator, out, run, tuning, check=read_back)}  # raises if over the size limit
    sums = out.parent / "SHA256SUMS"
    lines = [line for line in (sums.read_text().splitlines() if sums.is_file() else []) if not line.endswith("  " + out.name)]
    text = "\n".join(sorted(lines + [f"{digest['sha256']}  {out.name}"])) + "\n"
    atomic_write(sums, lambda f: f.write(text.encode("utf-8")))
    return digest["sha256"]


def main(argv: Sequence[str] | None = None) -> int:
    parser = CommandLineParser(prog="python -m transformer_lib.cli.export", description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path, help="the training run's folder (with metrics.json)")
    parser.add_argument("--tuning", type=Path, default=None,
                        help="benchmarks/tune_decoding.py --json output (default: the best decoding on validation "
                             "among those the run scored)")
    parser.add_argument("--out", type=Path, required=True,
                        help=f"the file to write; required, no default (the package's own is {pretrained.shipped_path()})")
    args = parser.parse_args(argv)

    def run() -> None:
        digest = export(args.run, args.tuning, args.out)
        print(f"{args.out}: {args.out.stat().st_size:,} bytes, sha256 {digest}")

    return run_command(run, argv)


if __name__ == "__main__":
    raise SystemExit(main())
