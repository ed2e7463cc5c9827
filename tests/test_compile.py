"""Bounded compilation: ``--compile`` trains on few batch shapes, without graph breaks, and stops
compiling after the first epoch.

Counted with ``torch._dynamo``'s counters on the CPU: the ``aot_eager`` backend traces what a GPU
run compiles (the forward pass and, through AOTAutograd, the backward pass) without generating
kernels, so no compiler and no GPU are needed.
"""

from __future__ import annotations

import functools

import pytest
import torch

from transformer_lib.batching import TranslationData, make_loader
from transformer_lib.config import TransformerConfig
from transformer_lib.model import Transformer
from transformer_lib.trainer import Trainer, TrainConfig

dynamo = pytest.importorskip("torch._dynamo")
from torch._dynamo.utils import counters  # noqa: E402

PAD_MULTIPLE = 16  # what the train command pads to with --compile (cli/train.py)
MAX_SHAPES = 8  # distinct batch shapes an epoch may have (issue 48)


def multi30k_like(n: int, seed: int = 0) -> TranslationData:
    """Sentence pairs with Multi30k's spread of lengths (mostly 8-20 tokens, a few up to 40),
    the target's length near the source's."""
    g = torch.Generator().manual_seed(seed)
    src, tgt = [], []
    for _ in range(n):
        s = _length(g)
        t = max(2, min(40, s + int(torch.randint(-3, 4, (), generator=g))))
        src.append(torch.randint(4, 50, (s,), generator=g).tolist())
        tgt.append(torch.randint(4, 40, (t,), generator=g).tolist())
    return TranslationData(src, tgt)


def _length(g: torch.Generator) -> int:
    """One sentence length: the sum of four uniform draws (a bell around 13), one in 20 up to 40."""
    if int(torch.randint(20, (), generator=g)) == 0:
        return int(torch.randint(20, 41, (), generator=g))
    return 2 + int(torch.randint(0, 6, (4,), generator=g).sum())


def shapes(loader) -> set[tuple[int, ...]]:
    return {(*batch.src.shape, batch.tgt_in.size(1)) for batch in loader}


def test_padding_to_multiples_bounds_the_shapes_an_epoch() -> None:
    data = multi30k_like(2000)
    unpadded = make_loader(data, 64, pad_multiple=1)
    padded = make_loader(data, 64, pad_multiple=PAD_MULTIPLE)
    assert len(shapes(padded)) <= MAX_SHAPES < len(shapes(unpadded))  # the bound needs the padding
    for epoch in range(3):
        padded.batch_sampler.set_epoch(epoch)
        assert all(length % PAD_MULTIPLE == 0 for shape in shapes(padded) for length in shape[1:])


def test_compiled_training_has_no_graph_breaks_and_no_recompiles_after_the_first_epoch(monkeypatch: pytest.MonkeyPatch) -> None:
    torch.manual_seed(0)
    config = TransformerConfig(src_vocab_size=50, tgt_vocab_size=40, d_model=16, n_heads=2, n_encoder_layers=1,
                               n_decoder_layers=1, d_ff=32, max_len=64, dropout=0.1, attn_dropout=0.1)
    loader = make_loader(multi30k_like(600), 64, pad_multiple=PAD_MULTIPLE)
    monkeypatch.setattr(torch, "compile", functools.partial(torch.compile, backend="aot_eager"))
    dynamo.reset()
    counters.clear()
    trainer = Trainer(Transformer(config), loader, TrainConfig(epochs=2, warmup_steps=10, progress=False, compile=True),
                      device="cpu")
    assert trainer.train_module is not trainer.model  # compiled

    def epoch(number: int) -> set[tuple[int, ...]]:
        loader.batch_sampler.set_epoch(number)
        seen = set()
        for batch in loader:
            trainer.train_step(batch)
            seen.add((*batch.src.shape, batch.tgt_in.size(1)))
        return seen

    first = epoch(0)
    graphs_after_first = counters["stats"]["unique_graphs"]
    second = epoch(1)
    assert 1 < len(first) <= MAX_SHAPES and len(second) <= MAX_SHAPES
    assert sum(counters["graph_break"].values()) == 0, dict(counters["graph_break"])
    assert 0 < graphs_after_first <= len(first)  # at most one graph per shape (fewer: dynamic shapes)
    assert counters["stats"]["unique_graphs"] == graphs_after_first, "recompiled in the second epoch"
    assert torch.isfinite(torch.stack([p.detach().sum() for p in trainer.model.parameters()])).all()
