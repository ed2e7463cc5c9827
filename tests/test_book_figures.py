"""Figures return charts/axes that encode what they claim (queries on rows, token labels, tooltips)."""

from __future__ import annotations

import html
import json
import re

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
import vl_convert  # noqa: E402

from transformer_lib.masking import causal_mask, padding_mask  # noqa: E402
from transformer_lib.book.attention_figures import attention_heatmap  # noqa: E402
from transformer_lib.book.figures import architecture_diagram  # noqa: E402
from transformer_lib.book.masking_figures import mask_heatmap  # noqa: E402


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


# --- 1. Attention and mask figures -------------------------------------------------------------

QUERIES = ["<bos>", "the", "cat", "the"]  # "the" twice: rows must not merge
KEYS = ["die", "Katze", "<pad>"]


def _rendered_cells(chart) -> list[dict[str, str]]:
    """Render with Vega itself (vl-convert) and read each cell's fields from its aria-label."""
    svg = vl_convert.vegalite_to_svg(chart.to_dict())
    cells = []
    for label in re.findall(r'aria-label="([^"]*)"', svg):
        label = html.unescape(label)
        fields = dict(part.split(": ", 1) for part in label.split("; ") if ": " in part)
        if "weight" in fields and "key" in fields:
            cells.append(fields)
    return cells


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


def test_attention_heatmap_renders_every_weight_with_its_tokens() -> None:
    weights = torch.softmax(torch.randn(4, 3), dim=-1)
    cells = _rendered_cells(attention_heatmap(weights, QUERIES, KEYS))
    assert len(cells) == 12  # 4 rows although "the" appears twice
    for cell in cells:
        q, k = int(cell["query position"]), int(cell["key position"])
        assert (cell["query"], cell["key"]) == (QUERIES[q], KEYS[k])
        assert float(cell["weight"]) == pytest.approx(weights[q, k].item(), abs=1e-6)


def test_attention_heatmap_selects_layer_and_head() -> None:
    layers = [torch.softmax(torch.randn(2, 4, 3), dim=-1) for _ in range(3)]  # 3 layers of (H, T, L)
    chart = attention_heatmap(layers, QUERIES, KEYS, layer_names=["enc 0", "enc 1", "enc 2"])
    spec = chart.to_dict()
    params = {p["name"]: p for p in spec["params"]}
    assert params["layer"]["bind"]["input"] == "select"
    assert params["layer"]["bind"]["options"] == ["enc 0", "enc 1", "enc 2"]
    assert params["head"]["bind"]["input"] == "radio"
    assert params["head"]["bind"]["options"] == ["head 0", "head 1"]
    filters = [t["filter"] for t in spec["transform"] if "filter" in t]
    assert filters == ["(datum.layer === layer)", "(datum.head === head)"]
    # the data: one record per layer and head, each the full (T, L) grid
    records = spec["data"]["values"]
    assert [(r["layer"], r["head"]) for r in records] == [(f"enc {i}", f"head {h}") for i in range(3) for h in range(2)]
    assert torch.allclose(torch.tensor(records[5]["weights"]), layers[2][1], atol=1e-6)
    # one colour scale for every layer and head, so cells can be compared across them
    assert spec["encoding"]["color"]["scale"]["domain"] == [0.0, pytest.approx(max(w.max().item() for w in layers))]
    # what Vega draws by default: layer 0, head 0
    cells = _rendered_cells(chart)
    assert len(cells) == 12
    assert sorted(float(c["weight"]) for c in cells) == pytest.approx(sorted(layers[0][0].flatten().tolist()), abs=1e-6)


def test_attention_heatmap_stays_small_for_a_whole_model() -> None:
    # 6 layers x 8 heads x 30 x 30 = 43,200 cells; altair's default limit is 5,000 rows
    spec = attention_heatmap(torch.rand(6, 8, 30, 30), [f"t{i}" for i in range(30)], [f"s{i}" for i in range(30)]).to_dict()
    assert len(spec["data"]["values"]) == 48


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
    title = "".join(ax.get_title(loc) for loc in ("left", "center", "right"))  # the style may place titles left
    assert (ax.get_xlabel(), ax.get_ylabel(), title) == ("key", "query", "padding")


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


