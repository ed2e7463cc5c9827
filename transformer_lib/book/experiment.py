"""One switch for how big the book's experiments are: the ``TRANSFORMER_BOOK_PROFILE`` variable.

- ``fast``: small models and data, every chapter well under a minute on a 2-core laptop CPU.
  This is what CI and ``make book`` use on a machine without a GPU.
- ``full``: the sizes the text discusses (paper-sized experiments, full Multi30k training).

Unset, it is ``full`` when a CUDA GPU is present and ``fast`` otherwise, so the same notebook runs
unchanged on a laptop, in CI and on Colab with a GPU.

Example:
    >>> steps = pick(fast=200, full=5000)   # in a chapter
"""

from __future__ import annotations

import os
from typing import Literal, TypeVar

import torch

__all__ = ["PROFILE_ENV", "current_profile", "pick"]

PROFILE_ENV = "TRANSFORMER_BOOK_PROFILE"
Profile = Literal["fast", "full"]
T = TypeVar("T")


def current_profile() -> Profile:
    """``fast`` or ``full``, from the environment or, unset, from whether CUDA is available."""
    value = os.environ.get(PROFILE_ENV, "").strip().lower()
    if value == "":
        return "full" if torch.cuda.is_available() else "fast"
    if value not in ("fast", "full"):
        raise ValueError(f"{PROFILE_ENV}={value!r} is not a profile; use 'fast' or 'full'")
    return value  # type: ignore[return-value]


def pick(fast: T, full: T) -> T:
    """The value for the current profile."""
    return fast if current_profile() == "fast" else full

