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


@pytest.fixture(scope="session")
def browser():
    """Headless Chromium, one per test process for every browser test (tests/test_site.py and
    tests/test_site_widget.py): Playwright's sync API starts once per process, and a second one beside
    it refuses to start ("Sync API inside the asyncio loop")."""
    from test_site import CHROMIUM_FLAGS, _find_chromium, _no_browser

    try:
        from playwright.sync_api import sync_playwright
    except ImportError as err:
        _no_browser(f"Playwright is not installed ({err})")
    executable = _find_chromium()
    if executable is None:
        _no_browser("no Chromium at /usr/bin/chromium or on PATH (or at $CHROMIUM)")
    with sync_playwright() as playwright:
        # Playwright starts it headless, with a fresh profile.
        chromium = playwright.chromium.launch(executable_path=executable, args=CHROMIUM_FLAGS)
        yield chromium
        chromium.close()
