"""Where and in what precision the library computes: the one place that decides between a CUDA GPU
and the CPU, and whether to autocast to bfloat16."""

from __future__ import annotations

import contextlib

import torch

__all__ = ["AMP_MODES", "RUNS_ON", "default_device", "parse_device", "autocast_context"]

# "auto": bf16 autocast on a CUDA GPU that supports it, float32 elsewhere; "bf16": always; "off": never.
AMP_MODES = ("auto", "bf16", "off")


def default_device() -> torch.device:
    """``cuda`` when PyTorch sees a CUDA GPU, else ``cpu``."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


# The device types a model can be trained and run on here.
RUNS_ON = ("cpu", "cuda", "mps")


def parse_device(name: str | torch.device) -> torch.device:
    """``name`` as a device this machine has (``"auto"``: :func:`default_device`); a ``ValueError``
    naming it if it is no device, or a GPU the machine lacks.

    Example:
        >>> parse_device("cpu")
        device(type='cpu')
    """
    if name == "auto":
        return default_device()
    try:
        device = torch.device(name)
    except (RuntimeError, TypeError) as error:
        raise ValueError(f"device {name!r} is not a device ({error}); use auto, cpu, cuda or cuda:N") from None
    if device.type not in RUNS_ON:  # "meta" holds shapes only, others need backends this library does not use
        raise ValueError(f"device {name!r}: this library runs on {', '.join(RUNS_ON)} (or auto), not {device.type}")
    if device.type == "mps" and not torch.backends.mps.is_available():
        raise ValueError(f"device {name!r}: this machine has no Apple GPU (torch.backends.mps.is_available() is False); use cpu")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {name!r}: this machine has no CUDA GPU (torch.cuda.is_available() is False); use cpu")
    if device.type == "cuda" and device.index is not None and device.index >= torch.cuda.device_count():
        count = torch.cuda.device_count()
        raise ValueError(f"device {name!r}: this machine has {count} GPU(s), cuda:0 to cuda:{count - 1}")
    return device


def autocast_context(device: torch.device, amp: str = "auto") -> contextlib.AbstractContextManager:
    """bf16 autocast on a CUDA GPU that supports it (``amp="auto"`` or ``"bf16"``), else nothing.

    bf16 has float32's exponent range, so unlike fp16 it needs no loss scaling. On CPU, ``"auto"``
    means float32 (CPU bf16 is slower than float32 on many processors); ``"bf16"`` forces it.
    """
    if amp not in AMP_MODES:
        raise ValueError(f"amp must be one of {AMP_MODES}, got {amp!r}")
    if amp == "off":
        return contextlib.nullcontext()
    if device.type == "cuda":
        if torch.cuda.is_bf16_supported():
            return torch.autocast("cuda", dtype=torch.bfloat16)
        if amp == "bf16":
            raise ValueError(f"amp='bf16' but {torch.cuda.get_device_name(device)} does not support bfloat16")
        return contextlib.nullcontext()
    if amp == "bf16":
        return torch.autocast(device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()
