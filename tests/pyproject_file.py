"""pyproject.toml as a dict, on every Python the project supports: ``tomllib`` is in the standard
library from 3.11; on 3.10 its predecessor ``tomli`` (the same parser, a test requirement there)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent


def read_pyproject() -> dict[str, Any]:
    """The whole of this repository's pyproject.toml."""
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
