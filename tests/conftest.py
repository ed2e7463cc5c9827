"""Shared test set-up: deterministic, single-threaded, CPU."""

from __future__ import annotations

import os

import pytest
import torch

torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1") or 1))


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)


@pytest.fixture
def no_fastpath():
    """PyTorch's reference layers without their inference fast path.

    nn.TransformerEncoderLayer's fast path uses nested tensors and returns zeros at padded
    positions; comparisons against the reference use the plain math path.
    """
    previous = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)
    yield
    torch.backends.mha.set_fastpath_enabled(previous)


@pytest.fixture
def real_multi30k():
    """The folder with the real Multi30k files (MULTI30K_DIR), all six present.

    Without them the test is skipped, unless REQUIRE_MULTI30K=1 (CI sets it), where it fails: a
    check that silently did not run must not look like a pass.
    """
    from pathlib import Path

    from transformer_lib.multi30k import MULTI30K_ENV, MULTI30K_SHA256

    folder = os.environ.get(MULTI30K_ENV)
    if folder and all((Path(folder) / name).is_file() for name in MULTI30K_SHA256):
        return Path(folder)
    message = f"the Multi30k files are not in {MULTI30K_ENV}={folder!r}"
    if os.environ.get("REQUIRE_MULTI30K") == "1":
        pytest.fail(message + " and REQUIRE_MULTI30K=1")
    pytest.skip(message)
