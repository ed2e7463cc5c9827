"""Tests of the command line trainer, ``python -m transformer_lib.train``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from transformer_lib import train
from transformer_lib.data import Vocab, prepare_multi30k
from transformer_lib.training import Trainer, load_checkpoint

FIXTURE = Path(__file__).parent / "fixtures" / "multi30k"
FIXTURE_SHA256 = {line.split()[1]: line.split()[0] for line in (FIXTURE / "SHA256SUMS").read_text().splitlines()}
# A small reverse task that the tiny preset solves in a few hundred CPU steps.
SMALL_REVERSE = ["--task", "reverse", "--n-train", "4000", "--n-heldout", "300", "--max-len", "6", "--max-steps", "600", "--no-progress"]


def test_cli_trains_reverse_to_100_percent_on_held_out_sequences(tmp_path: Path) -> None:
    metrics = train.main([*SMALL_REVERSE, "--out", str(tmp_path), "--device", "cpu"])
    assert metrics["final"]["val"]["exact_match"] == 1.0  # all 300 never-seen sequences reversed exactly
    assert metrics["final"]["val"]["n_sentences"] == 300
    assert "exact match reached 100%" in metrics["stopped_because"]

    checkpoint = load_checkpoint(tmp_path / "checkpoint.pt")
    assert checkpoint["task"] == "reverse" and checkpoint["step"] == metrics["steps"]
    assert Vocab.from_dict(checkpoint["src_vocab"]).tokens[4:] == [str(i) for i in range(10)]
    assert checkpoint["data"]["source_format"] == "tokens+eos" and checkpoint["data"]["max_len"] == 6
    model = train.build_model(checkpoint["model_config"])
    model.load_state_dict(checkpoint["model_state"])  # the checkpoint alone rebuilds the model

    written = json.loads((tmp_path / "metrics.json").read_text())
    assert written["command"].startswith("python -m transformer_lib.train --task reverse")
    assert written["hardware"]["device"] == "cpu" and written["history"]["val"][-1]["exact_match"] == 1.0
    assert (tmp_path / "loss.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


class PowerCut(Exception):
    """A crash in the middle of training."""


def test_cli_resumes_after_a_crash_where_it_stopped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    common = [*SMALL_REVERSE, "--log-every", "1", "--eval-every", "5", "--target-exact-match", "0", "--max-steps", "12"]
    whole = train.main([*common, "--out", str(tmp_path / "whole")])

    real_step = Trainer.train_step

    def crash_at_step_8(self: Trainer, batch):
        if self.step == 7:
            raise PowerCut("the machine went down")
        return real_step(self, batch)

    monkeypatch.setattr(Trainer, "train_step", crash_at_step_8)
    with pytest.raises(PowerCut):
        train.main([*common, "--out", str(tmp_path / "parts")])
    monkeypatch.undo()
    resumed = train.main([*common, "--out", str(tmp_path / "parts")])  # the same command again
    assert resumed["resumed_from_step"] == 5 and resumed["steps"] == 12  # from the checkpoint at step 5
    assert [r["loss"] for r in resumed["history"]["train"]] == [r["loss"] for r in whole["history"]["train"]]
    assert resumed["final"] == whole["final"]
    again = train.main([*common, "--out", str(tmp_path / "parts")])  # finished: nothing left to do
    assert again["steps"] == 12 and again["history"] == resumed["history"]
    restarted = train.main([*common, "--out", str(tmp_path / "parts"), "--max-steps", "3", "--restart"])
    assert restarted["resumed_from_step"] is None and restarted["steps"] == 3


def test_cli_refuses_to_resume_another_task(tmp_path: Path) -> None:
    train.main([*SMALL_REVERSE, "--out", str(tmp_path), "--max-steps", "2"])
    with pytest.raises(ValueError, match="is a 'reverse' run but --task is 'copy'"):
        train.main(["--task", "copy", "--out", str(tmp_path), "--max-steps", "2"])


@pytest.mark.parametrize(("option", "message"), [(["--batch-size", "0"], "--batch-size must be at least 1"), (["--max-len", "0"], "--max-len")])
def test_cli_rejects_bad_settings(tmp_path: Path, option: list[str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        train.main(["--task", "copy", "--out", str(tmp_path), *option])


def test_cli_rejects_an_unknown_task(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit):
        train.main(["--task", "sort", "--out", str(tmp_path)])
    assert "invalid choice: 'sort'" in capsys.readouterr().err


def test_cli_trains_multi30k_from_prepared_data(tmp_path: Path) -> None:
    """The GPU-machine path: data tokenized elsewhere (here: the fixture), copied as one file."""
    prepared = prepare_multi30k(FIXTURE, checksums=FIXTURE_SHA256, min_freq=1)
    prepared.save(tmp_path / "data.pt")
    metrics = train.main([
        "--task", "multi30k", "--data", str(tmp_path / "data.pt"), "--out", str(tmp_path / "run"),
        "--profile", "fast", "--max-steps", "4", "--batch-size", "16", "--no-progress",
    ])
    assert metrics["steps"] == 4 and set(metrics["final"]) == {"val", "test"}
    checkpoint = load_checkpoint(tmp_path / "run" / "checkpoint.pt")
    assert checkpoint["data"]["src_lang"] == "de" and checkpoint["data"]["tgt_lang"] == "en"
    assert checkpoint["data"]["lowercase"] is False and checkpoint["task"] == "multi30k"
    assert Vocab.from_dict(checkpoint["tgt_vocab"]) == prepared.tgt_vocab


@pytest.mark.multi30k
def test_cli_prepares_and_trains_on_real_multi30k(tmp_path: Path, real_multi30k: Path) -> None:
    prepared = train.main(["--task", "multi30k", "--prepare-only", "--train-size", "300", "--data-dir", str(real_multi30k), "--out", str(tmp_path)])
    assert prepared["sizes"] == {"train": 300, "val": 1014, "test": 1000}
    metrics = train.main(["--task", "multi30k", "--data", str(tmp_path / "data.pt"), "--out", str(tmp_path / "run"),
                          "--profile", "fast", "--max-steps", "2", "--no-progress"])
    assert metrics["steps"] == 2 and metrics["final"]["test"]["n_sentences"] == 1000


def test_cli_runs_as_a_module() -> None:
    result = subprocess.run([sys.executable, "-m", "transformer_lib.train", "--help"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and "--task {copy,reverse,multi30k}" in result.stdout


def test_cli_refuses_cuda_without_a_gpu(tmp_path: Path) -> None:
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    with pytest.raises(ValueError, match="no CUDA GPU"):
        train.main([*SMALL_REVERSE, "--out", str(tmp_path), "--device", "cuda"])
