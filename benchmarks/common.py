"""What the benchmarks share: timing side by side, and the measuring helpers of the book.

``sync``, ``timed`` and ``memory_probe`` live in :mod:`transformer_lib.book.measure`, which chapter 7
uses too, so the chapter and the benchmarks measure the same way.
"""

from __future__ import annotations

import statistics
import sys
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from transformer_lib.book.measure import memory_probe, sync, timed  # noqa: E402

__all__ = ["memory_probe", "side_by_side", "sync", "timed"]


def side_by_side(fns: dict[str, Callable[[], object]], device, repeats: int) -> dict[str, float]:
    """Median seconds per call of each function, alternating them so that load changes hit all alike."""
    for fn in fns.values():  # warm-up: allocator, kernels, caches
        fn()
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            times[name].append(timed(fn, device))
    return {name: statistics.median(t) for name, t in times.items()}


def write_json(path: Path | None, result: object) -> None:
    """``result`` as indented JSON at ``path`` (its folder made), if a path was given (``--json``)."""
    if path is None:
        return
    import json

    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {path}")
