"""Error bars for chapter 5's recipe comparison: three seeds per recipe, and sacreBLEU's paired
bootstrap between two recipes trained from the same seed (section 5.9).

The runs are ``benchmarks/seeds.sh``'s: five recipes, seeds 0, 1 and 2, each the full profile (16
epochs, the last weights or the average of the last five, whichever validation BLEU prefers), all
fifteen at once on one H100. For each run, ``runs/seeds/`` holds its ``metrics.json`` as
``RECIPE-seedS.json`` and the greedy translations of the validation set by the weights it kept as
``RECIPE-seedS.val.txt.gz`` (``transformer-translate --checkpoint ... --input val.de.gz``). Both
are package data, so the section reads them wherever it runs; only the references come from the
Multi30k files.
"""

from __future__ import annotations

import gzip
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from transformer_lib.book.results import COMMITTED_RUNS, committed_results
from transformer_lib.evaluation import corpus_bleu, paired_bootstrap

__all__ = ["SEED_RUNS", "seed_runs", "translations", "seed_table", "compare_recipes", "seed_chart"]

SEED_RUNS = COMMITTED_RUNS / "seeds"
_NAME = re.compile(r"^(?P<recipe>.+)-seed(?P<seed>\d+)$")


def seed_runs(folder: str | Path = SEED_RUNS) -> dict[str, dict[int, dict[str, Any]]]:
    """The committed runs by recipe, then seed: ``{"bpe8k-pre-noam-lr3e-3": {0: metrics, 1: ..., 2: ...}}``.

    Raises:
        ValueError: a results file is not named ``RECIPE-seedS.json``.
    """
    runs: dict[str, dict[int, dict[str, Any]]] = {}
    for name, metrics in committed_results(folder).items():
        match = _NAME.match(name)
        if match is None:
            raise ValueError(f"{Path(folder) / name}.json: a seed run's file is named RECIPE-seedS.json")
        runs.setdefault(match["recipe"], {})[int(match["seed"])] = metrics
    return runs


def translations(recipe: str, seed: int, folder: str | Path = SEED_RUNS) -> list[str]:
    """The greedy translations of Multi30k's validation set by one run's kept weights, one a sentence."""
    path = Path(folder) / f"{recipe}-seed{seed}.val.txt.gz"
    if not path.is_file():
        raise FileNotFoundError(f"no translations at {path}; the seed runs are {sorted(seed_runs(folder))}")
    with gzip.open(path, "rt", encoding="utf-8") as lines:
        return [line.rstrip("\n") for line in lines]


def seed_table(runs: Mapping[str, Mapping[int, Mapping[str, Any]]], references: Sequence[str],
               folder: str | Path | None = None) -> Any:
    """Validation BLEU (greedy, cased) of every run, a recipe a row: one column per seed, the mean, and
    the spread (highest minus lowest). Each score is recomputed from the run's committed
    translations (in ``folder``, default :data:`SEED_RUNS`); ``recorded`` holds the largest gap
    to the score its ``metrics.json`` recorded.
    """
    import pandas as pd

    rows = {}
    for recipe, by_seed in runs.items():
        scores = {seed: corpus_bleu(translations(recipe, seed, folder or SEED_RUNS), references).score
                  for seed in sorted(by_seed)}
        recorded = max(abs(scores[seed] - by_seed[seed]["bleu"]["val"]["greedy"]["cased"]["score"]) for seed in scores)
        rows[recipe] = {**{f"seed {seed}": score for seed, score in scores.items()},
                        "mean": sum(scores.values()) / len(scores), "spread": max(scores.values()) - min(scores.values()),
                        "recorded": recorded}
    return pd.DataFrame.from_dict(rows, orient="index").rename_axis("recipe").sort_values("mean", ascending=False)


def compare_recipes(baseline: str, system: str, seeds: Sequence[int], references: Sequence[str],
                    folder: str | Path = SEED_RUNS) -> Any:
    """``system`` against ``baseline``, seed by seed, with sacreBLEU's paired bootstrap (1,000 draws).

    Returns:
        A frame, a seed a row: both BLEU scores, the difference (system minus baseline), the
        system's 95% interval and the p-value of the difference.
    """
    import pandas as pd

    rows = []
    for seed in seeds:
        test = paired_bootstrap(translations(baseline, seed, folder), translations(system, seed, folder), references)
        rows.append({"seed": seed, baseline: test.baseline.score, system: test.system.score,
                     "difference": test.system.score - test.baseline.score,
                     "interval": f"{test.system.interval[0]:.1f} to {test.system.interval[1]:.1f}",
                     "p": test.p_value})
    return pd.DataFrame(rows).set_index("seed")


def seed_chart(table: Any, title: str = "") -> Any:
    """Each recipe's three seeds as dots on one line, and their mean as a tick: where the dots of two
    recipes overlap, one run of each cannot tell them apart."""
    import altair as alt

    seeds = [column for column in table.columns if column.startswith("seed ")]
    long = table.reset_index().melt(id_vars="recipe", value_vars=seeds, var_name="seed", value_name="val BLEU")
    order = table.index.tolist()
    y = alt.Y("recipe:N", sort=order, title=None, axis=alt.Axis(labelLimit=200))
    dots = alt.Chart(long).mark_circle(size=70, opacity=0.8).encode(
        y=y, x=alt.X("val BLEU:Q", title="validation BLEU (greedy, cased)", scale=alt.Scale(zero=False)),
        color=alt.Color("seed:N", legend=None),  # the tooltip names the seed; a legend would not fit a phone
        tooltip=["recipe", "seed", alt.Tooltip("val BLEU:Q", format=".2f")])
    means = alt.Chart(table.reset_index()).mark_tick(thickness=2, size=18, color="black").encode(
        y=y, x="mean:Q", tooltip=["recipe", alt.Tooltip("mean:Q", format=".2f")])
    return (dots + means).properties(width=360, height=34 * len(order), title=title)
