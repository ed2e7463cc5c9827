"""What a training run says and writes as it goes (``transformer_lib.cli.logs``, the train command line):
``metrics.jsonl`` appended while training, ``metrics.json`` at every checkpoint, files with the user's
umask, ``--help`` with the defaults that apply, ``--print-config``, ``--threads``."""

from __future__ import annotations

import json
import os
import stat
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from transformer_lib.cli import common, train
from transformer_lib.cli.logs import RunLog
from transformer_lib.cli.options import RunConfig, parse_args, resolve
from transformer_lib.cli.profiles import DEFAULTS

TINY = ["--task", "reverse", "--n-train", "300", "--n-heldout", "30", "--longest", "4", "--no-progress", "--device", "cpu"]


def test_metrics_jsonl_holds_every_record_and_metrics_json_follows_the_checkpoints(tmp_path: Path,
                                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[int] = []
    real = train.write_json

    def spy(path: Path, value: dict) -> None:
        if path.name == "metrics.json":
            seen.append(value["steps"])
        real(path, value)

    monkeypatch.setattr(train, "write_json", spy)
    metrics = train.main([*TINY, "--max-steps", "6", "--log-every", "1", "--eval-every", "2", "--target-exact-match", "0",
                          "--out", str(tmp_path)])
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if r["kind"] == "train"] == [1, 2, 3, 4, 5, 6]
    assert [r["step"] for r in records if r["kind"] == "val"] == [2, 4, 6]
    assert records[0]["loss"] == metrics["history"]["train"][0]["loss"]
    assert seen == [2, 4, 6, 6], "rewritten at each checkpoint (every validation), then the final file"


def test_a_resumed_log_drops_the_records_past_its_checkpoint(tmp_path: Path) -> None:
    log = RunLog(tmp_path, None, tensorboard=False)
    for step in (1, 2, 3, 4):
        log.record("train", {"step": step, "loss": 1.0 / step})
    with open(tmp_path / "metrics.jsonl", "a") as f:
        f.write('{"kind": "train", "st')  # a line cut short by a killed process
    RunLog(tmp_path, 2, tensorboard=False)
    assert [json.loads(line)["step"] for line in (tmp_path / "metrics.jsonl").read_text().splitlines()] == [1, 2]


@pytest.fixture
def user_umask(request: pytest.FixtureRequest) -> Iterator[int]:
    """This process's umask set to the test's parameter, and restored after."""
    before = os.umask(request.param)
    try:
        yield request.param
    finally:
        os.umask(before)


@pytest.mark.parametrize("user_umask", [0o022, 0o077], indirect=True)
def test_run_files_get_the_users_umask(tmp_path: Path, user_umask: int) -> None:
    out, umask = tmp_path / "run", user_umask
    assert train.cli([*TINY, "--max-steps", "2", "--eval-every", "2", "--out", str(out)]) == 0
    for name in ("checkpoint.pt", "metrics.json", "metrics.jsonl"):
        assert stat.S_IMODE((out / name).stat().st_mode) == 0o666 & ~umask, name


def test_help_shows_the_defaults_that_apply_and_never_none(capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit):
        parse_args(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "(default: None)" not in text and "(default: 0) (default" not in text
    toy, fast, full = DEFAULTS["toy"]["fast"], DEFAULTS["multi30k"]["fast"], DEFAULTS["multi30k"]["full"]
    assert f"toy {toy['batch_size']}; multi30k fast {fast['batch_size']}; multi30k full {full['batch_size']}" in text
    assert f"--n-symbols N_SYMBOLS symbols in the alphabet (default: {toy['n_symbols']})" in text


def test_print_config_prints_the_resolved_settings_and_starts_nothing(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "run"
    printed = train.main([*TINY, "--max-steps", "7", "--threads", "2", "--print-config", "--out", str(out)])
    shown = json.loads(capsys.readouterr().out)
    assert shown == json.loads(json.dumps(printed)) and not out.exists()
    expected, _ = resolve(parse_args([*TINY, "--max-steps", "7", "--out", str(out)]))
    assert RunConfig.from_dict(shown["run"]) == expected and shown["session"]["threads"] == 2
    assert shown["run"]["lr"] == DEFAULTS["toy"]["fast"]["lr"], "a default of the task, not only the options given"


def test_print_config_of_a_folder_with_a_checkpoint_shows_the_run_it_resumes(tmp_path: Path, capsys) -> None:
    train.main([*TINY, "--max-steps", "2", "--eval-every", "2", "--lr", "0.001", "--out", str(tmp_path)])
    capsys.readouterr()
    train.main([*TINY, "--max-steps", "4", "--print-config", "--out", str(tmp_path)])
    shown = json.loads(capsys.readouterr().out)
    assert shown["resumes"] == str(tmp_path / "checkpoint.pt")
    assert shown["run"]["lr"] == 0.001 and shown["run"]["max_steps"] == 4, "the checkpoint's settings, the new length"


def test_the_thread_count_is_set_and_said(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    before = torch.get_num_threads()
    try:
        train.main([*TINY, "--max-steps", "1", "--eval-every", "1", "--threads", "2", "--out", str(tmp_path / "a")])
        assert torch.get_num_threads() == 2 and "2 CPU threads (--threads)" in capsys.readouterr().out
        train.main([*TINY, "--max-steps", "1", "--eval-every", "1", "--out", str(tmp_path / "b")])
        assert torch.get_num_threads() == 1, "the tiny preset's default: one thread"
        assert "1 CPU thread (--threads)" in capsys.readouterr().out
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize(("variable", "expected"), [("3", 3), ("2,1", 2), ("0", None), ("many", None), ("", None)])
def test_threads_default_to_omp_num_threads_when_it_is_set(tmp_path: Path, capsys, monkeypatch, variable: str,
                                                          expected: int | None) -> None:
    """``OMP_NUM_THREADS=N transformer-train ...`` runs on N threads (issue 46); unset or not a positive
    number, the default is the model's: 1 for the tiny preset, else up to 4 of the cores the process may use."""
    monkeypatch.setenv("OMP_NUM_THREADS", variable)
    shown = train.main([*TINY, "--max-steps", "2", "--print-config", "--out", str(tmp_path / "run")])
    assert shown["session"]["threads"] == (expected or 1)
    given = train.main([*TINY, "--max-steps", "2", "--threads", "2", "--print-config", "--out", str(tmp_path / "run")])
    assert given["session"]["threads"] == 2, "--threads wins over the variable"
    capsys.readouterr()


def test_without_omp_num_threads_a_larger_model_uses_the_cores_the_process_may_run_on(monkeypatch) -> None:
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 5, 7}, raising=False)  # e.g. taskset -c 0,5,7
    assert common.available_cores() == 3
    assert common.default_threads(small_model=False) == 3 and common.default_threads(small_model=True) == 1
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(64)), raising=False)
    assert common.default_threads(small_model=False) == 4, "more threads rarely help these models"
    monkeypatch.setenv("OMP_NUM_THREADS", "6")
    assert common.default_threads(small_model=False) == common.default_threads(small_model=True) == 6


