"""Train a Transformer from the command line: ``python -m transformer_lib.train``.

Examples::

    python -m transformer_lib.train --task reverse --out runs/reverse          # a minute on a laptop CPU
    python -m transformer_lib.train --task multi30k --profile full --out runs/multi30k
    # a GPU machine without the data or spaCy: prepare on another machine, copy data.pt
    python -m transformer_lib.train --task multi30k --prepare-only --out runs/m30k-data
    python -m transformer_lib.train --task multi30k --data runs/m30k-data/data.pt --out runs/multi30k
    # several GPUs of one machine: one process each (the batch size stays the global batch)
    torchrun --standalone --nproc-per-node 4 -m transformer_lib.train --task multi30k --data DATA --out OUT

The output folder gets ``checkpoint.pt`` (the latest state; see :mod:`transformer_lib.checkpoint`
for its contents), ``metrics.json`` (the results file: settings, the command, hardware and
software versions, losses per epoch and per logging window, validation and test metrics, BLEU
greedy and beam with sacrebleu's signature) and ``loss.png``, each written atomically. Run the same
command again and it resumes from ``checkpoint.pt``: an interrupted run loses at most the work since
its last checkpoint. Only the options in :data:`RESUMABLE` (more steps or epochs, how to evaluate)
and ``--device``/``--compile``/``--checkpoint-every`` may change on resume; any other option that
differs from the checkpoint is refused, by name. ``--restart`` starts over, and a fresh run into a
folder with earlier results moves them to ``OUT/previous-*`` first: nothing is deleted. One run at
a time holds ``OUT/.lock``. A NaN or infinite loss, gradient norm or weight stops training before
anything is saved, so ``checkpoint.pt`` keeps the last good weights.

A user error (a bad option, missing data, an unwritable ``--out``, a diverged run) prints one line
``error: ...`` and exits with status 2; ``--debug`` (or ``TRANSFORMER_LIB_DEBUG=1``) shows the traceback.

BLEU (``--bleu``): ``final`` decodes the validation and test sets at the end, greedy and with a
beam; ``epoch`` also decodes the validation set (greedy) at every validation, which picks the
model and measures the time until validation BLEU first reaches ``--bleu-threshold``. With
``--average-last N`` the weights of the last ``N`` checkpoints are kept and averaged at the end;
the average replaces the last weights only if validation says it is better. The test set is
decoded once, at the end, and never chooses anything.

Defaults depend on the task and the profile (``--profile``, else ``TRANSFORMER_BOOK_PROFILE``,
else ``full`` with a CUDA GPU and ``fast`` without); every one can be overridden by its option.
"""

from __future__ import annotations

import argparse
import functools
import importlib.metadata
import itertools
import json
import math
import os
import platform
import shlex
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from .batching import SOURCE_FORMAT, TranslationData, make_loader
from .checkpoint import atomic_write, average_checkpoints, checkpoint_metadata, kept_weights, load_checkpoint, save_checkpoint
from .device import default_device
from .distributed import DistributedSetup, setup_distributed, teardown_distributed, wait_for_all
from .model import PRESETS, Transformer, TransformerConfig, count_parameters
from .prepared import TOKENIZERS, PreparedTranslation, prepare_multi30k
from .toy_tasks import TOY_TASKS, toy_task, toy_vocab
from .training import Trainer, TrainConfig, evaluate
from .translate import CommandLineParser, Translator, evaluate_bleu, run_command
from .vocab import SPECIALS, Vocab

__all__ = [
    "TASKS", "DEFAULTS", "METRICS_FORMAT_VERSION", "RESUMABLE", "main", "cli", "parse_args", "resolve_settings",
    "upgrade_settings", "build_model",
]

# Version of the metrics.json layout (the results file); 2 added BLEU, per-epoch losses, software
# versions, model selection and the distributed setup to version 1's settings and loss history.
METRICS_FORMAT_VERSION = 2

TASKS = (*TOY_TASKS, "multi30k")
# What a resumed run may change: how long to train, and how to evaluate. Every other option given
# when resuming must agree with the checkpoint's settings (the run refuses, naming each); --device,
# --compile, --checkpoint-every, --data/--data-dir (same vocabularies) and --no-progress may also differ.
RESUMABLE = ("epochs", "max_steps", "target_exact_match", "bleu", "beam_size", "bleu_threshold")
# Options that are not settings of the run, or are handled apart from the comparison.
_NOT_COMPARED = ("task", "out", "restart", "device", "compile", "no_progress", "data", "data_dir", "prepare_only",
                 "checkpoint_every", "debug")
# Results an earlier run left in --out: a fresh run or --restart moves them aside, never deletes them.
_EARLIER_RESULTS = ("checkpoint.pt", "model.pt", "weights", "metrics.json", "loss.png")

