"""The embedding and block figures of chapters 3 and 4.

Each figure function returns a chart or axes built from the data it was given (never shows it),
labels its axes, and rejects input it cannot draw with a message that names the problem.
"""

from __future__ import annotations

import altair as alt
import matplotlib
import numpy as np
import pandas as pd
import pytest

from transformer_lib.book import style
import torch

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from transformer_lib.book import block_figures, embedding_figures, figures  # noqa: E402
from transformer_lib.embeddings import sinusoidal_table  # noqa: E402


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def _values(chart: alt.Chart) -> list[dict]:
    spec = chart.to_dict()  # validates against the Vega-Lite schema
    return spec["datasets"][next(iter(spec["datasets"]))]


def test_positional_heatmap_has_one_cell_per_entry_with_the_value_in_the_tooltip() -> None:
    table = sinusoidal_table(20, 32)
    chart = embedding_figures.positional_heatmap(table, value_title="PE")
    rows = _values(chart)
    assert len(rows) == 20 * 32
    cell = next(r for r in rows if r["row"] == 3 and r["col"] == 5)
    assert cell["value"] == pytest.approx(table[3, 5].item())
    spec = chart.to_dict()
    assert spec["encoding"]["x"]["title"] == "dimension i" and spec["encoding"]["y"]["title"] == "position p"
    assert {t["title"] for t in spec["encoding"]["tooltip"]} == {"position p", "dimension i", "PE"}


def test_positional_heatmap_is_diverging_around_zero_or_sequential() -> None:
    values = torch.tensor([[1.0, -3.0], [0.5, 2.0]])
    diverging = embedding_figures.positional_heatmap(values).to_dict()["encoding"]["color"]["scale"]
    assert diverging["domain"] == [-3.0, 3.0] and diverging["scheme"] == style.DIVERGING
    sequential = embedding_figures.positional_heatmap(values.abs(), diverging=False).to_dict()["encoding"]["color"]["scale"]
    assert "domain" not in sequential and sequential["scheme"] == style.SEQUENTIAL


def test_positional_heatmap_accepts_a_tensor_that_requires_grad_and_rejects_1d() -> None:
    embedding_figures.positional_heatmap(torch.randn(3, 4, requires_grad=True)).to_dict()
    with pytest.raises(ValueError, match="2-D"):
        embedding_figures.positional_heatmap(torch.randn(5))


def test_positional_curves_label_sine_cosine_and_wavelength() -> None:
    chart = embedding_figures.positional_curves(sinusoidal_table(50, 16), dims=[0, 1, 6])
    names = sorted({r["series"] for r in _values(chart)})
    assert names == ["dim 0 (sin, wavelength 6.3)", "dim 1 (cos, wavelength 6.3)", "dim 6 (sin, wavelength 198.7)"]
    assert len(_values(chart)) == 3 * 50
    with pytest.raises(ValueError, match="outside"):
        embedding_figures.positional_curves(sinusoidal_table(5, 4), dims=[4])


def test_per_layer_chart_numbers_layers_from_first_layer_and_has_a_legend_selection() -> None:
    chart = block_figures.per_layer_chart({"Post-LN": [1.0, 2.0, 3.0], "Pre-LN": np.array([1.0, 1.0, 1.0])},
                                y_title="gradient norm", first_layer=0)
    rows = _values(chart)
    assert sorted({r["x"] for r in rows}) == [0, 1, 2]
    spec = chart.to_dict()
    assert spec["encoding"]["y"]["title"] == "gradient norm"
    assert any(p.get("bind") == "legend" for p in spec["params"])
    with pytest.raises(ValueError, match="one value per layer"):
        block_figures.per_layer_chart({"a": [1, 2], "b": [1, 2, 3]}, y_title="y")


