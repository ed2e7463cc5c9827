"""Where a run's numbers come from: the command, the hardware, and the software (versions and the
source of this code), as a run's results file records them.

The code's source is read from the installed distribution (its version, and ``direct_url.json``, PEP 610:
the URL it was installed from, the git commit of a ``git+`` install, editable or not); git is asked only
when the package runs from its own checkout, never for the repository the working folder or the
environment happens to be in (a wheel installed in a user's project recorded the user's commit).
"""

from __future__ import annotations

import importlib.metadata
import json
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

__all__ = ["command_line", "hardware", "software", "code_source", "git_commit", "OUTPUT_PACKAGES"]

# Every library whose version can change a run's numbers or outputs: the model and its kernels (torch,
# numpy), tokenization (tokenizers: BPE; spacy: words; sacremoses: detokenizing), the model file
# (safetensors), the scores (sacrebleu, jiwer), and the progress bar the logs show (tqdm).
OUTPUT_PACKAGES = ("torch", "numpy", "tokenizers", "spacy", "sacremoses", "safetensors", "sacrebleu", "jiwer", "tqdm")


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
    """Versions of everything that can change the numbers (:data:`OUTPUT_PACKAGES`), and where this code
    came from (:func:`code_source`; its commit also as ``git_commit``)."""
    versions: dict[str, Any] = {"python": platform.python_version(), __project__: __version__}
    for package in OUTPUT_PACKAGES:
        try:
            versions[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            versions[package] = None
    versions["cuda"] = torch.version.cuda
    versions["cudnn"] = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    source = code_source()
    versions["git_commit"], versions["git_uncommitted_changes"] = source["commit"], source["uncommitted_changes"]
    versions["source"] = source
    return versions


def code_source(package_dir: Path | None = None) -> dict[str, Any]:
    """Where the ``transformer_lib`` at ``package_dir`` (default: this one) came from.

    Returns ``{"version", "distribution_version", "installed_from", "editable", "commit",
    "uncommitted_changes", "checkout"}``: the package's ``__version__``; the installed distribution's
    version and ``direct_url.json`` (``None`` s when it was not installed by a PEP 610 installer); the
    commit: the git checkout's when the package runs from its own checkout (a folder whose
    ``pyproject.toml`` names this project, at the top of a git repository), else the ``git+`` install's
    (``vcs_info.commit_id``), else ``None``.
    """
    package_dir = (Path(__file__).resolve().parents[1] if package_dir is None else package_dir.resolve())
    found: dict[str, Any] = {"version": __version__, "distribution_version": None, "installed_from": None,
                             "editable": None, "commit": None, "uncommitted_changes": None, "checkout": None}
    try:
        distribution = importlib.metadata.distribution(__project__)
        found["distribution_version"] = distribution.version
        direct = json.loads(distribution.read_text("direct_url.json") or "null")
    except (importlib.metadata.PackageNotFoundError, json.JSONDecodeError, OSError):
        direct = None
    if isinstance(direct, dict):
        found["installed_from"] = direct.get("url")
        found["editable"] = bool((direct.get("dir_info") or {}).get("editable", False))
        found["commit"] = (direct.get("vcs_info") or {}).get("commit_id")
    root = package_dir.parent
    if _is_own_checkout(root):
        found["checkout"] = str(root)
        found["commit"], found["uncommitted_changes"] = git_commit(root)
    return found


def _is_own_checkout(root: Path) -> bool:
    """``root`` is this project's repository: its ``pyproject.toml`` names the project, and it is the top
    of a git work tree (not a folder inside some other repository)."""
    try:
        if f'name = "{__project__}"' not in (root / "pyproject.toml").read_text(encoding="utf-8"):
            return False
        top = subprocess.run(["git", "rev-parse", "--show-toplevel"], cwd=root, capture_output=True, text=True, timeout=10)
    except (OSError, UnicodeDecodeError, subprocess.SubprocessError):
        return False
    return top.returncode == 0 and Path(top.stdout.strip()).resolve() == root.resolve()


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