# Defaults per task family and profile. Toy tasks are CPU-sized in both profiles.
# Toy tasks: the tiny preset without dropout (nothing to regularise: the rule is all there is to
# learn) and a cosine schedule, whose decay to zero settles the last few sequences. Training stops
# at 100% held-out exact match, which takes ~600 updates for sequences of 1 to 8 symbols;
# max_steps (also the cosine's length) leaves a margin. One evaluation of the 1,000 held-out
# sequences costs about as much as ten updates, hence every 50.
_TOY = dict(
    preset="tiny", dropout=0.0, n_train=20000, n_heldout=1000, n_symbols=10, min_len=1, max_len=8,
    batch_size=64, schedule="cosine", lr=3e-3, warmup_steps=100, label_smoothing=0.1, clip_norm=1.0,
    epochs=None, max_steps=800, eval_every=50, target_exact_match=1.0, log_every=25,
    bleu="off", beam_size=4, bleu_threshold=None, keep_weights=0,
)
# The settings keys are TrainConfig's field names where there is one (TrainConfig.from_dict reads
# them); an option named otherwise says so with dest (--warmup: warmup_steps).
DEFAULTS: dict[str, dict[str, dict[str, Any]]] = {
    "toy": {"fast": dict(_TOY), "full": dict(_TOY)},
    "multi30k": {
        # One pass over a 3,000-pair subset on a CPU (chapter 5): enough to see the loss fall.
        "fast": dict(
            preset="tiny", dropout=None, norm=None, tokenizer="spacy", vocab_size=8000,
            train_size=3000, min_freq=2, batch_size=32, schedule="cosine",
            lr=3e-3, warmup_steps=20, label_smoothing=0.1, clip_norm=1.0, epochs=1, max_steps=None,
            eval_every=25, target_exact_match=None, log_every=5,
            bleu="off", beam_size=4, bleu_threshold=None, keep_weights=0,
        ),
        # All 29,000 pairs, the multi30k preset (d_model 256, 3+3 layers, Pre-LN) on one joint BPE
        # vocabulary of 8,000 tokens, the paper's Noam schedule peaking at 3e-3: the recipe with the
        # best validation BLEU of chapter 5's comparison (transformer_lib/book/runs/recipes/), and an hour on a
        # 2-core CPU. Validation BLEU (greedy) after every epoch, the last 5 epochs' weights averaged
        # if validation prefers it; 36.5 is the test BLEU Ben Trevett's pytorch-seq2seq tutorial 6 reports
        # (36.52, lowercased; the time to reach it is recorded).
        "full": dict(
            preset="multi30k", dropout=None, norm=None, tokenizer="bpe", vocab_size=8000,
            train_size=None, min_freq=2, batch_size=128, schedule="noam",
            lr=3e-3, warmup_steps=800, label_smoothing=0.1, clip_norm=1.0, epochs=16, max_steps=None,
            eval_every=None, target_exact_match=None, log_every=50,
            bleu="epoch", beam_size=4, bleu_threshold=36.5, keep_weights=5,
        ),
    },
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    from .book.experiment import PROFILE_ENV  # the book's size switch; imported here, so the core never loads the book package

    parser = CommandLineParser(
        prog="python -m transformer_lib.train",
        description="Train an encoder-decoder Transformer on a toy task or on Multi30k (German -> English).",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--task", choices=TASKS, required=True, help="what to learn")
    parser.add_argument("--out", type=Path, required=True, help="output folder (checkpoint.pt, metrics.json, loss.png)")
    parser.add_argument("--profile", choices=("fast", "full"), default=None, help=f"default sizes (default: ${PROFILE_ENV}, else full on GPU, fast on CPU)")
    parser.add_argument("--preset", choices=sorted(PRESETS), default=None, help="model size")
    parser.add_argument("--restart", action="store_true",
                        help="start over, although --out has a checkpoint (earlier results are moved to OUT/previous-*)")
    parser.add_argument("--device", default="auto", help="'auto' (CUDA if available), 'cpu', 'cuda', 'cuda:1', ...")
    parser.add_argument("--amp", choices=("auto", "bf16", "off"), default=None, help="bf16 autocast (default auto: on CUDA only)")
    parser.add_argument("--compile", action="store_true", help="torch.compile the training forward pass (worth it on a GPU)")
    parser.add_argument("--seed", type=int, default=None, help="(default: 0)")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar (TQDM_DISABLE=1 does too)")
    parser.add_argument("--debug", action="store_true", help="show the traceback of an error (or set TRANSFORMER_LIB_DEBUG=1)")
    _add_training_options(parser.add_argument_group("training (defaults depend on task and profile)"))
    _add_data_options(parser.add_argument_group("toy tasks (copy, reverse)"), parser.add_argument_group("multi30k"))
    return parser.parse_args(argv)


def _add_training_options(train: Any) -> None:
    train.add_argument("--epochs", type=int, default=None)
    train.add_argument("--max-steps", type=int, default=None)
    train.add_argument("--batch-size", type=int, default=None, help="sentences per batch")
    train.add_argument("--schedule", choices=("noam", "cosine", "constant"), default=None)
    train.add_argument("--lr", type=float, default=None, help="peak learning rate")
    train.add_argument("--warmup", dest="warmup_steps", type=int, default=None, help="warm-up steps (the rate peaks here)")
    train.add_argument("--label-smoothing", type=float, default=None)
    train.add_argument("--clip-norm", type=float, default=None, help="gradient clipping (0: off)")
    train.add_argument("--weight-decay", type=float, default=None, help="(default: 0)")
    train.add_argument("--dropout", type=float, default=None, help="override the preset's dropout")
    train.add_argument("--norm", choices=("pre", "post"), default=None,
                       help="override the preset's LayerNorm placement: pre (Pre-LN) or post (the paper's Post-LN)")
    train.add_argument("--eval-every", type=int, default=None, help="validate every N steps (default: each epoch)")
    train.add_argument("--checkpoint-every", type=int, default=None, help="also checkpoint every N steps")
    train.add_argument("--target-exact-match", type=float, default=None, help="stop at this validation exact match (0: never)")
    train.add_argument("--log-every", type=int, default=None)
    train.add_argument("--average-last", dest="keep_weights", type=int, default=None, metavar="N",
                       help="keep the last N checkpoints' weights and try their average at the end (0: off)")


def _add_data_options(toy: Any, m30k: Any) -> None:
    toy.add_argument("--n-train", type=int, default=None)
    toy.add_argument("--n-heldout", type=int, default=None, help="held-out sequences, never seen in training")
    toy.add_argument("--n-symbols", type=int, default=None)
    toy.add_argument("--min-len", type=int, default=None)
    toy.add_argument("--max-len", type=int, default=None)
    m30k.add_argument("--data-dir", type=Path, default=None, help="folder with the .gz files (default: $MULTI30K_DIR, else download to the cache)")
    m30k.add_argument("--data", type=Path, default=None, help="prepared data from --prepare-only (skips tokenizing)")
    m30k.add_argument("--prepare-only", action="store_true",
                      help="tokenize and write OUT/data.pt, then stop (for the full profile unless --profile says otherwise)")
    m30k.add_argument("--train-size", type=int, default=None, help="train on a random subset of this many pairs")
    m30k.add_argument("--tokenizer", choices=TOKENIZERS, default=None,
                      help="spacy: word vocabularies, one per language; bpe: one joint subword vocabulary, embeddings shared and tied")
    m30k.add_argument("--vocab-size", type=int, default=None, help="with --tokenizer bpe: tokens in the joint vocabulary")
    m30k.add_argument("--min-freq", type=int, default=None, help="spacy: fewest occurrences of a word; bpe: of a pair to merge")
    m30k.add_argument("--lowercase", action="store_true")
    m30k.add_argument("--bleu", choices=("off", "final", "epoch"), default=None,
                      help="decode and score BLEU: at the end (val and test, greedy and beam), or also after every validation (val, greedy)")
    m30k.add_argument("--beam-size", type=int, default=None, help="beam width for the final BLEU (beside greedy)")
    m30k.add_argument("--bleu-threshold", type=float, default=None,
                      help="with --bleu epoch: record when validation BLEU (greedy, lowercased) first reaches this")


def resolve_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The run's settings: the task/profile defaults, overridden by every option given.

    ``--prepare-only`` without ``--profile`` prepares the data of a full run: the file is usually
    made on one machine (with the data and spaCy) for a full run on another (a GPU).
    """
    from .book.experiment import current_profile

    profile = args.profile or ("full" if getattr(args, "prepare_only", False) else current_profile())
    family = "toy" if args.task in TOY_TASKS else "multi30k"
    settings = dict(DEFAULTS[family][profile])
    for key, value in vars(args).items():
        if key == "target_exact_match" and value == 0:
            settings[key] = None
        elif key == "clip_norm" and value == 0:
            settings[key] = None
        elif value is not None and (key in settings or key in ("weight_decay", "seed", "lowercase", "amp", "compile")):
            settings[key] = value
    settings.update(task=args.task, profile=profile)
    settings.setdefault("seed", 0)
    settings.setdefault("weight_decay", 0.0)
    _check_settings(settings)
    return settings


# Settings renamed to TrainConfig's field names; checkpoints and results files written before use the old names.
_RENAMED_SETTINGS = {"warmup": "warmup_steps", "average_last": "keep_weights"}


def upgrade_settings(settings: dict[str, Any]) -> dict[str, Any]:
    """A run's settings (a checkpoint's ``run``, a results file's ``settings``) under this version's names."""
    return {_RENAMED_SETTINGS.get(key, key): value for key, value in settings.items()}


def _flag(key: str) -> str:
    """The command-line option that sets ``key``: ``--warmup`` for ``warmup_steps``, ``--max-steps`` for ``max_steps``."""
    old = {new: old for old, new in _RENAMED_SETTINGS.items()}.get(key, key)
    return "--" + old.replace("_", "-")


def _check_settings(settings: dict[str, Any]) -> None:
    for key in ("batch_size", "warmup_steps", "log_every", "n_train", "n_heldout", "n_symbols", "min_len", "max_len", "min_freq", "beam_size", "vocab_size"):
        value = settings.get(key)
        if value is not None and value < 1:
            raise ValueError(f"{_flag(key)} must be at least 1, got {value}")
    for key in ("epochs", "max_steps", "eval_every", "train_size"):
        value = settings.get(key)
        if value is not None and value < 1:
            raise ValueError(f"{_flag(key)} must be at least 1 (or left out), got {value}")
    if settings.get("tokenizer") == "bpe" and settings.get("vocab_size") is not None and settings["vocab_size"] <= len(SPECIALS):
        raise ValueError(f"--vocab-size must be more than the {len(SPECIALS)} special tokens for --tokenizer bpe, got {settings['vocab_size']}")
    if settings.get("keep_weights", 0) < 0:
        raise ValueError(f"--average-last must be 0 (off) or more, got {settings['keep_weights']}")
    _check_numbers(settings)
    if settings["task"] in TOY_TASKS and settings.get("bleu", "off") != "off":
        raise ValueError(f"--bleu {settings['bleu']}: BLEU scores translations; the {settings['task']!r} task has exact match instead")


# The real-valued settings: finite, and inside these ranges (``--lr inf`` used to train to NaN).
_NUMBER_RANGES: dict[str, tuple[Any, str]] = {
    "lr": (lambda v: v > 0, "> 0, e.g. 5e-4"),
    "label_smoothing": (lambda v: 0 <= v < 1, "in [0, 1); the paper uses 0.1"),
    "dropout": (lambda v: 0 <= v < 1, "in [0, 1), e.g. 0.1"),
    "clip_norm": (lambda v: v > 0, "> 0 (0 turns clipping off)"),
    "weight_decay": (lambda v: v >= 0, ">= 0"),
    "target_exact_match": (lambda v: 0 < v <= 1, "in (0, 1] (0: never stop early)"),
    "bleu_threshold": (lambda v: 0 <= v <= 100, "in [0, 100]"),
}


def _check_numbers(settings: dict[str, Any]) -> None:
    for key, (inside, rule) in _NUMBER_RANGES.items():
        value = settings.get(key)
        if value is not None and not (math.isfinite(value) and inside(value)):
            raise ValueError(f"{_flag(key)} must be a finite number {rule}, got {value}")


def _check_options(args: argparse.Namespace) -> None:
    """Options that make no sense together or for the task: refuse them before anything is created."""
    toy_only = ("n_train", "n_heldout", "n_symbols", "min_len", "max_len")
    multi30k_only = ("data_dir", "data", "prepare_only", "train_size", "min_freq", "lowercase", "tokenizer", "vocab_size")
    wrong = [key for key in (multi30k_only if args.task in TOY_TASKS else toy_only) if getattr(args, key) not in (None, False)]
    if wrong:
        names = ", ".join(_flag(key) for key in wrong)
        what = "the toy tasks make their data themselves" if args.task in TOY_TASKS else "those options are for the toy tasks"
        raise ValueError(f"{names} do(es) not apply to --task {args.task}: {what}; leave it out")
    if args.checkpoint_every is not None and args.checkpoint_every < 1:
        raise ValueError(f"--checkpoint-every must be at least 1 (or left out), got {args.checkpoint_every}")
    if args.restart and args.prepare_only:
        raise ValueError("--restart and --prepare-only: --prepare-only only writes data.pt; leave out --restart")


def _device(name: str) -> torch.device:
    if name == "auto":
        return default_device()
    try:
        device = torch.device(name)
    except RuntimeError:
        raise ValueError(f"--device {name}: not a device; use auto, cpu, cuda or cuda:N") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"--device {name}: this machine has no CUDA GPU (torch.cuda.is_available() is False); use --device cpu")
    return device


def _hardware(device: torch.device, processes: DistributedSetup) -> dict[str, Any]:
    info: dict[str, Any] = {
        "device": str(device),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "processes": processes.world_size,
    }
    if device.type == "cuda":
        properties = torch.cuda.get_device_properties(device)
        info.update(
            gpu=torch.cuda.get_device_name(device),
            gpu_memory_gib=round(properties.total_memory / 2**30, 1),
            gpus_on_machine=torch.cuda.device_count(),
        )
    return info


def _software() -> dict[str, Any]:
    """Versions of everything that can change the numbers, and the commit of this code."""
    versions: dict[str, Any] = {"python": platform.python_version()}
    for package in ("torch", "numpy", "sacrebleu", "sacremoses", "spacy", "tqdm"):
        try:
            versions[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            versions[package] = None
    versions["cuda"] = torch.version.cuda
    versions["cudnn"] = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    repository = Path(__file__).resolve().parents[1]
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repository, capture_output=True, text=True, timeout=10)
        changed = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=repository,
                                 capture_output=True, text=True, timeout=10)
        versions["git_commit"] = (commit.stdout.strip() or None) if commit.returncode == 0 else None
        versions["git_uncommitted_changes"] = bool(changed.stdout.strip()) if changed.returncode == 0 else None
    except (OSError, subprocess.SubprocessError):
        versions["git_commit"] = versions["git_uncommitted_changes"] = None
    return versions


def build_model(model_config: dict[str, Any]) -> Transformer:
    """A :class:`~transformer_lib.model.Transformer` from a checkpoint's ``model_config``."""
    return Transformer(TransformerConfig.from_dict(model_config))


def _toy_data(settings: dict[str, Any]) -> tuple[Vocab, TranslationData, TranslationData, dict[str, Any]]:
    train, heldout = toy_task(
        settings["task"], settings["n_train"], settings["n_heldout"], n_symbols=settings["n_symbols"],
        min_len=settings["min_len"], max_len=settings["max_len"], seed=settings["seed"],
    )
    described = {key: settings[key] for key in ("n_train", "n_heldout", "n_symbols", "min_len", "max_len", "seed")}
    return toy_vocab(settings["n_symbols"]), train, heldout, {**described, "source_format": SOURCE_FORMAT}


def _multi30k_data(settings: dict[str, Any], args: argparse.Namespace, out: Path, processes: DistributedSetup,
                   device: torch.device, cached_exists: bool) -> PreparedTranslation:
    """The prepared data: ``--data``, else ``OUT/data.pt`` if it was there when the run started, else tokenize."""
    cached = out / "data.pt"
    if args.data is not None:
        return _load_prepared(args.data)
    if cached_exists and not args.restart and not args.prepare_only:
        return _load_prepared(cached)
    if processes.is_main:  # one process tokenizes; the others wait for its file
        what = "all pairs" if settings["train_size"] is None else f"a random {settings['train_size']:,} pairs"
        print(f"preparing {what} of the training split ({settings['profile']} profile)", flush=True)
        how = (f"spaCy blank tokenizers, min_freq={settings['min_freq']}" if settings["tokenizer"] == "spacy"
               else f"joint BPE vocabulary of {settings['vocab_size']:,} tokens, learned on the training split")
        print(f"tokenizing Multi30k ({how}) ...", flush=True)
        prepared = prepare_multi30k(
            args.data_dir, lowercase=settings.get("lowercase", False), min_freq=settings["min_freq"],
            train_size=settings["train_size"], seed=settings["seed"], tokenizer=settings["tokenizer"],
            vocab_size=settings["vocab_size"],
        )
        prepared.save(cached)
    wait_for_all(device)
    return prepared if processes.is_main else _load_prepared(cached)


def _check_prepared(prepared: PreparedTranslation, settings: dict[str, Any], args: argparse.Namespace, path: Path) -> None:
    """The prepared data decide how text became ids; refuse data that contradict the run.

    A full run on a subset (data prepared with the fast profile) fails here rather than train
    quietly on a tenth of the data; so do options given explicitly that the data contradict.
    Afterwards ``settings`` record what the data hold.
    """
    made = prepared.settings
    if settings["train_size"] is None and made.get("train_subset"):
        raise ValueError(
            f"{path} holds a random subset of {made['train_size']:,} training pairs, but this run ({settings['profile']} "
            f"profile) trains on all of them; prepare the data with `--prepare-only --profile {settings['profile']}`, "
            f"or pass --train-size {made['train_size']} to train on the subset"
        )
    if args.train_size is not None and made.get("train_size") != args.train_size:
        raise ValueError(f"{path} holds {made.get('train_size')} training pairs but --train-size is {args.train_size}")
    if args.min_freq is not None and made.get("min_freq") != args.min_freq:
        raise ValueError(f"{path} was prepared with min_freq={made.get('min_freq')} but --min-freq is {args.min_freq}")
    if args.lowercase and not made.get("lowercase"):
        raise ValueError(f"{path} was prepared without --lowercase; prepare it again with --lowercase")
    tokenizer = "bpe" if made.get("tokenizer") == "bpe" else "spacy"
    if args.tokenizer is not None and args.tokenizer != tokenizer:
        raise ValueError(f"{path} was prepared with the {tokenizer} tokenizer but --tokenizer is {args.tokenizer}")
    if args.vocab_size is not None and tokenizer == "bpe" and made.get("vocab_size") != args.vocab_size:
        raise ValueError(f"{path} holds a BPE vocabulary of {made.get('vocab_size')} tokens but --vocab-size is {args.vocab_size}")
    settings.update(
        tokenizer=tokenizer,
        vocab_size=made.get("vocab_size") if tokenizer == "bpe" else None,
        train_size=made["train_size"] if made.get("train_subset") else None,
        min_freq=made.get("min_freq", settings["min_freq"]),
        lowercase=made.get("lowercase", False),
    )


def _model_overrides(settings: dict[str, Any]) -> dict[str, Any]:
    """What the options change in the preset: dropout, LayerNorm placement, and one shared embedding
    matrix for a joint (BPE) vocabulary (source, target and output layer: three uses, one matrix)."""
    overrides: dict[str, Any] = {}
    if settings.get("dropout") is not None:
        overrides["dropout"] = settings["dropout"]
    if settings.get("norm") is not None:
        overrides["norm_first"] = settings["norm"] == "pre"
    if settings.get("tokenizer") == "bpe":
        overrides.update(share_embeddings=True, tie_output=True)
    return overrides


def _check_lengths(data: TranslationData, max_len: int, split: str, say: Any = print) -> TranslationData:
    """Drop (train) or refuse (other splits) pairs longer than the model's positional table."""
    fits = [i for i, (s, t) in enumerate(zip(data.src_lengths, data.tgt_lengths)) if max(s, t) + 1 <= max_len]
    if len(fits) == len(data):
        return data
    longest = max(max(s, t) for s, t in zip(data.src_lengths, data.tgt_lengths))
    if split != "train":
        raise ValueError(f"the {split} split has a sentence of {longest} tokens; the model's max_len={max_len} allows {max_len - 1}")
    say(f"dropping {len(data) - len(fits)} training pairs longer than {max_len - 1} tokens")
    return data.subset(fits)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run the command line; returns what it writes to ``metrics.json``.

    Under ``torchrun`` every process runs this; process 0 prints and writes the files.
    """
    args = parse_args(argv)
    _check_options(args)
    resolve_settings(args)  # every value is checked before anything is created
    device = _device(args.device)
    created = not args.out.exists()
    processes = setup_distributed(device.type)
    lock = None
    try:
        if processes.is_main:
            lock = _lock_folder(args.out)
        return _main(args, argv, processes, processes.device(device.type) if processes.world_size > 1 else device)
    finally:
        _unlock_folder(lock, args.out, remove_if_empty=created)
        teardown_distributed(processes)


def cli(argv: list[str] | None = None) -> int:
    """``python -m transformer_lib.train``: :func:`main`, with a user error (a bad option, missing
    data, an unwritable ``--out``, a diverged run) as one line ``error: ...`` and exit status 2."""
    return run_command(lambda: main(argv), argv)


def _lock_folder(out: Path) -> Any:
    """Hold ``OUT/.lock`` while this run lives: a second run into the same folder is refused.

    ``flock`` is released by the kernel when the process ends, however it ends (SIGKILL too), so a
    crashed run never leaves the folder locked. On a system without ``fcntl`` (Windows) there is no lock.
    """
    try:
        import fcntl
    except ImportError:
        return None
    out.mkdir(parents=True, exist_ok=True)
    handle = open(out / ".lock", "a+", encoding="utf-8")  # noqa: SIM115 - held until _unlock_folder
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        handle.seek(0)
        owner = handle.read().strip() or "?"
        handle.close()
        raise ValueError(f"another run (process {owner}) is writing to {out}; wait for it to end, or use another --out") from None
    handle.seek(0)
    handle.truncate()
    handle.write(f"{os.getpid()}\n")
    handle.flush()
    for stale in [*out.glob(".*.tmp"), *(out / "weights").glob(".*.tmp")]:
        stale.unlink(missing_ok=True)  # left by a save that was killed; no other run writes here
    return handle


def _unlock_folder(lock: Any, out: Path, remove_if_empty: bool) -> None:
    """Release the lock; a folder this run created and left empty (it never started) is removed."""
    if lock is not None:
        lock.close()
    if remove_if_empty and out.is_dir() and {p.name for p in out.iterdir()} <= {".lock"}:
        (out / ".lock").unlink(missing_ok=True)
        out.rmdir()


def _refuse_changed_settings(args: argparse.Namespace, resumed: dict[str, Any], checkpoint_path: Path) -> None:
    """Resuming: every option given (but those of :data:`RESUMABLE`) must agree with the checkpoint."""
    fresh, saved = resolve_settings(args), dict(resumed["run"])
    if saved.get("dropout") is None:
        saved["dropout"] = resumed["model_config"].get("dropout")  # the preset's
    given = [key for key, value in vars(args).items() if value not in (None, False)]
    conflicts = [
        f"{_flag(key)} {fresh[key]} (the checkpoint has {saved[key]})"
        for key in given
        if key not in (*RESUMABLE, *_NOT_COMPARED) and key in fresh and key in saved and fresh[key] != saved[key]
    ]
    if conflicts:
        raise ValueError(
            f"{checkpoint_path} was trained with other settings: {'; '.join(conflicts)}. Leave these options out "
            f"to resume it, use another --out, or --restart to start over (only {', '.join(_flag(k) for k in RESUMABLE)} "
            "may change on resume)"
        )


def _move_aside(out: Path, names: list[str], say: Any) -> None:
    """Move earlier results into a new ``OUT/previous-YYYYmmdd-HHMMSS`` folder instead of deleting them."""
    present = [out / name for name in names if (out / name).exists()]
    if not present:
        return
    stamp = time.strftime("%Y%m%d-%H%M%S")
    aside = out / f"previous-{stamp}"
    for n in itertools.count(2):
        if not aside.exists():
            break
        aside = out / f"previous-{stamp}-{n}"
    aside.mkdir()
    for path in present:
        os.replace(path, aside / path.name)
    say(f"moved the earlier results ({', '.join(p.name for p in present)}) to {aside}")


def _json_safe(value: Any) -> Any:
    """``value`` with every NaN or infinity as ``None``: JSON has no such numbers (``null`` it has)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: _json_safe(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(item) for item in value]
    return value


def _load_prepared(path: Path) -> PreparedTranslation:
    """:meth:`PreparedTranslation.load`, with a file that is not prepared data as a ``ValueError``."""
    try:
        return PreparedTranslation.load(path)
    except (FileNotFoundError, ValueError):
        raise
    except Exception as error:  # noqa: BLE001 - torch.load raises many kinds for a file of another kind
        raise ValueError(
            f"{path} is not prepared data from --prepare-only (torch.load(weights_only=True) failed with "
            f"{type(error).__name__}); make it with `python -m transformer_lib.train --task multi30k --prepare-only --out FOLDER`"
        ) from None


@dataclass
class _Run:
    """What the steps of one command-line run share: its options and settings, its processes, its files."""

    args: argparse.Namespace
    processes: DistributedSetup
    device: torch.device
    command: str
    software: dict[str, Any]
    settings: dict[str, Any] = field(default_factory=dict)
    resumed: dict[str, Any] | None = None

    @property
    def out(self) -> Path:
        return self.args.out

    @property
    def checkpoint_path(self) -> Path:
        return self.args.out / "checkpoint.pt"

    @property
    def eval_batch_size(self) -> int:
        return max(self.settings["batch_size"], 256)

    def say(self, message: str) -> None:
        """Print (process 0 only: the others train silently)."""
        if self.processes.is_main:
            print(message, flush=True)


@dataclass
class _Data:
    """The run's data: vocabularies, splits as token ids, how text became ids, and the raw text pairs."""

    src_vocab: Vocab
    tgt_vocab: Vocab
    splits: dict[str, TranslationData]
    description: dict[str, Any]
    text: dict[str, list[tuple[str, str]]] = field(default_factory=dict)


def _main(args: argparse.Namespace, argv: list[str] | None, processes: DistributedSetup, device: torch.device) -> dict[str, Any]:
    """One run: settings (fresh or resumed), data, model and trainer, training, final results, files."""
    if args.prepare_only and processes.world_size > 1:
        raise ValueError("--prepare-only runs in one process: run it with python, not torchrun")
    args.out.mkdir(parents=True, exist_ok=True)
    # The software versions now, not when writing metrics.json: the code may change while it trains.
    run = _Run(args, processes, device, _command_line(argv, processes), _software())
    run.resumed, run.settings = _resume_or_start(run)
    data_cached = _prepare_folder(run)
    data = _load_data(run, data_cached)
    if args.prepare_only:
        return _prepared_only(run, data)
    trainer = _make_trainer(run, _build_run_model(run, data), data)
    start = time.perf_counter()
    trainer.fit()
    wall_s = time.perf_counter() - start
    metrics = _metrics(run, trainer, data, _final_results(run, trainer, data), wall_s)
    _write_results(run, trainer, metrics, wall_s)
    return metrics


def _command_line(argv: list[str] | None, processes: DistributedSetup) -> str:
    """The command that started this run, as the results file records it."""
    launcher = f"torchrun --nproc-per-node {processes.world_size} -m" if processes.world_size > 1 else "python -m"
    return f"{launcher} transformer_lib.train " + " ".join(shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:]))


