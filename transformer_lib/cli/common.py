"""What the command lines share: a parser whose usage errors are one line, ``--version`` and
``--threads``, messages that never break a progress bar, and the way an error becomes one line
``error: ...`` and an exit status (:data:`EXIT_STATUSES`): 2 for a usage error (the command line
itself: an unknown or abbreviated option, a value out of its bounds, options that do not go
together), 1 for a run that failed (a missing or unreadable file, missing data, a diverged run),
130 and 143 for Ctrl-C and SIGTERM."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import torch

from .. import __project__, __version__
from ..trainer import TrainingDiverged
from ..validation import check_int
from .interrupt import Interrupted, exit_status

__all__ = [
    "EXIT_STATUSES",
    "EXIT_EPILOG",
    "UsageError",
    "DEBUG_ENV",
    "MAX_THREADS",
    "THREADS_ENV",
    "THREADS_DEFAULT_TEXT",
    "CommandLineParser",
    "environment_threads",
    "add_version",
    "available_cores",
    "default_threads",
    "check_at_most",
    "set_threads",
    "say",
    "run_command",
]

# A bound for --threads: more than any machine this runs on has cores to give one process.
MAX_THREADS = 1024
# The variable every OpenMP program reads for its thread count; set, it is --threads' default.
THREADS_ENV = "OMP_NUM_THREADS"
# What --help says of --threads' default (both command lines).
THREADS_DEFAULT_TEXT = (f"${THREADS_ENV} when set, else 1 for a tiny model (d_model <= 64), whose matrices are too "
                        "small to share out, else up to 4 of the cores this process may use")

# Set to 1 for full tracebacks from the command lines (as --debug does); 0, false, no or off leave them off.
DEBUG_ENV = "TRANSFORMER_LIB_DEBUG"
DEBUG_ON = ("1", "true", "yes", "on")


# The exit statuses of both command lines, as scripts read them.
EXIT_STATUSES = {0: "success", 1: "the run failed (a missing or unreadable file, missing data, a diverged run)",
                 2: "usage error (an unknown option, a value out of its bounds, options that do not go together)",
                 130: "interrupted (Ctrl-C)", 143: "terminated (SIGTERM)"}
EXIT_EPILOG = "exit status: " + "; ".join(f"{status} {meaning}" for status, meaning in EXIT_STATUSES.items()) + "."


class UsageError(ValueError):
    """A command line that cannot run as given (exit status 2), found after argparse: an option's value out
    of its bounds, options that do not go together, a --config file that does not hold options."""


class CommandLineParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose usage errors are one line, ``error: ...``, with exit status 2, and
    whose options are never abbreviated (``--warmup`` is an error, not ``--warmup-steps``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> Any:
        self.exit(2, f"error: {message} (see {self.prog} --help)\n")


def add_version(parser: argparse.ArgumentParser) -> None:
    """``--version``: this library's version and project, and the PyTorch it runs on."""
    parser.add_argument("--version", action="version",
                        version=f"%(prog)s {__version__} ({__project__}; torch {torch.__version__})")


def available_cores() -> int:
    """The CPU cores this process may run on (its affinity, where the system tells; else all)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


def environment_threads() -> int | None:
    """``OMP_NUM_THREADS`` as a thread count (its first number: OpenMP allows one per nesting level),
    at most :data:`MAX_THREADS`; ``None`` when unset or not a positive whole number."""
    first = os.environ.get(THREADS_ENV, "").split(",")[0].strip()
    if not first.isdigit() or int(first) < 1:
        return None
    return min(int(first), MAX_THREADS)


def default_threads(small_model: bool) -> int:
    """The default of ``--threads``: ``OMP_NUM_THREADS`` when it is set (as every OpenMP program and
    PyTorch itself read it), else 1 for a small model, else up to 4 of the cores this process may
    use (:func:`available_cores`: its CPU affinity, as ``taskset`` or a batch system set it).

    A small model's matrices are too small to split across threads, and on a shared machine extra
    threads wait on each other: on a loaded 2-core machine 150 updates of the reverse task took 106 s
    with one thread and 499 s with two (``benchmarks/bench_threads.py``). Larger models gain from a few
    threads (the Multi30k preset: 1.13x the throughput at 2 threads against 1, ``benchmarks/``), rarely from more.
    """
    chosen = environment_threads()
    if chosen is not None:
        return chosen
    return 1 if small_model else max(1, min(4, available_cores()))


def check_at_most(name: str, value: Any, maximum: float | None) -> None:
    """The upper bound of an option (``None``: no bound; a ``None`` value: not set)."""
    if maximum is not None and value is not None and value > maximum:
        raise ValueError(f"{name} must be at most {maximum:,}, got {value!r}")


def set_threads(threads: int) -> None:
    """Use ``threads`` CPU threads for PyTorch's operators (``--threads``), checked against its bound."""
    check_int("--threads", threads, minimum=1)
    check_at_most("--threads", threads, MAX_THREADS)
    torch.set_num_threads(threads)


def say(message: str) -> None:
    """Print one message line without breaking a progress bar (``tqdm.write`` when a bar is shown)."""
    from tqdm import tqdm

    tqdm.write(message, file=sys.stdout)
    sys.stdout.flush()


def _terminated(signum: int, frame: Any) -> None:
    raise Interrupted(signum, "terminated")


def run_command(run: Callable[[], Any], argv: Sequence[str] | None) -> int:
    """Call ``run()``; an error prints one line ``error: ...`` and returns its status: 2 for a
    :class:`UsageError`, 1 for a failed run (another ``ValueError``, an ``OSError``, a diverged run, a
    library of an extra that is not installed: spaCy for word-level tokenization);
    Ctrl-C returns 130 and SIGTERM 143 (training first saves a checkpoint); a success returns 0.
    ``--debug`` in ``argv`` (or ``TRANSFORMER_LIB_DEBUG=1``) lets the traceback through instead."""
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv or os.environ.get(DEBUG_ENV, "").strip().lower() in DEBUG_ON
    caught: list[warnings.WarningMessage] = []
    main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _terminated) if main_thread else None
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", UserWarning)
            run()
    except Interrupted as stopped:  # a signal: the one line says what was saved
        print(stopped.message, file=sys.stderr)
        return stopped.status
    except KeyboardInterrupt:  # Ctrl-C outside training (reading data, translating): nothing to save
        if debug:
            raise
        print("interrupted", file=sys.stderr)
        return exit_status(signal.SIGINT)
    except (ValueError, OSError, TrainingDiverged, ImportError) as error:  # ImportError: an extra not installed
        if debug:
            raise
        message = " ".join(str(error).split()) or type(error).__name__
        print(f"error: {message}", file=sys.stderr)
        return 2 if isinstance(error, UsageError) else 1
    finally:
        if main_thread:
            signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)
        for warning in caught:
            print(f"warning: {warning.message}", file=sys.stderr)
    return 0
