"""What a grader answers, and the machinery every grader shares.

A grader runs the reader's function or module on small inputs, checks properties and compares with
references, and answers with a :class:`GradeReport`: every check that passed (a short line each)
and, for each one that failed, a :class:`Failure` with a stable identifier (``check``), what is
wrong, the smallest input that shows it, the right output and the reader's, and a hint.

The reader's code is never trusted: whatever it raises or returns (a wrong shape, a wrong type,
NaN) becomes a failure with a message, never an exception out of the grader. That is the job of
:class:`Grading` (a run of checks), :class:`Problem` (what a failed check raises), :func:`call`
(runs the reader's code) and the ``expect_*`` helpers.

Identifiers name the bug when the wrong output matches a known one (``"no_scaling"``,
``"keys_masked_not_queries"``), otherwise the property that failed (``"matches_reference"``,
``"causality"``). Tests assert on them; the prose around them may change.
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import Tensor

__all__ = ["Failure", "GradeReport"]

WIDTH = 72  # characters per printed line: the book's code column, on a phone too


@dataclass(frozen=True)
class Failure:
    """One failed check.

    Attributes:
        check: stable identifier: the bug's name when it was recognised, else the property.
        message: what is wrong, in a sentence.
        example: the smallest input that shows it, printed.
        expected: the right output for that input, printed.
        got: the reader's output for that input, printed.
        hint: the likely cause and how to fix it.
    """

    check: str
    message: str
    example: str = ""
    expected: str = ""
    got: str = ""
    hint: str = ""

    def _blocks(self) -> list[tuple[str, str]]:
        return [(label, text) for label, text in
                (("input", self.example), ("expected", self.expected), ("got", self.got)) if text]


@dataclass(repr=False)
class GradeReport:
    """A grader's answer: what passed, what failed, and what could not be run here.

    ``passed`` is true when no check failed and at least one ran. ``str(report)`` is the plain-text
    report (also its ``repr``, so an interactive session prints it); in a notebook it shows as
    Markdown.
    """

    exercise: str
    passed_checks: list[str] = field(default_factory=list)
    failures: list[Failure] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.failures and bool(self.passed_checks)

    @property
    def failed_checks(self) -> list[str]:
        """The identifiers of the failed checks, in the order they failed."""
        return [failure.check for failure in self.failures]

    def __bool__(self) -> bool:
        return self.passed

    def _title(self) -> str:
        if self.passed:
            return f"{self.exercise}: all {len(self.passed_checks)} checks passed"
        n = len(self.failures)
        return f"{self.exercise}: {n} check{'s' if n > 1 else ''} failed"

    def __str__(self) -> str:
        lines = [self._title()]
        for failure in self.failures:
            lines += _wrap(f"✗ {failure.check}: {failure.message}", "", "  ")
            for label, text in failure._blocks():
                lines.append(f"  {label}:")
                lines += _block_lines(text, "    ")
            if failure.hint:
                lines += _wrap(f"hint: {failure.hint}", "  ", "    ")
        lines += [line for check in self.passed_checks for line in _wrap(f"✓ {check}", "", "  ")]
        lines += [line for reason in self.skipped for line in _wrap(f"- not run: {reason}", "", "  ")]
        return "\n".join(lines)

    __repr__ = __str__

    def _repr_markdown_(self) -> str:
        parts = [f"**{self._title()}**", ""]
        for failure in self.failures:
            parts.append(f"- ✗ `{failure.check}`: {failure.message}")
            for label, text in failure._blocks():
                parts += [f"  {label}:", "  ```", *_block_lines(text, "  "), "  ```"]
            if failure.hint:
                parts.append(f"  *Hint:* {failure.hint}")
        parts += [f"- ✓ {check}" for check in self.passed_checks]
        parts += [f"- not run: {reason}" for reason in self.skipped]
        return "\n".join(parts)


def _block_lines(text: str, indent: str) -> list[str]:
    """A printed input or output, indented, its long prose lines wrapped (tensor rows already fit)."""
    return [wrapped for line in text.splitlines()
            for wrapped in _wrap(line, indent, indent + " " * (len(line) - len(line.lstrip()) + 2))]


def _wrap(text: str, first: str, rest: str) -> list[str]:
    """``text`` in lines of at most :data:`WIDTH` characters, the first indented by ``first``."""
    return textwrap.wrap(text, WIDTH, initial_indent=first, subsequent_indent=rest) or [first]


# --- Running checks -------------------------------------------------------------------------------


class Problem(Exception):
    """Raised by a check that failed; carries the :class:`Failure` (and the reader's exception, if any)."""

    def __init__(self, check: str, message: str, *, example: str = "", expected: str = "", got: str = "",
                 hint: str = "", error: BaseException | None = None) -> None:
        super().__init__(message)
        self.failure = Failure(check, message, example, expected, got, hint)
        self.error = error


class _Stop(Exception):
    """A gate check failed: the checks after it cannot run meaningfully."""


class Grading:
    """One grading run: ``with Grading(name) as grading:`` then ``grading.check(...)`` per property.

    A check is a function that returns when the property holds and raises :class:`Problem` when it
    does not. A *gate* (``gate=True``: the code runs at all, returns the right shape) stops the
    run when it fails, since every later check would fail the same way.
    """

    def __init__(self, exercise: str) -> None:
        self.report = GradeReport(exercise)
        self._random_state = torch.random.fork_rng(devices=[])

    def __enter__(self) -> Grading:
        # Grading draws no numbers from the global generator: a notebook's later cells get the same
        # random numbers whether or not the reader ran a grader (the reader's code runs inside too).
        self._random_state.__enter__()
        return self

    def __exit__(self, kind: type | None, error: BaseException | None, traceback: Any) -> bool:
        self._random_state.__exit__(kind, error, traceback)
        return kind is _Stop

    def check(self, description: str, run: Callable[[], None], *, gate: bool = False) -> bool:
        """Run one check; ``description`` is the line shown when it passes."""
        try:
            try:
                run()
            except Problem:
                raise
            except Exception as error:  # the reader's output broke a step of the check (an odd shape or type)
                raise Problem("unexpected_output", f"your code's output could not be checked ({type(error).__name__}: "
                              f"{_first_line(error)})", hint="compare its shape and type with the exercise's "
                              "signature") from error
        except Problem as problem:
            if problem.failure.check not in self.report.failed_checks:  # one bug, reported once
                self.report.failures.append(problem.failure)
            if gate:
                raise _Stop from None
            return False
        self.report.passed_checks.append(description)
        return True

    def skip(self, reason: str) -> None:
        self.report.skipped.append(reason)


@contextmanager
def _grad(enabled: bool) -> Iterator[None]:
    with torch.set_grad_enabled(enabled):
        yield


def call(fn: Callable[..., Any], *args: Any, what: str, example: str = "", grad: bool = False, **kwargs: Any) -> Any:
    """Call the reader's ``fn`` on copies of the tensors given; any exception becomes a :class:`Problem`.

    Copies, so that a function that changes its input in place (``scores /= ...`` on a view of
    it) cannot change the grader's reference inputs.
    """
    args = tuple(a.clone() if isinstance(a, Tensor) else a for a in args)
    kwargs = {k: v.clone() if isinstance(v, Tensor) else v for k, v in kwargs.items()}
    try:
        with _grad(grad):
            return fn(*args, **kwargs)
    except NotImplementedError as error:
        raise Problem(
            "not_implemented", f"{what} raises NotImplementedError: it is not written yet",
            hint="write it in the cell above, run that cell, then run the grader again",
            error=error,
        ) from None
    except Exception as error:  # the reader's code may raise anything; report it, never crash
        raise Problem(
            "raises", f"{what} raised {type(error).__name__}: {_first_line(error)}",
            example=example, hint=_hint_for(error), error=error,
        ) from None


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return text[0] if text else "(no message)"


def _hint_for(error: BaseException) -> str:
    text = str(error)
    if "without overflow" in text:
        return ("a fill value is too large for the tensor's dtype (float16 reaches only ±65504): "
                "fill with float('-inf') instead")
    if "must match the size" in text or "shapes cannot be multiplied" in text or "size mismatch" in text:
        return ("two shapes do not fit together: print the shape of every intermediate tensor "
                "for the input above")
    if isinstance(error, (TypeError, AttributeError)):
        return "check the arguments your code expects and the type it returns (see the exercise's signature)"
    return ""


def as_output(result: Any, what: str, example: str = "") -> tuple[Tensor, Tensor | None]:
    """The reader's result as ``(output, weights or None)``: a tensor, or a tuple starting with one."""
    weights = None
    if isinstance(result, (tuple, list)) and result and isinstance(result[0], Tensor):
        if len(result) > 1 and isinstance(result[1], Tensor):
            weights = result[1]
        result = result[0]
    if not isinstance(result, Tensor):
        raise Problem(
            "returns_tensor", f"{what} returned {type(result).__name__}, not a tensor",
            example=example, hint="return the output tensor (or a tuple (output, weights)); did you forget `return`?",
        )
    return result, weights


# --- Comparing and printing ------------------------------------------------------------------------


def close(a: Tensor, b: Tensor, rtol: float = 1e-4, atol: float = 1e-5) -> bool:
    """Same shape and equal within float32 error (compared in float64; NaN equals NaN, so a known
    bug that produces NaN is recognised)."""
    if not isinstance(a, Tensor) or not isinstance(b, Tensor) or a.shape != b.shape:
        return False
    a, b = a.detach().double().cpu(), b.detach().double().cpu()
    return bool(torch.allclose(a, b, rtol=rtol, atol=atol, equal_nan=True))


def fmt(t: Tensor) -> str:
    """A small tensor printed with 3 decimals (booleans as 0/1), lines at most :data:`WIDTH` wide."""
    t = t.detach().cpu()
    if t.dtype == torch.bool:
        t = t.int()
    if t.is_floating_point():
        t = t.double()
    array = t.numpy()
    return np.array2string(array, precision=3, suppress_small=True, max_line_width=WIDTH - 8, separator=", ")


def fmt_inputs(**tensors: Any) -> str:
    """``name (shape):`` and the values, for each input; other values as ``name = value``."""
    lines = []
    for name, value in tensors.items():
        if isinstance(value, Tensor):
            lines.append(f"{name} {tuple(value.shape)}:")
            lines += ["  " + line for line in fmt(value).splitlines()]
        else:
            lines.append(f"{name} = {value!r}")
    return "\n".join(lines)


@dataclass(frozen=True)
class KnownBug:
    """A wrong answer the grader can name: its identifier, what it is, how to fix it, and its output
    on the failing input (computed lazily; ``None`` or an exception means "does not apply")."""

    check: str
    message: str
    hint: str
    output: Callable[[], Tensor | None]


def _output(bug: KnownBug) -> Tensor | None:
    try:
        return bug.output()
    except Exception:  # a known bug that cannot be computed on this input does not apply to it
        return None


def expect_close(got: Tensor, expected: Tensor, *, check: str, message: str, example: str, hint: str = "",
                 rtol: float = 1e-4, atol: float = 1e-5) -> None:
    """Raise :class:`Problem` unless ``got`` equals ``expected`` (see :func:`close`)."""
    if not close(got, expected, rtol, atol):
        raise Problem(check, message, example=example, expected=fmt(expected), got=fmt(got), hint=hint)


Case = tuple[Tensor, Tensor, str, list[KnownBug]]  # (got, expected, example, known bugs)


def expect_cases_close(cases: Iterable[Callable[[], Case]], *, check: str, message: str, hint: str = "",
                       rtol: float = 1e-4, atol: float = 1e-5) -> None:
    """``got == expected`` (:func:`close`) over cases ordered smallest first: the first case that differs is the one
    shown, and a known bug is named only if it matches the reader's output on *every* case it
    applies to (a 2x2 causal mask cannot tell "sees the next key" from "sees every key"; 3x3 can).

    Each case is a function returning ``(got, expected, example, bugs)``; they run in order, and an
    exception in a later case does not hide a mismatch found before it.
    """
    done: list[Case] = []
    for make in cases:
        try:
            done.append(make())
        except Problem:
            if any(not close(got, expected, rtol, atol) for got, expected, _, _ in done):
                break
            raise
    failing = [case for case in done if not close(case[0], case[1], rtol, atol)]
    if not failing:
        return
    got, expected, example, bugs = failing[0]
    matches = lambda a, b: close(a, b, rtol, atol)  # noqa: E731
    for bug in bugs:
        candidate = _output(bug)
        if candidate is not None and matches(got, candidate) and _matches_everywhere(bug.check, done, matches):
            check, message, hint = bug.check, bug.message, bug.hint
            break
    raise Problem(check, message, example=example, expected=fmt(expected), got=fmt(got), hint=hint)


def _matches_everywhere(check: str, cases: list[Case], matches: Callable[[Tensor, Tensor], bool]) -> bool:
    """Does the known bug ``check`` (one or more variants under that name) reproduce the reader's output
    in every case where it applies?"""
    applied = False
    for got, _, _, bugs in cases:
        candidates = [c for c in (_output(b) for b in bugs if b.check == check) if c is not None]
        if not candidates:
            continue
        if not any(matches(got, c) for c in candidates):
            return False
        applied = True
    return applied


def expect_shape(got: Tensor, shape: tuple[int, ...], *, what: str, example: str, hint: str = "") -> None:
    if tuple(got.shape) != tuple(shape):
        raise Problem(
            "output_shape", f"{what} has shape {tuple(got.shape)}, expected {tuple(shape)}",
            example=example, hint=hint,
        )


def expect_finite(got: Tensor, *, what: str, example: str) -> None:
    if got.is_floating_point() and not bool(torch.isfinite(got).all()):
        kind = "NaN" if bool(got.isnan().any()) else "infinite values"
        raise Problem(
            "not_finite", f"{what} contains {kind} on an ordinary input", example=example, got=fmt(got),
            hint="look for a division by zero, a log of zero, or an exp of a large number "
                 "(subtract the row's maximum, or use torch.softmax / log_softmax)",
        )


def inputs(*shape: int, seed: int, dtype: torch.dtype = torch.float32, low: int = -2, high: int = 2) -> Tensor:
    """Small whole numbers in ``[low, high]``: readable when printed, exact in every float type."""
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(low, high + 1, shape, generator=generator).to(dtype)




def property_check(check: str, run: Callable[[], None], *, example: str, hint: str = "") -> None:
    """Run a property check of :mod:`transformer_lib.properties` (the library's own tests use them); its
    ``AssertionError`` becomes a :class:`Problem` named ``check``, or ``"dropout_in_eval"`` when the
    code is random in evaluation mode."""
    try:
        run()
    except AssertionError as error:
        message = _first_line(error)
        if "not deterministic" in message:
            raise Problem(
                "dropout_in_eval", "two calls on the same input in eval() mode give different outputs",
                example=example,
                hint="something random is still on: an nn.Dropout created inside forward (a new module is "
                     "in training mode, and .eval() only reaches the modules the layer owns), or "
                     "F.dropout(x, p) without training=self.training. Create the dropout in __init__",
            ) from None
        raise Problem(check, message, example=example, hint=hint) from None
    except (TypeError, ValueError) as error:  # the reader's output does not fit the check (shape, type)
        raise Problem(check, f"the check could not run on your output: {_first_line(error)}", example=example) from None
