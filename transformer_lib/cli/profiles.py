"""How big a run is: the experiment-size switch, and the command line's defaults for each task and size.

One switch, ``TRANSFORMER_BOOK_PROFILE``, chooses the size: ``fast`` (minutes on a laptop CPU) or
``full`` (the sizes the book reports). Unset, it is ``full`` with a CUDA GPU and ``fast`` without.
The training command line reads it for its defaults (:data:`DEFAULTS`); the book's chapters read the
same switch (:mod:`transformer_lib.book.experiment` imports it from here).
"""

from __future__ import annotations

import os
from typing import Any, Literal

import torch

__all__ = ["PROFILE_ENV", "PROFILES", "Profile", "current_profile", "DEFAULTS"]

PROFILE_ENV = "TRANSFORMER_BOOK_PROFILE"
PROFILES = ("fast", "full")
Profile = Literal["fast", "full"]


def current_profile() -> Profile:
    """``fast`` or ``full``, from the environment or, unset, from whether CUDA is available."""
    value = os.environ.get(PROFILE_ENV, "").strip().lower()
    if value == "":
        return "full" if torch.cuda.is_available() else "fast"
    if value not in PROFILES:
        raise ValueError(f"{PROFILE_ENV}={value!r} is not a profile; use 'fast' or 'full'")
    return value  # type: ignore[return-value]


# Toy tasks: the tiny preset without dropout (nothing to regularise: the rule is all there is to
# learn) and a cosine schedule, whose decay to zero settles the last few sequences. Training stops
# at 100% held-out exact match, and the held-out set has every length (5 of the 10 one-symbol
# sequences, 50 of the 100 two-symbol ones: toy_task), so the short lengths must come out right too.
# Their training sequences are few, so the trainer repeats them (toy_task's balance_lengths): without
# that, 4 of the 5 held-out one-symbol sequences were still wrong after 800 updates. With it, at a
# peak of 1e-3, 100% came after 650 updates for model seeds 0 to 2 over 800, but seed 3 ended one
# eight-symbol sequence short; over 1,000 it came after 700, 800, 800 and 850 (seeds 0, 1, 3, 4),
# in 65 s to 115 s of training on one thread of a busy, shared AMD EPYC (2026-11-28). One
# evaluation of the 1,000 held-out sequences costs about as much as ten updates, hence every 50.
# Toy tasks are CPU-sized in both profiles.
_TOY: dict[str, Any] = dict(
    preset="tiny", dropout=0.0, n_train=20000, n_heldout=1000, n_symbols=10, shortest=1, longest=8,
    batch_size=64, schedule="cosine", lr=1e-3, warmup_steps=100, label_smoothing=0.1, clip_norm=1.0,
    epochs=None, max_steps=1000, eval_every=50, target_exact_match=1.0, log_every=25,
)
# The defaults of `python -m transformer_lib.cli.train`, by task family and profile. The keys are
# fields of transformer_lib.cli.options.RunConfig (a misspelled key is an error when it is read).
DEFAULTS: dict[str, dict[str, dict[str, Any]]] = {
    "toy": {"fast": dict(_TOY), "full": dict(_TOY)},
    "multi30k": {
        # One pass over a 3,000-pair subset on a CPU (chapter 5): enough to see the loss fall.
        "fast": dict(
            preset="tiny", tokenizer="words", vocab_size=8000, train_size=3000, min_freq=2, batch_size=32,
            schedule="cosine", lr=3e-3, warmup_steps=20, label_smoothing=0.1, clip_norm=1.0, epochs=1, max_steps=None,
            eval_every=25, target_exact_match=None, log_every=5, bleu="off", beam_size=4, bleu_threshold=None,
            keep_weights=0,
        ),
        # All 29,000 pairs, the multi30k preset (d_model 256, 3+3 layers, Pre-LN) on one joint BPE
        # vocabulary of 8,000 tokens, the paper's Noam schedule peaking at 3e-3: the recipe with the
        # best validation BLEU of chapter 5's comparison (transformer_lib/book/runs/recipes/), and an hour on a
        # 2-core CPU. Validation BLEU (greedy) after every epoch, the last 5 epochs' weights averaged
        # if validation prefers it; 36.5 is the test BLEU Ben Trevett's pytorch-seq2seq tutorial 6 reports
        # (36.52, lowercased; the time to reach it is recorded).
        "full": dict(
            preset="multi30k", tokenizer="bpe", vocab_size=8000, train_size=None, min_freq=2, batch_size=128,
            schedule="noam", lr=3e-3, warmup_steps=800, label_smoothing=0.1, clip_norm=1.0, epochs=16, max_steps=None,
            eval_every=None, target_exact_match=None, log_every=50, bleu="epoch", beam_size=4, bleu_threshold=36.5,
            keep_weights=5,
        ),
    },
}
