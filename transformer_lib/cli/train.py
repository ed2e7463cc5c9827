"""Train a Transformer from the command line: ``transformer-train`` (or ``python -m transformer_lib.cli.train``).

Examples::

    transformer-train --task reverse --out runs/reverse          # about 20 s on a CPU (it stops at 100% held-out)
    python -m transformer_lib.cli.train --task multi30k --profile full --out runs/multi30k
    # a GPU machine without the data or spaCy: prepare on another machine, copy data.pt
    python -m transformer_lib.cli.train --task multi30k --prepare-only --out runs/m30k-data
    python -m transformer_lib.cli.train --task multi30k --data runs/m30k-data/data.pt --out runs/multi30k
    # several GPUs of one machine: one process each (the batch size stays the global batch)
    torchrun --standalone --nproc-per-node 4 -m transformer_lib.cli.train --task multi30k --data DATA --out OUT

The output folder gets ``checkpoint.pt`` (the latest state; see :mod:`transformer_lib.checkpoint`
for its contents), ``metrics.json`` (the results file: settings, the command, hardware and
software versions, losses per epoch and per logging window, validation and test metrics, BLEU
greedy and beam with sacrebleu's signature) and ``loss.png``, each written atomically. Run the same
command again and it resumes from ``checkpoint.pt``: an interrupted run loses at most the work since
its last checkpoint. Only the settings marked resumable in :class:`~transformer_lib.cli.options.RunConfig`
(more steps or epochs, how to evaluate, where to run) may change on resume; any other option that
differs from the checkpoint is refused, by name. ``--restart`` starts over, and a fresh run into a
folder with earlier results moves them to ``OUT/previous-*`` first: nothing is deleted. One run at
a time holds ``OUT/.lock``. A NaN or infinite loss, gradient norm or weight stops training before
anything is saved, so ``checkpoint.pt`` keeps the last good weights.

An error prints one line ``error: ...`` and exits with status 2 for a bad command line (an option, its
value, a ``--config`` file) and 1 for a run that failed (missing data, an unwritable ``--out``, a
diverged run); Ctrl-C exits 130 and SIGTERM 143 (:data:`~transformer_lib.cli.common.EXIT_STATUSES`).
``--debug`` (or ``TRANSFORMER_LIB_DEBUG=1``) shows the traceback.

BLEU (``--bleu``): ``final`` decodes the validation and test sets at the end, greedy and with a
beam; ``epoch`` also decodes the validation set (greedy) at every validation, which picks the
model and measures the time until validation BLEU first reaches ``--bleu-threshold``. With
``--keep-weights N`` the weights of the last ``N`` checkpoints are kept and averaged at the end;
the average replaces the last weights only if validation says it is better. The test set is
decoded once, at the end, and never chooses anything.

Defaults depend on the task and the profile (``--profile``, else ``TRANSFORMER_BOOK_PROFILE``,
else ``full`` with a CUDA GPU and ``fast`` without): :data:`~transformer_lib.cli.profiles.DEFAULTS`.
``--print-config`` prints the settings a command would train with; ``--config FILE`` reads such a
file back, and the options given on the command line override it.

Messages go through ``logging`` (:mod:`transformer_lib.cli.console`): information on standard output,
warnings and errors on standard error, ``--quiet``, ``--log-level``, ``--log-file``; the progress bar
shows on a terminal only, and a file or a pipe gets a plain line every ``--log-every`` updates.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import torch

from .. import __project__, __version__
from ..batching import SOURCE_FORMAT, TranslationData, make_loader
from ..checkpoint import average_checkpoints, checkpoint_metadata, kept_weights, load_checkpoint, save_checkpoint
from ..config import TransformerConfig
from ..device import parse_device
from ..distributed import DistributedSetup, setup_distributed, teardown_distributed, wait_for_all
from ..metrics import evaluate_teacher_forced
from ..model import Transformer, count_parameters
from ..prepared import PreparedTranslation, prepare_multi30k
from ..tokenizers import TOKENIZERS, SymbolTokenizer, tokenizer_from_dict
from ..toy_tasks import exact_match_by_length, toy_task, toy_vocab
from ..trainer import Trainer
from ..translator import Translator, evaluate_bleu
from ..vocab import Tokenizer
from .common import UsageError, run_command, set_threads
from .console import PROGRESS, command_logging, progress_line, show_bar
from .interrupt import Interrupted, StopOnSignal
from .logs import RunLog, check_tensorboard
from .options import RunConfig, SessionOptions, flag, parse_args, resolve, resumable_fields
from .provenance import command_line, hardware, software
from .results import METRICS_FORMAT_VERSION, bleu_record, per_epoch, save_loss_plot, time_to_bleu
from .runs import EARLIER_RESULTS, lock_folder, move_aside, unlock_folder, write_json

__all__ = ["main", "cli"]

logger = logging.getLogger("transformer_lib.cli.train")  # not __name__: "__main__" under python -m


@dataclass
class _Run:
    """What the steps of one command-line run share: its settings, its options, its processes, its files."""

    config: RunConfig
    session: SessionOptions
    given: dict[str, Any]
    processes: DistributedSetup
    device: torch.device
    command: str
    software: dict[str, Any]
    resumed: dict[str, Any] | None = None
    bar: bool = False  # a progress bar (on a terminal), else plain progress lines

    @property
    def out(self) -> Path:
        return self.session.out

    @property
    def checkpoint_path(self) -> Path:
        return self.session.out / "checkpoint.pt"

    @property
    def eval_batch_size(self) -> int:
        return max(self.config.batch_size, 256)

    def say(self, message: str) -> None:
        """Log at ``info`` (process 0 only: the others train silently)."""
        if self.processes.is_main:
            logger.info(message)


@dataclass
class _Data:
    """The run's data: tokenizers, splits as token ids, how text became ids, and the raw text pairs."""

    src_tokenizer: Tokenizer
    tgt_tokenizer: Tokenizer
    splits: dict[str, TranslationData]
    description: dict[str, Any]
    text: dict[str, list[tuple[str, str]]] = field(default_factory=dict)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run the command line; returns what it writes to ``metrics.json``.

    Under ``torchrun`` every process runs this; process 0 prints and writes the files.
    """
    try:  # the command line and its --config file: every value is checked before anything is created
        given = parse_args(argv)
        config, session = resolve(given)
        device = _device(session.device)
    except (ValueError, OSError) as error:
        raise UsageError(str(error)) from None
    if session.tensorboard:
        check_tensorboard()
    threads = session.resolved_threads(config.preset)
    if session.print_config:
        return _print_config(config, session, threads, given)
    bar = show_bar(session.quiet, session.no_progress)
    with command_logging(session.quiet, session.log_file, session.log_level, info_stream="stdout", bar=bar):
        return _session(argv, given, config, session, device, threads, bar)


def _session(argv: list[str] | None, given: dict[str, Any], config: RunConfig, session: SessionOptions,
             device: torch.device, threads: int, bar: bool) -> dict[str, Any]:
    """The run, with its processes and its folder's lock."""
    set_threads(threads)
    created = not session.out.exists()
    processes = setup_distributed(device.type)
    lock = None
    try:
        if processes.is_main:
            lock = lock_folder(session.out)
        device = processes.device(device.type) if processes.world_size > 1 else device
        run = _Run(config, session, given, processes, device, command_line(argv, processes), software(), bar=bar)
        run.say(f"{__project__} {__version__}, torch {torch.__version__}: {threads} CPU thread{'s' * (threads > 1)} "
                f"(--threads), device {device}")
        return _train(run)
    finally:
        unlock_folder(lock, session.out, remove_if_empty=created)
        teardown_distributed(processes)