def _resume_or_start(run: _Run) -> tuple[dict[str, Any] | None, dict[str, Any]]:
    """The checkpoint to resume (``None``: a fresh run) and the run's settings."""
    args = run.args
    if not run.checkpoint_path.is_file() or args.restart or args.prepare_only:
        return None, resolve_settings(args)
    resumed = load_checkpoint(run.checkpoint_path)
    resumed["run"] = upgrade_settings(resumed["run"])
    if resumed["task"] != args.task:
        raise ValueError(
            f"{run.checkpoint_path} is a {resumed['task']!r} run but --task is {args.task!r}; use another --out, or --restart"
        )
    _refuse_changed_settings(args, resumed, run.checkpoint_path)
    settings = dict(resumed["run"])
    # Only how long to train, where, and how to evaluate or show it may change when resuming.
    for key in RESUMABLE:
        if getattr(args, key) is not None:
            settings[key] = None if (key == "target_exact_match" and getattr(args, key) == 0) else getattr(args, key)
    if args.compile:
        settings["compile"] = True
    _check_settings(settings)
    run.say(f"resuming from {run.checkpoint_path} at step {resumed['step']} (settings from the checkpoint)")
    return resumed, settings


def _prepare_folder(run: _Run) -> bool:
    """Move an earlier run's results aside (a fresh run), seed, and say whether ``OUT/data.pt`` was there."""
    args, out = run.args, run.out
    data_cached = (out / "data.pt").is_file()
    if run.resumed is None and run.processes.is_main:
        # A fresh run (or --restart): weights kept by an earlier run in this folder must not join its
        # average, and nothing an earlier run wrote is lost: it is moved aside.
        rewrites_data = args.task == "multi30k" and args.data is None and (args.restart or args.prepare_only)
        earlier = [] if args.prepare_only else list(_EARLIER_RESULTS)
        _move_aside(out, earlier + (["data.pt"] if rewrites_data else []), run.say)
    # Every process has looked for a checkpoint and data before any process writes one.
    wait_for_all(run.device)
    torch.manual_seed(run.settings["seed"])
    if run.device.type == "cuda":
        # TF32 tensor cores for what runs in float32 (the parts autocast leaves there).
        torch.set_float32_matmul_precision("high")
    return data_cached


