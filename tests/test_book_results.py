"""The committed results of longer runs, as chapters 3, 5 and 6 show them (``transformer_lib.book.results``)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from transformer_lib.book.results import (
    bleu_table, committed_results, decoding_choice, describe_run, learning_rate_text, results_table)

BOOK_RESULTS = Path(__file__).resolve().parents[1] / "transformer_lib" / "book" / "runs"  # COMMITTED_RUNS, from the source tree


SIGNATURE = "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0"


def scores(cased: float, lowercased: float) -> dict:
    return {"cased": {"score": cased, "signature": SIGNATURE},
            "lowercased": {"score": lowercased, "signature": SIGNATURE.replace("mixed", "lc")}}


def run_metrics(task: str = "multi30k") -> dict:
    """The parts of a train-CLI metrics.json (format 2) that the results functions read."""
    return {
        "task": task,
        "command": "python -m transformer_lib.train --task multi30k --profile full --out runs/m30k",
        "hardware": {"device": "cuda", "gpu": "NVIDIA H100", "torch": "2.13.0"},
        "parameters": 9_000_000,
        "steps": 4540,
        "training_time_s": 600.0,
        "final": {
            "val": {"loss": 1.9, "ppl": 6.7, "token_accuracy": 0.6, "exact_match": 0.0, "n_sentences": 1014},
            "test": {"loss": 1.8, "ppl": 6.0, "token_accuracy": 0.62, "exact_match": 0.0, "n_sentences": 1000},
        },
        "bleu": {"val": {"greedy": scores(33.0, 33.4)},
                 "test": {"greedy": scores(35.104, 35.6), "beam 4": scores(36.2, 36.7)}},
        "history": {"train": [], "val": []},
    }


def test_committed_results_reads_every_json_file(tmp_path: Path) -> None:
    (tmp_path / "multi30k_full_metrics.json").write_text(json.dumps(run_metrics()))
    (tmp_path / "reverse_metrics.json").write_text(json.dumps(run_metrics("reverse")))
    (tmp_path / "notes.txt").write_text("not a result")
    results = committed_results(tmp_path)
    assert list(results) == ["multi30k_full_metrics", "reverse_metrics"]
    assert results["multi30k_full_metrics"] == run_metrics()


def test_committed_results_without_a_folder_is_empty(tmp_path: Path) -> None:
    assert committed_results(tmp_path / "nowhere") == {}


def test_committed_results_are_package_data_found_from_any_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The website build runs each chapter in a temporary folder, Colab in /content: the default
    folder is the package's own runs/, not a path relative to where the chapter runs, nor ../book."""
    from transformer_lib.book.results import COMMITTED_RUNS

    import transformer_lib

    monkeypatch.chdir(tmp_path)
    assert COMMITTED_RUNS.is_relative_to(Path(transformer_lib.__file__).parent)
    runs = committed_results()
    assert "multi30k_full_metrics" in runs and runs == committed_results(COMMITTED_RUNS)
    assert len(committed_results(COMMITTED_RUNS / "recipes")) >= 20


@pytest.mark.parametrize("content, message", [("{not json", "not valid JSON"), ('{"final": {}}', "lacks ['command', 'hardware']")])
def test_committed_results_refuses_other_files(tmp_path: Path, content: str, message: str) -> None:
    (tmp_path / "bad.json").write_text(content)
    with pytest.raises(ValueError, match=re.escape(message)):
        committed_results(tmp_path)


def test_describe_run_results_table_and_bleu_table() -> None:
    text = describe_run(run_metrics())
    assert text.splitlines() == [
        "command:  python -m transformer_lib.train --task multi30k --profile full --out runs/m30k",
        "hardware: NVIDIA H100 | torch 2.13.0",
        "9,000,000 parameters, 4,540 steps, 10.0 min of training",
        f"sacreBLEU: {SIGNATURE}",
    ]
    table = results_table(run_metrics())
    assert list(table.index) == ["val", "test"]
    assert list(table.columns) == ["loss", "ppl", "token_accuracy"]
    assert table.loc["test", "loss"] == 1.8
    assert results_table({**run_metrics(), "final": {"val": {"loss": 1.653412, "ppl": 5.224776}}}).loc["val"].tolist() == [1.653, 5.225]
    assert "exact_match" in results_table(run_metrics("reverse")).columns  # meaningful for toy tasks only
    bleu = bleu_table(run_metrics())
    assert list(bleu.index) == ["greedy", "beam 4"] and list(bleu.columns) == ["BLEU", "BLEU, lowercased"]
    assert bleu.loc["greedy", "BLEU"] == 35.1 and bleu.loc["beam 4", "BLEU, lowercased"] == 36.7
    assert list(bleu_table(run_metrics(), "val").index) == ["greedy"]


