"""Tables a reader reads: ``show_table(df)`` displays a pandas table formatted for the page.

What pandas shows by default is a notebook dump: a 0..N index column, an empty row for the index's
name, "…" in long cells, raw ``True``/``False``, numbers to six decimals. :func:`show_table` shows:

- no index column when the index is just row numbers; otherwise the index becomes an ordinary first
  column with its name as header (no empty index-name row);
- units in the headers (``units={"time": "s"}`` heads the column "time (s)");
- every cell whole (no truncation), booleans as words, missing values as "–";
- numbers right-aligned in tabular figures, with thousands separators and a fixed number of decimals
  per column (chosen from the column's size unless ``decimals`` says);
- on a narrow screen the table is set condensed and, if still wider than the column, scrolls
  sideways inside its own box with a visible cue (``_static/site.css``, ``_static/scroll-cue.js``);
- optionally behind a toggle that says what it hides (``collapsed="Show the 30 runs"``).

The output is HTML (classes ``tt-table``) with a plain-text rendering for front ends without HTML.
"""

from __future__ import annotations

import html
import math
import numbers
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["Table", "format_table", "number_text", "shape_table", "show_table", "table_html"]

MISSING = "\u2013"  # en dash


def _is_number(value: Any) -> bool:
    return isinstance(value, numbers.Number) and not isinstance(value, bool)


def _auto_decimals(values: Sequence[float]) -> int:
    """Decimals for a column of floats: fewer as the numbers grow (1234, 12.3, 1.23, 0.123)."""
    finite = [abs(v) for v in values if math.isfinite(v)]
    if not finite:
        return 0
    if all(float(v).is_integer() for v in finite):
        return 0
    top = max(finite)
    return 0 if top >= 1000 else 1 if top >= 10 else 2 if top >= 1 else 3


def format_table(
    df: Any,
    *,
    units: Mapping[str, str] | None = None,
    decimals: Mapping[str, int] | None = None,
    names: Mapping[str, str] | None = None,
    index: bool | None = None,
    booleans: tuple[str, str] = ("yes", "no"),
) -> tuple[list[str], list[list[str]], list[bool]]:
    """The table as text cells: ``(headers, rows, numeric)`` (``numeric``: per column, right-align).

    Args:
        df: a ``pandas.DataFrame`` (or ``Series``).
        units: column -> unit, shown in the header: ``{"time": "s"}`` -> "time (s)".
        decimals: column -> number of decimals for its numbers (others: chosen from their size).
        names: column -> header to show instead of the column's name.
        index: show the index as the first column. ``None`` (default): only when it is not just
            row numbers (a ``RangeIndex``), i.e. when it names the rows.
        booleans: the words for ``True`` and ``False``.

    Raises:
        TypeError: ``df`` is not a pandas DataFrame or Series.
        KeyError: ``units``, ``decimals`` or ``names`` name a column the table does not have.
    """
    import pandas as pd

    if isinstance(df, pd.Series):
        df = df.to_frame()
    if not isinstance(df, pd.DataFrame):
        raise TypeError(f"show_table takes a pandas DataFrame or Series, got {type(df).__name__}")
    show_index = not isinstance(df.index, pd.RangeIndex) if index is None else index
    if show_index:
        labels = [str(n) if n is not None else "" for n in df.index.names]
        df = df.copy()
        df.index = df.index.set_names(labels)
        df = df.reset_index()
    columns = [" ".join(str(p) for p in c if str(p)) if isinstance(c, tuple) else str(c) for c in df.columns]
    for option, given in (("units", units), ("decimals", decimals), ("names", names)):
        unknown = sorted(set(given or ()) - set(columns))
        if unknown:
            raise KeyError(f"{option} names columns {unknown} that the table does not have; its columns: {columns}")
    units, decimals, names = dict(units or {}), dict(decimals or {}), dict(names or {})
    headers = [names.get(c, c) + (f" ({units[c]})" if c in units else "") for c in columns]
    rows: list[list[str]] = [[] for _ in range(len(df))]
    numeric: list[bool] = []
    for position, column in enumerate(columns):
        values = list(df.iloc[:, position])
        present = [v for v in values if not _missing(v)]
        is_numeric = bool(present) and all(_is_number(v) for v in present)
        numeric.append(is_numeric)
        floats = [float(v) for v in present if is_numeric and not float(v).is_integer()]
        places = decimals.get(column, _auto_decimals([float(v) for v in present]) if floats else 0)
        for row, value in zip(rows, values):
            row.append(_cell(value, places if is_numeric else None, booleans))
    return headers, rows, numeric


def _missing(value: Any) -> bool:
    if value is None:
        return True
    try:
        return bool(value != value)  # NaN, NaT, pd.NA
    except (TypeError, ValueError):
        return False


def _cell(value: Any, places: int | None, booleans: tuple[str, str]) -> str:
    if _missing(value):
        return MISSING
    if isinstance(value, (bool,)) or type(value).__name__ == "bool_":
        return booleans[0] if bool(value) else booleans[1]
    if places is not None and _is_number(value):
        return number_text(value, places)
    return str(value)