def _load_data(run: _Run, data_cached: bool) -> _Data:
    """The toy task's data, or Multi30k's (prepared: ``--data``, ``OUT/data.pt``, or tokenized now)."""
    args, settings = run.args, run.settings
    if args.task in TOY_TASKS:
        vocab, train_data, val_data, description = _toy_data(settings)
        return _Data(vocab, vocab, {"train": train_data, "val": val_data}, description)
    if run.resumed is not None and args.data is None and not (run.out / "data.pt").is_file():
        raise FileNotFoundError(f"resuming a multi30k run needs its prepared data: {run.out / 'data.pt'} or --data")
    prepared = _multi30k_data(settings, args, run.out, run.processes, run.device, data_cached)
    if run.resumed is None and not args.prepare_only:
        _check_prepared(prepared, settings, args, args.data or run.out / "data.pt")
    splits = {name: split for name, split in prepared.splits.items() if split is not None}
    return _Data(prepared.src_vocab, prepared.tgt_vocab, splits, dict(prepared.settings), prepared.text)


def _prepared_only(run: _Run, data: _Data) -> dict[str, Any]:
    sizes = {name: len(split) for name, split in data.splits.items()}
    print(f"wrote {run.out / 'data.pt'}: {sizes} pairs, vocabularies {len(data.src_vocab)} / {len(data.tgt_vocab)}")
    return {"prepared": str(run.out / "data.pt"), "sizes": sizes}


