"""Chapter 2's figures draw what they claim: mask grids broadcast per panel, pad weights as bars."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from transformer_lib.book.masking_figures import PHONE_FRIENDLY_WIDTH, mask_panels, pad_weight_bars  # noqa: E402
from transformer_lib.masking import causal_mask, padding_mask  # noqa: E402

TOKENS = ["<bos>", "a", "dog", "<pad>"]


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def _grid(ax) -> np.ndarray:
    return np.asarray(ax.images[0].get_array()).astype(bool)


def test_mask_panels_broadcast_each_mask_and_label_shared_queries_once() -> None:
    pad = padding_mask(torch.tensor([[5, 6, 7, 0]]), pad_id=0)  # (1, 1, 1, 4)
    fig = mask_panels([(pad, TOKENS, TOKENS, "padding"), (causal_mask(4), TOKENS, TOKENS, "causal")],
                      title="two masks")
    first, second = fig.axes
    assert np.array_equal(_grid(first), np.broadcast_to([True, True, True, False], (4, 4)))
    assert np.array_equal(_grid(second), np.tril(np.ones((4, 4), dtype=bool)))
    assert [t.get_text() for t in first.get_yticklabels()] == TOKENS
    assert not second.yaxis.get_tick_params()["labelleft"] and second.get_ylabel() == ""
    assert fig.get_figwidth() == pytest.approx(PHONE_FRIENDLY_WIDTH)


def test_mask_panels_keeps_query_labels_when_panels_differ() -> None:
    other = ["x", "y", "z", "w"]
    fig = mask_panels([(causal_mask(4), TOKENS, TOKENS, "a"), (causal_mask(4), other, other, "b")])
    assert [t.get_text() for t in fig.axes[1].get_yticklabels()] == other


def test_mask_panels_refuses_no_panels() -> None:
    with pytest.raises(ValueError, match="at least one"):
        mask_panels([])


def test_pad_weight_bars_draw_one_bar_per_query_and_mask() -> None:
    on_pads = {"keys": torch.zeros(3), "queries": torch.tensor([0.3, 0.25, 0.4])}
    ax = pad_weight_bars(on_pads, TOKENS[:3])
    assert len(ax.containers) == 2
    widths = [[bar.get_width() for bar in container] for container in ax.containers]
    assert widths[0] == [0.0, 0.0, 0.0] and widths[1] == pytest.approx([0.3, 0.25, 0.4])
    assert [t.get_text() for t in ax.get_yticklabels()] == TOKENS[:3]
    assert ax.yaxis_inverted()  # the first query on top, as in the mask grids


@pytest.mark.parametrize(
    ("on_pads", "tokens", "message"),
    [
        ({}, TOKENS, "at least one"),
        ({"a": [0.1, 0.2]}, TOKENS, "2 query tokens|query"),
        ({"a": [0.1, 0.2], "b": [0.1]}, TOKENS[:2], "one weight per query"),
        ({"a": [0.1, 1.5]}, TOKENS[:2], r"\[0, 1\]"),
    ],
)
def test_pad_weight_bars_refuse_bad_input(on_pads, tokens, message) -> None:
    with pytest.raises(ValueError, match=message):
        pad_weight_bars(on_pads, tokens)
