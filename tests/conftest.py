"""Shared test set-up: deterministic, single-threaded, CPU."""

from __future__ import annotations

import os

import pytest
import torch

torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1") or 1))


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)
