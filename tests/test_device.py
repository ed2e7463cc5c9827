"""Tests of transformer_lib.device: the one place that picks CUDA or the CPU."""

from __future__ import annotations

import pytest
import torch

from transformer_lib.device import default_device


@pytest.mark.parametrize("cuda", [False, True])
def test_default_device_follows_the_gpu(monkeypatch: pytest.MonkeyPatch, cuda: bool) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    assert default_device() == torch.device("cuda" if cuda else "cpu")
