"""One switch for how big the book's experiments are: the ``TRANSFORMER_BOOK_PROFILE`` variable.

- ``fast``: small models and data, every chapter well under a minute on a 2-core laptop CPU.
  This is what CI and ``make book`` use on a machine without a GPU.
- ``full``: the sizes the text discusses (paper-sized experiments, full Multi30k training).

Unset, it is ``full`` when a CUDA GPU is present and ``fast`` otherwise, so the same notebook runs
unchanged on a laptop, in CI and on Colab with a GPU.

Example:
    >>> steps = pick(fast=200, full=5000)   # in a chapter

Each chapter's set-up cell prints :func:`describe_profile`: the profile it runs, the device, what
the full profile trains and an estimate of how long that takes on Colab's usual GPU (an NVIDIA T4)
and on a 2-core CPU, and how to switch. The estimate is floating-point operations divided by a
throughput: the operations of one training step counted by ``torch.utils.flop_counter`` (matrix
products, forward and backward; ``tests/test_experiment_estimate.py`` counts them again) times the
steps; the throughputs are stated below (``THROUGHPUT``).
"""

from __future__ import annotations

import os
import textwrap
from dataclasses import dataclass
from typing import TypeVar

import torch

from ..cli.profiles import PROFILE_ENV, Profile, current_profile  # the switch the training command line reads too

__all__ = ["CHAPTERS", "FULL_PROFILE_TRAINING", "PROFILE_ENV", "THROUGHPUT", "Training", "current_profile",
           "describe_profile", "estimate_seconds", "full_profile_cost", "pick", "profile_line",
           "shipped_training_seconds"]

T = TypeVar("T")


def pick(fast: T, full: T) -> T:
    """The value for the current profile."""
    return fast if current_profile() == "fast" else full



@dataclass(frozen=True)
class Training:
    """Training that a chapter's full profile does: ``runs`` models, ``steps`` updates each.

    ``flops_per_step`` is one update's forward and backward matrix products, counted by
    ``torch.utils.flop_counter.FlopCounterMode`` on one batch of the chapter's shapes, attention's
    products included on every torch version (``tests/test_experiment_estimate.py`` recounts them).
    """

    what: str
    flops_per_step: float
    steps: int
    runs: int = 1
    shipped: bool = False  # the shipped model's recipe: its CPU time is the recorded run's

    @property
    def flops(self) -> float:
        return self.flops_per_step * self.steps * self.runs


# Sustained training throughput in FLOP/s, and where each number comes from.
THROUGHPUT: dict[str, float] = {
    # Measured: the committed full run's command, run again on main after the library's dropout
    # began drawing its masks faster (benchmarks/results/multi30k_full_cpu_main_metrics.json), made
    # 3,632 steps of 9.0e10 FLOP in 3,177 s of training (its validation decoding included).
    "cpu": 1.03e11,
    # Stated, not measured: a quarter of the T4's 8.1 TFLOP/s float32 peak (NVIDIA's datasheet;
    # it has no bfloat16 tensor cores, so the trainer's bf16 autocast gains nothing there).
    # Models this small cannot fill a GPU, hence a quarter.
    "t4": 2.0e12,
}

_MULTI30K = Training("the Multi30k model (multi30k preset, 16 epochs)", 8.9975e10, 3632, shipped=True)
CHAPTERS = ("01_attention", "02_masking", "03_embeddings", "04_blocks", "05_training", "06_decoding",
            "07_beyond")
# What each chapter's full profile trains (chapters that train no model are absent).
FULL_PROFILE_TRAINING: dict[str, tuple[Training, ...]] = {
    "04_blocks": (Training("20 copy-task models (tiny preset)", 4.8411e8, 200, runs=20),),
    "05_training": (_MULTI30K,),
    # chapter 6 decodes with the shipped model (transformer_lib.pretrained): it trains only the tiny
    # reverse model, the same in both profiles
    "07_beyond": (Training("5 reversal models (d_model 128)", 6.2000e9, 3000, runs=5),
                  Training("a decoder-only model", 4.2910e7, 3000),
                  Training("a caption language model (4 layers, d_model 128)", 8.3736e9, 3000),
                  Training("a masked-word encoder (4 layers, d_model 128)", 8.3736e9, 3000),
                  # section 7.9: the baseline and four options, three seeds each (the options' mean step)
                  Training("15 reverse-task models (tiny preset)", 8.5200e8, 1000, runs=15)),
}


