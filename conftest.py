"""Root pytest configuration: names available to the library's docstring examples (doctests)."""

import pytest
import torch


@pytest.fixture(autouse=True)
def _doctest_torch(doctest_namespace: dict) -> None:
    doctest_namespace["torch"] = torch
