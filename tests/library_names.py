"""Shared by the book's tests: the object a dotted ``transformer_lib`` name refers to."""

from __future__ import annotations

import importlib
from typing import Any


def resolve(dotted: str) -> Any:
    """Import the longest module prefix of ``dotted``, then follow the rest as attributes.

    Raises:
        LookupError: no prefix is a module, or an attribute is missing.
    """
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for attr in parts[cut:]:
            if not hasattr(obj, attr):
                raise LookupError(f"{dotted}: {'.'.join(parts[:cut])} has no {attr!r}")
            obj = getattr(obj, attr)
        return obj
    raise LookupError(f"{dotted}: no module")
