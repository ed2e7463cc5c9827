"""Training with several processes: the sharded batch sampler, and DistributedDataParallel on CPU (gloo).

The two-process tests start real processes that talk over the loopback interface, as ``torchrun``
would on one machine with two GPUs (with ``gloo`` instead of NCCL, so they run on any CPU).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from errors import raises
import torch.distributed as dist
import torch.multiprocessing as mp
from hypothesis import given, settings
from hypothesis import strategies as st

from transformer_lib.cli import train
from transformer_lib.batching import BucketBatchSampler, make_loader
from transformer_lib.tokenizers import SymbolTokenizer
from transformer_lib.toy_tasks import toy_task, toy_vocab
from transformer_lib.model import Transformer
from transformer_lib.config import TransformerConfig
from transformer_lib.checkpoint import checkpoint_metadata, load_checkpoint
from transformer_lib.distributed import DistributedSetup, setup_distributed, teardown_distributed
from transformer_lib.trainer import TrainConfig, Trainer

# --- the sampler: every process the same number of batches, every example exactly once ----------


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(1, 300),
    batch_size=st.integers(1, 40),
    world_size=st.integers(1, 5),
    bucket=st.booleans(),
    shuffle=st.booleans(),
    epoch=st.integers(0, 3),
    seed=st.integers(0, 1000),
)
def test_slices_of_each_global_batch_cover_it_exactly_once(n, batch_size, world_size, bucket, shuffle, epoch, seed) -> None:
    lengths = torch.randint(1, 30, (n,), generator=torch.Generator().manual_seed(seed)).tolist()
    if batch_size < world_size or n < world_size:
        with raises(ValueError, 'num_replicas'):
            BucketBatchSampler(lengths, batch_size, num_replicas=world_size)
        return
    options = dict(bucket=bucket, shuffle=shuffle, seed=seed, pool_batches=3)
    samplers = [BucketBatchSampler(lengths, batch_size, num_replicas=world_size, rank=r, **options) for r in range(world_size)]
    for sampler in samplers:
        sampler.set_epoch(epoch)
    per_rank = [sampler.batches() for sampler in samplers]
    global_batches = samplers[0].global_batches()

    # Every process gets the same number of batches, the number len() promises.
    assert {len(batches) for batches in per_rank} == {len(global_batches)} == {len(s) for s in samplers}
    # Batch i of every process is a slice of global batch i; together the slices are exactly it.
    for i, batch in enumerate(global_batches):
        slices = [batches[i] for batches in per_rank]
        assert all(len(s) >= 1 for s in slices)
        assert sorted(x for s in slices for x in s) == sorted(batch)
        assert max(map(len, slices)) - min(map(len, slices)) <= 1  # balanced
    # Over the epoch every example is used exactly once: nothing duplicated, nothing lost.
    everything = sorted(x for batches in per_rank for batch in batches for x in batch)
    assert everything == list(range(n))
    # Deterministic given seed and epoch, and the same global batches on every process.
    again = BucketBatchSampler(lengths, batch_size, num_replicas=world_size, rank=world_size - 1, **options)
    again.set_epoch(epoch)
    assert again.batches() == per_rank[-1] and again.global_batches() == global_batches
    # One process sees the global batches themselves (unless a tiny last batch had to be merged).
    single = BucketBatchSampler(lengths, batch_size, **options)
    single.set_epoch(epoch)
    if n % batch_size == 0 or n % batch_size >= world_size:
        assert single.batches() == global_batches


def test_a_last_batch_too_small_to_share_is_merged_not_dropped() -> None:
    sampler = BucketBatchSampler(list(range(9)), 4, shuffle=False, bucket=False, num_replicas=2, rank=0)
    assert sampler.global_batches() == [[0, 1, 2, 3], [4, 5, 6, 7, 8]]  # 9 = 4 + 4 + 1: the 1 joins its neighbour
    assert sampler.batches() == [[0, 2], [4, 6, 8]] and len(sampler) == 2


def test_epochs_differ_and_seeds_matter() -> None:
    lengths = list(range(100))
    a = BucketBatchSampler(lengths, 10, num_replicas=2, rank=1, seed=3)
    first = a.batches()
    a.set_epoch(1)
    assert a.batches() != first
    assert BucketBatchSampler(lengths, 10, num_replicas=2, rank=1, seed=4).batches() != first


@pytest.mark.parametrize(("kwargs", "named"), [
    (dict(num_replicas=0), ["num_replicas", 0]),
    (dict(num_replicas=2, rank=2), ["rank", "[0, 1]", 2]),
    (dict(num_replicas=2, rank=-1), ["rank", -1]),
    (dict(num_replicas=8), ["batch_size=4", "num_replicas=8"]),
])
def test_sampler_rejects_bad_process_settings(kwargs, named) -> None:
    with raises(ValueError, *named):
        BucketBatchSampler(list(range(50)), 4, **kwargs)


def test_without_torchrun_there_is_one_process(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    setup = setup_distributed("cpu")
    assert setup == DistributedSetup() and setup.is_main and not dist.is_initialized()
    teardown_distributed(setup)  # nothing to tear down


# --- two processes, gloo -------------------------------------------------------------------------

N_STEPS, STOP_AT = 6, 3  # 64 pairs in global batches of 16: 4 per epoch, so 6 steps cross an epoch


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _model(dropout: float) -> Transformer:
    torch.manual_seed(0)
    config = TransformerConfig.from_preset(
        "tiny", src_vocab_size=12, tgt_vocab_size=12, d_model=32, n_heads=2, d_ff=64,
        n_encoder_layers=1, n_decoder_layers=1, dropout=dropout,
    )
    return Transformer(config).double()  # float64: what differs between runs is rounding only


def _trainer(folder: Path | None, world_size: int, rank: int, max_steps: int, dropout: float,
             batches_per_update: int = 1) -> Trainer:
    train_data, heldout = toy_task("reverse", 64, 24, n_symbols=8, longest=7, seed=1)
    shard = dict(num_replicas=world_size, rank=rank)
    config = TrainConfig(epochs=None, max_steps=max_steps, schedule="constant", lr=3e-3, warmup_steps=2,
                         log_every=1, eval_every=2, progress=False, batches_per_update=batches_per_update)
    model, symbols = _model(dropout), SymbolTokenizer(toy_vocab(8))  # 12 tokens, the model's vocabulary
    return Trainer(
        model, make_loader(train_data, 16, seed=5, **shard), config,
        val_loader=make_loader(heldout, 8, shuffle=False, **shard), device="cpu",
        checkpoint_path=None if folder is None else folder / "checkpoint.pt",
        metadata=checkpoint_metadata(model.config, symbols, symbols, "reverse"),
    )


def _summary(trainer: Trainer) -> dict:
    return {"params": {k: v.clone() for k, v in trainer.model.state_dict().items()},
            "train": [r["loss"] for r in trainer.history["train"]],
            "val": [(r["loss"], r["exact_match"], r["n_sentences"]) for r in trainer.history["val"]],
            "epochs": [r["train_loss"] for r in trainer.history["epochs"]]}


def _worker(rank: int, world_size: int, port: int, folder: str) -> None:
    """One of the processes: what torchrun would start, with the environment it would set."""
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world_size),
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    setup = setup_distributed("cpu")
    try:
        assert (setup.rank, setup.world_size, setup.backend, setup.created) == (rank, world_size, "gloo", True)
        out = Path(folder)
        # 1. Without dropout, for the comparison with one process; each process is given its own
        #    checkpoint folder here, to see which of them writes.
        plain = _trainer(out / f"plain-rank{rank}", world_size, rank, N_STEPS, dropout=0.0)
        plain.fit()
        # 2. With dropout (each process its own random stream): stop, then resume in a new trainer.
        whole = _trainer(out / "whole", world_size, rank, N_STEPS, dropout=0.1)
        whole.fit()
        _trainer(out / "parts", world_size, rank, STOP_AT, dropout=0.1).fit()
        resumed = _trainer(out / "parts", world_size, rank, N_STEPS, dropout=0.1)
        torch.manual_seed(1234 + rank)  # a different process state: the checkpoint must restore it
        resumed.load_state_dict(load_checkpoint(out / "parts" / "checkpoint.pt"))
        assert resumed.step == STOP_AT
        resumed.fit()
        # 3. Gradient accumulation: two batches per update, the processes' gradients averaged once.
        accumulated = _trainer(None, world_size, rank, N_STEPS // 2, dropout=0.0, batches_per_update=2)
        accumulated.fit()
        runs = (("plain", plain), ("whole", whole), ("resumed", resumed), ("accumulated", accumulated))
        torch.save({name: _summary(t) for name, t in runs}, out / f"rank{rank}.pt")
    finally:
        teardown_distributed(setup)


@pytest.fixture(scope="module")
def two_processes(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict]]:
    folder = tmp_path_factory.mktemp("ddp")
    mp.spawn(_worker, args=(2, _free_port(), str(folder)), nprocs=2, join=True)
    return folder, [torch.load(folder / f"rank{r}.pt", weights_only=True) for r in range(2)]


def test_two_processes_stay_in_sync(two_processes) -> None:
    _, (rank0, rank1) = two_processes
    for run in ("plain", "whole", "resumed", "accumulated"):
        for name, value in rank0[run]["params"].items():
            assert torch.equal(value, rank1[run]["params"][name]), (run, name)  # bit for bit
        # Losses and validation metrics are summed over both processes: the same on each.
        assert rank0[run]["train"] == rank1[run]["train"] and rank0[run]["val"] == rank1[run]["val"]
    assert rank0["plain"]["val"][-1][2] == 24  # the validation covered all 24 held-out pairs, once


def test_only_process_zero_writes(two_processes) -> None:
    folder, _ = two_processes
    assert (folder / "plain-rank0" / "checkpoint.pt").is_file()
    assert not (folder / "plain-rank1").exists()


def test_resuming_two_processes_repeats_the_uninterrupted_run(two_processes) -> None:
    _, ranks = two_processes
    for summary in ranks:
        assert summary["resumed"]["train"] == summary["whole"]["train"]
        assert summary["resumed"]["val"] == summary["whole"]["val"]
        for name, value in summary["whole"]["params"].items():
            assert torch.equal(summary["resumed"]["params"][name], value), name


def test_two_processes_make_the_updates_of_one_on_the_whole_batch(two_processes) -> None:
    """Each process trains on half of every batch; the averaged gradient is the whole batch's.

    Not bit for bit: the halves are padded to their own lengths, the loss is summed in another
    order, and the gradients are added across processes, so float64 rounding differs (~1e-16
    relative per operation). Six Adam updates (lr 3e-3) keep the parameters within 1e-10.
    """
    _, (rank0, _) = two_processes
    single = _trainer(None, 1, 0, N_STEPS, dropout=0.0)
    single.fit()
    one = _summary(single)
    assert one["train"] == pytest.approx(rank0["plain"]["train"], rel=1e-12, abs=0)
    assert one["epochs"] == pytest.approx(rank0["plain"]["epochs"], rel=1e-12, abs=0)
    assert [v[1:] for v in one["val"]] == [v[1:] for v in rank0["plain"]["val"]]
    assert [v[0] for v in one["val"]] == pytest.approx([v[0] for v in rank0["plain"]["val"]], rel=1e-12, abs=0)
    moved = max(float((one["params"][k] - _model(0.0).state_dict()[k]).abs().max()) for k in one["params"])
    assert moved > 1e-3  # training did change the weights, so agreeing is not trivial
    for name, value in one["params"].items():
        torch.testing.assert_close(rank0["plain"]["params"][name], value, rtol=0, atol=1e-10, msg=name)


def test_two_processes_accumulate_the_gradient_of_one_on_the_whole_batches(two_processes) -> None:
    """With batches_per_update=2 each process accumulates its halves of two batches and the gradients
    are averaged once: the updates of one process accumulating the whole batches, to float64 rounding
    (as above; the loss normalised by the tokens of both batches on both processes)."""
    _, (rank0, _) = two_processes
    single = _trainer(None, 1, 0, N_STEPS // 2, dropout=0.0, batches_per_update=2)
    single.fit()
    one = _summary(single)
    assert single.step == N_STEPS // 2 and len(one["train"]) == N_STEPS // 2
    assert one["train"] == pytest.approx(rank0["accumulated"]["train"], rel=1e-12, abs=0)
    for name, value in one["params"].items():
        torch.testing.assert_close(rank0["accumulated"]["params"][name], value, rtol=0, atol=1e-10, msg=name)


# --- the command line under torchrun -------------------------------------------------------------


@pytest.mark.end_to_end
def test_cli_under_torchrun_resumes_a_one_process_run_with_two(tmp_path: Path) -> None:
    """One process trains 4 steps; ``torchrun --nproc-per-node 2`` continues the same run to 8."""
    common = ["--task", "reverse", "--n-train", "400", "--n-heldout", "64", "--longest", "5", "--no-progress",
              "--device", "cpu", "--eval-every", "4", "--log-every", "2", "--target-exact-match", "0", "--out", str(tmp_path)]
    first = train.main([*common, "--max-steps", "4"])
    assert first["distributed"]["world_size"] == 1
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TQDM_DISABLE": "1"}
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
               "-m", "transformer_lib.cli.train", *common, "--max-steps", "8"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300, env=env, cwd=Path(__file__).parents[1])
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.count("resuming from") == 1  # only process 0 prints
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert metrics["distributed"] == {"world_size": 2, "backend": "gloo", "global_batch_size": 64}
    assert metrics["resumed_from_step"] == 4 and metrics["steps"] == 8
    assert metrics["final"]["val"]["n_sentences"] == 64  # the validation set once, not once per process
    assert load_checkpoint(tmp_path / "checkpoint.pt")["step"] == 8
    # no temporary files left (.lock stays: the run's lock, released by the kernel when it ends)
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".") and p.name != ".lock"] == []
