"""Tests of transformer_lib.metrics: exact match under teacher forcing equals greedy exact match,
running means, and the teacher-forced evaluation."""

from __future__ import annotations

import math

import pytest
import torch

from transformer_lib.batching import make_loader
from transformer_lib.config import TransformerConfig
from transformer_lib.metrics import RunningMean, evaluate_teacher_forced, exact_match_counts
from transformer_lib.model import Transformer
from transformer_lib.toy_tasks import toy_task


def _tiny_model(vocab_size: int = 12, dropout: float = 0.0, seed: int = 0) -> Transformer:
    torch.manual_seed(seed)
    config = TransformerConfig.from_preset(
        "tiny", src_vocab_size=vocab_size, tgt_vocab_size=vocab_size, d_model=32, n_heads=2, d_ff=64,
        n_encoder_layers=1, n_decoder_layers=1, dropout=dropout,
    )
    return Transformer(config)


@torch.no_grad()
def _greedy(model: Transformer, src: torch.Tensor, steps: int) -> torch.Tensor:
    """The simplest greedy decoder, for the check only (decoding.py has the real one)."""
    tgt = torch.full((src.size(0), 1), 2)
    for _ in range(steps):
        logits = model(src, tgt, *model.masks_for(src, tgt))  # (B, t, V)
        tgt = torch.cat([tgt, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
    return tgt[:, 1:]


# --- metrics -------------------------------------------------------------------------------------


def test_teacher_forced_exact_match_equals_greedy_exact_match() -> None:
    model = _tiny_model().eval()
    src = torch.randint(4, 12, (8, 5))
    greedy = _greedy(model, src, steps=6)  # (B, 6)
    target = greedy.clone()
    target[1::2, 2] = (target[1::2, 2] - 4 + 1) % 8 + 4  # odd rows: one token differs from greedy's
    tgt_in = torch.cat([torch.full((8, 1), 2), target[:, :-1]], dim=1)
    with torch.no_grad():
        logits = model(src, tgt_in, *model.masks_for(src, tgt_in))
    matches, total = exact_match_counts(logits, target)
    per_row = [(logits[i].argmax(-1) == target[i]).all().item() for i in range(8)]
    assert per_row == [(greedy[i] == target[i]).all().item() for i in range(8)] == [True, False] * 4
    assert (matches, total) == (4, 8)


def test_running_mean_weights_by_count_and_resets() -> None:
    meter = RunningMean()
    assert meter.mean == 0.0 and meter.updates == 0
    meter.update(torch.tensor(6.0, dtype=torch.float64), 3)
    meter.update(4.0, 1)
    assert (meter.mean, float(meter.count), meter.updates) == (2.5, 4.0, 2)
    meter.reset()
    assert (meter.mean, float(meter.count), meter.updates) == (0.0, 0.0, 0)


def test_evaluate_reports_loss_perplexity_and_accuracy() -> None:
    model = _tiny_model()
    train, _ = toy_task("copy", 40, 0, n_symbols=8, longest=5)
    metrics = evaluate_teacher_forced(model, make_loader(train, 16, shuffle=False))
    assert metrics["ppl"] == pytest.approx(math.exp(metrics["loss"]))
    assert 0.0 <= metrics["token_accuracy"] <= 1.0 and metrics["n_sentences"] == 40
    assert model.training  # evaluate_teacher_forced puts the model back in the mode it found