def _device(name: str) -> torch.device:
    try:
        return parse_device(name)
    except ValueError as error:
        raise ValueError(f"--device {name}: {error}") from None


def cli(argv: list[str] | None = None) -> int:
    """``python -m transformer_lib.cli.train``: :func:`main`, with an error as one line ``error: ...``
    and an exit status: 2 for a bad command line (an option, a --config file), 1 for a failed run
    (missing data, an unwritable ``--out``, a diverged run), 130/143 for Ctrl-C/SIGTERM."""
    return run_command(lambda: main(argv), argv)


def _train(run: _Run) -> dict[str, Any]:
    """One run: settings (fresh or resumed), data, model and trainer, training, final results, files."""
    if run.session.prepare_only and run.processes.world_size > 1:
        raise ValueError("--prepare-only runs in one process: run it with python, not torchrun")
    run.out.mkdir(parents=True, exist_ok=True)
    run.resumed, run.config = _resume_or_start(run)
    if run.resumed is not None:
        run.say(f"resuming from {run.checkpoint_path} at step {run.resumed['step']} (settings from the checkpoint)")
    data = _load_data(run, _prepare_folder(run))
    if run.session.prepare_only:
        return _prepared_only(run, data)
    trainer = _make_trainer(run, _build_model(run, data), data)
    start = time.perf_counter()
    _fit(run, trainer, data, start)
    wall_s = time.perf_counter() - start
    metrics = _metrics(run, trainer, data, _final_results(run, trainer, data), wall_s)
    _write_results(run, trainer, metrics, wall_s)
    return metrics