def _build_run_model(run: _Run, data: _Data) -> Transformer:
    """The model: the checkpoint's configuration when resuming, else the preset with the options' changes."""
    settings = run.settings
    if run.resumed is not None:
        model_config = TransformerConfig.from_dict(run.resumed["model_config"])
        if Vocab.from_dict(run.resumed["src_vocab"]) != data.src_vocab or Vocab.from_dict(run.resumed["tgt_vocab"]) != data.tgt_vocab:
            raise ValueError(f"the data's vocabularies differ from those in {run.checkpoint_path}; resume with the same data, or --restart")
    else:
        model_config = TransformerConfig.from_preset(
            settings["preset"], src_vocab_size=len(data.src_vocab), tgt_vocab_size=len(data.tgt_vocab),
            pad_id=data.src_vocab.pad_id, **_model_overrides(settings),
        )
    model = Transformer(model_config)
    if run.processes.rank > 0:
        # Every process starts from process 0's weights (DDP copies them); dropout differs per process.
        torch.manual_seed(settings["seed"] + run.processes.rank)
    data.splits["train"] = _check_lengths(data.splits["train"], model_config.max_len, "train", run.say)
    _check_lengths(data.splits["val"], model_config.max_len, "val")
    return model


def _loader(run: _Run, data: _Data, split: str, **options: Any) -> Any:
    """A loader of ``split``: this process's slice of every batch, with the target vocabulary's specials."""
    vocab = data.tgt_vocab
    return make_loader(
        data.splits[split], options.pop("batch_size", run.eval_batch_size), pad_id=vocab.pad_id, bos_id=vocab.bos_id,
        eos_id=vocab.eos_id, num_replicas=run.processes.world_size, rank=run.processes.rank, **options,
    )


