"""The default device: the one place that decides between a CUDA GPU and the CPU."""

from __future__ import annotations

import torch

__all__ = ["default_device"]


def default_device() -> torch.device:
    """``cuda`` when PyTorch sees a CUDA GPU, else ``cpu``."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")
