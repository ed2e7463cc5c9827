"""A new table entry is one entry in one place: a throwaway norm and a throwaway schedule, each added to
its table only, are taken by the config, the parameter count, the command line and training."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from torch import Tensor, nn

from transformer_lib.checkpoint import parameter_count
from transformer_lib.cli import train
from transformer_lib.cli.options import RunConfig, model_fields, parse_args, resolve
from transformer_lib.config import TransformerConfig
from transformer_lib.model import Transformer
from transformer_lib.normalization import NORMS
from transformer_lib.schedules import SCHEDULES


class ScaleNorm(nn.Module):
    """Nguyen & Salazar 2019: one learned scalar times x / ||x||, a norm no formula in the library knows."""

    def __init__(self, width: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps = eps
        self.scale = nn.Parameter(torch.tensor(float(width) ** 0.5))

    def forward(self, x: Tensor) -> Tensor:
        return self.scale * x / x.norm(dim=-1, keepdim=True).clamp_min(self.eps)


class LinearDecaySchedule:
    """Warm-up, then a straight line down to 0 at ``total_steps``."""

    def __init__(self, peak_lr: float, warmup_steps: int, total_steps: int) -> None:
        self.peak_lr, self.warmup_steps, self.total_steps = peak_lr, warmup_steps, total_steps

    def __call__(self, done: int) -> float:
        step = done + 1
        if step <= self.warmup_steps:
            return self.peak_lr * step / self.warmup_steps
        return self.peak_lr * max(0.0, (self.total_steps - step) / max(1, self.total_steps - self.warmup_steps))


@pytest.fixture
def registered() -> Iterator[None]:
    """The two entries, each added in one place, removed afterwards."""
    NORMS["scalenorm"] = ScaleNorm
    SCHEDULES["linear"] = LinearDecaySchedule
    try:
        yield
    finally:
        del NORMS["scalenorm"], SCHEDULES["linear"]


@pytest.mark.parametrize("overrides", [{}, {"norm_first": False}, {"qk_norm": True, "positional": "relative"}])
def test_a_new_norm_is_taken_by_the_config_and_counted_exactly(registered: None, overrides: dict) -> None:
    config = TransformerConfig.from_preset("tiny", src_vocab_size=30, tgt_vocab_size=40, norm="scalenorm", **overrides)
    model = Transformer(config)
    assert any(isinstance(m, ScaleNorm) for m in model.modules())
    unique = {id(p): p.numel() for p in model.parameters()}  # a tied matrix counts once
    assert parameter_count(config) == sum(unique.values())
    with pytest.raises(ValueError, match="scalenorm"):  # named in the choices once registered...
        TransformerConfig.from_preset("tiny", src_vocab_size=30, tgt_vocab_size=40, norm="batchnorm")


def test_an_unregistered_norm_is_refused() -> None:
    with pytest.raises(ValueError, match="'scalenorm'"):
        TransformerConfig.from_preset("tiny", src_vocab_size=30, tgt_vocab_size=40, norm="scalenorm")
    with pytest.raises(SystemExit):
        parse_args(["--task", "copy", "--out", "x", "--norm", "scalenorm"])


def test_the_command_line_takes_the_new_entries(registered: None) -> None:
    given = parse_args(["--task", "copy", "--out", "x", "--norm", "scalenorm", "--schedule", "linear",
                        "--lr", "0.002", "--max-steps", "7"])
    run, _ = resolve(given)
    assert (run.norm, run.schedule) == ("scalenorm", "linear")
    assert run.model_config(12, 12, 0).norm == "scalenorm"
    assert run.train_config(0, progress=False).schedule == "linear"


def test_training_takes_the_new_entries(registered: None, tmp_path: Path) -> None:
    metrics = train.main(["--task", "copy", "--n-train", "64", "--n-heldout", "16", "--longest", "4", "--batch-size", "16",
                          "--norm", "scalenorm", "--schedule", "linear", "--lr", "0.002", "--warmup-steps", "2",
                          "--max-steps", "4", "--log-every", "1", "--no-progress", "--quiet", "--out", str(tmp_path),
                          "--device", "cpu"])
    assert metrics["steps"] == 4
    assert metrics["model_config"]["norm"] == "scalenorm" and metrics["settings"]["schedule"] == "linear"
    assert metrics["parameters"] == parameter_count(TransformerConfig.from_dict(metrics["model_config"]))
    rates = [entry["lr"] for entry in metrics["history"]["train"]]
    assert rates == pytest.approx([0.001, 0.002, 0.001, 0.0])  # warm-up over 2 updates, then down to 0 at update 4


def test_a_token_budget_and_accumulation_from_the_command_line_train(tmp_path: Path) -> None:
    options = ["--task", "copy", "--n-train", "64", "--n-heldout", "16", "--longest", "4", "--max-steps", "3",
               "--no-progress", "--quiet", "--device", "cpu"]
    whole = train.main([*options, "--batch-size", "16", "--out", str(tmp_path / "batch")])
    parts = train.main([*options, "--max-tokens", "40", "--batches-per-update", "2", "--out", str(tmp_path / "tokens")])
    assert parts["settings"]["max_tokens"] == 40 and parts["settings"]["batches_per_update"] == 2
    # 16 sequences a batch, one an update, against batches of 40 padded tokens (2 to 20 sequences), two an update
    assert whole["steps"] == parts["steps"] == 3 and parts["epochs"] != whole["epochs"]


def test_every_model_field_is_an_option_of_the_training_command() -> None:
    from_data = {"src_vocab_size", "tgt_vocab_size", "pad_id"}
    assert set(model_fields()) == {f.name for f in dataclasses.fields(TransformerConfig)} - from_data
    given = parse_args(["--task", "copy", "--out", "x", "--d-model", "48", "--n-heads", "6", "--n-kv-heads", "2",
                        "--norm", "rmsnorm", "--qk-norm", "--no-tie-output", "--positional", "rope", "--max-tokens", "512",
                        "--batches-per-update", "3"])
    run, _ = resolve(given)
    model = run.model_config(12, 12, 0)
    assert (model.d_model, model.n_heads, model.n_kv_heads, model.norm, model.qk_norm, model.tie_output, model.positional) \
        == (48, 6, 2, "rmsnorm", True, False, "rope")
    assert run.max_tokens == 512 and run.train_config(0, progress=False).batches_per_update == 3
    with pytest.raises(ValueError, match="50"):  # the model's checks, when the options are read
        resolve(parse_args(["--task", "copy", "--out", "x", "--d-model", "50", "--n-heads", "4"]))
    assert isinstance(RunConfig.from_dict(run.to_dict()), RunConfig)
