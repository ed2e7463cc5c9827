"""What the command lines say, and where: a :mod:`logging` logger per module, set up once per command.

Each module of the library that reports anything has its own logger, ``logging.getLogger(__name__)``,
under the ``transformer_lib`` logger, so a program that imports the library routes, filters or
silences them as it does any library's. A command line sets that logger up (:func:`command_logging`):

- the console: ``info`` records on the command's stream for them (standard output for
  ``transformer-train``, whose results are files; standard error for ``transformer-translate``, whose
  standard output is the translations), warnings and errors on standard error as ``warning: ...`` and
  ``error: ...``; ``--quiet`` keeps only those, ``--log-level`` sets the threshold;
- ``--log-file FILE``: every record at ``--log-level`` or above, with its time, level and logger,
  appended to ``FILE`` (whatever ``--quiet`` hides from the console), and the error that ended the run;
- training's progress: a bar (tqdm) on a terminal only; otherwise (``2> log``, a batch system's file)
  a plain line every ``--log-every`` updates (:func:`progress_line`), never a carriage-return redraw.
  The plain lines go to the log file in either case.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

__all__ = ["LEVELS", "ROOT_LOGGER", "command_logging", "progress_line", "show_bar"]

ROOT_LOGGER = "transformer_lib"
LEVELS = ("debug", "info", "warning", "error")
# A record with this attribute set is a training progress line: on the console only where no bar shows it.
PROGRESS = "progress_line"
_FILE_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def show_bar(quiet: bool, no_progress: bool = False, stream: IO[str] | None = None) -> bool:
    """Whether training shows a progress bar: on a terminal only (standard error, where tqdm draws),
    unless ``--quiet`` or ``--no-progress`` (``TQDM_DISABLE=1`` hides it too: tqdm reads it)."""
    stream = sys.stderr if stream is None else stream
    isatty = getattr(stream, "isatty", None)
    return not quiet and not no_progress and callable(isatty) and bool(isatty())


def progress_line(record: dict[str, float], total_steps: int) -> str:
    """A training log record as one plain line (what a file gets instead of a progress bar)."""
    return (f"step {int(record['step']):>6}/{total_steps}  loss {record['loss']:.3f}  lr {record['lr']:.2e}  "
            f"{record['tokens_per_s']:,.0f} tokens/s")


class _Console(logging.Handler):
    """Records on the console, on the streams as they are when each is written (a test or a notebook may
    swap them), through ``tqdm.write`` so a progress bar is redrawn below the line instead of broken."""

    def __init__(self, info_stream: str, prefix_info: bool, hide_progress: bool) -> None:
        super().__init__()
        self.info_stream, self.prefix_info, self.hide_progress = info_stream, prefix_info, hide_progress

    def emit(self, record: logging.LogRecord) -> None:
        if self.hide_progress and getattr(record, PROGRESS, False):
            return
        try:
            message = record.getMessage()
            if record.levelno >= logging.WARNING or self.prefix_info:
                message = f"{record.levelname.lower()}: {message}"
            low = record.levelno < logging.WARNING and self.info_stream == "stdout"
            stream = sys.stdout if low else sys.stderr
            from tqdm import tqdm

            tqdm.write(message, file=stream)
            stream.flush()
        except Exception:  # noqa: BLE001 - logging's own rule: a failing handler never stops the program
            self.handleError(record)


@contextmanager
def command_logging(quiet: bool = False, log_file: str | Path | None = None, log_level: str = "info", *,
                    info_stream: str = "stdout", prefix_info: bool = False, bar: bool = False) -> Iterator[logging.Logger]:
    """Set up the ``transformer_lib`` logger for one command, and take it down after.

    Args:
        quiet: the console gets warnings and errors only.
        log_file: append every record at ``log_level`` or above to this file.
        log_level: ``debug``, ``info``, ``warning`` or ``error``.
        info_stream: ``"stdout"`` or ``"stderr"``, where ``info`` records go.
        prefix_info: write ``info: `` before an ``info`` record (warnings and errors always say theirs).
        bar: a progress bar shows training's progress, so its plain lines stay off the console.

    An error that ends the command (it leaves the block) is written to the log file too.
    """
    logger = logging.getLogger(ROOT_LOGGER)
    level = getattr(logging, log_level.upper())
    console = _Console(info_stream, prefix_info, hide_progress=bar or quiet)
    console.setLevel(max(level, logging.WARNING) if quiet else level)
    handlers: list[logging.Handler] = [console]
    file = None
    if log_file is not None:
        try:
            file = logging.FileHandler(log_file, encoding="utf-8")
        except OSError as error:
            raise OSError(f"--log-file {log_file}: cannot write it ({error.strerror or error})") from None
        file.setLevel(level)
        file.setFormatter(logging.Formatter(_FILE_FORMAT))
        handlers.append(file)
    saved = logger.handlers[:], logger.level, logger.propagate
    logger.handlers, logger.propagate = handlers, False
    logger.setLevel(level)
    try:
        yield logger
    except BaseException as error:
        if file is not None:
            message = " ".join(str(error).split()) or type(error).__name__
            file.handle(logger.makeRecord(ROOT_LOGGER, logging.ERROR, "", 0, f"stopped: {message}", (), None))
        raise
    finally:
        for handler in handlers:
            handler.close()
        logger.handlers, logger.propagate = saved[0], saved[2]
        logger.setLevel(saved[1])