def _make_trainer(run: _Run, model: Transformer, data: _Data) -> Trainer:
    """The :class:`Trainer`, its config straight from the settings (they carry TrainConfig's names)."""
    settings, args = run.settings, run.args
    config = TrainConfig.from_dict(
        {**settings, "pad_id": data.tgt_vocab.pad_id, "progress": not args.no_progress, "checkpoint_every": args.checkpoint_every}
    )
    pin = run.device.type == "cuda"
    train_loader = _loader(run, data, "train", batch_size=settings["batch_size"], seed=settings["seed"], pin_memory=pin)
    metadata = checkpoint_metadata(
        model.config, data.src_vocab, data.tgt_vocab, args.task, data.description,
        run={k: v for k, v in settings.items() if k not in ("data", "out")},
    )
    val_bleu = functools.partial(_val_bleu_record, run, data) if settings.get("bleu") == "epoch" else None
    trainer = Trainer(
        model, train_loader, config, val_loader=_loader(run, data, "val", shuffle=False, pin_memory=pin), device=run.device,
        checkpoint_path=run.checkpoint_path, metadata=metadata, on_eval=functools.partial(_report_validation, run),
        val_metrics=val_bleu,
    )
    if run.resumed is not None:
        trainer.load_state_dict(run.resumed)
        if trainer.step > trainer.total_steps:
            raise ValueError(
                f"{run.checkpoint_path} is at step {trainer.step}, past the {trainer.total_steps} steps this run asks for "
                "(--max-steps / --epochs); ask for more to go on, or --restart to start over"
            )
    processes = run.processes
    where = f"{processes.world_size} processes ({processes.backend}) on {run.device.type}" if processes.world_size > 1 else str(run.device)
    run.say(
        f"{args.task}: {count_parameters(model):,} parameters, {len(data.splits['train']):,} training pairs, "
        f"{trainer.total_steps} steps at most, on {where}"
    )
    return trainer


