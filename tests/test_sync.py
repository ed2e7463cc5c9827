"""No host synchronisation in a training step or a decoding step.

On a GPU, reading a tensor's value on the host (``.item()``, ``.tolist()``, ``bool(t)`` and so an
``if`` on a tensor, ``int(t)``, ``float(t)``, a ``nonzero`` whose size depends on the data) makes
the CPU wait for the GPU to finish everything queued before it. The library checks its input at the
boundaries and keeps such reads out of the step itself: here every one of those calls raises while
one training step (the trainer's update) and one decoding step (the generation loop's) run on the
CPU. With a CUDA GPU the same steps run again under ``torch.cuda.set_sync_debug_mode("error")``,
which turns any synchronising CUDA call into an error.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import torch

from transformer_lib.batching import collate
from transformer_lib.config import TransformerConfig
from transformer_lib.decoding import decoding_step
from transformer_lib.kv_cache import kv_cache
from transformer_lib.model import Transformer
from transformer_lib.toy_tasks import toy_task, toy_vocab
from transformer_lib.trainer import TrainConfig, Trainer
from transformer_lib.validation import check_token_ids

SYNCHRONISING = ["item", "tolist", "__bool__", "__int__", "__float__", "__index__", "nonzero", "numpy", "unique"]


class HostRead(AssertionError):
    """A tensor's value was read on the host inside a step."""


@contextmanager
def no_host_reads() -> Iterator[None]:
    saved = {name: getattr(torch.Tensor, name) for name in SYNCHRONISING}
    originals = (torch.nonzero, torch.unique)

    def refuse(name: str):
        def read(*args, **kwargs):
            raise HostRead(f"Tensor.{name} read a value on the host inside the step")
        return read

    for name in SYNCHRONISING:
        setattr(torch.Tensor, name, refuse(name))
    torch.nonzero, torch.unique = refuse("nonzero"), refuse("unique")
    try:
        yield
    finally:
        for name, method in saved.items():
            setattr(torch.Tensor, name, method)
        torch.nonzero, torch.unique = originals


def _setup(device: str) -> tuple[Trainer, Transformer, object]:
    vocab = toy_vocab(8)
    train, _ = toy_task("reverse", 64, 0, n_symbols=8, longest=6, seed=0)
    batches = [collate([train[i] for i in range(start, start + 16)]).to(device) for start in range(0, 64, 16)]
    torch.manual_seed(0)
    model = Transformer(TransformerConfig.from_preset("tiny", src_vocab_size=len(vocab), tgt_vocab_size=len(vocab)))
    config = TrainConfig(epochs=1, schedule="cosine", lr=1e-3, warmup_steps=2, progress=False)  # clipping on, label smoothing 0.1
    trainer = Trainer(model, batches, config, device=device)
    trainer.train_step(batches[0])  # the first step may set things up (lazy state, probes); the next ones may not read
    return trainer, model, batches


def _decoding_steps(model: Transformer, batch, steps: int = 3) -> None:
    model.eval()
    src = batch.src
    src_mask = model.masks_for(src)[0]
    with torch.no_grad(), kv_cache(model) as cache:
        memory = model.encode(src, src_mask)
        tokens = torch.full((src.size(0), 1), 2, device=src.device)
        finished = torch.zeros(src.size(0), dtype=torch.bool, device=src.device)
        never = torch.tensor([0, 2], device=src.device)  # <pad> and <bos> are never output
        for step in range(steps):
            tokens, finished, _ = decoding_step(
                model, tokens, finished, lambda logits: logits.argmax(-1), memory=memory, src_mask=src_mask,
                cache=cache, eos_id=3, pad_id=0, eos_allowed=step >= 1, never=never,
            )
    assert tokens.shape == (src.size(0), steps + 1)


def test_a_training_step_and_a_decoding_step_read_nothing_on_the_host() -> None:
    trainer, model, batches = _setup("cpu")
    with no_host_reads():
        for batch in batches[1:3]:
            trainer.train_step(batch)
        _decoding_steps(model, batches[0])
    assert trainer.step == 3


def test_the_check_can_fail() -> None:
    """What the boundaries do (a range check of the ids) is caught inside the guard."""
    with no_host_reads(), pytest.raises(HostRead):
        check_token_ids(torch.tensor([[1, 2]]), "src", vocab_size=5)
    check_token_ids(torch.tensor([[1, 2]]), "src", vocab_size=5)  # and outside it all is well


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU: set_sync_debug_mode exists for CUDA only")
def test_a_training_step_and_a_decoding_step_do_not_synchronise_a_gpu() -> None:
    trainer, model, batches = _setup("cuda")
    _decoding_steps(model, batches[0])  # warm up the decoding path too
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for batch in batches[1:3]:
            trainer.train_step(batch)
        _decoding_steps(model, batches[0])
    finally:
        torch.cuda.set_sync_debug_mode("default")
