"""Where a run's numbers come from: the command, the hardware, and the software (versions and the
git commit of this code), as a run's results file records them."""

from __future__ import annotations

import importlib.metadata
import os
import platform
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import torch

from .. import __project__, __version__
from ..distributed import DistributedSetup

__all__ = ["command_line", "hardware", "software", "git_commit"]


def command_line(argv: list[str] | None, processes: DistributedSetup) -> str:
    """The command that started this run, as the results file records it."""
    launcher = f"torchrun --nproc-per-node {processes.world_size} -m" if processes.world_size > 1 else "python -m"
    return f"{launcher} transformer_lib.cli.train " + " ".join(shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:]))


def hardware(device: torch.device, processes: DistributedSetup) -> dict[str, Any]:
    """The device, the GPU and its memory, the CPU count, torch's threads, the number of processes."""
    info: dict[str, Any] = {
        "device": str(device),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "processes": processes.world_size,
    }
    if device.type == "cuda":
        properties = torch.cuda.get_device_properties(device)
        info.update(
            gpu=torch.cuda.get_device_name(device),
            gpu_memory_gib=round(properties.total_memory / 2**30, 1),
            gpus_on_machine=torch.cuda.device_count(),
        )
    return info


def software() -> dict[str, Any]:
    """Versions of everything that can change the numbers, and the commit of this code."""
    versions: dict[str, Any] = {"python": platform.python_version(), __project__: __version__}
    for package in ("torch", "numpy", "sacrebleu", "sacremoses", "spacy", "tqdm"):
        try:
            versions[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            versions[package] = None
    versions["cuda"] = torch.version.cuda
    versions["cudnn"] = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    versions["git_commit"], versions["git_uncommitted_changes"] = git_commit(Path(__file__).resolve().parents[2])
    return versions


def git_commit(repository: Path) -> tuple[str | None, bool | None]:
    """The commit checked out in ``repository`` and whether tracked files changed since; ``None`` s
    outside a git checkout (an installed package) or without git."""
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repository, capture_output=True, text=True, timeout=10)
        changed = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=repository,
                                 capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None, None
    return ((commit.stdout.strip() or None) if commit.returncode == 0 else None,
            bool(changed.stdout.strip()) if changed.returncode == 0 else None)