def _report_validation(run: _Run, record: dict[str, float]) -> None:
    extra = f", exact match {record['exact_match']:.1%}" if run.args.task in TOY_TASKS else f", ppl {record['ppl']:.2f}"
    if "bleu" in record:
        extra += f", BLEU {record['bleu']:.2f} (lowercased {record['bleu_lowercased']:.2f})"
    run.say(f"step {record['step']:>6}  validation loss {record['loss']:.3f}{extra}")


def _bleu(run: _Run, model: Transformer, data: _Data, split: str, beam_sizes: tuple[int, ...] = (1,)) -> dict[str, Any]:
    """:func:`~transformer_lib.translate.evaluate_bleu` of ``split``: its token ids decoded, scored against the raw text."""
    translator = Translator(model, data.src_vocab, data.tgt_vocab, "multi30k", dict(data.description))
    references = [reference for _, reference in data.text[split]]
    pairs = list(zip(data.splits[split].src, references))
    return evaluate_bleu(translator, pairs, beam_sizes=beam_sizes, batch_size=run.eval_batch_size)


def _val_bleu_record(run: _Run, data: _Data, model: Transformer) -> dict[str, float]:
    """Validation BLEU (greedy) for the trainer's validation record."""
    greedy = _bleu(run, model, data, "val")["greedy"]
    return {"bleu": greedy["bleu"].score, "bleu_lowercased": greedy["bleu_lowercased"].score}


def _evaluate_split(run: _Run, trainer: Trainer, data: _Data, split: str) -> dict[str, float]:
    loader = _loader(run, data, split, shuffle=False)
    config = trainer.config
    return evaluate(trainer.model, loader, device=run.device, pad_id=config.pad_id, amp=config.amp,
                    all_reduce=run.processes.world_size > 1)


def _final_results(run: _Run, trainer: Trainer, data: _Data) -> dict[str, Any]:
    """After training: choose the weights, then measure them (loss, and BLEU if asked) on val and test."""
    bleu_on = run.settings.get("bleu", "off") != "off"
    val_bleu = functools.partial(_val_bleu_record, run, data, trainer.model) if bleu_on else None
    selection = _select_weights(run, trainer, data, val_bleu)
    final = {split: _evaluate_split(run, trainer, data, split) for split in ("val", "test") if split in data.splits}
    bleu, examples = _final_bleu(run, trainer.model, data) if bleu_on else ({}, [])
    return {"selection": selection, "final": final, "bleu": bleu or None, "examples": examples}


def _final_bleu(run: _Run, model: Transformer, data: _Data) -> tuple[dict[str, Any], list[dict[str, str]]]:
    """BLEU of val and test, greedy and with the beam, as metrics.json records it; five test examples."""
    beam = run.settings.get("beam_size", 4)
    results: dict[str, Any] = {}
    for split in ("val", "test"):
        decoded = _bleu(run, model, data, split, (1, beam) if beam > 1 else (1,))
        results[split] = {name: _bleu_record(result) for name, result in decoded.items()}
        for name, result in decoded.items():
            run.say(f"{split} BLEU, {name}: {result['bleu'].score:.2f} (lowercased {result['bleu_lowercased'].score:.2f})")
    examples = [
        {"source": source, "reference": reference, **{name: result["translations"][i] for name, result in decoded.items()}}
        for i, (source, reference) in enumerate(data.text["test"][:5])
    ]
    run.say(f"BLEU signature: {results['test']['greedy']['cased']['signature']}")
    return results, examples


def _bleu_record(result: dict[str, Any]) -> dict[str, Any]:
    """One decoding's BLEU as metrics.json has recorded it since format 2 (``cased``, ``lowercased``, ``seconds``)."""
    return {"cased": asdict(result["bleu"]), "lowercased": asdict(result["bleu_lowercased"]), "seconds": result["seconds"]}


