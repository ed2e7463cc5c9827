"""Chapter 2's helpers (``transformer_lib.book.chapters.masking``) beyond its example batch, which
``tests/test_book_chapters.py`` covers."""

from __future__ import annotations

import pytest
import torch

from transformer_lib.book.chapters.masking import matrix_table


def test_matrix_table_labels_rows_and_columns_and_spells_out_nan_and_minus_infinity() -> None:
    values = torch.tensor([[0.5, float("-inf")], [float("nan"), -0.25]])
    table = matrix_table(values, ["query 0", "query 1"], ["key 0", "key 1"], corner="weights",
                         caption="a caption")
    assert table.headers == ["weights", "key 0", "key 1"]
    assert table.rows == [["query 0", "0.50", "\u2212\u221e"], ["query 1", "NaN", "\u22120.25"]]
    assert table.numeric == [False, True, True]
    assert "a caption" in table._repr_html_() and "<table" in table._repr_html_()


def test_matrix_table_rounds_to_the_decimals_asked_without_a_negative_zero() -> None:
    table = matrix_table(torch.tensor([[1 / 3, -1e-4]]), ["r"], ["a", "b"], decimals=3)
    assert table.rows == [["r", "0.333", "0.000"]]


@pytest.mark.parametrize("shape", [(2, 3), (3, 2), (6,)])
def test_matrix_table_refuses_values_that_do_not_match_the_labels(shape: tuple[int, ...]) -> None:
    with pytest.raises(ValueError, match=str(tuple(shape))):
        matrix_table(torch.zeros(shape), ["a", "b"], ["c", "d"])
