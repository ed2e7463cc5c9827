"""The multi-head diagram of chapter 1: its shape labels come from the sizes it is given."""

from __future__ import annotations

import matplotlib
import pytest

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from transformer_lib.book.attention_figures import multi_head_diagram  # noqa: E402


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def _texts(ax) -> list[str]:
    return [text.get_text() for text in ax.texts]


@pytest.mark.parametrize(
    ("d_model", "n_heads", "expected"),
    [
        (8, 2, ["(B, T, D) = (B, T, 8)", "(B, H, T, Dh) = (B, 2, T, 4)", "(B, H, T, T) = (B, 2, T, T)",
                "(B, T, H·Dh) = (B, T, 8)"]),
        (512, 8, ["(B, T, D) = (B, T, 512)", "(B, H, T, Dh) = (B, 8, T, 64)", "(B, H, T, T) = (B, 8, T, T)"]),
    ],
)
def test_the_shapes_are_written_in_letters_and_in_the_given_sizes(d_model, n_heads, expected) -> None:
    texts = _texts(multi_head_diagram(d_model, n_heads))
    for label in expected:
        assert label in texts, (label, texts)


def test_one_lane_per_head_or_the_first_two_and_the_last() -> None:
    few = _texts(multi_head_diagram(12, 3))
    assert {t for t in few if t.startswith("head ")} == {"head 1", "head 2", "head 3"}
    assert "⋯" not in few
    many = _texts(multi_head_diagram(512, 8))
    heads = {t for t in many if t.startswith("head ")}
    assert heads == {"head 1", "head 2", "head 8"}
    assert "⋯" in many


def test_sizes_that_do_not_split_into_heads_are_refused() -> None:
    with pytest.raises(ValueError, match="n_heads=3 .* d_model=8"):
        multi_head_diagram(8, 3)


def test_draws_into_the_axes_given() -> None:
    _, ax = plt.subplots()
    assert multi_head_diagram(8, 2, ax=ax) is ax
    assert not ax.axison