def _print_config(config: RunConfig, session: SessionOptions, threads: int, given: dict[str, Any]) -> dict[str, Any]:
    """``--print-config``: the settings this command would train with (a checkpoint's, when it resumes one), as JSON."""
    run = _Run(config, session, given, DistributedSetup(), torch.device("cpu"), "", {})
    resumed, config = _resume_or_start(run) if session.out.exists() else (None, config)
    sessions = {name: str(value) if isinstance(value, Path) else value for name, value in dataclasses.asdict(session).items()}
    values = {"run": config.to_dict(), "session": {**sessions, "threads": threads},
              "resumes": str(run.checkpoint_path) if resumed is not None else None}
    print(json.dumps(values, indent=2))
    return values


def _fit(run: _Run, trainer: Trainer, data: _Data, start: float) -> None:
    """Train, logging every record to ``metrics.jsonl`` (and TensorBoard) and rewriting ``metrics.json``
    at every checkpoint; the first SIGINT/SIGTERM stops after the current update with a checkpoint."""
    log = RunLog(run.out, run.resumed["step"] if run.resumed else None, run.session.tensorboard) if run.processes.is_main else None
    report = trainer.on_eval

    def on_eval(record: dict[str, Any]) -> None:
        if report is not None:
            report(record)
        if log is not None:
            log.record("val", record)

    def on_save(path: Path) -> None:
        if path == run.checkpoint_path:
            progress: dict[str, Any] = {"selection": None, "final": None, "bleu": None, "examples": []}
            write_json(run.out / "metrics.json", _metrics(run, trainer, data, progress, time.perf_counter() - start))

    def on_log(record: dict[str, Any]) -> None:
        log.record("train", record)  # type: ignore[union-attr]
        # A plain line: the console shows it where no progress bar does (a file, a pipe); a log file always.
        logger.info(progress_line(record, trainer.total_steps), extra={PROGRESS: True})

    trainer.on_log = on_log if log is not None else None
    trainer.on_eval, trainer.on_save = on_eval, on_save
    try:
        with StopOnSignal(lambda name: setattr(trainer, "stop_requested", name)) as stop:
            trainer.fit()
    finally:
        if log is not None:
            log.close()
    if stop.received is not None:
        raise Interrupted(stop.received, f"stopped at step {trainer.step}; run the same command to resume")


# --- resuming -----------------------------------------------------------------------------------


def _resume_or_start(run: _Run) -> tuple[dict[str, Any] | None, RunConfig]:
    """The checkpoint to resume (``None``: a fresh run) and the run's settings."""
    session, path = run.session, run.checkpoint_path
    if not path.is_file() or session.restart or session.prepare_only:
        return None, run.config
    resumed = load_checkpoint(path)
    if resumed["task"] != run.config.task:
        raise ValueError(f"{path} is a {resumed['task']!r} run but --task is {run.config.task!r}; use another --out, or --restart")
    saved = RunConfig.from_dict(resumed["run"])
    _refuse_changed_settings(run, saved, resumed["model_config"])
    changes = {name: getattr(run.config, name) for name in resumable_fields() if name in run.given}
    return resumed, dataclasses.replace(saved, **changes)


