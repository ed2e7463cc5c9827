"""Ctrl-C and SIGTERM during training: finish the current update, checkpoint, stop; a second one stops at once.

:class:`StopOnSignal` turns the first SIGINT (Ctrl-C) or SIGTERM (``kill``, a batch system's end of
time) into a request the trainer reads after its current update (``Trainer.stop_requested``); the
command line then saves a checkpoint, prints one line and exits with ``128 + signal`` (130 for
SIGINT, 143 for SIGTERM), as shells expect. A second signal stops at once (:class:`Interrupted`); the
checkpoint on disk is still the last complete one (every save is atomic).
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from types import FrameType, TracebackType
from typing import Any

__all__ = ["Interrupted", "StopOnSignal", "exit_status"]

SIGNALS = (signal.SIGINT, signal.SIGTERM)


def exit_status(signum: int) -> int:
    """The shell's status for a process ended by ``signum``: 130 for SIGINT, 143 for SIGTERM."""
    return 128 + int(signum)


class Interrupted(Exception):
    """Training stopped on a signal; ``status`` is the exit status (130 or 143), ``message`` the one line to print."""

    def __init__(self, signum: int, message: str) -> None:
        super().__init__(message)
        self.status = exit_status(signum)
        self.message = message


class StopOnSignal:
    """While active, the first SIGINT/SIGTERM calls ``request(name)``; a second raises :class:`Interrupted`.

    Only the main thread may install signal handlers; elsewhere (a notebook's worker thread) it does nothing.
    """

    def __init__(self, request: Callable[[str], None]) -> None:
        self.request = request
        self.received: int | None = None
        self._previous: dict[int, Any] = {}

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.received is not None:
            raise Interrupted(signum, f"stopped at once by a second {signal.Signals(signum).name}; the last checkpoint "
                                      "is intact: run the same command to resume from it")
        self.received = signum
        self.request(signal.Signals(signum).name)

    def __enter__(self) -> StopOnSignal:
        if threading.current_thread() is threading.main_thread():
            for signum in SIGNALS:
                self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()
