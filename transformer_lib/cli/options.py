"""The training command line's options: a typed run configuration (:class:`RunConfig`), the options of
one session (:class:`SessionOptions`), and the parser made from both, one option per field.

Every option of ``python -m transformer_lib.cli.train`` is a field of one of the two dataclasses,
under the same name (``--warmup-steps`` sets ``warmup_steps``), so there is no table that maps
names. :class:`RunConfig` is what a run *is*: it is resolved once (defaults of the task and
profile, :data:`~transformer_lib.cli.profiles.DEFAULTS`, then every option given), checked, and
saved in the checkpoint (``run``). A resumed run takes it from the checkpoint, and only the
fields marked ``resumable`` (how long to train, how to evaluate, where to run) may change.
:class:`SessionOptions` say how this one invocation runs (the folder, the device, the data file):
they are never compared with a checkpoint.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import typing
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, cast

from ..blocks import ACTIVATIONS, GATED_ACTIVATIONS
from ..config import PRESETS, TransformerConfig
from ..device import AMP_MODES
from ..normalization import NORMS
from ..positions import POSITIONAL
from ..schedules import SCHEDULES
from ..tokenizers import TOKENIZERS, learned_tokenizers
from ..toy_tasks import TOY_TASKS
from ..trainer import TrainConfig
from ..validation import check_choice, check_int, check_number
from ..vocab import SPECIALS
from .common import EXIT_EPILOG, MAX_THREADS, THREADS_DEFAULT_TEXT, CommandLineParser, add_version, check_at_most, default_threads
from .console import LEVELS
from .profiles import DEFAULTS, PROFILE_ENV, PROFILES, current_profile

__all__ = ["TASKS", "BLEU_MODES", "MAX_BEAM", "RunConfig", "SessionOptions", "add_options", "check_maxima", "flag", "model_fields", "option", "parse_args", "read_config",
           "resolve"]

TASKS = (*TOY_TASKS, "multi30k")
BLEU_MODES = ("off", "final", "epoch")
# The widest beam accepted (both command lines): wider beams cost time in proportion and, on these
# models, find more empty or degenerate translations rather than better ones.
MAX_BEAM = 100


def option(help: str, default: Any = None, *, choices: Any = None, task: str | None = None, resumable: bool = False,
           zero_is_off: bool = False, metavar: str | None = None, required: bool = False, maximum: float | None = None,
           model: bool = False, group: str | None = None, one_of: str | None = None, positional: bool = False,
           convert: Any = None) -> Any:
    """A dataclass field that is also a command-line option (both command lines' parsers are made from them).

    ``task``: ``"toy"`` or ``"multi30k"`` for options of one task family only; ``resumable``: may
    differ from the checkpoint when resuming; ``zero_is_off``: the option's value 0 means ``None``;
    ``required``: the command line needs it; ``maximum``: the largest value accepted (checked with
    the rest before anything starts: a typo such as ``--n-symbols 100000000`` is an error, not hours
    of allocation); ``model``: a field of :class:`TransformerConfig` (``None``: the preset's);
    ``group``: the help section it is listed in; ``one_of``: exactly one option of this name is given
    (``--checkpoint`` or ``--pretrained``); ``positional``: the words that are no option (a list);
    ``convert``: the argparse type, where not the field's own.
    ``choices`` may be a table (or a function that gives the names), read when the parser is made, so an
    entry added to the table is an option value at once.
    """
    meta = dict(help=help, choices=choices, task=task, resumable=resumable, zero_is_off=zero_is_off, metavar=metavar,
                required=required, maximum=maximum, model=model, group=group, one_of=one_of, positional=positional,
                convert=convert)
    if positional:
        return field(default_factory=list, metadata=meta)
    return field(default=default, metadata=meta)


def _model_option(help: str, *, choices: Any = None, maximum: float | None = None) -> Any:
    """An option that changes one :class:`TransformerConfig` field of the preset (``None``: the preset's)."""
    return option(help, choices=choices, maximum=maximum, model=True, group="the model (default: the --preset's)")


def activations() -> tuple[str, ...]:
    """The feed-forward activations, plain and gated."""
    return (*ACTIVATIONS, *GATED_ACTIVATIONS)


def flag(name: str) -> str:
    """The option that sets field ``name``: ``--warmup-steps`` for ``warmup_steps``."""
    return "--" + name.replace("_", "-")


@dataclass
class RunConfig:
    """Every setting of a training run, one field per option of the same name.

    Fields left ``None`` mean "not used by this task" (the toy tasks' options in a Multi30k run and
    the other way round) or "the preset's" (the model's fields) or "off" (``clip_norm``, ``max_tokens``,
    ``target_exact_match``, ``bleu_threshold``, ``max_steps``/``epochs``: by the other one).
    """

    task: str = option("what to learn", choices=TASKS, required=True)
    profile: str = option(f"default sizes (default: ${PROFILE_ENV}, else full on GPU, fast on CPU)", choices=PROFILES)
    preset: str = option("model size", choices=tuple(sorted(PRESETS)))
    seed: int = option("random seed of the data order, the weights and dropout", 0, maximum=2**63 - 1)
    amp: str = option("mixed precision (auto: bf16 on GPUs with native bf16, fp16 with loss scaling on older GPUs, float32 on CPU)", "auto", choices=AMP_MODES)
    compile: bool = option("torch.compile the training forward pass (worth it on a GPU)", False, resumable=True)
    # training
    epochs: int | None = option("passes over the training data", resumable=True, maximum=10**6)
    max_steps: int | None = option("stop after this many updates", resumable=True, maximum=10**9)
    batch_size: int = option("sentences per batch (the global batch under torchrun)", maximum=10**6)
    max_tokens: int | None = option("train on batches of this many padded tokens (the longer side) instead of "
                                     "--batch-size sentences (0: off)", zero_is_off=True, maximum=10**8)
    batches_per_update: int = option("gradient accumulation: batches per optimizer update", 1, maximum=10**4)
    schedule: str = option("learning-rate schedule", choices=SCHEDULES)
    lr: float | None = option("peak learning rate", maximum=10.0)
    warmup_steps: int = option("warm-up updates (the rate peaks here)", maximum=10**9)
    label_smoothing: float = option("label smoothing of the training loss")
    clip_norm: float | None = option("clip the gradients' norm to this (0: off)", zero_is_off=True, maximum=10.0**6)
    weight_decay: float = option("AdamW weight decay of matrices", 0.0, maximum=10.0)
    eval_every: int | None = option("validate every N updates (default: after each epoch)", maximum=10**9)
    checkpoint_every: int | None = option("also checkpoint every N updates", resumable=True, maximum=10**9)
    target_exact_match: float | None = option("stop at this validation exact match (0: never)", resumable=True,
                                               zero_is_off=True)
    log_every: int = option("record the training loss every N updates", maximum=10**9)
    keep_weights: int = option("keep the last N checkpoints' weights and try their average at the end (0: off)", 0,
                                metavar="N", maximum=1000)
    # the model: the preset's sizes and choices, each field of TransformerConfig changed by the option of its name
    # (the vocabulary sizes and the padding id come from the data)
    d_model: int | None = _model_option("model width D; a multiple of --n-heads", maximum=16_384)
    n_heads: int | None = _model_option("attention heads", maximum=1_024)
    n_kv_heads: int | None = _model_option("key/value heads (fewer: grouped-query attention); divides --n-heads",
                                           maximum=1_024)
    n_encoder_layers: int | None = _model_option("encoder layers", maximum=128)
    n_decoder_layers: int | None = _model_option("decoder layers", maximum=128)
    d_ff: int | None = _model_option("feed-forward hidden width", maximum=65_536)
    dropout: float | None = _model_option("dropout of embeddings, sublayer outputs and the feed-forward")
    attn_dropout: float | None = _model_option("dropout of the attention weights")
    activation: str | None = _model_option("feed-forward activation (swiglu: a gated feed-forward)", choices=activations)
    norm: str | None = _model_option("normalisation of every sublayer", choices=NORMS)
    norm_first: bool | None = _model_option("Pre-LN (--norm-first) or the paper's Post-LN (--no-norm-first)")
    qk_norm: bool | None = _model_option("normalise each head's queries and keys (QK-norm)")
    layer_norm_eps: float | None = _model_option("the norms' epsilon")
    positional: str | None = _model_option("where positions come from", choices=POSITIONAL)
    max_len: int | None = _model_option("longest sequence the positions cover", maximum=65_536)
    relative_max_distance: int | None = _model_option("with --positional relative: the distance beyond which one "
                                                      "bias is shared", maximum=65_536)
    share_embeddings: bool | None = _model_option("one embedding matrix for source and target (a joint vocabulary)")
    tie_output: bool | None = _model_option("the output layer reuses the target embedding matrix")
    # the toy tasks (copy, reverse)
    n_train: int | None = option("training sequences", task="toy", maximum=10**7)
    n_heldout: int | None = option("held-out sequences, never seen in training", task="toy", maximum=10**6)
    n_symbols: int | None = option("symbols in the alphabet", task="toy", maximum=10**4)
    shortest: int | None = option("fewest symbols in a sequence", task="toy", maximum=512)
    longest: int | None = option("most symbols in a sequence", task="toy", maximum=512)
    # multi30k
    train_size: int | None = option("train on a random subset of this many pairs", task="multi30k", maximum=10**7)
    tokenizer: str | None = option("words: a word vocabulary per language; bpe: one joint subword vocabulary, "
                                     "embeddings shared and tied", choices=learned_tokenizers, task="multi30k")
    vocab_size: int | None = option("with --tokenizer bpe: tokens in the joint vocabulary", task="multi30k", maximum=10**6)
    min_freq: int | None = option("words: fewest occurrences of a word; bpe: of a pair to merge", task="multi30k", maximum=10**6)
    lowercase: bool = option("lower-case the text", False, task="multi30k")
    bleu: str = option("decode and score BLEU: at the end (val and test, greedy and beam), or also after every "
                        "validation (val, greedy)", "off", choices=BLEU_MODES, task="multi30k", resumable=True)
    beam_size: int = option("beam width for the final BLEU (beside greedy)", 4, task="multi30k", resumable=True, maximum=MAX_BEAM)
    bleu_threshold: float | None = option("with --bleu epoch: record when validation BLEU (greedy, lowercased) "
                                           "first reaches this", task="multi30k", resumable=True)

    def __post_init__(self) -> None:
        check_choice(flag("task"), self.task, TASKS)
        check_choice(flag("profile"), self.profile, PROFILES)
        check_choice(flag("preset"), self.preset, PRESETS)
        for name in ("batch_size", "beam_size"):
            check_int(flag(name), getattr(self, name))
        for name in self._family_fields("toy"):  # integers, set for a toy task (None otherwise)
            check_int(flag(name), getattr(self, name), optional=self.family != "toy")
        for name in ("train_size", "vocab_size", "min_freq", "max_tokens"):
            check_int(flag(name), getattr(self, name), optional=True)
        check_int(flag("seed"), self.seed, minimum=0)
        _check_flags(self, ("compile", "lowercase"))
        check_number(flag("bleu_threshold"), self.bleu_threshold, 0, 100, high_open=False, optional=True)
        if self.epochs is None and self.max_steps is None:
            raise ValueError("set --epochs or --max-steps (or both): otherwise training never stops")
        try:  # the trainer's and the model's settings, checked by their configs (the sizes of the data come later)
            self.train_config(0, progress=False)
            self.model_config(1000, 1000, 0)
        except ValueError as error:
            raise ValueError(_named_as_option(str(error))) from None
        check_maxima(self)
        self._check_family()

    @property
    def family(self) -> str:
        """``"toy"`` for the copy and reverse tasks, else ``"multi30k"``."""
        return "toy" if self.task in TOY_TASKS else "multi30k"

    @classmethod
    def _family_fields(cls, family: str) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls) if f.metadata["task"] == family)

    def _check_family(self) -> None:
        if self.family == "toy":
            check_int(flag("longest"), self.longest, minimum=self.shortest)  # type: ignore[arg-type]
            max_len = self.max_len or PRESETS[self.preset].get("max_len", TransformerConfig.max_len)  # with its <eos>
            if self.longest >= max_len:  # type: ignore[operator]
                raise ValueError(f"{flag('longest')} {self.longest}: the {self.preset!r} preset's max_len={max_len} allows "
                                 f"sequences of at most {max_len - 1} symbols; give {flag('longest')} {max_len - 1} or "
                                 "less, or a larger --preset")
            if self.bleu != "off":
                raise ValueError(f"--bleu {self.bleu}: BLEU scores translations; the {self.task!r} task has exact match instead")
            return
        check_choice(flag("tokenizer"), self.tokenizer, learned_tokenizers())
        check_choice(flag("bleu"), self.bleu, BLEU_MODES)
        if TOKENIZERS[cast(str, self.tokenizer)].joint and self.vocab_size is not None and self.vocab_size <= len(SPECIALS):
            raise ValueError(f"--vocab-size must be more than the {len(SPECIALS)} special tokens for --tokenizer {self.tokenizer}, "
                             f"got {self.vocab_size}")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> RunConfig:
        """The config :meth:`to_dict` wrote (a checkpoint's ``run``); an unknown key is an error."""
        unknown = sorted(set(values) - {f.name for f in fields(cls)})
        if unknown:
            raise ValueError(f"unknown run setting(s) {unknown}: not a setting of this version's RunConfig")
        return cls(**values)

    def train_config(self, pad_id: int, progress: bool) -> TrainConfig:
        """The trainer's config: every TrainConfig field has the same name here."""
        shared = {f.name: getattr(self, f.name) for f in fields(TrainConfig) if hasattr(self, f.name)}
        return TrainConfig(**{**shared, "pad_id": pad_id, "progress": progress})

    def model_config(self, src_vocab_size: int, tgt_vocab_size: int, pad_id: int) -> TransformerConfig:
        """The preset with every model field the options set, and one shared matrix for a joint (BPE)
        vocabulary unless the options say otherwise (source, target and output layer: three uses, one matrix)."""
        overrides: dict[str, Any] = {}
        if self.tokenizer is not None and TOKENIZERS[self.tokenizer].joint:
            overrides.update(share_embeddings=True, tie_output=True)
        overrides.update({name: getattr(self, name) for name in model_fields() if getattr(self, name) is not None})
        return TransformerConfig.from_preset(self.preset, src_vocab_size=src_vocab_size, tgt_vocab_size=tgt_vocab_size,
                                             pad_id=pad_id, **overrides)


@dataclass
class SessionOptions:
    """How this one invocation runs; never compared with a checkpoint."""

    out: Path = option("output folder (checkpoint.pt, metrics.json, loss.png)", required=True)
    restart: bool = option("start over, although --out has a checkpoint (earlier results are moved to OUT/previous-*)", False)
    device: str = option("'auto' (CUDA if available), 'cpu', 'cuda', 'cuda:1', ...", "auto")
    no_progress: bool = option("no progress bar and no progress lines (TQDM_DISABLE=1 hides the bar too); the bar "
                                "shows on a terminal only, elsewhere a plain line every --log-every updates", False)
    quiet: bool = option("only warnings and errors on the console: no information or progress lines, no bar", False)
    log_file: Path | None = option("also append every message (at --log-level or above, with its time) to this file",
                                    metavar="FILE")
    log_level: str = option("the least important messages shown and logged", "info", choices=LEVELS)
    debug: bool = option("show the traceback of an error (or set TRANSFORMER_LIB_DEBUG=1)", False)
    data_dir: Path | None = option("folder with the .gz files (default: $MULTI30K_DIR, else download to the cache)",
                                    task="multi30k")
    data: Path | None = option("prepared data from --prepare-only (skips tokenizing)", task="multi30k")
    prepare_only: bool = option("tokenize and write OUT/data.pt, then stop (for the full profile unless --profile "
                                 "says otherwise)", False, task="multi30k")
    threads: int | None = option(f"CPU threads for PyTorch's operators (default: {THREADS_DEFAULT_TEXT})",
                                  metavar="N", maximum=MAX_THREADS)
    tensorboard: bool = option("also write TensorBoard event files to OUT/tensorboard (needs the tensorboard "
                                "package; OUT/metrics.jsonl has the same records either way)", False)
    print_config: bool = option("print the resolved run configuration (the defaults of the task and profile, "
                                 "then the options given) as JSON, and exit", False)

    def __post_init__(self) -> None:
        if self.threads is not None:  # None: the default for the model's size
            check_int(flag("threads"), self.threads)
        _check_flags(self, ("restart", "no_progress", "quiet", "debug", "prepare_only", "tensorboard", "print_config"))
        check_choice(flag("log_level"), self.log_level, LEVELS)
        check_maxima(self)

    def resolved_threads(self, preset: str) -> int:
        """``--threads``, or its default for a model of ``preset``."""
        return self.threads if self.threads is not None else default_threads(small_model=preset == "tiny")


def _check_flags(options: Any, names: tuple[str, ...]) -> None:
    """Yes/no fields are booleans; ``"no"`` is not ``False`` (the model's are checked by TransformerConfig)."""
    for name in names:
        value = getattr(options, name)
        if not isinstance(value, bool):
            raise ValueError(f"{flag(name)} must be true or false, got {value!r}")


def _named_as_option(message: str) -> str:
    """A config's message about one of its fields, naming the option instead: ``lr must be ...`` becomes
    ``--lr must be ...``."""
    name = message.split(" ", 1)[0].split("=", 1)[0]
    return flag(name) + message[len(name):] if name in {f.name for f in fields(RunConfig)} else message


def check_maxima(options: Any) -> None:
    """Every field with a ``maximum`` is at most that."""
    for item in fields(options):
        check_at_most(flag(item.name), getattr(options, item.name), item.metadata["maximum"])


def _number_or_off(kind: type) -> Any:
    """An argparse type for an option whose value 0 means "off" (``None``)."""

    def convert(text: str) -> Any:
        value = kind(text)
        return None if value == 0 else value

    convert.__name__ = kind.__name__  # argparse names the type in its errors
    return convert


def _defaults_text(item: dataclasses.Field) -> str:
    """`` (default: ...)``: the value that applies when the option is left out, per task and profile
    where they differ (the same :data:`DEFAULTS` the run resolves); nothing where there is no value."""
    if "default:" in item.metadata["help"] or item.metadata["required"] or item.default is False:
        return ""
    contexts = {"toy": DEFAULTS["toy"]["fast"], "multi30k fast": DEFAULTS["multi30k"]["fast"],
                "multi30k full": DEFAULTS["multi30k"]["full"]}
    family = item.metadata["task"]
    values = {label: table.get(item.name, item.default) for label, table in contexts.items()
              if family is None or label.startswith(family)}
    shown = {label: value for label, value in values.items() if value is not None}
    if not shown:
        return ""
    if len(shown) == len(values) and len({repr(v) for v in shown.values()}) == 1:
        return f" (default: {next(iter(shown.values()))})"
    parts = [f"{label} {value}" for label, value in shown.items()]
    return f" (default: {'; '.join(parts)})"


def _add_field(parser: Any, item: dataclasses.Field, hint: Any, default: Any, help_text: str) -> None:
    meta, name = item.metadata, flag(item.name)
    kind = next((t for t in typing.get_args(hint) if t is not type(None)), hint)
    if meta["positional"]:
        parser.add_argument(item.name, nargs="*", help=help_text)
        return
    options: dict[str, Any] = dict(dest=item.name, help=help_text, default=default)
    if meta["required"]:
        options["required"] = True
    if kind is bool and meta["model"]:  # --qk-norm / --no-qk-norm; left out: the preset's
        parser.add_argument(name, action=argparse.BooleanOptionalAction, **options)
    elif kind is bool:
        parser.add_argument(name, action="store_true", **options)
    else:
        convert = meta["convert"] or (_number_or_off(kind) if meta["zero_is_off"] else kind)
        choices = meta["choices"]() if callable(meta["choices"]) else meta["choices"]  # read when the parser is made
        parser.add_argument(name, type=convert, choices=None if choices is None else tuple(choices), metavar=meta["metavar"],
                            **options)


def add_options(parser: argparse.ArgumentParser, *classes: type, left_out: str = "absent",
                defaults_text: Any = None) -> None:
    """One option per field of each dataclass of ``classes``, listed under its ``group`` (or its task family's).

    ``left_out``: ``"absent"`` (an option not given is no key of the result: the training command line,
    which resolves defaults per task and profile) or ``"default"`` (the field's default).
    ``defaults_text(field)``: what the help adds about the default.
    """
    sections: dict[str | None, Any] = {None: parser}
    exclusive: dict[str, Any] = {}
    hints = {name: hint for cls in classes for name, hint in typing.get_type_hints(cls).items()}
    for item in (item for cls in classes for item in fields(cls)):
        meta = item.metadata
        title = meta["group"] or ({"toy": "toy tasks (copy, reverse)", "multi30k": "multi30k"}.get(meta["task"]))
        if title not in sections:
            sections[title] = parser.add_argument_group(title)
        where = sections[title]
        if meta["one_of"] is not None:
            if meta["one_of"] not in exclusive:
                exclusive[meta["one_of"]] = where.add_mutually_exclusive_group(required=True)
            where = exclusive[meta["one_of"]]
        default = argparse.SUPPRESS if left_out == "absent" else item.default
        help_text = meta["help"] + (defaults_text(item) if defaults_text is not None else "")
        _add_field(where, item, hints[item.name], default, help_text)


def _parser() -> argparse.ArgumentParser:
    parser = CommandLineParser(
        prog="transformer-train",
        description="Train an encoder-decoder Transformer on a toy task or on Multi30k (German -> English).",
        epilog=f"Defaults depend on the task and the profile (--profile, else ${PROFILE_ENV}, else full with a CUDA GPU "
               "and fast without); --print-config shows those that apply to a command, and --config FILE reads them back. "
               + EXIT_EPILOG,
    )
    add_version(parser)
    parser.add_argument("--config", metavar="FILE", help="read the settings from FILE, as --print-config writes them "
                        "(JSON); the options given on the command line override them")
    add_options(parser, RunConfig, SessionOptions, defaults_text=_defaults_text)
    return parser


# What a --config file holds but never sets: the one-shot actions of the invocation that printed it.
NOT_FROM_CONFIG = ("print_config", "restart")


def parse_args(argv: list[str] | None = None) -> dict[str, Any]:
    """The options given, by field name (those left out are absent); ``--task`` and ``--out`` are required.

    ``--config FILE`` reads the settings ``--print-config`` printed (:func:`read_config`) as if they had
    been given, and the options on the command line override them; ``--task`` and ``--out`` may then come
    from the file.
    """
    argv = sys.argv[1:] if argv is None else list(argv)
    config_only = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    config_only.add_argument("--config")
    path = config_only.parse_known_args(argv)[0].config
    parser = _parser()
    from_file = read_config(path) if path is not None else {}
    for action in parser._actions:
        if action.dest in from_file:
            action.required = False
    given = vars(parser.parse_args(argv))
    given.pop("config", None)
    return {**from_file, **given}


def read_config(path: str | Path) -> dict[str, Any]:
    """The settings in a file ``--print-config`` wrote (``{"run": {...}, "session": {...}}``), by field name.

    Fields of the other task family (``None`` or their defaults there) and the one-shot actions
    (:data:`NOT_FROM_CONFIG`) are left out; a key that is no option is an error, by name. The values are
    checked with the rest of the options (:func:`resolve`).
    """
    try:
        values = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as error:
        raise OSError(f"--config {path}: cannot read it ({error.strerror or error})") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"--config {path} is not JSON as --print-config writes it ({error})") from None
    if not isinstance(values, dict) or not isinstance(values.get("run", {}), dict) or not isinstance(values.get("session", {}), dict):
        raise ValueError(f"--config {path}: expected the JSON object --print-config writes, with \"run\" and \"session\"")
    unknown = sorted(set(values) - {"run", "session", "resumes"})
    items = {f.name: f for cls in (RunConfig, SessionOptions) for f in fields(cls)}
    settings = {**values.get("run", {}), **values.get("session", {})}
    unknown += sorted(set(settings) - set(items))
    if unknown:
        raise ValueError(f"--config {path}: unknown setting(s) {unknown}; it holds what --print-config prints")
    family = "toy" if settings.get("task") in TOY_TASKS else "multi30k"
    hints = {**typing.get_type_hints(RunConfig), **typing.get_type_hints(SessionOptions)}
    chosen: dict[str, Any] = {}
    for name, value in settings.items():
        if name in NOT_FROM_CONFIG or items[name].metadata["task"] not in (None, family):
            continue
        if value is not None and Path in typing.get_args(hints[name]) + (hints[name],) and isinstance(value, str):
            value = Path(value)
        chosen[name] = value
    return chosen


