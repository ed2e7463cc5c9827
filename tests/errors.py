"""Shared by the tests of errors: check the exception's type and the values it must name, not its wording."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest


@contextmanager
def raises(kind: type[BaseException], *named: Any) -> Iterator[Any]:
    """Like ``pytest.raises(kind)``, and the message must contain each of ``named`` (the offending
    value, the limit, the option's name), as ``str()`` writes it; the prose around them is free.

    Example::

        with raises(ValueError, "d_model", 10, "n_heads", 4):
            TransformerConfig(..., d_model=10, n_heads=4)
    """
    with pytest.raises(kind) as info:
        yield info
    message = str(info.value)
    missing = [value for value in named if str(value) not in message]
    assert not missing, f"{kind.__name__}({message!r}) does not name {missing}"
