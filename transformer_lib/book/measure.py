"""Measuring a call's time and peak memory, for chapters 1 and 7 and ``benchmarks/``.

Peak memory is the extra memory one call needs beyond what is allocated before it:
``torch.cuda.max_memory_allocated`` on a GPU; on Linux CPUs the process's peak resident size
(``VmHWM``, reset before each call through ``/proc/self/clear_refs``); elsewhere it is not measured.
:func:`largest_tensor_bytes` measures the same on every machine, exactly, by another route: the
largest tensor an operation of the call takes in or makes (what a fused kernel keeps inside, its
tiles, is not a tensor and is not seen).
"""

from __future__ import annotations

import ctypes
import gc
import math
import platform
import re
import time
from collections.abc import Callable
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

__all__ = ["sync", "timed", "best_time", "memory_probe", "largest_tensor_bytes"]

MemoryProbe = Callable[[Callable[[], object]], float]


def sync(device: torch.device) -> None:
    """Wait for the GPU's queued work (a no-op on the CPU), so that a clock reads finished work."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(call: Callable[[], object], device: torch.device) -> float:
    """Seconds one call takes, its GPU work included."""
    sync(device)
    start = time.perf_counter()
    call()
    sync(device)
    return time.perf_counter() - start


def best_time(call: Callable[[], object], device: torch.device, repeats: int = 3) -> float:
    """The shortest of ``repeats`` timings of ``call``, in seconds."""
    return min((timed(call, device) for _ in range(repeats)), default=math.inf)


def _resident_mib(field: str) -> float:
    status = Path("/proc/self/status").read_text()
    found = re.search(rf"{field}:\s+(\d+)", status)
    if found is None:
        raise RuntimeError(f"/proc/self/status has no {field} line")
    return int(found.group(1)) / 1024  # kB -> MiB


def _gpu_probe(device: torch.device) -> MemoryProbe:
    def on_gpu(call: Callable[[], object]) -> float:
        sync(device)
        before = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        call()
        sync(device)
        return (torch.cuda.max_memory_allocated(device) - before) / 2**20

    return on_gpu


def _linux_probe() -> MemoryProbe | None:
    clear_refs = Path("/proc/self/clear_refs")
    if platform.system() != "Linux" or not clear_refs.exists():
        return None
    # Memory freed by earlier calls stays resident in malloc's pools and would be reused unseen;
    # malloc_trim (glibc) hands it back to the system first, so the peak counts every page touched.
    trim = getattr(ctypes.CDLL(None), "malloc_trim", None)

    def on_linux(call: Callable[[], object]) -> float:
        gc.collect()
        if trim is not None:
            trim(0)
        clear_refs.write_text("5")  # resets the peak (VmHWM) to the current resident size
        before = _resident_mib("VmRSS")
        call()
        return _resident_mib("VmHWM") - before

    try:
        on_linux(lambda: None)
    except OSError:  # e.g. a container that does not let the process write clear_refs
        return None
    return on_linux


def memory_probe(device: torch.device) -> MemoryProbe | None:
    """A function that runs a call and returns its extra peak memory in MiB; ``None`` where it
    cannot be measured (a CPU that is not Linux's, or one that refuses the peak reset)."""
    return _gpu_probe(device) if device.type == "cuda" else _linux_probe()


class _LargestTensor(TorchDispatchMode):
    """Records the size of the largest tensor that any operation takes in or returns."""

    def __init__(self) -> None:
        super().__init__()
        self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for value in tree_flatten((args, kwargs, out))[0]:
            if isinstance(value, torch.Tensor):
                self.largest = max(self.largest, value.numel() * value.element_size())
        return out


def largest_tensor_bytes(call: Callable[[], object]) -> int:
    """Run ``call`` and return the size in bytes of the largest tensor that one of its operations
    took in or made: what the call must hold at once, at least. Unlike :func:`memory_probe` it is
    exact and the same on every machine, and it does not see a fused kernel's internal tiles.
    """
    with _LargestTensor() as watch:
        call()
    return watch.largest
