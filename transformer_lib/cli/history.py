"""Runs recorded by earlier versions of the train command line, as they would be given today.

A results file keeps the command as it was run (``command``): that is history, and it stays. Options
have been renamed since (``--average-last`` is ``--keep-weights``, ``--norm post`` is
``--no-norm-first``, ``--warmup`` is ``--warmup-steps``), the module moved (``transformer_lib.train``
is ``transformer_lib.cli.train``), and defaults changed (the full profile's schedule was cosine at
5e-4, it is Noam at 3e-3), so an old command run today would fail, or worse, train another recipe.
:func:`current_command` gives the command that makes the same run with this version: the task and
profile, every recorded setting that differs from today's default for them, and the options of the
session as run (``--data``, ``--out``, ``--device``, ...). Its resolved configuration equals the
recorded one (:func:`differences` finds none); ``tests/test_commands_shown.py`` checks that for every
committed record.

    >>> record = {"command": "python -m transformer_lib.train --task multi30k --norm post --out r",
    ...           "settings": {"task": "multi30k", "profile": "full", "norm": "post", "schedule": "cosine"}}
    >>> current_command(record)
    'python -m transformer_lib.cli.train --task multi30k --profile full --schedule cosine --no-norm-first --out r'
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

from .options import RunConfig, SessionOptions, flag, model_fields, parse_args, resolve

__all__ = ["MODULE", "RENAMED_SETTINGS", "DATA_SETTINGS", "current_settings", "current_command", "differences", "train_arguments"]

MODULE = "transformer_lib.cli.train"
# Settings an earlier version recorded under another name: old name -> today's field of RunConfig.
RENAMED_SETTINGS = {"warmup": "warmup_steps", "average_last": "keep_weights"}
# --norm pre|post (None: the preset's) became --norm-first / --no-norm-first.
_NORM_FIRST = {"pre": True, "post": False, None: None}
# With --data, the prepared file decides these; the run records what the file holds (cli.train._check_prepared).
DATA_SETTINGS = ("tokenizer", "vocab_size", "min_freq", "train_size", "lowercase")
# The word tokenizer was named after spaCy, which splits the words.
_TOKENIZERS = {"spacy": "words", "spacy.blank": "words"}


def current_settings(settings: Mapping[str, Any], data: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A record's ``settings`` under today's names and values (fields of :class:`RunConfig`); ``data``
    (the record's ``data``) gives the tokenizer of a record made before ``--tokenizer`` existed.

    Raises:
        ValueError: a setting this version has no field for (a rename this table does not know).
    """
    today: dict[str, Any] = {}
    for name, value in settings.items():
        if name == "norm" and "norm_first" not in settings:  # before --norm-first: --norm pre|post
            today["norm_first"] = _NORM_FIRST[value]
        else:
            today[RENAMED_SETTINGS.get(name, name)] = value
    if "tokenizer" not in today and data and "tokenizer" in data:
        today["tokenizer"] = data["tokenizer"]
    if today.get("tokenizer") is not None:
        today["tokenizer"] = _TOKENIZERS.get(today["tokenizer"], today["tokenizer"])
    if today.get("tokenizer") == "words":
        today.pop("vocab_size", None)  # a BPE option: word runs record None, and it is not used
    unknown = sorted(set(today) - {f.name for f in fields(RunConfig)})
    if unknown:
        raise ValueError(f"settings {unknown} are not options of this version's train command line; "
                         "add their new names to RENAMED_SETTINGS")
    return today


def _session_arguments(command: str) -> list[str]:
    """The options of the session (``--data``, ``--out``, ``--device``, ...) in a recorded command, as given."""
    session = {f.name: f for f in fields(SessionOptions)}
    words = shlex.split(command)
    kept: list[str] = []
    for i, word in enumerate(words):
        name = word[2:].replace("-", "_") if word.startswith("--") else None
        if name in session:
            is_flag = session[name].default is False
            kept += [word] if is_flag else [word, words[i + 1]]
    return kept


