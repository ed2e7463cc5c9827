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

A grader cannot be broken by the answer it grades (:func:`call`): each call of the reader's code has
a time limit (:data:`TIME_LIMIT_S`) and the grading an output limit (:data:`OUTPUT_LIMIT_CHARS`);
``SystemExit``, ``KeyboardInterrupt`` and exceptions of any kind become the answer's failure. Every
grading also checks, over all its calls, that the answer leaves the caller's arguments unchanged,
and (by default, *from scratch*) that it does not call a ready-made version of what it is asked to
write (:class:`Refused`): the library's own function, or PyTorch's.
"""

from __future__ import annotations

import ctypes
import signal
import sys
import textwrap
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import CodeType, FrameType
from typing import Any

import numpy as np
import torch
from torch import Tensor

__all__ = ["Failure", "GradeReport", "Refused"]

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

TIME_LIMIT_S = 10.0  # per call of the reader's code: the inputs are tiny, a right answer takes milliseconds
OUTPUT_LIMIT_CHARS = 20_000  # what the reader's code may print during one grading (a few hundred lines)


class Problem(Exception):
    """Raised by a check that failed; carries the :class:`Failure` (and the reader's exception, if any).

    ``fatal``: the grading stops here (a time or output limit, an interrupt), since every later call
    of the answer would do the same.
    """

    def __init__(self, check: str, message: str, *, example: str = "", expected: str = "", got: str = "",
                 hint: str = "", error: BaseException | None = None, fatal: bool = False) -> None:
        super().__init__(message)
        self.failure = Failure(check, message, example, expected, got, hint)
        self.error = error
        self.fatal = fatal


class _Stop(Exception):
    """A gate check failed: the checks after it cannot run meaningfully."""


class _Limit(BaseException):
    """Raised inside the reader's code to cut it short. A ``BaseException``, so that an answer's own
    ``except Exception:`` does not swallow it."""


class _TimeLimit(_Limit):
    pass


class _OutputLimit(_Limit):
    pass


@dataclass(frozen=True)
class Refused:
    """A ready-made version of what an exercise asks the reader to write, noticed when the answer calls it.

    Attributes:
        name: how the report names it, e.g. ``"F.scaled_dot_product_attention"``.
        targets: the functions whose call counts: Python functions or methods (a class's ``__init__``
            for the class) and builtins.
        when: optional condition on a Python function's arguments at the call (its local variables),
            e.g. ``F.cross_entropy`` only with label smoothing.
    """

    name: str
    targets: tuple[Any, ...]
    when: Callable[[dict[str, Any]], bool] | None = None


class _Recorder:
    """A profile function (:func:`sys.setprofile`) that notes which refused functions the reader's code
    calls, however it reached them (``F.x``, ``from ... import x``, a subclass, a wrapper)."""

    def __init__(self, refused: Sequence[Refused], seen: dict[str, Refused]) -> None:
        self.codes: dict[CodeType, Refused] = {}
        self.builtins: dict[int, Refused] = {}
        for item in refused:
            for target in item.targets:
                code = getattr(target, "__code__", None)
                if isinstance(code, CodeType):
                    self.codes[code] = item
                else:
                    self.builtins[id(target)] = item
        self.seen = seen

    def __call__(self, frame: FrameType, event: str, arg: Any) -> None:
        if event == "call":
            item = self.codes.get(frame.f_code)
            if item is not None and item.name not in self.seen:
                try:
                    counts = item.when is None or bool(item.when(frame.f_locals))
                except Exception:  # noqa: BLE001 (an odd argument: not the ready-made use)
                    counts = False
                if counts:
                    self.seen[item.name] = item
        elif event == "c_call":
            item = self.builtins.get(id(arg))
            if item is not None:
                self.seen.setdefault(item.name, item)


class Grading:
    """One grading run: ``with Grading(name) as grading:`` then ``grading.check(...)`` per property.

    A check is a function that returns when the property holds and raises :class:`Problem` when it
    does not. A *gate* (``gate=True``: the code runs at all, returns the right shape) stops the
    run when it fails, since every later check would fail the same way.

    Over every call of the answer (:func:`call`), the grading notes the first argument the answer
    changed in place and, with ``refused`` and ``from_scratch`` (the default), the ready-made
    functions it called; at the end it reports them as two checks of their own. With
    ``from_scratch=False`` ready-made calls are allowed and the report's title says so.
    """

    def __init__(self, exercise: str, *, refused: Sequence[Refused] = (), from_scratch: bool = True) -> None:
        self.refused = tuple(refused) if from_scratch else ()
        self.report = GradeReport(exercise if from_scratch or not refused else
                                  f"{exercise} (not from scratch: ready-made versions allowed)")
        self.called: dict[str, Refused] = {}
        self.changed: Failure | None = None
        self.printed = 0
        self._random_state = torch.random.fork_rng(devices=[])

    def __enter__(self) -> Grading:
        # Grading draws no numbers from the global generator: a notebook's later cells get the same
        # random numbers whether or not the reader ran a grader (the reader's code runs inside too).
        self._random_state.__enter__()
        _running().append(self)
        return self

    def __exit__(self, kind: type | None, error: BaseException | None, traceback: Any) -> bool:
        try:
            if kind is None or kind is _Stop:
                self._whole_run_checks(stopped=kind is _Stop)
        finally:
            _running().remove(self)
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
            if gate or problem.fatal:
                raise _Stop from None
            return False
        self.report.passed_checks.append(description)
        return True

    def skip(self, reason: str) -> None:
        self.report.skipped.append(reason)

    def _whole_run_checks(self, stopped: bool) -> None:
        """The checks over every call of the answer: its arguments unchanged, no ready-made version called.
        After a stop only their failures are reported (the run was cut short)."""
        names = [item.name for item in self.refused]
        checks = [("leaves the caller's arguments unchanged (no in-place change of an input)", self._unchanged)]
        if self.refused:
            checks.append((f"written from the pieces: calls no ready-made version ({', '.join(names)})",
                           self._from_the_pieces))
        for description, run in checks:
            if not stopped:
                self.check(description, run)
                continue
            try:
                run()
            except Problem as problem:
                self.report.failures.append(problem.failure)

    def _unchanged(self) -> None:
        if self.changed is not None:
            failure = self.changed
            raise Problem(failure.check, failure.message, example=failure.example, expected=failure.expected,
                          got=failure.got, hint=failure.hint)

    def _from_the_pieces(self) -> None:
        if not self.called:
            return
        names = list(self.called)
        listed = " and ".join([", ".join(names[:-1]), names[-1]] if len(names) > 1 else names)
        raise Problem(
            "ready_made", f"your answer calls {listed}: write it from the pieces: {listed} "
            f"{'is' if len(names) == 1 else 'are'} the answer you are writing",
            hint="build it from smaller operations (matmul, softmax, exp, masked_fill, comparisons ...); to "
                 "grade a ready-made answer anyway, pass from_scratch=False (the report then says so)",
        )


_THREAD = threading.local()


def _running() -> list[Grading]:
    """The gradings running now in this thread, innermost last."""
    if not hasattr(_THREAD, "gradings"):
        _THREAD.gradings = []
    return _THREAD.gradings


@contextmanager
def _grad(enabled: bool) -> Iterator[None]:
    with torch.set_grad_enabled(enabled):
        yield


class _CappedStream:
    """``sys.stdout`` or ``sys.stderr`` while the reader's code runs: passed through until the grading's
    output budget is spent, then cut (:class:`_OutputLimit` raised inside the reader's code)."""

    def __init__(self, stream: Any, budget: Grading | _Budget) -> None:
        self.stream, self.budget = stream, budget

    def write(self, text: str) -> int:
        left = OUTPUT_LIMIT_CHARS - self.budget.printed
        if len(text) <= left:
            self.budget.printed += len(text)
            return self.stream.write(text)
        if left >= 0:  # the first write over the budget: show its start, and say where it was cut
            self.stream.write(text[:left] + f"\n[grader: output cut after {OUTPUT_LIMIT_CHARS:,} characters]\n")
            self.budget.printed = OUTPUT_LIMIT_CHARS + 1
        raise _OutputLimit

    def flush(self) -> None:
        self.stream.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)


@dataclass
class _Budget:
    printed: int = 0


@contextmanager
def _capped_output(budget: Grading | _Budget) -> Iterator[None]:
    out, err = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = _CappedStream(out, budget), _CappedStream(err, budget)
    try:
        yield
    finally:
        sys.stdout, sys.stderr = out, err


@contextmanager
def _time_limit(seconds: float) -> Iterator[None]:
    """Raise :class:`_TimeLimit` in the running code after ``seconds``. In the main thread (a Jupyter or
    Colab kernel, a script) by ``SIGALRM``, which also ends a ``time.sleep``, and again every 50 ms if
    the code swallows it; elsewhere (another thread, or Windows) by a watchdog thread that raises it
    asynchronously in this one (a Python loop ends; a long sleep or C call is waited for)."""
    if threading.current_thread() is threading.main_thread() and hasattr(signal, "setitimer"):
        def on_alarm(signum: int, frame: FrameType | None) -> None:
            raise _TimeLimit

        handler = signal.signal(signal.SIGALRM, on_alarm)
        outer, _ = signal.setitimer(signal.ITIMER_REAL, seconds, 0.05)  # a timer set by someone else (pytest-timeout)
        try:
            yield
        finally:
            left, _ = signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, handler)
            if outer > 0:  # give the outer timer back, less the time spent here
                signal.setitimer(signal.ITIMER_REAL, max(outer - (seconds - left), 1e-3))
        return
    thread, done, fired, lock = threading.get_ident(), threading.Event(), threading.Event(), threading.Lock()

    def watch() -> None:
        if not done.wait(seconds):
            with lock:
                if not done.is_set():
                    fired.set()
                    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread), ctypes.py_object(_TimeLimit))

    watchdog = threading.Thread(target=watch, daemon=True)
    watchdog.start()
    try:
        yield
    finally:
        with lock:
            done.set()
        watchdog.join()
        if fired.is_set():  # raised in the code already, or pending: then it is raised here, still inside the call
            _let_pending_exception_out()


