"""Train a Transformer from the command line: ``python -m transformer_lib.train``.

Examples::

    python -m transformer_lib.train --task reverse --out runs/reverse          # a minute on a laptop CPU
    python -m transformer_lib.train --task multi30k --profile full --out runs/multi30k
    # a GPU machine without the data or spaCy's network: prepare on another machine, copy data.pt
    python -m transformer_lib.train --task multi30k --prepare-only --out runs/m30k-data
    python -m transformer_lib.train --task multi30k --data runs/m30k-data/data.pt --out runs/multi30k

The output folder gets ``checkpoint.pt`` (the latest state; see :mod:`transformer_lib.training`
for its contents), ``metrics.json`` (settings, hardware, the loss history, final metrics) and
``loss.png``. Run the same command again and it resumes from ``checkpoint.pt``: an interrupted
run loses at most the work since its last checkpoint. ``--restart`` starts over instead.

Defaults depend on the task and the profile (``--profile``, else ``TRANSFORMER_BOOK_PROFILE``,
else ``full`` with a CUDA GPU and ``fast`` without); every one can be overridden by its option.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import sys
import time
from pathlib import Path
from typing import Any

import torch

from .data import (
    SOURCE_FORMAT,
    TOY_TASKS,
    PreparedTranslation,
    TranslationData,
    Vocab,
    make_loader,
    prepare_multi30k,
    toy_task,
    toy_vocab,
)
from .model import PRESETS, Transformer, TransformerConfig, count_parameters
from .profile import PROFILE_ENV, current_profile
from .training import Trainer, TrainConfig, evaluate, load_checkpoint

__all__ = ["TASKS", "DEFAULTS", "main", "parse_args", "resolve_settings", "build_model"]

TASKS = (*TOY_TASKS, "multi30k")

# Defaults per task family and profile. Toy tasks are CPU-sized in both profiles.
# Toy tasks: the tiny preset without dropout (nothing to regularise: the rule is all there is to
# learn) and a cosine schedule, whose decay to zero settles the last few sequences. Training stops
# at 100% held-out exact match, which takes ~600 updates for sequences of 1 to 8 symbols;
# max_steps (also the cosine's length) leaves a margin. One evaluation of the 1,000 held-out
# sequences costs about as much as ten updates, hence every 50.
_TOY = dict(
    preset="tiny", dropout=0.0, n_train=20000, n_heldout=1000, n_symbols=10, min_len=1, max_len=8,
    batch_size=64, schedule="cosine", lr=3e-3, warmup=100, label_smoothing=0.1, clip_norm=1.0,
    epochs=None, max_steps=800, eval_every=50, target_exact_match=1.0, log_every=25,
)
DEFAULTS: dict[str, dict[str, dict[str, Any]]] = {
    "toy": {"fast": dict(_TOY), "full": dict(_TOY)},
    "multi30k": {
        # One pass over a 3,000-pair subset on a CPU (chapter 5): enough to see the loss fall.
        "fast": dict(
            preset="tiny", dropout=None, train_size=3000, min_freq=2, batch_size=32, schedule="cosine",
            lr=3e-3, warmup=20, label_smoothing=0.1, clip_norm=1.0, epochs=1, max_steps=None,
            eval_every=25, target_exact_match=None, log_every=5,
        ),
        # All 29,000 pairs, the multi30k preset (d_model 256, 3+3 layers): a GPU run.
        "full": dict(
            preset="multi30k", dropout=None, train_size=None, min_freq=2, batch_size=128, schedule="cosine",
            lr=5e-4, warmup=800, label_smoothing=0.1, clip_norm=1.0, epochs=20, max_steps=None,
            eval_every=None, target_exact_match=None, log_every=50,
        ),
    },
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m transformer_lib.train",
        description="Train an encoder-decoder Transformer on a toy task or on Multi30k (German -> English).",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--task", choices=TASKS, required=True, help="what to learn")
    parser.add_argument("--out", type=Path, required=True, help="output folder (checkpoint.pt, metrics.json, loss.png)")
    parser.add_argument("--profile", choices=("fast", "full"), default=None, help=f"default sizes (default: ${PROFILE_ENV}, else full on GPU, fast on CPU)")
    parser.add_argument("--preset", choices=sorted(PRESETS), default=None, help="model size")
    parser.add_argument("--restart", action="store_true", help="ignore an existing checkpoint in --out and start over")
    parser.add_argument("--device", default="auto", help="'auto' (CUDA if available), 'cpu', 'cuda', 'cuda:1', ...")
    parser.add_argument("--amp", choices=("auto", "bf16", "off"), default="auto", help="bf16 autocast (auto: on CUDA only)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar (TQDM_DISABLE=1 does too)")
    train = parser.add_argument_group("training (defaults depend on task and profile)")
    train.add_argument("--epochs", type=int, default=None)
    train.add_argument("--max-steps", type=int, default=None)
    train.add_argument("--batch-size", type=int, default=None, help="sentences per batch")
    train.add_argument("--schedule", choices=("noam", "cosine", "constant"), default=None)
    train.add_argument("--lr", type=float, default=None, help="peak learning rate")
    train.add_argument("--warmup", type=int, default=None, help="warm-up steps (the rate peaks here)")
    train.add_argument("--label-smoothing", type=float, default=None)
    train.add_argument("--clip-norm", type=float, default=None, help="gradient clipping (0: off)")
    train.add_argument("--weight-decay", type=float, default=0.0)
    train.add_argument("--dropout", type=float, default=None, help="override the preset's dropout")
    train.add_argument("--eval-every", type=int, default=None, help="validate every N steps (default: each epoch)")
    train.add_argument("--checkpoint-every", type=int, default=None, help="also checkpoint every N steps")
    train.add_argument("--target-exact-match", type=float, default=None, help="stop at this validation exact match (0: never)")
    train.add_argument("--log-every", type=int, default=None)
    toy = parser.add_argument_group("toy tasks (copy, reverse)")
    toy.add_argument("--n-train", type=int, default=None)
    toy.add_argument("--n-heldout", type=int, default=None, help="held-out sequences, never seen in training")
    toy.add_argument("--n-symbols", type=int, default=None)
    toy.add_argument("--min-len", type=int, default=None)
    toy.add_argument("--max-len", type=int, default=None)
    m30k = parser.add_argument_group("multi30k")
    m30k.add_argument("--data-dir", type=Path, default=None, help="folder with the .gz files (default: $MULTI30K_DIR, else download to the cache)")
    m30k.add_argument("--data", type=Path, default=None, help="prepared data from --prepare-only (skips tokenizing)")
    m30k.add_argument("--prepare-only", action="store_true", help="tokenize and write OUT/data.pt, then stop")
    m30k.add_argument("--train-size", type=int, default=None, help="train on a random subset of this many pairs")
    m30k.add_argument("--min-freq", type=int, default=None)
    m30k.add_argument("--lowercase", action="store_true")
    return parser.parse_args(argv)


def resolve_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The run's settings: the task/profile defaults, overridden by every option given."""
    profile = args.profile or current_profile()
    family = "toy" if args.task in TOY_TASKS else "multi30k"
    settings = dict(DEFAULTS[family][profile])
    for key, value in vars(args).items():
        if key == "target_exact_match" and value == 0:
            settings[key] = None
        elif key == "clip_norm" and value == 0:
            settings[key] = None
        elif value is not None and (key in settings or key in ("weight_decay", "seed", "lowercase", "amp")):
            settings[key] = value
    settings.update(task=args.task, profile=profile)
    for key in ("batch_size", "warmup", "log_every", "n_train", "n_heldout", "n_symbols", "min_len", "max_len", "min_freq"):
        value = settings.get(key)
        if value is not None and value < 1:
            raise ValueError(f"--{key.replace('_', '-')} must be at least 1, got {value}")
    return settings


