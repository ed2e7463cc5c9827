"""transformer_lib.book.seeds: the seed runs of section 5.9 read from a folder and tabulated, and the
committed paired bootstraps shown seed by seed (small fixtures; the committed runs are checked by the
section itself)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from transformer_lib.book import seeds


def _run(folder: Path, name: str, recorded: float) -> None:
    metrics = {"command": "train", "hardware": {}, "final": {},
               "bleu": {"val": {"greedy": {"cased": {"score": recorded}}}}}
    (folder / f"{name}.json").write_text(json.dumps(metrics))


@pytest.fixture()
def runs_folder(tmp_path: Path) -> Path:
    for name, score in [("good-seed0", 40.0), ("good-seed1", 41.0), ("worse-seed0", 30.0), ("worse-seed1", 38.0)]:
        _run(tmp_path, name, score)
    return tmp_path


def test_runs_are_grouped_by_recipe_and_seed(runs_folder: Path) -> None:
    runs = seeds.seed_runs(runs_folder)
    assert sorted(runs) == ["good", "worse"] and sorted(runs["worse"]) == [0, 1]


def test_a_file_not_named_by_seed_is_an_error(runs_folder: Path) -> None:
    _run(runs_folder, "no-seed-here", 0.0)
    with pytest.raises(ValueError, match="RECIPE-seedS"):
        seeds.seed_runs(runs_folder)


def test_table_has_each_seed_the_mean_the_sd_and_the_spread_best_first(runs_folder: Path) -> None:
    table = seeds.seed_table(seeds.seed_runs(runs_folder))
    assert list(table.index) == ["good", "worse"]
    assert table.loc["good", "seed 1"] == 41.0 and table.loc["good", "mean"] == pytest.approx(40.5)
    assert table.loc["worse", "spread"] == pytest.approx(8.0)
    assert table.loc["worse", "sd"] == pytest.approx(8.0 / 2 ** 0.5)  # sample sd of 30 and 38 (n - 1)


def _table(rows: dict[str, tuple[float, float]]):
    import pandas as pd

    return pd.DataFrame({"mean": {r: m for r, (m, _) in rows.items()}, "sd": {r: s for r, (_, s) in rows.items()}})


@pytest.mark.parametrize("first,second,expected", [
    ("a", "b", True),    # 40 - 0.5 = 39.5 above 38 + 1 = 39
    ("b", "a", False),   # the rule is one-sided
    ("a", "c", False),   # 39.5 is not above 39.2 + 0.5 = 39.7: the intervals overlap
    ("c", "a", False),
])
def test_a_recipe_beats_another_when_their_mean_sd_intervals_do_not_overlap(first: str, second: str, expected: bool) -> None:
    table = _table({"a": (40.0, 0.5), "b": (38.0, 1.0), "c": (39.2, 0.5)})
    assert seeds.beats(table, first, second) is expected


def test_the_rule_needs_known_recipes_with_two_seeds() -> None:
    table = _table({"a": (40.0, 0.5), "one seed": (38.0, float("nan"))})
    with pytest.raises(KeyError):
        seeds.beats(table, "a", "missing")
    with pytest.raises(ValueError):
        seeds.beats(table, "a", "one seed")


def test_compare_recipes_gives_one_row_a_seed_with_the_difference() -> None:
    test = {"first": "a", "second": "b", "by_seed": {
        "1": {"first": 39.0, "second": 38.0, "second_interval": [36.5, 39.5], "p": 0.2},
        "0": {"first": 38.0, "second": 40.0, "second_interval": [38.5, 41.5], "p": 0.01}}}
    result = seeds.compare_recipes(test)
    assert list(result.index) == [0, 1]
    assert result.loc[0, "difference"] == 2.0 and result.loc[1, "difference"] == -1.0
    assert result.loc[0, "interval"] == "38.5 to 41.5" and result.loc[1, "p"] == 0.2


def test_the_committed_bootstraps_cover_every_claim_and_seed() -> None:
    committed = seeds.paired_tests()
    runs = seeds.seed_runs()
    for claim, test in committed.items():
        assert test["first"] in runs and test["second"] in runs, claim
        assert sorted(test["by_seed"]) == ["0", "1", "2"] and 0 < test["pooled"]["p"] <= 1, claim


def test_chart_draws_every_seed_and_the_mean() -> None:
    import pandas as pd

    table = pd.DataFrame({"seed 0": [1.0, 2.0], "seed 1": [1.5, 2.5], "mean": [1.25, 2.25]},
                         index=pd.Index(["a", "b"], name="recipe"))
    spec = seeds.seed_chart(table).to_dict()
    assert len(spec["layer"]) == 2
    with_sd = seeds.seed_chart(table.assign(sd=[0.35, 0.35])).to_dict()
    assert len(with_sd["layer"]) == 3 and with_sd["layer"][0]["mark"]["type"] == "rule"