def _let_pending_exception_out() -> None:
    for _ in range(1000):  # the interpreter raises a pending asynchronous exception within a few instructions
        pass


@contextmanager
def _guarded(grading: Grading | None) -> Iterator[None]:
    """The reader's code runs under the time and output limits, its ready-made calls recorded, and the
    global settings it may change (default dtype, profile function) restored."""
    dtype = torch.get_default_dtype()
    recorder = _Recorder(grading.refused, grading.called) if grading is not None and grading.refused else None
    with _capped_output(grading if grading is not None else _Budget()), _time_limit(TIME_LIMIT_S):
        previous = sys.getprofile()
        if recorder is not None:
            sys.setprofile(recorder)
        try:
            yield
        finally:
            if recorder is not None:
                sys.setprofile(previous)
            torch.set_default_dtype(dtype)


def _copy(value: Any) -> Any:
    if isinstance(value, Tensor):
        return value.clone()
    return list(value) if isinstance(value, list) else value


def _same(before: Any, after: Any) -> bool:
    if isinstance(before, Tensor):
        return (isinstance(after, Tensor) and before.shape == after.shape and before.dtype == after.dtype
                and bool(torch.equal(before.detach(), after.detach())))
    return not isinstance(before, list) or before == after


def _shown(value: Any) -> str:
    return fmt(value) if isinstance(value, Tensor) else repr(value)[:400]


