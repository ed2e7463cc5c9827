"""What the command lines share: a parser whose usage errors are one line, and the way a user error
(a bad value, a missing file, a diverged run) becomes one line ``error: ...`` and exit status 2."""

from __future__ import annotations

import argparse
import os
import sys
import warnings
from collections.abc import Callable, Sequence
from typing import Any

from ..trainer import TrainingDiverged

__all__ = ["DEBUG_ENV", "CommandLineParser", "run_command"]

# Set to 1 for full tracebacks from the command lines (as --debug does).
DEBUG_ENV = "TRANSFORMER_LIB_DEBUG"


class CommandLineParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose usage errors are one line, ``error: ...``, with exit status 2."""

    def error(self, message: str) -> Any:  # type: ignore[override]
        self.exit(2, f"error: {message} (see {self.prog} --help)\n")


def run_command(run: Callable[[], Any], argv: Sequence[str] | None) -> int:
    """Call ``run()``; a user error (bad value, missing or unreadable file, diverged training) prints
    one line ``error: ...`` and returns 2, a success returns 0. ``--debug`` in ``argv`` (or
    ``TRANSFORMER_LIB_DEBUG=1``) lets the traceback through instead."""
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv or os.environ.get(DEBUG_ENV, "") not in ("", "0")
    caught: list[warnings.WarningMessage] = []
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", UserWarning)
            run()
    except (ValueError, OSError, TrainingDiverged) as error:
        if debug:
            raise
        message = " ".join(str(error).split()) or type(error).__name__
        print(f"error: {message}", file=sys.stderr)
        return 2
    finally:
        for warning in caught:
            print(f"warning: {warning.message}", file=sys.stderr)
    return 0