def shipped_training_seconds() -> float:
    """The training time of the shipped model's run (2-core CPU), from its record."""
    from transformer_lib import pretrained

    return float(pretrained.info().run["training_time_s"])


def estimate_seconds(chapter: str, device: str) -> float:
    """Seconds the training of ``chapter``'s full profile takes on ``device`` (a THROUGHPUT key).
    On the CPU, the shipped model's recipe takes what its recorded run took; the rest is FLOP over
    the device's throughput."""
    if device not in THROUGHPUT:
        raise ValueError(f"no throughput for device {device!r}; known: {sorted(THROUGHPUT)}")
    if chapter not in CHAPTERS:
        raise ValueError(f"{chapter!r} is not a chapter; chapters: {', '.join(CHAPTERS)}")
    return sum(shipped_training_seconds() * t.runs if t.shipped and device == "cpu" else t.flops / THROUGHPUT[device]
               for t in FULL_PROFILE_TRAINING.get(chapter, ()))


WIDTH = 72


def _duration(seconds: float, at_least: bool) -> str:
    amount = f"{seconds / 60:.0f} min" if seconds >= 90 else f"{max(seconds, 1):.0f} s"
    return f"{'at least' if at_least else 'about'} {amount}"


def _why() -> str:
    if os.environ.get(PROFILE_ENV, "").strip():
        return f"{PROFILE_ENV} says so"
    return "the default with a GPU" if torch.cuda.is_available() else "the default without a GPU"


def profile_line() -> str:
    """One line for a section's set-up cell (at most ``WIDTH`` characters): the profile, why, the
    device, and how to switch."""
    profile = current_profile()
    other = "fast" if profile == "full" else "full"
    gpu = torch.cuda.is_available()
    why = "set" if os.environ.get(PROFILE_ENV, "").strip() else ("a GPU" if gpu else "no GPU")
    return f"{profile} profile ({why}), {'cuda' if gpu else 'cpu'}; switch: %env {PROFILE_ENV}={other}"


def full_profile_cost(chapter: str) -> str:
    """What the full profile of ``chapter`` trains and how long that takes, in a sentence.

    Args:
        chapter: the chapter's folder name, e.g. ``"05_training"``.
    """
    estimate_seconds(chapter, "cpu")  # a chapter's name, or a clear error
    work = FULL_PROFILE_TRAINING.get(chapter, ())
    if not work:
        return "The full profile makes bigger measurements; it trains no model."
    flops = sum(t.flops for t in work)
    small = max(t.flops_per_step for t in work) < 1e10  # too small to reach those rates
    t4, cpu = (_duration(estimate_seconds(chapter, d), small) for d in ("t4", "cpu"))
    return (f"The full profile trains {' and '.join(t.what for t in work)}, {flops:.1e} FLOP: "
            f"{t4} on a Colab T4 GPU, {cpu} on a 2-core CPU (FLOP / rate: the T4 at a quarter of "
            f"its float32 peak; the CPU as measured running the full profile"
            f"{'; models this small run slower' if small else ''}).")


def describe_profile(chapter: str) -> str:
    """What a chapter's set-up cell prints: profile, device, the full profile's cost, the switch.

    Args:
        chapter: the notebook's name without ``.ipynb``, e.g. ``"05_training"``.

    Returns:
        A few lines, at most ``WIDTH`` characters wide (they fit a phone's screen).
    """
    cost = full_profile_cost(chapter)  # a chapter's name, or a clear error
    profile = current_profile()
    gpu = torch.cuda.is_available()
    device = f"cuda ({torch.cuda.get_device_name()})" if gpu else "cpu"
    lines = [f"profile: {profile} ({_why()}), device {device}, torch {torch.__version__}",
             cost.replace("The full profile makes", "Full profile: makes", 1)
                 .replace("The full profile trains", "Full profile: trains", 1)]
    other = "fast" if profile == "full" else "full"
    lines.append(f"Switch: run %env {PROFILE_ENV}={other} before this cell.")
    return "\n".join(textwrap.fill(line, width=WIDTH, subsequent_indent="  ") for line in lines)
