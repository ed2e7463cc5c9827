"""Figures return charts/axes that encode what they claim (queries on rows, token labels, tooltips)."""

from __future__ import annotations

import json

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from transformer_lib.masking import causal_mask, padding_mask  # noqa: E402
from transformer_lib.viz import architecture_diagram, attention_heatmap, mask_heatmap  # noqa: E402


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


# --- 2. Attention and mask figures -------------------------------------------------------------

QUERIES = ["<bos>", "the", "cat", "the"]  # "the" twice: rows must not merge
KEYS = ["die", "Katze", "<pad>"]


def test_attention_heatmap_encodes_queries_on_rows_with_token_labels() -> None:
    weights = torch.softmax(torch.randn(4, 3), dim=-1)
    spec = attention_heatmap(weights, QUERIES, KEYS).to_dict()
    enc = spec["encoding"]
    assert enc["y"]["field"] == "query_pos" and enc["x"]["field"] == "key_pos"
    assert enc["y"]["axis"]["title"] == "query" and enc["x"]["axis"]["title"] == "key"
    assert json.dumps(QUERIES) in enc["y"]["axis"]["labelExpr"]
    assert json.dumps(KEYS) in enc["x"]["axis"]["labelExpr"]
    assert enc["color"]["field"] == "weight"
    assert [t["field"] for t in enc["tooltip"]][:3] == ["query", "key", "weight"]
    assert "params" not in spec  # nothing to choose with one layer and one head


def test_attention_heatmap_data_holds_every_weight() -> None:
    weights = torch.softmax(torch.randn(4, 3), dim=-1)
    chart = attention_heatmap(weights, QUERIES, KEYS)
    data = chart.data
    assert len(data) == 12
    row = data[(data.query_pos == 3) & (data.key_pos == 1)].iloc[0]
    assert (row.query, row.key) == ("the", "Katze")
    assert row.weight == pytest.approx(weights[3, 1].item())
    # 4 distinct rows although "the" appears twice
    assert data.query_pos.nunique() == 4 and data["query"].nunique() == 3


def test_attention_heatmap_selects_layer_and_head() -> None:
    layers = [torch.softmax(torch.randn(2, 4, 3), dim=-1) for _ in range(3)]  # 3 layers of (H, T, L)
    chart = attention_heatmap(layers, QUERIES, KEYS, layer_names=["enc 0", "enc 1", "enc 2"])
    spec = chart.to_dict()
    params = {p["name"]: p for p in spec["params"]}
    assert params["layer"]["bind"]["input"] == "select"
    assert params["layer"]["bind"]["options"] == ["enc 0", "enc 1", "enc 2"]
    assert params["head"]["bind"]["input"] == "radio"
    assert params["head"]["bind"]["options"] == ["head 0", "head 1"]
    filters = [t["filter"] for t in spec["transform"]]
    assert "(datum.layer === layer)" in filters and "(datum.head === head)" in filters
    data = chart.data
    assert len(data) == 3 * 2 * 4 * 3
    row = data[(data["layer"] == "enc 2") & (data["head"] == "head 1") & (data.query_pos == 0) & (data.key_pos == 2)]
    assert row.weight.item() == pytest.approx(layers[2][1, 0, 2].item())
    # one colour scale for every layer and head, so cells can be compared across them
    assert spec["encoding"]["color"]["scale"]["domain"] == [0.0, pytest.approx(max(w.max().item() for w in layers))]


def test_attention_heatmap_many_heads_use_a_dropdown() -> None:
    spec = attention_heatmap(torch.rand(12, 4, 3), QUERIES, KEYS).to_dict()
    assert spec["params"][0]["bind"]["input"] == "select"


@pytest.mark.parametrize(
    "shape, queries, keys, message",
    [((4, 3, 3, 3, 3), QUERIES, KEYS, "one sequence"), ((4, 3), QUERIES[:3], KEYS, "query"), ((4, 3), QUERIES, KEYS[:2], "key")],
)
def test_attention_heatmap_rejects_mismatches(shape, queries, keys, message) -> None:
    with pytest.raises(ValueError, match=message):
        attention_heatmap(torch.rand(shape), queries, keys)


def test_mask_heatmap_broadcasts_a_padding_mask_to_every_query() -> None:
    mask = padding_mask(torch.tensor([[2, 5, 0]]), pad_id=0)  # (1, 1, 1, 3)
    ax = mask_heatmap(mask, ["a", "b", "c", "d"], ["<bos>", "x", "<pad>"], title="padding")
    grid = np.asarray(ax.images[0].get_array())
    assert grid.shape == (4, 3)
    assert grid.astype(bool).tolist() == [[True, True, False]] * 4
    assert [t.get_text() for t in ax.get_xticklabels()] == ["<bos>", "x", "<pad>"]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["a", "b", "c", "d"]
    assert (ax.get_xlabel(), ax.get_ylabel(), ax.get_title()) == ("key", "query", "padding")


def test_mask_heatmap_draws_the_causal_triangle_on_a_given_axes() -> None:
    _, ax = plt.subplots()
    assert mask_heatmap(causal_mask(3), list("abc"), list("abc"), ax=ax) is ax
    grid = np.asarray(ax.images[0].get_array()).astype(bool)
    assert grid.tolist() == np.tril(np.ones((3, 3), dtype=bool)).tolist()


def test_mask_heatmap_rejects_bad_masks() -> None:
    with pytest.raises(TypeError, match="boolean"):
        mask_heatmap(torch.zeros(3, 3), list("abc"), list("abc"))
    with pytest.raises(ValueError, match="leading dimensions"):
        mask_heatmap(torch.ones(2, 1, 3, 3, dtype=torch.bool), list("abc"), list("abc"))
    with pytest.raises(ValueError, match="broadcast"):
        mask_heatmap(torch.ones(1, 4, dtype=torch.bool), list("abc"), list("abc"))


def test_architecture_diagram_highlights_only_the_chosen_parts() -> None:
    ax = architecture_diagram(highlight=["attention"])
    labels = {t.get_text() for t in ax.texts}
    assert {"multi-head self-attention", "masked multi-head attention", "multi-head cross-attention"} <= labels
    lit = [p for p in ax.patches if matplotlib.colors.to_hex(p.get_facecolor()) == "#f6ad55"]
    assert len(lit) == 3  # the three attention boxes
    with pytest.raises(ValueError, match="unknown parts"):
        architecture_diagram(highlight=["attnetion"])
