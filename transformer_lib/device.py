"""Where and in what precision the library computes: the one place that decides between a CUDA GPU
and the CPU, and in which precision to autocast (bfloat16, float16 with loss scaling, or none)."""

from __future__ import annotations

import contextlib

import torch

__all__ = ["AMP_MODES", "RUNS_ON", "default_device", "parse_device", "amp_dtype", "needs_grad_scaler", "autocast_context"]

# "auto": bf16 autocast on a CUDA GPU with native bf16 (compute capability 8.0 and above), fp16 with
# a gradient scaler on older GPUs (T4, V100), float32 on CPU; "bf16"/"fp16": always that; "off": never.
AMP_MODES = ("auto", "bf16", "fp16", "off")
NATIVE_BF16_CAPABILITY = (8, 0)  # Ampere; torch.cuda.is_bf16_supported() is True on a T4 too (emulated, slow)


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


def amp_dtype(device: torch.device, amp: str = "auto") -> torch.dtype | None:
    """The autocast precision for ``device``: ``torch.bfloat16``, ``torch.float16`` or ``None`` (float32).

    ``"auto"`` reads the GPU's compute capability, not ``torch.cuda.is_bf16_supported()``, which
    says True where bf16 is only emulated (a T4): bf16 from capability 8.0, fp16 below (the trainer
    adds a gradient scaler), float32 on CPU (CPU bf16 is slower than float32 on many processors).

    Example:
        >>> amp_dtype(torch.device("cpu")) is None
        True
    """
    if amp not in AMP_MODES:
        raise ValueError(f"amp must be one of {AMP_MODES}, got {amp!r}")
    if amp == "off" or (amp == "auto" and device.type != "cuda"):
        return None
    native_bf16 = device.type == "cuda" and torch.cuda.get_device_capability(device) >= NATIVE_BF16_CAPABILITY
    if amp == "auto":
        return torch.bfloat16 if native_bf16 else torch.float16
    if amp == "bf16" and device.type == "cuda" and not native_bf16:
        capability = ".".join(map(str, torch.cuda.get_device_capability(device)))
        raise ValueError(f"amp='bf16' but {torch.cuda.get_device_name(device)} (compute capability {capability}) "
                         f"has no native bfloat16 (needs {NATIVE_BF16_CAPABILITY[0]}.0); use amp='fp16' or 'auto'")
    return torch.bfloat16 if amp == "bf16" else torch.float16


def needs_grad_scaler(device: torch.device, amp: str = "auto") -> bool:
    """Whether training in this precision needs loss scaling: fp16's small exponent range loses
    small gradients to zero unless the loss is scaled up first (bf16 and float32 do not)."""
    return amp_dtype(device, amp) == torch.float16


def autocast_context(device: torch.device, amp: str = "auto") -> contextlib.AbstractContextManager:
    """Autocast to :func:`amp_dtype`'s precision, or nothing for float32."""
    dtype = amp_dtype(device, amp)
    return contextlib.nullcontext() if dtype is None else torch.autocast(device.type, dtype=dtype)
