"""Tests of transformer_lib.schedules: the paper's schedule, warm-up + cosine, the one table."""

from __future__ import annotations

import pytest
import torch
from errors import raises

from transformer_lib.schedules import SCHEDULES, make_scheduler, noam_rate, warmup_cosine_rate
from transformer_lib.schedules import make_optimizer

# --- schedules -----------------------------------------------------------------------------------


@pytest.mark.parametrize("warmup", [1, 10, 400, 4000])
def test_noam_peaks_exactly_at_the_warmup_step(warmup: int) -> None:
    rates = [noam_rate(step, 512, warmup) for step in range(1, 3 * warmup + 2)]
    assert rates.index(max(rates)) + 1 == warmup
    assert max(rates) == pytest.approx((512 * warmup) ** -0.5)


def test_noam_matches_the_paper() -> None:
    assert noam_rate(4000, 512, 4000) == pytest.approx(6.988e-4, rel=1e-3)  # base model peak
    assert noam_rate(100, 512, 4000) == pytest.approx(512**-0.5 * 100 * 4000**-1.5)  # linear warm-up
    assert noam_rate(16000, 512, 4000) == pytest.approx(noam_rate(4000, 512, 4000) / 2)  # 1/sqrt(step) decay
    with raises(ValueError, '1'):
        noam_rate(0, 512)


@pytest.mark.parametrize(("schedule", "peak"), [("noam", None), ("noam", 2e-3), ("cosine", 1e-3), ("constant", 5e-4)])
def test_scheduler_applies_the_rate_to_each_update(schedule: str, peak: float | None) -> None:
    model = torch.nn.Linear(3, 3)
    optimizer = make_optimizer(model)
    scheduler = make_scheduler(optimizer, schedule, warmup_steps=5, peak_lr=peak, d_model=64, total_steps=20)
    used = []
    for _ in range(20):
        used.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    assert used.index(max(used)) + 1 == 5  # the peak is the 5th update's rate
    expected_peak = peak if peak is not None else (64 * 5) ** -0.5
    assert max(used) == pytest.approx(expected_peak)
    if schedule == "noam":
        assert used == pytest.approx([noam_rate(s, 64, 5) * (1 if peak is None else peak / (64 * 5) ** -0.5) for s in range(1, 21)])
    if schedule == "cosine":
        assert used == pytest.approx([warmup_cosine_rate(s, peak, 5, 20) for s in range(1, 21)])
        assert used[-1] == pytest.approx(0.0) and all(a >= b for a, b in zip(used[4:], used[5:]))


def test_scheduler_rejects_unknown_or_incomplete_settings() -> None:
    optimizer = make_optimizer(torch.nn.Linear(2, 2))
    with raises(ValueError, "'linear'"):
        make_scheduler(optimizer, "linear", warmup_steps=1)
    with raises(ValueError, 'd_model'):
        make_scheduler(optimizer, "noam", warmup_steps=1)
    with raises(ValueError, 'total_steps=3', 'warmup_steps=5'):
        warmup_cosine_rate(1, 1e-3, 5, 3)


def test_optimizer_decays_matrices_only() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.LayerNorm(4))
    decayed, plain = make_optimizer(model, weight_decay=0.1).param_groups
    assert decayed["weight_decay"] == 0.1 and all(p.dim() == 2 for p in decayed["params"])
    assert plain["weight_decay"] == 0.0 and len(plain["params"]) == 3  # linear bias, norm weight and bias
    assert decayed["betas"] == (0.9, 0.98) and decayed["eps"] == 1e-9


def test_every_schedule_is_in_the_one_table_and_its_settings_are_named() -> None:
    assert set(SCHEDULES) == {"noam", "cosine", "constant"}
    optimizer = make_optimizer(torch.nn.Linear(2, 2))
    with raises(ValueError, "cosine", "total_steps"):
        make_scheduler(optimizer, "cosine", warmup_steps=2, peak_lr=1e-3)
    with raises(TypeError, "warmup"):
        make_scheduler(optimizer, "constant", warmup=2, peak_lr=1e-3)  # a misspelled setting is not ignored