# --- The attention explorer (chapter 6: the trained model's committed weights) -----------------


def _explorer_sentence(source: list[str], output: list[str], seed: int) -> dict:
    g = torch.Generator().manual_seed(seed)
    S, T = len(source), len(output)

    def weights(*shape: int) -> list:
        return torch.softmax(torch.randn(*shape, generator=g), -1).tolist()

    return {"source": " ".join(source), "source_tokens": source, "output_tokens": output,
            "decoder_input_tokens": ["<bos>", *output[:-1]], "encoder_self": weights(2, 3, S, S),
            "decoder_self": weights(2, 3, T, T), "decoder_cross": weights(2, 3, T, S)}


def test_attention_explorer_picks_sentence_attention_layer_and_head() -> None:
    from transformer_lib.book.decoding_figures import attention_explorer

    sentences = [_explorer_sentence(["Zwei", "Hunde", "<eos>"], ["Two", "dogs", "the", "<eos>"], 0),
                 _explorer_sentence(["a", "b", "c", "d", "<eos>"], ["x", "<eos>"], 1)]
    chart = attention_explorer(sentences, title="t")
    spec = chart.to_dict()
    params = {p["name"]: p for p in spec["params"]}
    assert list(params) == ["sentence", "attention", "layer", "head"]
    assert params["sentence"]["bind"]["options"] == ["1. Zwei Hunde <eos>", "2. a b c d <eos>"]
    assert params["attention"]["value"] == "cross-attention"
    assert params["head"]["bind"]["options"] == ["mean of heads", "head 1", "head 2", "head 3"]
    assert len(spec["data"]["values"]) == 2 * 3 * 2 * 4  # sentences x kinds x layers x (heads + mean)
    assert spec["width"] == spec["height"] == 24 * 5  # fixed: the longest sentence
    # what Vega draws first: sentence 1's cross-attention, layer 1, the mean of the heads
    cells = _rendered_cells(chart)
    assert len(cells) == 4 * 3
    mean = torch.tensor(sentences[0]["decoder_cross"][0]).mean(0)  # (T, S)
    for cell in cells:
        q, k = int(cell["query position"]), int(cell["key position"])
        assert (cell["query"], cell["key"]) == (sentences[0]["output_tokens"][q], sentences[0]["source_tokens"][k])
        assert float(cell["weight"]) == pytest.approx(mean[q, k].item(), abs=6e-4)
    # the axes are labelled with the chosen sentence's tokens ("the" and "dogs" once each: no merging)
    svg = vl_convert.vegalite_to_svg(spec)
    labels = [html.unescape(t) for t in re.findall(r"<text[^>]*>([^<]*)</text>", svg)]
    assert {"Zwei", "Hunde", "Two", "dogs", "the"} <= set(labels)
    spec["params"][0]["value"] = "2. a b c d <eos>"  # choose the other sentence
    labels = [html.unescape(t) for t in re.findall(r"<text[^>]*>([^<]*)</text>", vl_convert.vegalite_to_svg(spec))]
    assert {"a", "d", "x"} <= set(labels) and "Hunde" not in labels


def test_short_loss_curves_get_a_marker_per_value_long_ones_do_not() -> None:
    """A few values per run (an evaluation every 50 steps, say) are drawn with markers, so each one can
    be hovered for its tooltip; long curves stay plain lines."""
    from transformer_lib.book.figures import FEW_POINTS, loss_curves_chart

    def mark(curves):
        spec = loss_curves_chart(curves).to_dict()
        return spec["mark"] if "mark" in spec else spec["layer"][0]["mark"]

    assert mark({"a": [3.0, 2.0, 1.5], "b": [3.1, 2.2, 1.4]}).get("point") is True
    assert not mark({"a": list(range(FEW_POINTS + 1, 0, -1))}).get("point")
