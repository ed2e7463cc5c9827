"""Chapter 3's grader: the sinusoidal positional encodings.

Shapes: ``max_len`` positions ``p`` on rows, ``D`` (``d_model``) dimensions on columns.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial

import torch
from torch import Tensor

from transformer_lib.embeddings import SinusoidalPositionalEncoding, sinusoidal_table

from .report import (
    Case, GradeReport, Grading, KnownBug, Problem, Refused, call, expect_cases_close, expect_close, fmt_inputs,
)

__all__ = ["grade_sinusoidal_table"]

# (max_len, d_model), smallest first: the paper's formula by hand (3, 4), one frequency, a wider
# table, and an odd width (the last sine has no cosine partner).
TABLE_CASES = [(3, 4), (4, 2), (50, 16), (20, 7)]
REFUSED_TABLE = (Refused("the library's sinusoidal_table", (sinusoidal_table, SinusoidalPositionalEncoding.__init__)),)
LONG = (2048, 64)  # positions of a long document: angles up to 2047 radians


def _angles(max_len: int, exponents: Tensor, start: int = 0) -> Tensor:
    """``p / 10000^e`` for positions ``start .. start + max_len - 1`` and one exponent per column."""
    position = torch.arange(start, start + max_len, dtype=torch.float64)[:, None]  # (max_len, 1)
    return position / 10000.0 ** exponents  # (max_len, D)


def _interleaved(max_len: int, d_model: int, exponents: Tensor, first: Callable = torch.sin,
                 second: Callable = torch.cos, start: int = 0) -> Tensor:
    angles = _angles(max_len, exponents, start)  # (max_len, D)
    columns = torch.arange(d_model)
    return torch.where(columns % 2 == 0, first(angles), second(angles)).float()  # (max_len, D)


def _table_bugs(max_len: int, d_model: int) -> list[KnownBug]:
    """Known wrong tables (``None`` where a bug has no single form: a swapped odd-width table)."""
    j = torch.arange(d_model, dtype=torch.float64)  # column index
    paired = 2 * (j // 2) / d_model  # the paper's 2i/D: columns 2i and 2i+1 share a frequency
    half = math.ceil(d_model / 2)
    i = torch.arange(half, dtype=torch.float64)

    def halves() -> Tensor:
        angles = _angles(max_len, 2 * i / d_model)  # (max_len, ceil(D/2))
        return torch.cat([torch.sin(angles), torch.cos(angles)], dim=1)[:, :d_model].float()

    return [
        KnownBug("sin_cos_swapped", "cosines fill the even columns and sines the odd ones",
                 "PE(p, 2i) = sin(...), PE(p, 2i + 1) = cos(...): sine first",
                 lambda: None if d_model % 2 else _interleaved(max_len, d_model, paired, torch.cos, torch.sin)),
        KnownBug("halves_not_interleaved", "all sines come first and all cosines after them (tensor2tensor's "
                 "layout): a valid encoding, but not the paper's, and not the library's",
                 "interleave: table[:, 0::2] = sin(angles), table[:, 1::2] = cos(angles)",
                 lambda: None if d_model % 2 else halves()),
        KnownBug("cosine_frequency", "column j turns at 10000^(-j/D), so a cosine does not share its sine's "
                 "frequency", "the exponent is 2i/D for both columns 2i and 2i + 1: torch.arange(0, D, 2) / D",
                 lambda: _interleaved(max_len, d_model, j / d_model)),
        KnownBug("frequency_exponent", "column j turns at 10000^(-2j/D): the frequencies fall twice as fast",
                 "the exponent is 2i/D with i = j // 2, the pair's index: torch.arange(0, D, 2) / D",
                 lambda: _interleaved(max_len, d_model, 2 * j / d_model)),
        KnownBug("positions_start_at_one", "row p holds the encoding of position p + 1",
                 "positions start at 0: torch.arange(max_len)",
                 lambda: _interleaved(max_len, d_model, paired, start=1)),
    ]


def _table(fn: Callable[[int, int], Tensor], max_len: int, d_model: int) -> tuple[Tensor, str]:
    """The reader's table (a leading dimension of 1 dropped) and the input printed; checked for shape and dtype."""
    example = fmt_inputs(max_len=max_len, d_model=d_model)
    what = f"your table({max_len}, {d_model})"
    out = call(fn, max_len, d_model, what=what, example=example, names=("max_len", "d_model"))
    if not isinstance(out, Tensor):
        raise Problem("returns_tensor", f"{what} returned {type(out).__name__}, not a tensor", example=example)
    if out.dim() == 3 and out.size(0) == 1:
        out = out[0]
    if tuple(out.shape) != (max_len, d_model):
        hint = ("an odd width has one more sine than cosines: fill the cosine columns with "
                "angles[:, : d_model // 2]") if d_model % 2 else "one row per position, one column per dimension"
        raise Problem("output_shape", f"{what} has shape {tuple(out.shape)}, expected {(max_len, d_model)}",
                      example=example, hint=hint)
    if not out.is_floating_point():
        raise Problem("dtype", f"{what} has dtype {out.dtype}, not a floating-point type", example=example)
    return out, example