def _refuse_changed_settings(run: _Run, saved: RunConfig, model_config: dict[str, Any]) -> None:
    """Resuming: every option given (but the resumable ones) must agree with the checkpoint."""
    conflicts = []
    for name in run.given:
        if not hasattr(saved, name) or name in resumable_fields():
            continue
        ours, theirs = getattr(run.config, name), getattr(saved, name)
        if ours == theirs:  # "the preset's" in both (a --config file holds every setting)
            continue
        if theirs is None and name in model_config:  # "the preset's" dropout or norm_first
            theirs = model_config[name]
        if ours != theirs:
            conflicts.append(f"{flag(name)} {ours} (the checkpoint has {theirs})")
    if conflicts:
        may_change = ", ".join(flag(name) for name in resumable_fields())
        raise ValueError(
            f"{run.checkpoint_path} was trained with other settings: {'; '.join(conflicts)}. Leave these options out "
            f"to resume it, use another --out, or --restart to start over (only {may_change} may change on resume)"
        )


# --- data ---------------------------------------------------------------------------------------


def _prepare_folder(run: _Run) -> bool:
    """Move an earlier run's results aside (a fresh run), seed, and say whether ``OUT/data.pt`` was there."""
    session, out = run.session, run.out
    data_cached = (out / "data.pt").is_file()
    if run.resumed is None and run.processes.is_main:
        # A fresh run (or --restart): weights kept by an earlier run in this folder must not join its
        # average, and nothing an earlier run wrote is lost: it is moved aside.
        rewrites_data = run.config.task == "multi30k" and session.data is None and (session.restart or session.prepare_only)
        earlier = [] if session.prepare_only else list(EARLIER_RESULTS)
        move_aside(out, earlier + (["data.pt"] if rewrites_data else []), run.say)
    # Every process has looked for a checkpoint and data before any process writes one.
    wait_for_all(run.device)
    torch.manual_seed(run.config.seed)
    if run.device.type == "cuda":
        # TF32 tensor cores for what runs in float32 (the parts autocast leaves there).
        torch.set_float32_matmul_precision("high")
    return data_cached


def _load_data(run: _Run, data_cached: bool) -> _Data:
    """The toy task's data, or Multi30k's (prepared: ``--data``, ``OUT/data.pt``, or tokenized now)."""
    config, session = run.config, run.session
    if config.family == "toy":
        return _toy_data(config)
    if run.resumed is not None and session.data is None and not (run.out / "data.pt").is_file():
        raise FileNotFoundError(f"resuming a multi30k run needs its prepared data: {run.out / 'data.pt'} or --data")
    prepared = _multi30k_data(run, data_cached)
    if run.resumed is None and not session.prepare_only:
        run.config = _check_prepared(prepared, run.config, run.given, session.data or run.out / "data.pt")
    splits = {name: split for name, split in prepared.splits.items() if split is not None}
    description = {**prepared.settings, "data_sha256": prepared.sha256}  # a resumed run must train on the same data
    if run.resumed is not None:
        _refuse_other_data(run, description, session.data or run.out / "data.pt")
    return _Data(prepared.src_tokenizer, prepared.tgt_tokenizer, splits, description, prepared.text)


def _refuse_other_data(run: _Run, description: dict[str, Any], path: Path) -> None:
    """Resuming: the prepared data must be the checkpoint's (its contents' SHA-256; a checkpoint from
    before the checksum was recorded is compared by its tokenizers only, in :func:`_build_model`)."""
    assert run.resumed is not None
    saved = run.resumed["data"].get("data_sha256")
    if saved is not None and saved != description["data_sha256"]:
        raise ValueError(
            f"{path} is not the data {run.checkpoint_path} trained on (its contents have SHA-256 "
            f"{str(description['data_sha256'])[:12]}..., the checkpoint's data {str(saved)[:12]}...); resume with the same "
            "--data, or --restart to train on this data from the start"
        )


def _toy_data(config: RunConfig) -> _Data:
    train, heldout = toy_task(config.task, config.n_train, config.n_heldout, n_symbols=config.n_symbols,  # type: ignore[arg-type]
                              shortest=config.shortest, longest=config.longest, seed=config.seed,  # type: ignore[arg-type]
                              balance_lengths=True)  # the short lengths' few sequences repeated: see toy_task
    described = {name: getattr(config, name) for name in ("n_train", "n_heldout", "n_symbols", "shortest", "longest", "seed")}
    symbols = SymbolTokenizer(toy_vocab(config.n_symbols))  # type: ignore[arg-type]
    return _Data(symbols, symbols, {"train": train, "val": heldout}, {**described, "source_format": SOURCE_FORMAT})


