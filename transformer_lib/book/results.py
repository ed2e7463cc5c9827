"""The committed results of longer runs, as a chapter shows them (chapters 3, 5 and 6).

A results file is the ``metrics.json`` that ``python -m transformer_lib.cli.train`` writes, copied into
``transformer_lib/book/runs/`` (:data:`COMMITTED_RUNS`). They are package data of the book's
support code, so a chapter finds them wherever it runs: in the repository, in the temporary folder
the website build executes it in, and on Colab, where the library is installed from git.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = [
    "COMMITTED_RUNS", "RAN_AS", "TODAY", "committed_results", "describe_run", "results_table", "bleu_table", "recipe", "recipe_table",
    "learning_rate_text", "decoding_choice",
]


_RUN_KEYS = ("command", "hardware", "final")

# Package data (pyproject.toml), beside this module: installed with the library.
COMMITTED_RUNS = Path(__file__).resolve().parent / "runs"


def committed_results(folder: str | Path = COMMITTED_RUNS) -> dict[str, dict[str, Any]]:
    """The metrics files committed with the book, by name (the file name without ``.json``).

    Each file is the ``metrics.json`` that ``python -m transformer_lib.cli.train`` writes (the command,
    the hardware, the settings, the final metrics per split, the loss history and, with ``--bleu``,
    the BLEU of greedy and beam decoding), copied into :data:`COMMITTED_RUNS`, e.g.
    ``multi30k_full_metrics.json``.

    Args:
        folder: where to look: :data:`COMMITTED_RUNS` (default), or e.g.
            ``COMMITTED_RUNS / "recipes"`` for the recipe comparison.

    Returns:
        ``{name: metrics}`` sorted by name; empty when the folder does not exist.

    Raises:
        ValueError: a file is not JSON, or lacks the entries every run has (``command``,
            ``hardware``, ``final``).
    """
    folder = Path(folder)
    if not folder.is_dir():
        return {}
    results: dict[str, dict[str, Any]] = {}
    for path in sorted(folder.glob("*.json")):
        try:
            metrics = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as error:
            raise ValueError(f"{path} is not valid JSON ({error}); it should be a metrics.json of the train CLI") from None
        missing = [key for key in _RUN_KEYS if not isinstance(metrics, dict) or key not in metrics]
        if missing:
            raise ValueError(
                f"{path} lacks {missing}: results files are the metrics.json that "
                "`python -m transformer_lib.cli.train` writes"
            )
        results[path.stem] = metrics
    return results


def describe_run(metrics: Mapping[str, Any]) -> str:
    """How a run was made: its command, its hardware, its size and duration (and, when it was
    scored, the sacreBLEU signature of its test BLEU).

    The record keeps the command as it was run. Where that command would not make the same run
    with this version (an earlier version's names or defaults), it is labelled as run by an earlier
    version, and the command that makes the same run today follows
    (:func:`transformer_lib.cli.history.current_command`).

    Example:
        >>> print(describe_run({"command": "python -m transformer_lib.cli.train --task reverse --out r",
        ...                     "hardware": {"device": "cpu", "torch": "2.5.0"}, "parameters": 1000,
        ...                     "steps": 650, "training_time_s": 90.0, "final": {}}))
        command:  python -m transformer_lib.cli.train --task reverse --out r
        hardware: cpu | torch 2.5.0
        1,000 parameters, 650 steps, 1.5 min of training
    """
    hardware = metrics["hardware"]
    where = hardware.get("gpu", hardware.get("device", "unknown device"))
    size = []
    if "parameters" in metrics:
        size.append(f"{metrics['parameters']:,} parameters")
    if "steps" in metrics:
        size.append(f"{metrics['steps']:,} steps")
    if "training_time_s" in metrics:
        size.append(f"{metrics['training_time_s'] / 60:.1f} min of training")
    lines = [*_command_lines(metrics), f"hardware: {where} | torch {hardware.get('torch', '?')}"]
    if size:
        lines.append(", ".join(size))
    test_bleu = (metrics.get("bleu") or {}).get("test") or {}
    if "greedy" in test_bleu:
        lines.append(f"sacreBLEU: {test_bleu['greedy']['cased']['signature']}")
    return "\n".join(lines)


RAN_AS = "command as run, by an earlier version: "
TODAY = "the same run today: "


def _command_lines(metrics: Mapping[str, Any]) -> list[str]:
    """``command: ...``; or, for a run whose command this version would run otherwise, that command
    labelled as history and the command that makes the same run today."""
    from transformer_lib.cli.history import current_command, differences

    command = metrics["command"]
    if "settings" not in metrics or not differences(command, metrics):
        return [f"command:  {_without_machine_paths(command)}"]
    return [f"{RAN_AS}{_without_machine_paths(command)}", f"{TODAY}{_without_machine_paths(current_command(metrics))}"]


def _without_machine_paths(command: str) -> str:
    """``command`` with each absolute path cut to its last part (``--out /tmp/grid3/run`` becomes
    ``--out …/run``): where a run wrote its files on its machine tells a reader nothing."""
    return " ".join(f"…/{Path(word).name}" if word.startswith("/") and word != "/" else word
                    for word in command.split(" "))


def results_table(metrics: Mapping[str, Any]) -> Any:
    """A run's final metrics as a ``pandas.DataFrame``, one row per split.

    Columns: ``loss`` (cross-entropy per target token), ``ppl``, ``token_accuracy``, and for toy
    tasks ``exact_match`` (no translation is ever exactly its reference); rounded to 3 decimals.
    """
    import pandas as pd  # imported lazily: only showing results needs it

    columns = ["loss", "ppl", "token_accuracy"]
    if metrics.get("task") != "multi30k":
        columns.append("exact_match")
    frame = pd.DataFrame.from_dict(dict(metrics["final"]), orient="index")
    frame.index.name = "split"
    return frame[[c for c in columns if c in frame.columns]].round(3)


def bleu_table(metrics: Mapping[str, Any], split: str = "test") -> Any:
    """A run's BLEU on ``split``, one row per decoding (``greedy``, ``beam 4``, ...), or ``None``.

    Columns ``BLEU`` (cased: the number to report) and ``BLEU, lowercased`` (for older papers);
    :func:`describe_run` gives the signature. ``None`` when the run was not scored (``--bleu off``).
    """
    import pandas as pd  # imported lazily: only showing results needs it

    scored = (metrics.get("bleu") or {}).get(split)
    if not scored:
        return None
    rows = {name: {"BLEU": r["cased"]["score"], "BLEU, lowercased": r["lowercased"]["score"]} for name, r in scored.items()}
    frame = pd.DataFrame.from_dict(rows, orient="index").round(2)
    frame.index.name = "decoding"
    return frame


def recipe(metrics: Mapping[str, Any]) -> dict[str, Any]:
    """The choices a run made that the recipe comparison varies, read from its results file.

    Example:
        >>> recipe({"data": {"tokenizer": "bpe", "vocab_size": 8000}, "model_config": {"norm_first": False,
        ...         "dropout": 0.1}, "settings": {"schedule": "noam", "lr": 0.0022, "warmup": 800}})
        {'tokens': 'BPE 8,000', 'LayerNorm': 'Post-LN', 'schedule': 'noam', 'peak lr': 0.0022, 'warm-up': 800, 'dropout': 0.1}
    """
    data, config, settings = metrics["data"], metrics["model_config"], metrics["settings"]
    tokens = f"BPE {data['vocab_size']:,}" if data.get("tokenizer") == "bpe" else "words (spaCy)"
    return {
        "tokens": tokens,
        "LayerNorm": "Pre-LN" if config["norm_first"] else "Post-LN",
        "schedule": settings["schedule"],
        "peak lr": settings["lr"],
        # Files written before the settings took TrainConfig's names say "warmup".
        "warm-up": settings["warmup_steps"] if "warmup_steps" in settings else settings["warmup"],
        "dropout": config["dropout"],
    }


def recipe_table(runs: Mapping[str, Mapping[str, Any]]) -> Any:
    """Runs side by side, best validation BLEU (beam, lowercased) first: what each chose, and how it did.

    Only validation numbers: the comparison chooses the recipe, and the test set must not take part
    in a choice. Columns: the :func:`recipe` choices, the seed, the validation BLEU (greedy and beam,
    lowercased) of the weights the run selected, the best greedy validation BLEU during training, and
    the final validation loss.
    """
    import pandas as pd  # imported lazily: only showing results needs it

    rows = {}
    for name, metrics in runs.items():
        val = metrics["bleu"]["val"]
        beam = next(key for key in val if key.startswith("beam"))
        during = [row["val_bleu_lowercased"] for row in metrics["per_epoch"] if "val_bleu_lowercased" in row]
        rows[name] = {
            **recipe(metrics),
            "seed": metrics["settings"].get("seed", 0),
            "val BLEU greedy": val["greedy"]["lowercased"]["score"],
            f"val BLEU {beam}": val[beam]["lowercased"]["score"],
            "best epoch BLEU": max(during) if during else float("nan"),
            "val loss": metrics["final"]["val"]["loss"],
        }
    frame = pd.DataFrame.from_dict(rows, orient="index").sort_values(f"val BLEU {beam}", ascending=False)
    frame.index.name = "run"
    return frame.round({"val BLEU greedy": 2, f"val BLEU {beam}": 2, "best epoch BLEU": 2, "val loss": 3})


def learning_rate_text(value: float) -> str:
    """A learning rate as a table shows it: the shortest ``5e-4``-style text that reads back as exactly
    ``value`` (``0.0005`` -> ``"5e-4"``, ``0.0022`` -> ``"2.2e-3"``), where fixed decimals would round
    5e-4 up to 0.001 and 2.2e-3 down to 0.002.

    Raises:
        ValueError: ``value`` is not a positive finite number.
    """
    number = float(value)
    if not 0 < number < float("inf"):
        raise ValueError(f"a learning rate is a positive finite number, got {value!r}")
    for digits in range(17):
        mantissa, exponent = f"{number:.{digits}e}".split("e")
        text = f"{mantissa}e{int(exponent)}"
        if float(text) == number:
            return text
    raise AssertionError(f"{number!r} has no exact 17-digit form")  # every double has one


def decoding_choice(path: str | Path = COMMITTED_RUNS / "decoding" / "multi30k_full_beam_grid.json") -> dict[str, Any]:
    """Beam size and length penalty of the committed full run, chosen on validation
    (``benchmarks/tune_decoding.py``): ``{"chosen": row, "val": rows, "test": rows, ...}``, each row
    ``{"beam", "length_penalty", "bleu", "bleu_lowercased", "signature", ...}``.

    Raises:
        ValueError: the file is not JSON, lacks a section, or its ``chosen`` row is not the best
            validation row (the test scores must have chosen nothing).
    """
    path = Path(path)
    try:
        found = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise ValueError(f"{path} is not JSON: {error}") from None
    missing = [key for key in ("chosen", "val", "test", "commands") if key not in found]
    if missing:
        raise ValueError(f"{path} lacks {missing}")
    best = max(found["val"], key=lambda row: row["bleu"])
    if (best["beam"], best["length_penalty"]) != (found["chosen"]["beam"], found["chosen"]["length_penalty"]):
        raise ValueError(f"{path}: the chosen setting {found['chosen']} is not the best on validation ({best})")
    return found
