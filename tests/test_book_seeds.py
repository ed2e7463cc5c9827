"""transformer_lib.book.seeds: the seed runs of section 5.9 read from a folder, scored from their
translations, and compared with the paired bootstrap (small fixtures; the committed runs are
checked by the section itself)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from transformer_lib.book import seeds

REFERENCES = ["a dog runs on the grass", "two men are talking", "a woman reads a book", "the child plays"]


def _run(folder: Path, name: str, lines: list[str], recorded: float) -> None:
    metrics = {"command": "train", "hardware": {}, "final": {},
               "bleu": {"val": {"greedy": {"cased": {"score": recorded}}}}}
    (folder / f"{name}.json").write_text(json.dumps(metrics))
    with gzip.open(folder / f"{name}.val.txt.gz", "wt", encoding="utf-8") as out:
        out.write("".join(f"{line}\n" for line in lines))


@pytest.fixture()
def runs_folder(tmp_path: Path) -> Path:
    good = REFERENCES
    worse = ["a dog runs", "two men talking", "a woman reads a book", "child"]
    _run(tmp_path, "good-seed0", good, 100.0)
    _run(tmp_path, "good-seed1", good, 100.0)
    _run(tmp_path, "worse-seed0", worse, 0.0)
    _run(tmp_path, "worse-seed1", good, 100.0)
    return tmp_path


def test_runs_are_grouped_by_recipe_and_seed(runs_folder: Path) -> None:
    runs = seeds.seed_runs(runs_folder)
    assert sorted(runs) == ["good", "worse"] and sorted(runs["worse"]) == [0, 1]


def test_a_file_not_named_by_seed_is_an_error(runs_folder: Path) -> None:
    _run(runs_folder, "no-seed-here", REFERENCES, 0.0)
    with pytest.raises(ValueError, match="RECIPE-seedS"):
        seeds.seed_runs(runs_folder)


def test_missing_translations_name_the_file(runs_folder: Path) -> None:
    with pytest.raises(FileNotFoundError, match="good-seed7.val.txt.gz"):
        seeds.translations("good", 7, runs_folder)


def test_table_scores_the_translations_and_reports_the_gap_to_the_record(runs_folder: Path) -> None:
    table = seeds.seed_table(seeds.seed_runs(runs_folder), REFERENCES, folder=runs_folder)
    assert table.loc["good", "seed 0"] == pytest.approx(100.0)
    assert table.loc["good", "spread"] == pytest.approx(0.0)
    assert table.loc["worse", "seed 0"] < table.loc["worse", "seed 1"] == pytest.approx(100.0)
    assert table.loc["worse", "spread"] > 0 and table.index[0] == "good"  # best mean first
    assert table.loc["worse", "recorded"] > 0  # seed 0 scores above the 0.0 its record claims


def test_compare_recipes_gives_one_row_a_seed(runs_folder: Path) -> None:
    result = seeds.compare_recipes("worse", "good", [0, 1], REFERENCES, folder=runs_folder)
    assert list(result.index) == [0, 1]
    assert result.loc[0, "difference"] > 0 and result.loc[1, "difference"] == 0
    assert result.loc[1, "p"] == 1.0  # identical outputs cannot be told apart


def test_chart_draws_every_seed_and_the_mean(runs_folder: Path) -> None:
    import pandas as pd

    table = pd.DataFrame({"seed 0": [1.0, 2.0], "seed 1": [1.5, 2.5], "mean": [1.25, 2.25]},
                         index=pd.Index(["a", "b"], name="recipe"))
    spec = seeds.seed_chart(table).to_dict()
    assert len(spec["layer"]) == 2