def _multi30k_data(run: _Run, cached_exists: bool) -> PreparedTranslation:
    """The prepared data: ``--data``, else ``OUT/data.pt`` if it was there when the run started, else tokenize."""
    config, session, cached = run.config, run.session, run.out / "data.pt"
    if session.data is not None:
        return _load_prepared(session.data)
    if cached_exists and not session.restart and not session.prepare_only:
        return _load_prepared(cached)
    if run.processes.is_main:  # one process tokenizes; the others wait for its file
        what = "all pairs" if config.train_size is None else f"a random {config.train_size:,} pairs"
        logger.info(f"preparing {what} of the training split ({config.profile} profile)")
        how = (f"a joint {config.tokenizer} vocabulary of {config.vocab_size:,} tokens, learned on the training split"
               if TOKENIZERS[cast(str, config.tokenizer)].joint else f"{config.tokenizer} tokenizers, min_freq={config.min_freq}")
        logger.info(f"tokenizing Multi30k ({how}) ...")
        prepared = prepare_multi30k(
            session.data_dir, lowercase=config.lowercase, min_freq=cast(int, config.min_freq), train_size=config.train_size,
            seed=config.seed, tokenizer=cast(str, config.tokenizer), vocab_size=cast(int, config.vocab_size),
        )
        prepared.save(cached)
    wait_for_all(run.device)
    return prepared if run.processes.is_main else _load_prepared(cached)


def _load_prepared(path: Path) -> PreparedTranslation:
    """:meth:`PreparedTranslation.load`, with a file that is not prepared data as a ``ValueError``."""
    try:
        return PreparedTranslation.load(path, needs=("train", "val"))  # validation decides when to stop
    except (FileNotFoundError, ValueError):
        raise
    except Exception as error:  # noqa: BLE001 - torch.load raises many kinds for a file of another kind
        raise ValueError(
            f"{path} is not prepared data from --prepare-only (torch.load(weights_only=True) failed with "
            f"{type(error).__name__}); make it with `python -m transformer_lib.cli.train --task multi30k --prepare-only --out FOLDER`"
        ) from None


def _check_prepared(prepared: PreparedTranslation, config: RunConfig, given: dict[str, Any], path: Path) -> RunConfig:
    """The prepared data decide how text became ids: refuse data that contradict the run, and return
    the settings as the data hold them.

    A full run on a subset (data prepared with the fast profile) fails here rather than train
    quietly on a tenth of the data; so do options given explicitly that the data contradict.
    """
    made = prepared.settings
    if config.train_size is None and made.get("train_subset"):
        raise ValueError(
            f"{path} holds a random subset of {made['train_size']:,} training pairs, but this run ({config.profile} "
            f"profile) trains on all of them; prepare the data with `--prepare-only --profile {config.profile}`, "
            f"or pass --train-size {made['train_size']} to train on the subset"
        )
    held = dict(tokenizer=made["tokenizer"], vocab_size=made.get("vocab_size"), min_freq=made.get("min_freq"),
                train_size=made["train_size"] if made.get("train_subset") else None, lowercase=made.get("lowercase", False))
    for name, value in held.items():
        if name in given and given[name] != value and not (name == "vocab_size" and held["tokenizer"] != "bpe"):
            raise ValueError(f"{path} was prepared with {name}={value} but {flag(name)} is {given[name]}")
    if held["tokenizer"] != "bpe":
        held["vocab_size"] = config.vocab_size
    return dataclasses.replace(config, **held)


def _prepared_only(run: _Run, data: _Data) -> dict[str, Any]:
    sizes = {name: len(split) for name, split in data.splits.items()}
    logger.info(f"wrote {run.out / 'data.pt'}: {sizes} pairs, vocabularies {len(data.src_tokenizer.vocab)} / "
          f"{len(data.tgt_tokenizer.vocab)}")
    return {"prepared": str(run.out / "data.pt"), "sizes": sizes}


# --- model and trainer --------------------------------------------------------------------------