def _note_changes(grading: Grading | None, originals: list[tuple[str, Any]], copies: list[Any], what: str,
                  example: str) -> None:
    """Keep, for the end of the grading, the first argument the reader's call changed in place."""
    if grading is None or grading.changed is not None:
        return
    for (name, before), after in zip(originals, copies):
        if not _same(before, after):
            grading.changed = Failure(
                "modifies_input", f"{what} changes its argument `{name}` in place: the caller's tensor is "
                f"different after the call", example=example or fmt_inputs(**{name: before}),
                expected=f"{name} unchanged:\n{_shown(before)}", got=f"{name} after the call:\n{_shown(after)}",
                hint="an in-place operation on an argument (/=, +=, .div_(), .masked_fill_(), x[...] = ..., "
                     "list.sort()) reaches the caller's tensor, which the caller may still use (the batch, the "
                     "targets): write scores = scores / ..., or work on a .clone()",
            )
            return


def call(fn: Callable[..., Any], *args: Any, what: str, example: str = "", grad: bool = False,
         names: Sequence[str] = (), **kwargs: Any) -> Any:
    """Call the reader's ``fn`` on copies of the arguments; whatever happens becomes a :class:`Problem`.

    Copies, so that a function that changes its input in place (``query /= ...``) cannot change the
    grader's inputs; the copies are compared with the originals afterwards, and a change is noted for
    the grading's "arguments unchanged" check (``names``: the arguments' names, in order). The call
    runs under :func:`_guarded`: a time limit, an output limit, the refused functions recorded.
    ``SystemExit``, ``KeyboardInterrupt`` and any exception are the answer's failure.
    """
    copies = [_copy(a) for a in args]
    kw_copies = {k: _copy(v) for k, v in kwargs.items()}
    grading = _running()[-1] if _running() else None
    try:
        with _grad(grad), _guarded(grading):
            result = fn(*copies, **kw_copies)
    except NotImplementedError as error:
        raise Problem(
            "not_implemented", f"{what} raises NotImplementedError: it is not written yet",
            hint="write it in the cell above, run that cell, then run the grader again",
            error=error,
        ) from None
    except _TimeLimit:
        raise Problem(
            "time_limit", f"{what} ran for more than {TIME_LIMIT_S:g} s on a tiny input, and was stopped there",
            example=example, fatal=True,
            hint="look for a loop that never ends (a while whose condition never changes, an index that is "
                 "never advanced) or a recursion without a base case; a right answer takes milliseconds here",
        ) from None
    except _OutputLimit:
        raise Problem(
            "output_limit", f"{what} printed more than {OUTPUT_LIMIT_CHARS:,} characters while being graded, "
            "and was stopped there", example=example, fatal=True,
            hint="remove the print() calls (or print shapes only) before grading: the grader calls your code "
                 "many times",
        ) from None
    except SystemExit as error:
        code = "" if error.code is None else f" with {error.code!r}"
        raise Problem(
            "exits", f"{what} called sys.exit(){code} (or exit(), quit()): it ends the program instead of "
            "returning", example=example, error=error,
            hint="a function hands its result back with return; to stop on bad input, raise an exception "
                 "(raise ValueError(...))",
        ) from None
    except KeyboardInterrupt as error:
        raise Problem(
            "interrupted", f"{what} was interrupted (KeyboardInterrupt) before it returned", example=example,
            error=error, fatal=True,
            hint="if you stopped it: it runs long on these tiny inputs, look for a loop that never ends",
        ) from None
    except Exception as error:  # the reader's code may raise anything; report it, never crash
        raise Problem(
            "raises", f"{what} raised {type(error).__name__}: {_first_line(error)}",
            example=example, hint=_hint_for(error), error=error,
        ) from None
    except BaseException as error:  # noqa: BLE001 (GeneratorExit, a reader's own BaseException ...)
        raise Problem("raises", f"{what} raised {type(error).__name__}: {_first_line(error)}",
                      example=example, error=error) from None
    named = [(names[i] if i < len(names) else f"argument {i + 1}", a) for i, a in enumerate(args)]
    _note_changes(grading, named + list(kwargs.items()), copies + list(kw_copies.values()), what, example)
    return result


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