def _option(name: str, value: Any, default: Any) -> list[str]:
    """The command-line words that set field ``name`` to ``value`` where the default is ``default``."""
    item = next(f for f in fields(RunConfig) if f.name == name)
    if item.metadata["model"] and isinstance(value, bool):  # --qk-norm / --no-qk-norm
        return [flag(name) if value else "--no-" + flag(name)[2:]]
    if isinstance(value, bool) and value:
        return [flag(name)]
    if value is None and item.metadata["zero_is_off"]:
        return [flag(name), "0"]
    if value is None or isinstance(value, bool):
        raise ValueError(f"{flag(name)}: the run had {value!r}, today's default is {default!r}, and no option "
                         "sets it back")
    return [flag(name), repr(value) if isinstance(value, float) else str(value)]


def current_command(record: Mapping[str, Any]) -> str:
    """The command that makes the run of ``record`` (a results file with ``command`` and ``settings``)
    with this version of ``python -m transformer_lib.cli.train``: the recorded command itself where it
    still makes that run (:func:`differences` finds none), else one derived from the settings.

    Model fields left to the preset (``None``) are written out where the recorded
    ``model_config`` differs from what today's preset gives.

    Raises:
        ValueError: a setting this version cannot express.
    """
    if not differences(record["command"], record):
        return str(record["command"])
    settings = current_settings(record["settings"], record.get("data"))
    task, profile = settings["task"], settings["profile"]
    session = _session_arguments(record["command"])
    defaults = resolve({"task": task, "profile": profile, "out": Path("out")})[0]
    model = record.get("model_config") or {}
    preset = _model(replace(defaults, **{k: v for k, v in settings.items() if k not in model_fields()}), model)
    for name in model_fields():
        if settings.get(name) is None and name in model and model[name] != getattr(preset, name):
            settings[name] = model[name]  # the preset's then, not today's
    words = ["--task", task, "--profile", profile]
    for item in fields(RunConfig):
        name = item.name
        if name in ("task", "profile") or name not in settings:
            continue
        default = getattr(defaults, name)
        if settings[name] != default:
            words += _option(name, settings[name], default)
    return " ".join(["python", "-m", MODULE, *(shlex.quote(word) for word in words + session)])


def _model(config: RunConfig, recorded: Mapping[str, Any]) -> Any:
    """The model ``config`` builds for the recorded vocabulary sizes."""
    return config.model_config(recorded.get("src_vocab_size", 100), recorded.get("tgt_vocab_size", 100),
                               recorded.get("pad_id", 0))


def train_arguments(command: str) -> list[str]:
    """The arguments of a ``python -m transformer_lib.cli.train`` (or ``torchrun ... -m``) command line.

    Raises:
        ValueError: the command runs another module (an old name such as ``transformer_lib.train``).
    """
    words = shlex.split(command)
    if "-m" not in words or words.index("-m") + 1 >= len(words):
        raise ValueError(f"{command!r} runs no module (python -m ...)")
    at = words.index("-m") + 1
    if words[at] != MODULE:
        raise ValueError(f"{command!r} runs {words[at]}, not {MODULE}")
    return words[at + 1:]


def differences(command: str, record: Mapping[str, Any]) -> list[str]:
    """How a run of ``command`` with this version would differ from the recorded run: the module, an
    option today's parser refuses, each setting that resolves to another value, each field of the
    model it builds that differs from the recorded ``model_config``. Empty: it makes the same run.
    The command is parsed and resolved, not run (as ``--print-config`` does)."""
    import contextlib
    import io

    try:
        arguments = train_arguments(command)
    except ValueError as error:
        return [str(error)]
    errors = io.StringIO()
    try:
        with contextlib.redirect_stderr(errors), contextlib.redirect_stdout(io.StringIO()):
            config = resolve(parse_args(arguments))[0]
    except SystemExit:
        return [errors.getvalue().strip()]
    except ValueError as error:
        return [str(error)]
    recorded_settings = current_settings(record.get("settings", {}), record.get("data"))
    if "--data" in arguments:  # the prepared file the command names decides these (and refuses an option that contradicts it)
        config = replace(config, **{name: recorded_settings[name] for name in DATA_SETTINGS if name in recorded_settings})
    found = []
    for name, value in recorded_settings.items():
        if getattr(config, name) != value:
            found.append(f"{flag(name)}: the run had {value!r}, this command gives {getattr(config, name)!r}")
    recorded = record.get("model_config") or {}
    model = _model(config, recorded).to_dict()
    for name, value in recorded.items():
        if name in model and model[name] != value:
            found.append(f"model_config.{name}: the run had {value!r}, this command builds {model[name]!r}")
    return found