def _build_model(run: _Run, data: _Data) -> Transformer:
    """The model: the checkpoint's configuration when resuming, else the preset with the options' changes."""
    src_vocab = data.src_tokenizer.vocab
    if run.resumed is not None:
        model_config = TransformerConfig.from_dict(run.resumed["model_config"])
        saved = run.resumed["tokenizers"]
        if tokenizer_from_dict(saved["src"]) != data.src_tokenizer or tokenizer_from_dict(saved["tgt"]) != data.tgt_tokenizer:
            raise ValueError(f"the data's tokenizers differ from those in {run.checkpoint_path}; resume with the same data, or --restart")
    else:
        model_config = run.config.model_config(len(src_vocab), len(data.tgt_tokenizer.vocab), src_vocab.pad_id)
    model = Transformer(model_config)
    if run.processes.rank > 0:
        # Every process starts from process 0's weights (DDP copies them); dropout differs per process.
        torch.manual_seed(run.config.seed + run.processes.rank)
    data.splits["train"] = _check_lengths(data.splits["train"], model_config.max_len, "train", run.say)
    _check_lengths(data.splits["val"], model_config.max_len, "val")
    return model


def _check_lengths(data: TranslationData, max_len: int, split: str, say: Callable[[str], None] = logger.info) -> TranslationData:
    """Drop (train) or refuse (other splits) pairs longer than the model's positional table."""
    fits = [i for i, (s, t) in enumerate(zip(data.src_lengths, data.tgt_lengths)) if max(s, t) + 1 <= max_len]
    if len(fits) == len(data):
        return data
    longest = max(max(s, t) for s, t in zip(data.src_lengths, data.tgt_lengths))
    if split != "train":
        raise ValueError(f"the {split} split has a sentence of {longest} tokens; the model's max_len={max_len} allows {max_len - 1}")
    say(f"dropping {len(data) - len(fits)} training pairs longer than {max_len - 1} tokens")
    return data.subset(fits)


def _loader(run: _Run, data: _Data, split: str, **options: Any) -> Any:
    """A loader of ``split``: this process's slice of every batch, with the target vocabulary's specials."""
    vocab = data.tgt_tokenizer.vocab
    # Compiled (on a GPU): few batch shapes, so torch.compile builds few graphs (16 tokens apart).
    pad_multiple = 16 if run.config.compile else 1
    return make_loader(
        data.splits[split], options.pop("batch_size", run.eval_batch_size), pad_id=vocab.pad_id, bos_id=vocab.bos_id,
        eos_id=vocab.eos_id, num_replicas=run.processes.world_size, rank=run.processes.rank, pad_multiple=pad_multiple,
        **options,
    )


def _make_trainer(run: _Run, model: Transformer, data: _Data) -> Trainer:
    """The :class:`Trainer`, its config from the run's (the fields share their names)."""
    config = run.config
    pin = run.device.type == "cuda"
    metadata = checkpoint_metadata(model.config, data.src_tokenizer, data.tgt_tokenizer, config.task, data.description,
                                   run=config.to_dict())
    trainer = Trainer(
        model, _loader(run, data, "train", seed=config.seed, pin_memory=pin,
                       **({"batch_size": None, "max_tokens": config.max_tokens} if config.max_tokens else
                          {"batch_size": config.batch_size})),
        config.train_config(data.tgt_tokenizer.vocab.pad_id, progress=run.bar),
        val_loader=_loader(run, data, "val", shuffle=False, pin_memory=pin), device=run.device,
        checkpoint_path=run.checkpoint_path, metadata=metadata, on_eval=functools.partial(_report_validation, run),
        val_metrics=functools.partial(_val_bleu_record, run, data) if config.bleu == "epoch" else None,
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
        f"{config.task}: {count_parameters(model):,} parameters, {len(data.splits['train']):,} training pairs, "
        f"{trainer.total_steps} steps at most, on {where}"
    )
    return trainer


def _report_validation(run: _Run, record: dict[str, float]) -> None:
    extra = f", exact match {record['exact_match']:.1%}" if run.config.family == "toy" else f", ppl {record['ppl']:.2f}"
    if "bleu" in record:
        extra += f", BLEU {record['bleu']:.2f} (lowercased {record['bleu_lowercased']:.2f})"
    run.say(f"step {record['step']:>6}  validation loss {record['loss']:.3f}{extra}")