def _metrics(run: _Run, trainer: Trainer, data: _Data, results: dict[str, Any], wall_s: float) -> dict[str, Any]:
    """What metrics.json holds (format :data:`METRICS_FORMAT_VERSION`)."""
    model, history, settings = trainer.model, trainer.history, run.settings
    return {
        "metrics_format": METRICS_FORMAT_VERSION,
        "task": run.args.task,
        "command": run.command,
        "settings": trainer.metadata["run"],
        "data": {key: value for key, value in data.description.items() if key != "subword_model"},
        "model_config": model.config.to_dict(),
        "parameters": count_parameters(model),
        "hardware": _hardware(run.device, run.processes),
        "software": run.software,
        "distributed": {
            "world_size": run.processes.world_size,
            "backend": run.processes.backend,
            "global_batch_size": settings["batch_size"],
        },
        "steps": trainer.step,
        "epochs": trainer.epoch + trainer.batch_in_epoch / trainer.steps_per_epoch,
        "stopped_because": trainer.stopped_because,
        "resumed_from_step": run.resumed["step"] if run.resumed is not None else None,
        "wall_time_s": wall_s,
        "training_time_s": trainer.elapsed_s,
        "per_epoch": _per_epoch(history),
        "time_to_bleu": _time_to_bleu(history, settings.get("bleu_threshold")) if settings.get("bleu") == "epoch" else None,
        **results,
        "history": history,
    }


def _write_results(run: _Run, trainer: Trainer, metrics: dict[str, Any], wall_s: float) -> None:
    """metrics.json and loss.png (process 0), and the closing line."""
    written = ["checkpoint.pt", "metrics.json"] + (["model.pt"] if metrics["selection"]["checkpoint"] == "model.pt" else [])
    if run.processes.is_main:
        text = json.dumps(_json_safe(metrics), indent=2, allow_nan=False) + "\n"
        atomic_write(run.out / "metrics.json", lambda f: f.write(text.encode("utf-8")))
        title = f"{run.args.task}: {metrics['parameters']:,} parameters, {trainer.step} steps"
        if _save_loss_plot(trainer.history, run.out / "loss.png", title):
            written.append("loss.png")
    summary = ", ".join(f"{split} loss {m['loss']:.3f} / exact match {m['exact_match']:.1%}" for split, m in metrics["final"].items())
    run.say(f"done ({trainer.stopped_because}) in {wall_s:.1f} s: {summary}. Wrote {', '.join(written)} in {run.out}")


def _select_weights(run: _Run, trainer: Trainer, data: _Data, val_bleu: Callable[[], dict[str, float]] | None) -> dict[str, Any]:
    """Keep the last weights or the average of the last N checkpoints, whichever validation prefers.

    Validation BLEU (greedy, cased) decides when BLEU is on, else the validation loss. The chosen
    weights stay in ``trainer.model``; if they are the average they are also written to
    ``model.pt`` (a checkpoint for ``transformer_lib.translate``; ``checkpoint.pt`` keeps the
    training state for resuming).
    """
    n = run.settings.get("keep_weights", 0)
    files = kept_weights(trainer.checkpoint_path.parent / "weights") if trainer.checkpoint_path is not None else []
    if n < 2 or len(files) < 2:
        return {"chosen": "last", "candidates": {}, "by": None, "checkpoint": "checkpoint.pt"}
    by = "val BLEU (greedy, cased)" if val_bleu is not None else "val loss"
    last = {name: tensor.detach().clone() for name, tensor in trainer.model.state_dict().items()}
    candidates: dict[str, dict[str, Any]] = {}
    weights = {"last": last, f"average of last {len(files[-n:])}": average_checkpoints(files[-n:])}
    for name, state in weights.items():
        trainer.model.load_state_dict(state)
        result: dict[str, Any] = {"val_loss": _evaluate_split(run, trainer, data, "val")["loss"]}
        if val_bleu is not None:
            result["val_bleu"] = val_bleu()["bleu"]
        if name != "last":
            result["steps"] = [int(f.stem.split("_")[1]) for f in files[-n:]]
        candidates[name] = result
    key = (lambda name: candidates[name]["val_bleu"]) if val_bleu is not None else (lambda name: -candidates[name]["val_loss"])
    chosen = max(candidates, key=key)  # ties keep "last" (first)
    trainer.model.load_state_dict(weights[chosen])
    run.say("model selection by " + by + ": " + ", ".join(
        f"{name} {c.get('val_bleu', c['val_loss']):.3f}" for name, c in candidates.items()) + f" -> {chosen}")
    checkpoint_name = "checkpoint.pt"
    if chosen != "last":
        checkpoint = trainer.checkpoint()  # every process takes part; process 0 writes
        checkpoint_name = "model.pt"
        if trainer.is_main:
            save_checkpoint(trainer.checkpoint_path.parent / checkpoint_name, {**checkpoint, "selected": chosen})
    return {"chosen": chosen, "candidates": candidates, "by": by, "checkpoint": checkpoint_name}


def _per_epoch(history: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """One row per completed epoch: its mean training loss, and the validation made at its end."""
    val_at = {record["step"]: record for record in history.get("val", [])}
    rows = []
    for record in history.get("epochs", []):
        row = {"epoch": record["epoch"], "step": record["step"], "train_loss": record["train_loss"], "elapsed_s": record["elapsed_s"]}
        val = val_at.get(record["step"])
        if val is not None:
            row.update({f"val_{k}": v for k, v in val.items() if k in ("loss", "ppl", "token_accuracy", "bleu", "bleu_lowercased")})
        rows.append(row)
    return rows


def _time_to_bleu(history: dict[str, list[dict[str, Any]]], threshold: float | None) -> dict[str, Any] | None:
    """When validation BLEU (greedy, lowercased) first reached ``threshold``: training time, step, epoch."""
    if threshold is None:
        return None
    found = next((r for r in history.get("val", []) if r.get("bleu_lowercased", float("-inf")) >= threshold), None)
    result: dict[str, Any] = {"threshold": threshold, "metric": "validation BLEU, greedy, lowercased", "reached": found is not None}
    if found is not None:
        result.update(elapsed_s=found["elapsed_s"], step=found["step"], epoch=found["epoch"], bleu_lowercased=found["bleu_lowercased"])
    return result


def _save_loss_plot(history: dict[str, Any], path: Path, title: str) -> bool:
    """Draw the loss curves; on a machine without the book's plotting packages, say so and go on."""
    try:
        from .book.figures import plot_training_curves
    except ImportError as error:
        print(f"no {path.name}: {error} (metrics.json has every number the plot would show)", flush=True)
        return False
    ax = plot_training_curves(history, title=title)
    atomic_write(path, lambda f: ax.figure.savefig(f, dpi=120, format="png"))
    return True


if __name__ == "__main__":
    sys.exit(cli())