def _check_family_options(task: str, given: dict[str, Any]) -> None:
    """Options of the other task family are refused by name, before anything is created."""
    family = "toy" if task in TOY_TASKS else "multi30k"
    items = [*fields(RunConfig), *fields(SessionOptions)]
    wrong = [flag(f.name) for f in items if f.metadata["task"] not in (None, family) and given.get(f.name) not in (None, False)]
    if wrong:
        what = "the toy tasks make their data themselves" if family == "toy" else "those options are for the toy tasks"
        raise ValueError(f"{', '.join(wrong)} do(es) not apply to --task {task}: {what}; leave it out")


def resolve(given: dict[str, Any]) -> tuple[RunConfig, SessionOptions]:
    """The run's configuration (the task's and profile's defaults, then every option given) and the
    session's options, both checked.

    ``--prepare-only`` without ``--profile`` prepares the data of a full run: the file is usually
    made on one machine (with the data and spaCy) for a full run on another (a GPU).
    """
    _check_family_options(given["task"], given)
    session_names = {f.name for f in fields(SessionOptions)}
    session = SessionOptions(**{k: v for k, v in given.items() if k in session_names})
    if session.restart and session.prepare_only:
        raise ValueError("--restart and --prepare-only: --prepare-only only writes data.pt; leave out --restart")
    settings = {k: v for k, v in given.items() if k not in session_names}
    profile = settings.get("profile") or ("full" if session.prepare_only else current_profile())
    family = "toy" if given["task"] in TOY_TASKS else "multi30k"
    return RunConfig.from_dict({**DEFAULTS[family][profile], **settings, "profile": profile}), session


def model_fields() -> tuple[str, ...]:
    """The settings that change the preset's model, each a :class:`TransformerConfig` field of the same name."""
    return tuple(f.name for f in fields(RunConfig) if f.metadata["model"])


def resumable_fields() -> tuple[str, ...]:
    """The settings a resumed run may change: how long to train, how to evaluate, where to run."""
    return tuple(f.name for f in fields(RunConfig) if f.metadata["resumable"])