# --- the final results --------------------------------------------------------------------------


def _bleu(run: _Run, model: Transformer, data: _Data, split: str, beam_sizes: tuple[int, ...] = (1,)) -> dict[str, Any]:
    """:func:`~transformer_lib.translator.evaluate_bleu` of ``split``: its token ids decoded, scored against the raw text."""
    translator = Translator(model, data.src_tokenizer, data.tgt_tokenizer, "multi30k", dict(data.description))
    references = [reference for _, reference in data.text[split]]
    pairs = list(zip(data.splits[split].src, references))
    return evaluate_bleu(translator, pairs, beam_sizes=beam_sizes, batch_size=run.eval_batch_size)


def _val_bleu_record(run: _Run, data: _Data, model: Transformer) -> dict[str, float]:
    """Validation BLEU (greedy) for the trainer's validation record."""
    greedy = _bleu(run, model, data, "val")["greedy"]
    return {"bleu": greedy["bleu"].score, "bleu_lowercased": greedy["bleu_lowercased"].score}


def _evaluate_split(run: _Run, trainer: Trainer, data: _Data, split: str) -> dict[str, float]:
    return evaluate_teacher_forced(trainer.model, _loader(run, data, split, shuffle=False), device=run.device,
                    pad_id=trainer.config.pad_id, amp=trainer.config.amp, all_reduce=run.processes.world_size > 1)


def _final_results(run: _Run, trainer: Trainer, data: _Data) -> dict[str, Any]:
    """After training: choose the weights, then measure them (loss, and BLEU if asked) on val and test."""
    bleu_on = run.config.bleu != "off"
    model = cast(Transformer, trainer.model)
    val_bleu = functools.partial(_val_bleu_record, run, data, model) if bleu_on else None
    selection = _select_weights(run, trainer, data, val_bleu)
    final = {split: _evaluate_split(run, trainer, data, split) for split in ("val", "test") if split in data.splits}
    bleu, examples = _final_bleu(run, model, data) if bleu_on else ({}, [])
    results = {"selection": selection, "final": final, "bleu": bleu or None, "examples": examples}
    if run.config.family == "toy":  # one number hides a short length's few sequences: each length apart
        by_length = exact_match_by_length(trainer.model, data.splits["val"], device=run.device)
        results["val_exact_match_by_length"] = {str(n): {"right": right, "of": of} for n, (right, of) in by_length.items()}
    return results


def _final_bleu(run: _Run, model: Transformer, data: _Data) -> tuple[dict[str, Any], list[dict[str, str]]]:
    """BLEU of val and test, greedy and with the beam, as metrics.json records it; five test examples."""
    beam = run.config.beam_size
    results: dict[str, Any] = {}
    for split in ("val", "test"):
        decoded = _bleu(run, model, data, split, (1, beam) if beam > 1 else (1,))
        results[split] = {name: bleu_record(result) for name, result in decoded.items()}
        for name, result in decoded.items():
            run.say(f"{split} BLEU, {name}: {result['bleu'].score:.2f} (lowercased {result['bleu_lowercased'].score:.2f})")
    examples = [
        {"source": source, "reference": reference, **{name: result["translations"][i] for name, result in decoded.items()}}
        for i, (source, reference) in enumerate(data.text["test"][:5])
    ]
    run.say(f"BLEU signature: {results['test']['greedy']['cased']['signature']}")
    return results, examples


