"""Error bars for chapter 5's recipe comparison: three seeds per recipe, and sacreBLEU's paired
bootstrap between two recipes trained from the same seed (section 5.9).

The runs are ``benchmarks/seeds.sh``'s: five recipes, seeds 0, 1 and 2, each the full profile (16
epochs, the last weights or the average of the last five, whichever validation BLEU prefers), all
fifteen at once on one H100. ``runs/seeds/`` holds each run's ``metrics.json`` as
``RECIPE-seedS.json``; ``runs/bootstrap/seeds.json`` holds the paired bootstrap of each claim,
computed from the runs' validation translations by ``benchmarks/seed_report.py`` (the translations
themselves are not committed). Both are package data, so the section reads them wherever it runs.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from transformer_lib.book.results import COMMITTED_RUNS, committed_results

__all__ = ["BOOTSTRAP", "SEED_RUNS", "seed_runs", "seed_table", "beats", "paired_tests", "compare_recipes", "seed_chart"]

SEED_RUNS = COMMITTED_RUNS / "seeds"
BOOTSTRAP = COMMITTED_RUNS / "bootstrap" / "seeds.json"
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


def _val_bleu(metrics: Mapping[str, Any]) -> float:
    return metrics["bleu"]["val"]["greedy"]["cased"]["score"]


def seed_table(runs: Mapping[str, Mapping[int, Mapping[str, Any]]]) -> Any:
    """Validation BLEU (greedy, cased: the score each run chose its weights by) of every run, a recipe
    a row: one column per seed, the mean, the sample standard deviation over the seeds (``sd``, with
    ``n - 1``; NaN for one seed) and the spread (highest minus lowest), best mean first."""
    import pandas as pd

    rows = {}
    for recipe, by_seed in runs.items():
        scores = {seed: _val_bleu(by_seed[seed]) for seed in sorted(by_seed)}
        values = pd.Series(list(scores.values()), dtype=float)
        rows[recipe] = {**{f"seed {seed}": score for seed, score in scores.items()},
                        "mean": values.mean(), "sd": values.std(ddof=1), "spread": values.max() - values.min()}
    return pd.DataFrame.from_dict(rows, orient="index").rename_axis("recipe").sort_values("mean", ascending=False)


def beats(table: Any, first: str, second: str) -> bool:
    """The rule section 5.9 states and chapter 5 follows: recipe ``first`` beats ``second`` when their
    mean ± sd intervals over the seeds (rows of :func:`seed_table`) do not overlap with ``first`` on
    top, that is when ``first``'s mean - sd is above ``second``'s mean + sd. Two recipes neither of
    which beats the other are indistinguishable.

    Raises:
        KeyError: ``first`` or ``second`` is not a row of ``table``.
        ValueError: a recipe has fewer than two seeds (no standard deviation).
    """
    for recipe in (first, second):
        if recipe not in table.index:
            raise KeyError(f"{recipe!r} is not a recipe of the table; it has {list(table.index)}")
        if not table.loc[recipe, "sd"] == table.loc[recipe, "sd"]:  # NaN: one seed
            raise ValueError(f"{recipe!r} has one seed: the rule needs a standard deviation, so two seeds or more")
    low = table.loc[first, "mean"] - table.loc[first, "sd"]
    return bool(low > table.loc[second, "mean"] + table.loc[second, "sd"])


def paired_tests(path: str | Path = BOOTSTRAP) -> dict[str, Any]:
    """The committed paired bootstraps, by claim: ``{claim: {"first", "second", "by_seed", "pooled"}}``."""
    return json.loads(Path(path).read_text(encoding="utf-8"))


def compare_recipes(test: Mapping[str, Any]) -> Any:
    """One claim's paired bootstrap (an entry of :func:`paired_tests`) as a frame, a seed a row: both
    BLEU scores, the difference (second minus first), the second's 95% interval and the p-value."""
    import pandas as pd

    rows = [{"seed": int(seed), test["first"]: r["first"], test["second"]: r["second"],
             "difference": r["second"] - r["first"],
             "interval": f"{r['second_interval'][0]:.1f} to {r['second_interval'][1]:.1f}", "p": r["p"]}
            for seed, r in sorted(test["by_seed"].items())]
    return pd.DataFrame(rows).set_index("seed")


def seed_chart(table: Any, title: str = "") -> Any:
    """Each recipe's three seeds as dots on one line, their mean as a tick and, where ``table`` has
    an ``sd`` column, mean ± sd as a bar: where the bars of two recipes overlap, :func:`beats` calls
    them indistinguishable."""
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
    layers = [dots, means]
    if "sd" in table.columns:
        bars = table.reset_index().assign(low=table["mean"].values - table["sd"].values,
                                          high=table["mean"].values + table["sd"].values)
        layers.insert(0, alt.Chart(bars).mark_rule(strokeWidth=2, color="gray").encode(
            y=y, x="low:Q", x2="high:Q",
            tooltip=["recipe", alt.Tooltip("low:Q", format=".2f", title="mean - sd"),
                     alt.Tooltip("high:Q", format=".2f", title="mean + sd")]))
    return alt.layer(*layers).properties(width=360, height=34 * len(order), title=title)
