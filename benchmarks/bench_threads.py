"""How many CPU threads the command lines should use: the same runs side by side at each thread count.

    .venv/bin/python benchmarks/bench_threads.py                  # 150 reverse-task updates, 1 thread vs all cores
    .venv/bin/python benchmarks/bench_threads.py --threads 1 2 4 --steps 300 --repeats 3

Each run is ``transformer-train --task reverse`` (the tiny preset) for ``--steps`` updates, in a fresh
process, the thread counts interleaved so that a change in the machine's load hits each alike. It
reports the median wall time of each count and its ratio to one thread; the command lines' default
(``--threads``: 1 for the tiny preset) comes from this. Also times the default reverse run to its
stopping point (100% held-out exact match), the number the README and the train command's docstring quote.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _train(args: list[str]) -> float:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("OMP_NUM_THREADS", None)  # --threads decides
    with tempfile.TemporaryDirectory() as out:
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "transformer_lib.cli.train", "--task", "reverse", "--no-progress",
                        "--device", "cpu", "--out", out, *args], check=True, env=env, capture_output=True)
        return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, os.cpu_count() or 1])
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--skip-default-run", action="store_true")
    options = parser.parse_args()
    times: dict[int, list[float]] = {n: [] for n in options.threads}
    for _ in range(options.repeats):
        for n in options.threads:
            times[n].append(_train(["--max-steps", str(options.steps), "--eval-every", str(options.steps),
                                    "--target-exact-match", "0", "--threads", str(n)]))
    base = statistics.median(times[options.threads[0]])
    print(f"{options.steps} reverse-task updates (tiny preset), {os.cpu_count()} cores, median of {options.repeats}:")
    for n, values in times.items():
        median = statistics.median(values)
        print(f"  --threads {n:>2}: {median:6.1f} s   ({median / base:.2f}x the time of --threads {options.threads[0]})")
    if not options.skip_default_run:
        print(f"the default reverse run (to 100% held-out exact match): {_train([]):.1f} s, wall time with start-up")


if __name__ == "__main__":
    main()