def expect_cases_close(cases: Iterable[Callable[..., Case]], *, check: str, message: str, hint: str = "",
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
        except Problem as problem:
            if not problem.fatal and any(not close(got, expected, rtol, atol) for got, expected, _, _ in done):
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


def expect_gradients(answer: Callable[[dict[str, Tensor]], Tensor], reference: Callable[[dict[str, Tensor]], Tensor],
                     leaves: dict[str, Tensor], *, example: str, compare: bool,
                     blocked: dict[frozenset[str], tuple[str, str, str]] | None = None) -> None:
    """Raise :class:`Problem` unless a gradient reaches each of ``leaves`` through ``answer`` wherever one
    reaches it through ``reference`` (in float64), and, with ``compare`` (the forward pass was right),
    unless the gradients are the reference's.

    ``answer(leaves)`` and ``reference(leaves)`` return an output; the gradient is that of
    ``(output · w).sum()`` for a fixed random ``w``. ``blocked`` names a known bug by the set of inputs
    no gradient reaches: ``{frozenset({"query", "key"}): (check, message, hint)}``.
    """
    leaves = {name: t.detach().clone().requires_grad_(True) for name, t in leaves.items()}
    got = answer(leaves)
    if not got.requires_grad:
        raise Problem("not_differentiable", "the output is cut off from the inputs: no gradient can flow back to them",
                      example=example, hint="compute it with torch operations on the inputs: .detach(), .data, "
                      ".item(), .numpy(), torch.tensor(...) or torch.no_grad() end the graph")
    weights = torch.randn(got.shape, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    try:
        mine = torch.autograd.grad((got.double() * weights).sum(), list(leaves.values()), allow_unused=True)
    except RuntimeError as error:  # the graph the answer built cannot be differentiated
        in_place = "inplace operation" in str(error)
        raise Problem("gradient_fails", "computing the gradient raises: " + (
            "a tensor autograd needs was changed in place" if in_place else _first_line(error)), example=example,
            hint="write x = x + ... instead of x += ... (and no other in-place change of an input or of a tensor "
                 "used again)" if in_place else "") from None
    doubles = {name: t.detach().double().requires_grad_(True) for name, t in leaves.items()}
    expected = torch.autograd.grad((reference(doubles) * weights).sum(), list(doubles.values()), allow_unused=True)
    missing = [name for name, g, e in zip(leaves, mine, expected)
               if e is not None and bool(e.any()) and (g is None or not bool(g.any()))]
    if missing:
        listed = " and ".join(f"`{name}`" for name in missing)
        check, message, hint = (blocked or {}).get(frozenset(missing), (
            "gradient_blocked", f"no gradient reaches {listed}: training could not change what it depends on",
            "something cuts the graph between it and the output: .detach(), .data, torch.no_grad(), "
            "or a round trip through .item(), .numpy() or torch.tensor(...)"))
        raise Problem(check, message, example=example, hint=hint)
    if not compare:  # a wrong output has a wrong gradient: reported by the comparison already
        return
    for name, g, e in zip(leaves, mine, expected):
        if e is not None and g is not None:
            expect_close(g, e, check="gradient", example=example, rtol=1e-3, atol=1e-4,
                         message=f"the gradient with respect to `{name}` differs from the library's",
                         hint="the forward pass is right, so something changes the backward pass: an in-place "
                              "change of a tensor autograd needs, a .detach() on part of a sum, a custom autograd "
                              "function")


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




def property_check(check: str, run: Callable[[], object], *, example: str, hint: str = "") -> None:
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