def test_describe_run_prints_no_machine_paths() -> None:
    """A committed run's command names the folder it wrote to on its machine (/tmp/grid3/...): the
    page shows the folder's name only, and leaves relative paths alone."""
    command = "python -m transformer_lib.train --data runs/data.pt --out /tmp/grid3/bpe8k-pre-noam --no-progress"
    first = describe_run({**run_metrics(), "command": command}).splitlines()[0]
    assert first == "command:  python -m transformer_lib.train --data runs/data.pt --out …/bpe8k-pre-noam --no-progress"


def test_a_run_without_bleu() -> None:
    metrics = {**run_metrics(), "bleu": None}
    assert bleu_table(metrics) is None
    assert not describe_run(metrics).splitlines()[-1].startswith("sacreBLEU")


def test_the_committed_full_run_is_complete_and_shown_by_the_helpers() -> None:
    """transformer_lib/book/runs/multi30k_full_metrics.json, which chapters 5 and 6 show: everything issue 7 asks a
    results file to hold, readable by the helpers the chapters call."""
    run = committed_results(BOOK_RESULTS)["multi30k_full_metrics"]
    assert run["task"] == "multi30k" and run["command"].startswith("python -m transformer_lib.train --task multi30k")
    assert run["hardware"]["device"] and run["software"]["torch"] and run["software"]["git_commit"]
    assert run["wall_time_s"] > 0 and run["steps"] > 0 and run["parameters"] > 0
    assert [e["epoch"] for e in run["per_epoch"]] == list(range(1, len(run["per_epoch"]) + 1))
    assert all("val_bleu" in e and "train_loss" in e for e in run["per_epoch"])
    assert run["selection"]["chosen"] in run["selection"]["candidates"]
    table = bleu_table(run, "test")
    assert list(table.index) == ["greedy", "beam 4"]
    assert ((table > 0) & (table < 100)).all().all()
    for scores in run["bleu"]["test"].values():
        assert scores["cased"]["signature"].startswith("nrefs:1|case:mixed|eff:no|tok:13a")
        assert scores["lowercased"]["signature"].startswith("nrefs:1|case:lc|")
    assert list(results_table(run).index) == ["val", "test"]
    assert "sacreBLEU: nrefs:1|case:mixed" in describe_run(run)


def test_recipe_reads_old_and_new_settings_names() -> None:
    """Results files from before the settings took TrainConfig's names say "warmup"; newer ones
    "warmup_steps": the recipe table reads both."""
    from transformer_lib.book.results import recipe

    base = {"data": {"tokenizer": "bpe", "vocab_size": 8000}, "model_config": {"norm_first": True, "dropout": 0.1}}
    old = recipe({**base, "settings": {"schedule": "noam", "lr": 3e-3, "warmup": 800}})
    new = recipe({**base, "settings": {"schedule": "noam", "lr": 3e-3, "warmup_steps": 800}})
    assert old == new and new["warm-up"] == 800


def test_the_committed_decoding_choice_was_made_on_validation(tmp_path: Path) -> None:
    found = decoding_choice()
    chosen = found["chosen"]
    assert chosen in found["val"] and (chosen["beam"], chosen["length_penalty"]) in {
        (row["beam"], row["length_penalty"]) for row in found["test"]
    }
    alphas = sorted({row["length_penalty"] for row in found["val"] if row["beam"] == chosen["beam"]})
    assert alphas[0] < chosen["length_penalty"] < alphas[-1], "the best setting must lie inside the grid"
    tampered = dict(found, chosen=min(found["val"], key=lambda row: row["bleu"]))
    (tmp_path / "grid.json").write_text(json.dumps(tampered))
    with pytest.raises(ValueError, match="not the best on validation"):
        decoding_choice(tmp_path / "grid.json")



@pytest.mark.parametrize("value,text", [(5e-4, "5e-4"), (0.0015, "1.5e-3"), (0.0022, "2.2e-3"), (3e-3, "3e-3"),
                                        (256 ** -0.5 * 800 ** -0.5, "2.209708691207961e-3"), (1.0, "1e0")])
def test_learning_rates_are_written_exactly(value: float, text: str) -> None:
    assert learning_rate_text(value) == text and float(text) == value


@pytest.mark.parametrize("value", [0.0, -1e-3, float("inf"), float("nan")])
def test_a_learning_rate_must_be_positive_and_finite(value: float) -> None:
    with pytest.raises(ValueError):
        learning_rate_text(value)