def _select_weights(run: _Run, trainer: Trainer, data: _Data, val_bleu: Callable[[], dict[str, float]] | None) -> dict[str, Any]:
    """Keep the last weights or the average of the last N checkpoints, whichever validation prefers.

    Validation BLEU (greedy, cased) decides when BLEU is on, else the validation loss. The chosen
    weights stay in ``trainer.model``; if they are the average they are also written to
    ``model.pt`` (a checkpoint for the translate command line; ``checkpoint.pt`` keeps the
    training state for resuming).
    """
    n = run.config.keep_weights
    files = kept_weights(trainer.checkpoint_path.parent / "weights") if trainer.checkpoint_path is not None else []
    if n < 2 or len(files) < 2:
        return {"chosen": "last", "candidates": {}, "by": None, "checkpoint": "checkpoint.pt"}
    by = "val BLEU (greedy, cased)" if val_bleu is not None else "val loss"
    last = {name: tensor.detach().clone() for name, tensor in trainer.model.state_dict().items()}
    weights = {"last": last, f"average of last {len(files[-n:])}": average_checkpoints(files[-n:])}
    candidates: dict[str, dict[str, Any]] = {}
    for name, state in weights.items():
        trainer.model.load_state_dict(state)
        candidates[name] = {"val_loss": _evaluate_split(run, trainer, data, "val")["loss"]}
        if val_bleu is not None:
            candidates[name]["val_bleu"] = val_bleu()["bleu"]
        if name != "last":
            candidates[name]["steps"] = [int(f.stem.split("_")[1]) for f in files[-n:]]
    key = (lambda name: candidates[name]["val_bleu"]) if val_bleu is not None else (lambda name: -candidates[name]["val_loss"])
    chosen = max(candidates, key=key)  # ties keep "last" (first)
    trainer.model.load_state_dict(weights[chosen])
    run.say("model selection by " + by + ": " + ", ".join(
        f"{name} {c.get('val_bleu', c['val_loss']):.3f}" for name, c in candidates.items()) + f" -> {chosen}")
    if chosen == "last":
        return {"chosen": chosen, "candidates": candidates, "by": by, "checkpoint": "checkpoint.pt"}
    checkpoint = trainer.checkpoint()  # every process takes part; process 0 writes
    if trainer.is_main:
        save_checkpoint(cast(Path, trainer.checkpoint_path).parent / "model.pt", {**checkpoint, "selected": chosen})
    return {"chosen": chosen, "candidates": candidates, "by": by, "checkpoint": "model.pt"}


def _metrics(run: _Run, trainer: Trainer, data: _Data, results: dict[str, Any], wall_s: float) -> dict[str, Any]:
    """What metrics.json holds (format :data:`~transformer_lib.cli.results.METRICS_FORMAT_VERSION`)."""
    model, history, config = cast(Transformer, trainer.model), trainer.history, run.config
    return {
        "metrics_format": METRICS_FORMAT_VERSION,
        "task": config.task,
        "command": run.command,
        "settings": trainer.metadata["run"],
        "data": data.description,
        "model_config": model.config.to_dict(),
        "parameters": count_parameters(model),
        "hardware": hardware(run.device, run.processes),
        "software": run.software,
        "distributed": {
            "world_size": run.processes.world_size,
            "backend": run.processes.backend,
            "global_batch_size": config.batch_size,
        },
        "steps": trainer.step,
        "epochs": trainer.epoch + trainer.batch_in_epoch / trainer.steps_per_epoch,
        "stopped_because": trainer.stopped_because,
        "resumed_from_step": run.resumed["step"] if run.resumed is not None else None,
        "wall_time_s": wall_s,
        "training_time_s": trainer.elapsed_s,
        "per_epoch": per_epoch(history),
        "time_to_bleu": time_to_bleu(history, config.bleu_threshold) if config.bleu == "epoch" else None,
        **results,
        "history": history,
    }


def _write_results(run: _Run, trainer: Trainer, metrics: dict[str, Any], wall_s: float) -> None:
    """metrics.json and loss.png (process 0), and the closing line."""
    written = ["checkpoint.pt", "metrics.json"] + (["model.pt"] if metrics["selection"]["checkpoint"] == "model.pt" else [])
    if run.processes.is_main:
        write_json(run.out / "metrics.json", metrics)
        title = f"{run.config.task}: {metrics['parameters']:,} parameters, {trainer.step} steps"
        if save_loss_plot(trainer.history, run.out / "loss.png", title):
            written.append("loss.png")
    summary = ", ".join(f"{split} loss {m['loss']:.3f} / exact match {m['exact_match']:.1%}" for split, m in metrics["final"].items())
    if metrics.get("val_exact_match_by_length"):
        summary += " (by length: " + ", ".join(f"{n}: {m['right']}/{m['of']}" for n, m in metrics["val_exact_match_by_length"].items()) + ")"
    run.say(f"done ({trainer.stopped_because}) in {wall_s:.1f} s: {summary}. Wrote {', '.join(written)} in {run.out}")


if __name__ == "__main__":
    sys.exit(cli())