def number_text(value: float, places: int) -> str:
    """A number as a table cell shows it: ``places`` digits after the point, thousands separated,
    a true minus sign (as wide as the plus), no "\u22120.00" for a value that rounds to zero, and
    "NaN", "\u221e" and "\u2212\u221e" spelt out."""
    number = float(value)
    if math.isnan(number):
        return "NaN"
    if math.isinf(number):
        return "\u221e" if number > 0 else "\u2212\u221e"
    text = f"{number:,.{places}f}" if places or not number.is_integer() or abs(number) >= 1000 \
        else f"{int(number):,}"
    if float(text.replace(",", "")) == 0:
        text = text.lstrip("-")
    return text.replace("-", "\u2212")


def table_html(headers: Sequence[str], rows: Sequence[Sequence[str]], numeric: Sequence[bool],
               caption: str | None = None, collapsed: str | None = None) -> str:
    """The HTML of a table (see :func:`show_table`)."""
    def cls(j: int) -> str:
        return ' class="tt-num"' if numeric[j] else ""

    head = "".join(f'<th scope="col"{cls(j)}>{html.escape(h)}</th>' for j, h in enumerate(headers))
    body = "".join(
        "<tr>" + "".join(f"<td{cls(j)}>{html.escape(c)}</td>" for j, c in enumerate(row)) + "</tr>" for row in rows
    )
    title = f"<caption>{html.escape(caption)}</caption>" if caption else ""
    table = (f'<div class="tt-table-wrap"><table class="tt-table">{title}<thead><tr>{head}</tr></thead>'
             f"<tbody>{body}</tbody></table></div>")
    if collapsed:
        return (f'<details class="tt-table-toggle"><summary>{html.escape(collapsed)}</summary>'
                f"{table}</details>")
    return table


def _plain(headers: Sequence[str], rows: Sequence[Sequence[str]], numeric: Sequence[bool],
           caption: str | None = None) -> str:
    widths = [max([len(h)] + [len(r[j]) for r in rows]) for j, h in enumerate(headers)]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(c.rjust(w) if numeric[j] else c.ljust(w) for j, (c, w) in enumerate(zip(cells, widths))).rstrip()

    text = [line(headers), "  ".join("-" * w for w in widths)] + [line(r) for r in rows]
    return "\n".join(([caption] if caption else []) + text)


class Table:
    """A formatted table as a notebook output (HTML, and plain text elsewhere)."""

    def __init__(self, headers: Sequence[str], rows: Sequence[Sequence[str]], numeric: Sequence[bool],
                 caption: str | None = None, collapsed: str | None = None) -> None:
        self.headers, self.rows, self.numeric = list(headers), [list(r) for r in rows], list(numeric)
        self.caption, self.collapsed = caption, collapsed

    def _repr_html_(self) -> str:
        return table_html(self.headers, self.rows, self.numeric, self.caption, self.collapsed)

    def __repr__(self) -> str:
        return _plain(self.headers, self.rows, self.numeric, self.caption)


def show_table(
    df: Any,
    *,
    units: Mapping[str, str] | None = None,
    decimals: Mapping[str, int] | None = None,
    names: Mapping[str, str] | None = None,
    index: bool | None = None,
    booleans: tuple[str, str] = ("yes", "no"),
    caption: str | None = None,
    collapsed: str | None = None,
) -> Table:
    """Display a pandas table formatted for reading (see the module's docstring).

    Args:
        df, units, decimals, names, index, booleans: see :func:`format_table`.
        caption: a line above the table (what it shows, where its numbers come from).
        collapsed: put the table behind a toggle with this label ("Show the 30 runs").

    Returns:
        A :class:`Table`, which the notebook displays as the cell's value (or pass it to ``display``).

    Example:
        >>> import pandas as pd
        >>> print(repr(show_table(pd.DataFrame({"run": ["a", "b"], "time": [1234.5, 98.25], "ok": [True, False]}),
        ...                       units={"time": "s"})))
        run  time (s)  ok
        ---  --------  ---
        a       1,234  yes
        b          98  no
    """
    headers, rows, numeric = format_table(df, units=units, decimals=decimals, names=names, index=index,
                                          booleans=booleans)
    return Table(headers, rows, numeric, caption, collapsed)


def shape_table(steps: Sequence[Sequence[Any]], *, dtype: bool = False, caption: str | None = None) -> Table:
    """The shapes a computation goes through, as a table: one row per step, its name, its shape, and
    (where a step gives them) the shape's letters (``"(B, T, D)"``), and the dtype if ``dtype``.

    Args:
        steps: ``(name, tensor)`` or ``(name, tensor, letters)`` per step, in order.
        dtype: add a column with each tensor's dtype.
        caption: a line above the table.

    Example:
        >>> import torch
        >>> print(repr(shape_table([("x", torch.zeros(2, 3), "(B, D)")])))
        step  shape   letters
        ----  ------  -------
        x     (2, 3)  (B, D)
    """
    with_letters = any(len(step) > 2 for step in steps)
    headers = ["step", "shape"] + (["letters"] if with_letters else []) + (["dtype"] if dtype else [])
    rows = []
    for step in steps:
        name, tensor = step[0], step[1]
        row = [str(name), str(tuple(tensor.shape))]
        if with_letters:
            row.append(str(step[2]) if len(step) > 2 else "")
        if dtype:
            row.append(str(tensor.dtype).removeprefix("torch."))
        rows.append(row)
    return Table(headers, rows, [False] * len(headers), caption)
