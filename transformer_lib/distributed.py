"""Several processes (one per GPU, started by ``torchrun``): joining and leaving the process group.

:func:`setup_distributed` joins the process group the launcher describes; the
:class:`~transformer_lib.trainer.Trainer` wraps the model in ``DistributedDataParallel`` (:func:`data_parallel`), each
process trains on its slice of every batch (:class:`~transformer_lib.batching.BucketBatchSampler`
with ``num_replicas``), and only process 0 writes files. The updates are those of one process on
the whole batch, up to rounding.
"""

from __future__ import annotations

import inspect
import os
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

__all__ = ["DistributedSetup", "setup_distributed", "teardown_distributed", "get_world_size", "get_rank", "wait_for_all",
           "data_parallel"]

@dataclass(frozen=True)
class DistributedSetup:
    """Where this process stands among the processes training together.

    Attributes:
        rank: this process's index, ``0 <= rank < world_size``; process 0 writes every file.
        world_size: number of processes (1: an ordinary single-process run).
        local_rank: index on this machine; process ``local_rank`` uses GPU ``cuda:local_rank``.
        backend: ``"nccl"`` (CUDA), ``"gloo"`` (CPU), or ``None`` for a single process.
        created: whether :func:`setup_distributed` created the process group (and
            :func:`teardown_distributed` should destroy it).
    """

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    backend: str | None = None
    created: bool = False

    @property
    def is_main(self) -> bool:
        """Whether this is process 0, the one that prints and writes files."""
        return self.rank == 0

    def device(self, device_type: str) -> torch.device:
        """This process's device: ``cuda:local_rank`` for CUDA, else ``device_type`` itself."""
        return torch.device("cuda", self.local_rank) if device_type == "cuda" else torch.device(device_type)


def setup_distributed(device_type: str = "cpu") -> DistributedSetup:
    """Join the process group that ``torchrun`` describes in the environment, if there is one.

    ``torchrun --nproc-per-node N`` starts ``N`` copies of the program and gives each the variables
    ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR`` and ``MASTER_PORT``; the processes meet
    at that address (``init_method="env://"``). Without ``WORLD_SIZE`` (or with ``WORLD_SIZE=1``)
    this is a single process and nothing is set up. A process group that already exists is used
    as it is (and left for its creator to destroy).

    Args:
        device_type: ``"cuda"`` (backend NCCL, one GPU per process: ``cuda:LOCAL_RANK``) or
            ``"cpu"`` (backend gloo).
    """
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if dist.is_available() and dist.is_initialized():
        local_rank = int(os.environ.get("LOCAL_RANK", dist.get_rank()))
        return DistributedSetup(dist.get_rank(), dist.get_world_size(), local_rank, dist.get_backend(), created=False)
    if world_size <= 1:
        return DistributedSetup()
    missing = [name for name in ("RANK", "MASTER_ADDR", "MASTER_PORT") if name not in os.environ]
    if missing:
        raise RuntimeError(f"WORLD_SIZE={world_size} but {missing} are not set; start the processes with torchrun")
    rank = int(os.environ["RANK"])
    local_rank = int(os.environ.get("LOCAL_RANK", rank))
    if device_type == "cuda":
        if local_rank >= torch.cuda.device_count():
            raise RuntimeError(f"LOCAL_RANK={local_rank} but this machine has {torch.cuda.device_count()} GPUs; start at most that many processes per machine")
        torch.cuda.set_device(local_rank)  # before NCCL starts: each process talks through its own GPU
        backend = "nccl"
    else:
        backend = "gloo"
    dist.init_process_group(backend, init_method="env://", rank=rank, world_size=world_size)
    return DistributedSetup(rank, world_size, local_rank, backend, created=True)


def teardown_distributed(setup: DistributedSetup) -> None:
    """Leave the process group, if :func:`setup_distributed` created it."""
    if setup.created and dist.is_initialized():
        dist.destroy_process_group()


def get_world_size() -> int:
    """The number of processes training together (1 without a process group)."""
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def get_rank() -> int:
    """This process's index among them (0 without a process group)."""
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def wait_for_all(device: torch.device) -> None:
    """Wait until every process gets here (a barrier); nothing to wait for in a single process.

    ``device`` is this process's device: NCCL must be told which GPU the process uses.
    """
    if get_world_size() <= 1:
        return
    if device.type == "cuda":
        dist.barrier(device_ids=[device.index])
    else:
        dist.barrier()


def data_parallel(model: torch.nn.Module, device: torch.device) -> torch.nn.Module:
    """``model`` in ``DistributedDataParallel``, which averages the gradients over the processes during
    the backward pass; creating it copies process 0's parameters to every process."""
    from torch.nn.parallel import DistributedDataParallel

    # Our buffers (positional tables) are constants, the same on every process; by default DDP
    # would send process 0's copy before every forward pass. (The option was renamed in PyTorch 2.13.)
    renamed = "forward_sync_buffers" in inspect.signature(DistributedDataParallel).parameters
    no_buffer_sync: dict[str, Any] = {"forward_sync_buffers": False} if renamed else {"broadcast_buffers": False}
    return DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None, **no_buffer_sync)