def _odd_width_hint(problem: Problem, d_model: int) -> Problem:
    if d_model % 2 and problem.failure.check == "raises":
        return Problem("odd_width", f"{problem.failure.message} (d_model = {d_model} is odd)",
                       example=problem.failure.example,
                       hint="with an odd width the last sine has no cosine partner: compute the "
                            "cosines for the d_model // 2 complete pairs only")
    return problem


def _compared(fn: Callable[[int, int], Tensor], max_len: int, d_model: int) -> Case:
    try:
        out, example = _table(fn, max_len, d_model)
    except Problem as problem:
        raise _odd_width_hint(problem, d_model) from None
    return out, sinusoidal_table(max_len, d_model), example, _table_bugs(max_len, d_model)


def _runs(fn: Callable[[int, int], Tensor]) -> None:
    _table(fn, *TABLE_CASES[0])


def _matches_reference(fn: Callable[[int, int], Tensor]) -> None:
    # float32 sin and cos of angles up to max_len: absolute error well under 1e-5
    expect_cases_close((lambda c=c: _compared(fn, *c) for c in TABLE_CASES), check="matches_reference",
                       message="the table differs from sinusoidal_table", rtol=0.0, atol=1e-5,
                       hint="PE(p, 2i) = sin(p / 10000^(2i/D)), PE(p, 2i+1) = cos(p / 10000^(2i/D))")


def _long_table(fn: Callable[[int, int], Tensor], matched: bool) -> None:
    max_len, d_model = LONG
    out, example = _table(fn, max_len, d_model)
    expected = _interleaved(max_len, d_model, 2 * (torch.arange(d_model, dtype=torch.float64) // 2) / d_model)
    # float32 holds an angle of 2047 to about 1.2e-4; a sine moves by at most that
    if not bool(torch.isfinite(out).all()):
        raise Problem("large_positions", f"the ({max_len}, {d_model}) table holds NaN or infinite values",
                      example=example, hint="compute 10000^(2i/D) in floating point (a power of an integer "
                                            "tensor stays an integer and overflows)")
    if matched:
        expect_close(out.double(), expected.double(), check="large_positions", example=example, rtol=0.0, atol=2e-3,
                     message=f"at positions up to {max_len - 1} the table differs from the float64 one by more "
                             "than float32 rounding",
                     hint="compute positions and angles in float32 or float64, not float16 (which holds whole "
                          "numbers exactly only up to 2048) or integers")


def grade_sinusoidal_table(fn: Callable[[int, int], Tensor], *, from_scratch: bool = True) -> GradeReport:
    """Grade the reader's table of sinusoidal positional encodings.

    ``fn(max_len, d_model)`` must return the ``(max_len, d_model)`` table of the paper (section 3.5):
    ``PE(p, 2i) = sin(p / 10000^(2i/D))``, ``PE(p, 2i+1) = cos(p / 10000^(2i/D))``. Checked against
    :func:`transformer_lib.embeddings.sinusoidal_table` on small tables, the ``(3, 4)`` one by hand
    included, and on an odd ``d_model``. A leading dimension of 1 (``(1, max_len, D)``, as the
    Annotated Transformer stores it) is accepted.

    Then a long table (2,048 positions) against float64, and (from scratch, the default) no use of
    the library's ``sinusoidal_table``.

    Example:
        >>> grade_sinusoidal_table(sinusoidal_table, from_scratch=False).passed
        True
    """
    grading = Grading("Sinusoidal positional encodings", refused=REFUSED_TABLE, from_scratch=from_scratch)
    with grading:
        grading.check("returns a (max_len, d_model) floating-point table", partial(_runs, fn), gate=True)
        matched = grading.check("equals sinusoidal_table: (3, 4) as computed by hand in the chapter, (4, 2), "
                                "(50, 16), and the odd width (20, 7)", partial(_matches_reference, fn))
        grading.check(f"exact at {LONG[0]:,} positions (within float32 rounding of float64)",
                      partial(_long_table, fn, matched))
    return grading.report