def test_loss_curves_chart_uses_the_given_steps_and_checks_lengths() -> None:
    chart = figures.loss_curves_chart({"run": [3.0, 2.0, 1.0]}, steps=[10, 20, 30], log_y=True)
    assert [r["x"] for r in _values(chart)] == [10, 20, 30]
    assert chart.to_dict()["encoding"]["y"]["scale"]["type"] == "log"
    # a log axis fitted to the values, not rounded out to powers of 10 (an empty band down to 0.01)
    assert chart.to_dict()["encoding"]["y"]["scale"]["domain"] == pytest.approx([0.95, 3.15])
    smooth = figures.loss_curves_chart({"run": [4.0, 2.0, 0.0, 2.0]}, smooth=2)
    assert [r["y"] for r in _values(smooth)] == [4.0, 3.0, 1.0, 1.0]
    assert smooth.to_dict()["encoding"]["y"]["title"].endswith("mean of 2 steps")
    with pytest.raises(ValueError, match="x values"):
        figures.loss_curves_chart({"run": [3.0, 2.0]}, steps=[1, 2, 3])
    with pytest.raises(ValueError, match="empty"):
        figures.loss_curves_chart({})


def test_loss_curves_chart_thins_long_runs() -> None:
    # Chapter 7's full profile: two runs of 3,000 steps, 6,000 rows, over altair's 5,000-row limit.
    long = np.linspace(9.0, 3.0, 3000)
    chart = figures.loss_curves_chart({"a": long, "b": long[:1000] + 1}, smooth=10, max_points=600)
    spec = chart.to_dict()  # raises MaxRowsError if the rows were not thinned
    rows = _values(chart)
    a = [r for r in rows if r["series"] == "a"]
    b = [r for r in rows if r["series"] == "b"]
    assert 500 <= len(a) <= 601 and len(b) <= 601
    assert a[0]["x"] == 1 and a[-1]["x"] == 3000 and b[-1]["x"] == 1000  # first and last step kept
    smoothed = pd.Series(long).rolling(10, min_periods=1).mean().to_numpy()
    assert all(r["y"] == pytest.approx(smoothed[int(r["x"]) - 1]) for r in a)  # thinned after smoothing
    assert spec["encoding"]["y"]["title"].endswith("mean of 10 steps")
    short = figures.loss_curves_chart({"run": [3.0, 2.0, 1.0]}, max_points=600)
    assert [r["x"] for r in _values(short)] == [1, 2, 3]  # short runs drawn whole
    with pytest.raises(ValueError, match="max_points"):
        figures.loss_curves_chart({"run": [3.0, 2.0]}, max_points=1)


def test_matplotlib_figures_return_labelled_axes() -> None:
    ax = embedding_figures.value_histograms({"a": torch.randn(500), "b": np.random.default_rng(0).uniform(size=100)}, x_title="coordinate")
    assert ax.get_xlabel() == "coordinate" and ax.get_ylabel() == "density"
    assert [t.get_text().split(" (")[0] for t in ax.get_legend().get_texts()] == ["a", "b"]

    ax = block_figures.position_change_bars({"feed-forward": [0, 0, 1.5], "attention": torch.tensor([0.1, 0.2, 0.3])},
                                  labels=["Ein", "Hund", "."])
    assert [t.get_text() for t in ax.get_xticklabels()] == ["Ein", "Hund", "."]
    assert len(ax.patches) == 6
    with pytest.raises(ValueError, match="labels"):
        block_figures.position_change_bars({"a": [1, 2]}, labels=["x"])
    with pytest.raises(ValueError, match="one value per position"):
        block_figures.position_change_bars({"a": [1, 2], "b": [1]})


def test_per_layer_chart_panels_share_one_legend_selection_without_warnings(recwarn) -> None:
    chart = block_figures.per_layer_chart(
        {"encoder": {"Post-LN": [1.0, 1.0], "Pre-LN": [2.0, 1.0]}, "decoder": {"Post-LN": [1.0, 3.0], "Pre-LN": [1.0, 1.0]}},
        y_title="gradient norm",
    )
    spec = chart.to_dict()
    assert not [w for w in recwarn if "deduplicated" in str(w.message)]
    assert spec["facet"]["column"]["sort"] == ["encoder", "decoder"]
    assert spec["resolve"]["scale"]["y"] == "independent"
    assert len([p for p in spec["params"] if p.get("bind") == "legend"]) == 1
    rows = spec["datasets"][next(iter(spec["datasets"]))]
    assert len(rows) == 8 and {r["panel"] for r in rows} == {"encoder", "decoder"}
