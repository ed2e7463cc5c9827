"""What the command lines say, and where (``transformer_lib.cli.console``): a progress bar on a terminal
only and plain lines in a file, a ``logging`` logger per module, ``--quiet``, ``--log-file``, ``--log-level``
(issue 46, item 4)."""

from __future__ import annotations

import io
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from test_translate_cli import GERMAN, checkpoint_dict

from transformer_lib.cli import console, train, translate

ROOT = Path(__file__).resolve().parent.parent
# A short reverse run without --no-progress: where its progress goes is what is tested.
RUN = ["--task", "reverse", "--n-train", "300", "--n-heldout", "30", "--longest", "4", "--device", "cpu",
       "--max-steps", "6", "--eval-every", "3", "--log-every", "2"]


def test_training_into_a_file_writes_plain_progress_lines_and_no_redraws(tmp_path: Path) -> None:
    """``transformer-train ... 2> log``: no carriage-return redraws (a bar only on a terminal), a plain line
    every --log-every updates, the information lines on standard output as before."""
    with open(tmp_path / "err", "w") as err, open(tmp_path / "out", "w") as out:
        result = subprocess.run([sys.executable, "-m", "transformer_lib.cli.train", *RUN, "--out", str(tmp_path / "run")],
                                stdout=out, stderr=err, env={**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"},
                                timeout=300)
    stdout, stderr = (tmp_path / "out").read_text(), (tmp_path / "err").read_text()
    assert result.returncode == 0, stderr
    assert "\r" not in stderr and "\r" not in stdout
    steps = [line.split()[1] for line in stdout.splitlines() if line.startswith("step ") and "loss" in line and "lr" in line]
    assert steps == ["2/6", "4/6", "6/6"], stdout
    assert "validation loss" in stdout and stdout.splitlines()[-1].startswith("done ("), stdout


def test_a_bar_only_on_a_terminal() -> None:
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    assert console.show_bar(quiet=False, stream=Terminal())
    assert not console.show_bar(quiet=False, stream=io.StringIO()), "a file or a pipe: plain lines"
    assert not console.show_bar(quiet=True, stream=Terminal()) and not console.show_bar(False, True, Terminal())


def test_quiet_log_file_and_log_level_of_the_training_command(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    log_file = tmp_path / "train.log"
    assert train.cli([*RUN, "--quiet", "--log-file", str(log_file), "--out", str(tmp_path / "a")]) == 0
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == "", "--quiet: nothing but warnings and errors"
    logged = log_file.read_text().splitlines()
    # The file has every message, with its time, level and module's logger, whatever the console showed.
    assert any(" INFO transformer_lib.cli.train: step      2/6  loss " in line for line in logged), logged
    assert any("validation loss" in line for line in logged) and "done (" in logged[-1], logged
    assert train.cli([*RUN, "--log-level", "warning", "--out", str(tmp_path / "b")]) == 0
    assert capsys.readouterr().out == ""
    assert train.cli([*RUN, "--out", str(tmp_path / "c")]) == 0
    assert "validation loss" in capsys.readouterr().out, "the default level: information lines"


def test_a_log_file_records_the_error_that_ended_the_run(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    log_file = tmp_path / "train.log"
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "checkpoint.pt").write_text("not a checkpoint")
    status = train.cli([*RUN, "--log-file", str(log_file), "--out", str(tmp_path / "a")])
    err = capsys.readouterr().err
    assert status != 0 and err.startswith("error: ")
    assert "ERROR transformer_lib: stopped: " in log_file.read_text(), log_file.read_text()


def test_quiet_log_file_and_log_level_of_the_translate_command(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    checkpoint = tmp_path / "checkpoint.pt"
    torch.save(checkpoint_dict(), checkpoint)
    argv = ["--checkpoint", str(checkpoint), "--device", "cpu", GERMAN[0]]
    assert translate.main(argv) == 0
    loud = capsys.readouterr()
    assert loud.err.startswith("info: 1 CPU thread") and loud.out.count("\n") == 1
    log_file = tmp_path / "translate.log"
    assert translate.main([*argv, "--quiet", "--log-file", str(log_file)]) == 0
    quiet = capsys.readouterr()
    assert quiet.err == "" and quiet.out == loud.out, "--quiet hides information, never results"
    assert "INFO transformer_lib.cli.translate: 1 CPU thread" in log_file.read_text()
    assert translate.main([*argv, "--log-level", "WARNING"]) == 0 and capsys.readouterr().err == ""


def test_the_logging_set_up_is_taken_down_after_a_command(tmp_path: Path) -> None:
    """A program that calls the command line keeps its own logging as it was."""
    logger = logging.getLogger(console.ROOT_LOGGER)
    before = logger.handlers[:], logger.level, logger.propagate
    with console.command_logging(quiet=True, log_file=tmp_path / "x.log", log_level="debug"):
        assert logger.level == logging.DEBUG and not logger.propagate
    assert (logger.handlers, logger.level, logger.propagate) == before


def test_an_unwritable_log_file_is_one_error(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    status = train.cli([*RUN, "--log-file", str(tmp_path / "no" / "such" / "x.log"), "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert status != 0 and err.startswith("error: --log-file") and err.count("\n") == 1, err