def test_tensorboard_is_optional_and_writes_event_files_when_installed(tmp_path: Path) -> None:
    pytest.importorskip("tensorboard")
    train.main([*TINY, "--max-steps", "2", "--eval-every", "2", "--tensorboard", "--out", str(tmp_path)])
    assert list((tmp_path / "tensorboard").glob("events.out.tfevents.*"))


def test_tensorboard_without_the_package_is_refused_before_anything_starts(tmp_path: Path, capsys,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)  # as if tensorboard were not installed
    status = train.cli([*TINY, "--max-steps", "2", "--tensorboard", "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert status == 1 and err.startswith("error: --tensorboard") and not (tmp_path / "run").exists(), err


@pytest.mark.parametrize("task", [["--task", "reverse", "--max-steps", "7", "--lr", "0.002"],
                                  ["--task", "multi30k", "--profile", "fast", "--clip-norm", "0", "--dropout", "0.2"]])
def test_config_reads_what_print_config_writes(tmp_path: Path, capsys: pytest.CaptureFixture, task: list[str]) -> None:
    """--config FILE round trip (issue 46, item 5): the settings --print-config prints, read back, print the
    same; options on the command line override the file's."""
    out = tmp_path / "run"
    printed = capsys.readouterr() and train.main([*task, "--threads", "1", "--print-config", "--out", str(out)])
    config = tmp_path / "settings.json"
    config.write_text(capsys.readouterr().out)
    assert train.main(["--config", str(config), "--print-config"]) == printed
    assert json.loads(capsys.readouterr().out) == printed
    changed = train.main(["--config", str(config), "--seed", "3", "--out", str(tmp_path / "other"), "--print-config"])
    assert changed["run"] == {**printed["run"], "seed": 3} and changed["session"]["out"] == str(tmp_path / "other")
    capsys.readouterr()


def test_a_run_from_a_config_file_trains_with_its_settings_and_resumes(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "run"
    printed = train.main([*TINY, "--max-steps", "2", "--eval-every", "2", "--lr", "0.002", "--print-config", "--out", str(out)])
    config = tmp_path / "settings.json"
    config.write_text(capsys.readouterr().out)
    metrics = train.main(["--config", str(config)])
    assert metrics["settings"] == printed["run"] and metrics["steps"] == 2
    again = train.main(["--config", str(config), "--max-steps", "4"])  # every setting the checkpoint's: it resumes
    assert again["resumed_from_step"] == 2 and again["steps"] == 4


@pytest.mark.parametrize(("content", "named"), [("{not json", ["settings.json", "JSON"]),
                                                ('{"run": {"warmup": 3}}', ["settings.json", "'warmup'"]),
                                                ('{"run": {"task": "reverse", "lr": "fast"}, "session": {"out": "x"}}', ["--lr"])])
def test_a_bad_config_file_is_one_error(tmp_path: Path, capsys: pytest.CaptureFixture, content: str, named: list[str]) -> None:
    config = tmp_path / "settings.json"
    config.write_text(content)
    status = train.cli(["--config", str(config), "--print-config"])
    err = capsys.readouterr().err
    assert status == 2 and err.startswith("error: ") and err.count("\n") == 1, err
    assert all(name in err for name in named), err
