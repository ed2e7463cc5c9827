"""A run's output folder: one run at a time (a lock), earlier results moved aside (never deleted), and
the results file written atomically."""

from __future__ import annotations

import itertools
import json
import math
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

from ..checkpoint import atomic_write

__all__ = ["EARLIER_RESULTS", "lock_folder", "unlock_folder", "move_aside", "write_json", "json_safe"]

# Results an earlier run left in --out: a fresh run or --restart moves them aside, never deletes them.
EARLIER_RESULTS = ("checkpoint.pt", "model.pt", "weights", "metrics.json", "metrics.jsonl", "tensorboard", "loss.png")


def lock_folder(out: Path) -> Any:
    """Hold ``OUT/.lock`` while this run lives: a second run into the same folder is refused.

    ``filelock`` takes an operating-system lock (``flock`` on POSIX, ``msvcrt`` on Windows), which
    the system releases when the process ends, however it ends (SIGKILL too): a crashed run never
    leaves the folder locked.
    """
    if out.is_symlink() and not out.exists():
        raise ValueError(f"--out {out} is a symbolic link to {os.readlink(out)}, which does not exist: "
                         "create that folder, or give another --out")
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {out} is a file, not a folder: give a folder for the run's files")
    out.mkdir(parents=True, exist_ok=True)
    lock = FileLock(out / ".lock")
    try:
        lock.acquire(timeout=0)
    except Timeout:
        raise ValueError(f"another run is writing to {out}; wait for it to end, or use another --out") from None
    for stale in [*out.glob(".*.tmp"), *(out / "weights").glob(".*.tmp")]:
        stale.unlink(missing_ok=True)  # left by a save that was killed; no other run writes here
    return lock


def unlock_folder(lock: Any, out: Path, remove_if_empty: bool) -> None:
    """Release the lock; a folder this run created and left empty (it never started) is removed."""
    if lock is not None:
        lock.release()
    if remove_if_empty and out.is_dir() and {p.name for p in out.iterdir()} <= {".lock"}:
        (out / ".lock").unlink(missing_ok=True)
        out.rmdir()


def move_aside(out: Path, names: list[str], say: Callable[[str], None]) -> None:
    """Move earlier results into a new ``OUT/previous-YYYYmmdd-HHMMSS`` folder instead of deleting them."""
    present = [out / name for name in names if (out / name).exists()]
    if not present:
        return
    stamp = time.strftime("%Y%m%d-%H%M%S")
    aside = out / f"previous-{stamp}"
    for n in itertools.count(2):
        if not aside.exists():
            break
        aside = out / f"previous-{stamp}-{n}"
    aside.mkdir()
    for path in present:
        os.replace(path, aside / path.name)
    say(f"moved the earlier results ({', '.join(p.name for p in present)}) to {aside}")


def json_safe(value: Any) -> Any:
    """``value`` with every NaN or infinity as ``None``: JSON has no such numbers (``null`` it has)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: json_safe(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(item) for item in value]
    return value


def write_json(path: Path, value: Any) -> None:
    """``value`` (NaN and infinities as ``null``) as indented JSON, written atomically."""
    text = json.dumps(json_safe(value), indent=2, allow_nan=False) + "\n"
    atomic_write(path, lambda f: f.write(text.encode("utf-8")))
