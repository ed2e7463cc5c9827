"""Tables for reading (transformer_lib.book.tables): what pandas shows by default, fixed."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from transformer_lib.book.tables import MISSING, format_table, number_text, show_table


def test_row_numbers_are_not_a_column_and_a_named_index_is_an_ordinary_one() -> None:
    df = pd.DataFrame({"BLEU": [27.31, 28.4]})
    headers, rows, _ = format_table(df)
    assert headers == ["BLEU"] and rows == [["27.3"], ["28.4"]]  # decimals from the size: 1 for tens
    named = df.set_axis(pd.Index(["base", "big"], name="model"))
    headers, rows, numeric = format_table(named)
    assert headers == ["model", "BLEU"] and rows[1] == ["big", "28.4"] and numeric == [False, True]
    # no empty index-name row: one header row, whatever the index
    page = show_table(named)._repr_html_()
    assert page.count("<tr>") == 3 and "<th></th>" not in page
    assert format_table(named, index=False)[0] == ["BLEU"]


def test_units_names_decimals_booleans_and_missing_values() -> None:
    df = pd.DataFrame({
        "run": ["a", "b", "c"],
        "time": [1234.5, 98.25, float("nan")],
        "params": [65_000_000, 213_000_000, 7],
        "ok": [True, False, True],
        "loss": [0.1234, -0.5, 2.0],
    })
    headers, rows, numeric = format_table(df, units={"time": "s"}, decimals={"loss": 2}, names={"ok": "converged"},
                                          booleans=("✓", "✗"))
    assert headers == ["run", "time (s)", "params", "converged", "loss"]
    assert [r[1] for r in rows] == ["1,234", "98", MISSING]
    assert [r[2] for r in rows] == ["65,000,000", "213,000,000", "7"]
    assert [r[3] for r in rows] == ["✓", "✗", "✓"]
    assert [r[4] for r in rows] == ["0.12", "\u22120.50", "2.00"]
    assert numeric == [True if h != "run" and h != "converged" else False for h in headers]


def test_a_value_that_rounds_to_zero_has_no_minus_sign_and_infinities_are_spelt_out() -> None:
    df = pd.DataFrame({"delta": [-0.004, -0.006, float("-inf"), 0.0]})
    assert [r[0] for r in format_table(df, decimals={"delta": 2})[1]] == ["0.00", "\u22120.01", "\u2212\u221e", "0.00"]
    assert number_text(-0.4, 0) == "0" and number_text(-1234.0, 0) == "\u22121,234"
    assert number_text(float("nan"), 2) == "NaN" and number_text(float("inf"), 1) == "\u221e"


def test_nothing_is_truncated_or_elided() -> None:
    long = "a sentence far longer than the fifty characters of display.max_colwidth, kept whole"
    df = pd.DataFrame({"text": [long] * 80, "n": range(80)})
    table = show_table(df)
    page = table._repr_html_()
    assert long in page and "…" not in page and "..." not in page
    assert page.count("<tr>") == 81
    assert long in repr(table)


def test_html_is_escaped_and_a_table_can_be_collapsed_behind_a_labelled_toggle() -> None:
    df = pd.DataFrame({"<b>col</b>": ["<script>x</script>"]})
    page = show_table(df, caption="What & why", collapsed="Show the 30 runs")._repr_html_()
    assert "<script>x" not in page and "&lt;script&gt;" in page and "&lt;b&gt;col" in page
    assert page.startswith('<details class="tt-table-toggle"><summary>Show the 30 runs</summary>')
    assert "<caption>What &amp; why</caption>" in page
    assert 'class="tt-table-wrap"' in page  # the box that scrolls (with the site's cue) on a phone


def test_multi_level_columns_are_flattened_and_integers_stay_integers() -> None:
    df = pd.DataFrame([[1, 2.5]], columns=pd.MultiIndex.from_tuples([("BLEU", "test"), ("loss", "val")]))
    headers, rows, _ = format_table(df)
    assert headers == ["BLEU test", "loss val"] and rows == [["1", "2.50"]]
    assert format_table(pd.Series([1.0, 2.0], name="x"))[1] == [["1"], ["2"]]
    assert format_table(pd.DataFrame({"x": [math.inf]}))[1] == [["\u221e"]]


def test_bad_input_names_the_value() -> None:
    with pytest.raises(TypeError, match="list"):
        show_table([1, 2])
    with pytest.raises(KeyError, match="tme"):
        show_table(pd.DataFrame({"time": [1]}), units={"tme": "s"})
