"""Ctrl-C and SIGTERM during training (``transformer_lib.cli.interrupt``): the run finishes its step,
saves a checkpoint, says where it stopped in one line and exits 130/143; the same command resumes it.
A second signal stops at once. Each case runs the real command line in a subprocess and signals it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from transformer_lib.checkpoint import load_checkpoint
from transformer_lib.cli.interrupt import exit_status

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.skipif(os.name != "posix", reason="sends POSIX signals")

# A reverse run long enough to be signalled in the middle: it never reaches its last step first.
LONG_RUN = ["--task", "reverse", "--n-train", "2000", "--n-heldout", "50", "--longest", "5", "--max-steps", "100000",
            "--eval-every", "100000", "--log-every", "1", "--target-exact-match", "0", "--no-progress", "--device", "cpu"]


def _start(out: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    return subprocess.Popen([sys.executable, "-m", "transformer_lib.cli.train", *LONG_RUN, "--out", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def _wait_for_steps(out: Path, process: subprocess.Popen, steps: int = 3) -> None:
    """Until the run has logged ``steps`` updates (metrics.jsonl is written as training goes)."""
    log = out / "metrics.jsonl"
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        assert process.poll() is None, process.communicate()
        if log.exists() and len(log.read_text().splitlines()) >= steps:
            return
        time.sleep(0.05)
    process.kill()
    raise AssertionError("the run logged no steps in 240 s")


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_saves_a_checkpoint_says_one_line_and_exits_128_plus_the_signal(tmp_path: Path, signum: int) -> None:
    out = tmp_path / "run"
    process = _start(out)
    _wait_for_steps(out, process)
    process.send_signal(signum)
    stdout, stderr = process.communicate(timeout=240)
    assert process.returncode == exit_status(signum) == 128 + signum, stderr
    assert "Traceback" not in stderr and len(stderr.splitlines()) == 1, stderr
    step = load_checkpoint(out / "checkpoint.pt")["step"]
    assert f"stopped at step {step};" in stderr and "resume" in stderr, stderr
    assert step >= 3
    # The progress written so far agrees with the checkpoint: metrics.json was rewritten when it was saved.
    assert json.loads((out / "metrics.json").read_text())["steps"] == step


@pytest.mark.end_to_end
def test_the_same_command_resumes_where_the_signal_stopped_it(tmp_path: Path) -> None:
    out = tmp_path / "run"
    process = _start(out)
    _wait_for_steps(out, process)
    process.send_signal(signal.SIGINT)
    process.communicate(timeout=240)
    stopped_at = load_checkpoint(out / "checkpoint.pt")["step"]
    again = _start(out)
    _wait_for_steps(out, again, steps=stopped_at + 2)
    again.send_signal(signal.SIGTERM)
    stdout, stderr = again.communicate(timeout=240)
    assert again.returncode == 143, stderr
    assert f"resuming from {out / 'checkpoint.pt'} at step {stopped_at}" in stdout
    steps = [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert steps == list(range(1, len(steps) + 1)), "each step logged once, in order, across the two sessions"


def test_a_second_signal_stops_at_once_and_leaves_the_last_checkpoint_whole(tmp_path: Path) -> None:
    from transformer_lib.cli.interrupt import Interrupted, StopOnSignal

    requests: list[str] = []
    before = signal.getsignal(signal.SIGINT)  # Python's default, or SIG_IGN in a job started in the background
    with StopOnSignal(requests.append) as stop:
        os.kill(os.getpid(), signal.SIGINT)
        assert requests == ["SIGINT"] and stop.received == signal.SIGINT  # the first: a request, no exception
        with pytest.raises(Interrupted) as second:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(1)  # the handler runs here
    assert second.value.status == 130
    assert signal.getsignal(signal.SIGINT) is before, "the handler is put back"