def _device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"--device {name}: this machine has no CUDA GPU (torch.cuda.is_available() is False); use --device cpu")
    return device


def _hardware(device: torch.device) -> dict[str, Any]:
    info: dict[str, Any] = {
        "device": str(device),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
    }
    if device.type == "cuda":
        info["gpu"] = torch.cuda.get_device_name(device)
    return info


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


def _multi30k_data(settings: dict[str, Any], args: argparse.Namespace, out: Path) -> PreparedTranslation:
    cached = out / "data.pt"
    if args.data is not None:
        prepared = PreparedTranslation.load(args.data)
    elif cached.is_file() and not args.restart and not args.prepare_only:
        prepared = PreparedTranslation.load(cached)
    else:
        print(f"tokenizing Multi30k (spaCy blank tokenizers, min_freq={settings['min_freq']}) ...", flush=True)
        prepared = prepare_multi30k(
            args.data_dir, lowercase=settings.get("lowercase", False), min_freq=settings["min_freq"],
            train_size=settings["train_size"], seed=settings["seed"],
        )
        prepared.save(cached)
    return prepared


def _check_lengths(data: TranslationData, max_len: int, split: str) -> TranslationData:
    """Drop (train) or refuse (other splits) pairs longer than the model's positional table."""
    fits = [i for i, (s, t) in enumerate(zip(data.src_lengths, data.tgt_lengths)) if max(s, t) + 1 <= max_len]
    if len(fits) == len(data):
        return data
    longest = max(max(s, t) for s, t in zip(data.src_lengths, data.tgt_lengths))
    if split != "train":
        raise ValueError(f"the {split} split has a sentence of {longest} tokens; the model's max_len={max_len} allows {max_len - 1}")
    print(f"dropping {len(data) - len(fits)} training pairs longer than {max_len - 1} tokens", flush=True)
    return data.subset(fits)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run the command line; returns what it writes to ``metrics.json``."""
    args = parse_args(argv)
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    checkpoint_path = out / "checkpoint.pt"
    command = "python -m transformer_lib.train " + " ".join(shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:]))

    resumed = None
    if checkpoint_path.is_file() and not args.restart and not args.prepare_only:
        resumed = load_checkpoint(checkpoint_path)
        if resumed["task"] != args.task:
            raise ValueError(
                f"{checkpoint_path} is a {resumed['task']!r} run but --task is {args.task!r}; use another --out, or --restart"
            )
        settings = dict(resumed["run"])
        # Only how long to train, where, and how to show it may change when resuming.
        for key in ("epochs", "max_steps", "target_exact_match"):
            if getattr(args, key) is not None:
                settings[key] = None if (key == "target_exact_match" and getattr(args, key) == 0) else getattr(args, key)
        print(f"resuming from {checkpoint_path} at step {resumed['step']} (settings from the checkpoint)", flush=True)
    else:
        settings = resolve_settings(args)
    device = _device(args.device)
    torch.manual_seed(settings["seed"])

    if args.task in TOY_TASKS:
        vocab, train_data, val_data, data_description = _toy_data(settings)
        src_vocab = tgt_vocab = vocab
        test_data = None
    else:
        if resumed is not None and args.data is None and not (out / "data.pt").is_file():
            raise FileNotFoundError(f"resuming a multi30k run needs its prepared data: {out / 'data.pt'} or --data")
        prepared = _multi30k_data(settings, args, out)
        if args.prepare_only:
            sizes = {name: len(d) for name, d in prepared.splits.items()}
            print(f"wrote {out / 'data.pt'}: {sizes} pairs, vocabularies {len(prepared.src_vocab)} / {len(prepared.tgt_vocab)}")
            return {"prepared": str(out / "data.pt"), "sizes": sizes}
        src_vocab, tgt_vocab = prepared.src_vocab, prepared.tgt_vocab
        train_data, val_data, test_data = prepared.splits["train"], prepared.splits["val"], prepared.splits.get("test")
        data_description = dict(prepared.settings)

    if resumed is not None:
        model_config = TransformerConfig.from_dict(resumed["model_config"])
        if Vocab.from_dict(resumed["src_vocab"]) != src_vocab or Vocab.from_dict(resumed["tgt_vocab"]) != tgt_vocab:
            raise ValueError(f"the data's vocabularies differ from those in {checkpoint_path}; resume with the same data, or --restart")
    else:
        overrides = {} if settings.get("dropout") is None else {"dropout": settings["dropout"]}
        model_config = TransformerConfig.from_preset(
            settings["preset"], src_vocab_size=len(src_vocab), tgt_vocab_size=len(tgt_vocab), pad_id=src_vocab.pad_id, **overrides
        )
    model = Transformer(model_config)
    train_data = _check_lengths(train_data, model_config.max_len, "train")
    _check_lengths(val_data, model_config.max_len, "val")

    config = TrainConfig(
        epochs=settings["epochs"], max_steps=settings["max_steps"], schedule=settings["schedule"], lr=settings["lr"],
        warmup_steps=settings["warmup"], label_smoothing=settings["label_smoothing"], clip_norm=settings["clip_norm"],
        weight_decay=settings.get("weight_decay", 0.0), amp=settings.get("amp", "auto"), pad_id=tgt_vocab.pad_id,
        eval_every=settings["eval_every"], checkpoint_every=args.checkpoint_every or settings.get("checkpoint_every"),
        target_exact_match=settings["target_exact_match"], log_every=settings["log_every"],
        progress=not args.no_progress,
    )
    pin = device.type == "cuda"
    specials = dict(pad_id=tgt_vocab.pad_id, bos_id=tgt_vocab.bos_id, eos_id=tgt_vocab.eos_id)
    train_loader = make_loader(train_data, settings["batch_size"], seed=settings["seed"], pin_memory=pin, **specials)
    val_loader = make_loader(val_data, max(settings["batch_size"], 256), shuffle=False, pin_memory=pin, **specials)
    metadata = {
        "model_config": model_config.to_dict(),
        "src_vocab": src_vocab.to_dict(),
        "tgt_vocab": tgt_vocab.to_dict(),
        "task": args.task,
        "data": data_description,
        "run": {k: v for k, v in settings.items() if k not in ("data", "out")},
    }

    def report(record: dict[str, float]) -> None:
        extra = f", exact match {record['exact_match']:.1%}" if args.task in TOY_TASKS else f", ppl {record['ppl']:.2f}"
        print(f"step {record['step']:>6}  validation loss {record['loss']:.3f}{extra}", flush=True)

    trainer = Trainer(
        model, train_loader, config, val_loader=val_loader, device=device, checkpoint_path=checkpoint_path,
        metadata=metadata, on_eval=report,
    )
    if resumed is not None:
        trainer.load_state_dict(resumed)
    print(
        f"{args.task}: {count_parameters(model):,} parameters, {len(train_data):,} training pairs, "
        f"{trainer.total_steps} steps at most, on {device}", flush=True,
    )
    start = time.perf_counter()
    history = trainer.fit()
    wall_s = time.perf_counter() - start

    final = {"val": evaluate(trainer.model, val_loader, device=device, pad_id=config.pad_id, amp=config.amp)}
    if test_data is not None:
        test_loader = make_loader(test_data, max(settings["batch_size"], 256), shuffle=False, **specials)
        final["test"] = evaluate(trainer.model, test_loader, device=device, pad_id=config.pad_id, amp=config.amp)
    metrics = {
        "task": args.task,
        "command": command,
        "settings": metadata["run"],
        "data": data_description,
        "model_config": model_config.to_dict(),
        "parameters": count_parameters(model),
        "hardware": _hardware(device),
        "steps": trainer.step,
        "epochs": trainer.epoch + trainer.batch_in_epoch / trainer.steps_per_epoch,
        "stopped_because": trainer.stopped_because,
        "resumed_from_step": resumed["step"] if resumed is not None else None,
        "wall_time_s": wall_s,
        "training_time_s": trainer.elapsed_s,
        "final": final,
        "history": history,
    }
    (out / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n", encoding="utf-8")
    _save_loss_plot(history, out / "loss.png", f"{args.task}: {metrics['parameters']:,} parameters, {trainer.step} steps")
    summary = ", ".join(f"{split} loss {m['loss']:.3f} / exact match {m['exact_match']:.1%}" for split, m in final.items())
    print(f"done ({trainer.stopped_because}) in {wall_s:.1f} s: {summary}. Wrote {out}/checkpoint.pt, metrics.json, loss.png", flush=True)
    return metrics


def _save_loss_plot(history: dict[str, Any], path: Path, title: str) -> None:
    from .viz import plot_training_curves

    ax = plot_training_curves(history, title=title)
    ax.figure.savefig(path, dpi=120)


if __name__ == "__main__":
    main()
