"""The trained model that ships with the book: Multi30k German to English.

One file, ``transformer_lib/weights/multi30k-de-en.safetensors`` (package data, so a clone, a wheel and
Colab all have it; no download), holds the weights in half precision, the model's configuration, its
tokenizer (the BPE vocabulary and merges; normalisation and splitting are the library's), and the
run's record: the command, hardware, training time, the metrics of :mod:`transformer_lib.cli.train`
and the decoding chosen on the validation set. ``safetensors`` stores tensors and text only, so
reading the file cannot run code (a pickle can). Its SHA-256 is in ``weights/SHA256SUMS`` and is
checked on every load.

The chosen decoding is the model's default, as a Hugging Face generation config is: the loaded
:class:`~transformer_lib.translator.Translator` decodes with it unless told otherwise, and so does
``transformer-translate --pretrained``; ``beam_size=1`` asks for greedy decoding.

    >>> from transformer_lib import pretrained
    >>> translator = pretrained.load()                           # doctest: +SKIP
    >>> translator.translate(["Ein Hund rennt."])                 # doctest: +SKIP
    ['A dog is running.']
    >>> translator.translate(["Ein Hund rennt."], beam_size=1)    # doctest: +SKIP
    ['A dog is running.']

:func:`info` reads the record without the weights; :func:`headline` gives the numbers the README
and the chapters quote, from that record only. :func:`save` writes the format
(``python -m transformer_lib.cli.export`` turns a finished run into the file).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import torch

from .checkpoint import CheckpointError, load_weights, read_json_fields
from .config import TransformerConfig
from .device import parse_device
from .model import Transformer, upgrade_state_dict
from .multi30k import sha256_file
from .tokenizers import tokenizer_from_dict
from .translator import Translator

__all__ = ["FILE_NAME", "FORMAT", "FORMAT_VERSION", "PretrainedError", "PretrainedInfo", "shipped_path",
           "expected_sha256", "sha256_of", "info", "load", "save", "headline"]

FILE_NAME = "multi30k-de-en.safetensors"
FORMAT = "tested-transformer-pretrained"
FORMAT_VERSION = "2"
MAX_BYTES = 16 * 2**20  # what a git repository should hold: the book's one binary
_TEXT_FIELDS = ("task", "format", "format_version")
_JSON_FIELDS = ("model_config", "tokenizer", "tied_parameters", "data", "run", "decoding")


class PretrainedError(ValueError):
    """The file is missing, changed (checksum), or not in this format."""


@dataclass(frozen=True)
class PretrainedInfo:
    """What the file records besides its weights.

    Attributes:
        path: the file read.
        config: the model's :class:`~transformer_lib.config.TransformerConfig`.
        tokenizer: the tokenizer's plain description (``kind``, ``tokens``, ``merges``, ...).
        data: how text became ids in training (languages, source format).
        run: the training run's metrics as :mod:`transformer_lib.cli.train` wrote them (command,
            settings, hardware, software, per-epoch values, BLEU, examples, ``wall_time_s``).
        decoding: the decoding chosen on validation (``beam_size``, ``length_penalty``) as keywords
            of :meth:`Translator.translate`: the loaded model's default (``Translator.decoding``).
        tuning: the validation grid it was chosen from, and test BLEU with the chosen decoding.
    """

    path: Path
    config: TransformerConfig
    tokenizer: dict[str, Any]
    data: dict[str, Any]
    run: dict[str, Any]
    decoding: dict[str, Any]
    tuning: dict[str, Any] = field(repr=False)


def shipped_path() -> Path:
    """The file inside the installed package (a checkout or a wheel)."""
    return Path(str(resources.files("transformer_lib") / "weights" / FILE_NAME))


def expected_sha256(path: str | Path) -> str | None:
    """The checksum ``SHA256SUMS`` beside ``path`` lists for its name; ``None`` if it lists none."""
    path = Path(path)
    sums = path.parent / "SHA256SUMS"
    if not sums.is_file():
        return None
    for line in sums.read_text().splitlines():
        digest, _, name = line.partition("  ")
        if name.strip() == path.name:
            return digest.strip()
    return None


sha256_of = sha256_file  # one file checksum for the corpus and the model


def _checked(path: str | Path | None, sha256: str | None) -> Path:
    """The file to read, its checksum verified: ``sha256`` if given, else ``SHA256SUMS`` beside it."""
    path = shipped_path() if path is None else Path(path)
    if not path.is_file():
        raise PretrainedError(f"no pretrained model at {path}")
    expected = sha256 or expected_sha256(path)
    if expected is None:
        raise PretrainedError(f"no checksum for {path}: pass sha256=... or list it in {path.parent / 'SHA256SUMS'}")
    actual = sha256_of(path)
    if actual != expected:
        raise PretrainedError(f"{path} has SHA-256 {actual}, expected {expected}: the file changed; restore it")
    return path


def _metadata(path: Path) -> dict[str, str]:
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="pt") as file:
            metadata = dict(file.metadata() or {})
    except Exception as error:  # noqa: BLE001 - safetensors raises its own kinds for a bad header
        raise PretrainedError(f"{path} is not a safetensors file: {error}") from None
    if metadata.get("format") != FORMAT or metadata.get("format_version") != FORMAT_VERSION:
        raise PretrainedError(
            f"{path} has format {metadata.get('format')!r} version {metadata.get('format_version')!r}; "
            f"this library reads {FORMAT!r} version {FORMAT_VERSION!r}"
        )
    return metadata


def info(path: str | Path | None = None, sha256: str | None = None) -> PretrainedInfo:
    """The file's record (no weights are read); ``path`` defaults to the shipped file."""
    path = _checked(path, sha256)
    metadata = _metadata(path)
    # A file whose checksum is right can still lack a field or carry a broken one (made by another
    # tool, or an older writer): one PretrainedError naming the file and the field, not a KeyError.
    try:
        values = read_json_fields(metadata, _JSON_FIELDS, str(path))
    except CheckpointError as error:
        raise PretrainedError(str(error)) from None
    if not isinstance(metadata.get("task"), str):
        raise PretrainedError(f"{path} lacks the metadata field 'task' (it has {sorted(metadata)})")
    tuning = values["decoding"]
    try:
        config = TransformerConfig.from_dict(values["model_config"])
        chosen = tuning["chosen"]
        decoding = {"beam_size": chosen["beam_size"], "length_penalty": chosen["length_penalty"]}
    except (KeyError, TypeError, ValueError) as error:
        raise PretrainedError(f"{path}: its model_config or decoding record is not usable ({error!r})") from None
    return PretrainedInfo(path=path, config=config, tokenizer=values["tokenizer"], data=values["data"],
                          run=values["run"], tuning=tuning, decoding=decoding)


def load(path: str | Path | None = None, device: str | torch.device = "cpu", sha256: str | None = None) -> Translator:
    """The shipped model as a :class:`~transformer_lib.translator.Translator`, in eval mode, weights in
    float32 (stored in float16), decoding by default as the file chose (``info().decoding``).
    Raises :class:`PretrainedError` if the file is missing or changed."""
    from safetensors.torch import load_file

    record = info(path, sha256)
    state = load_file(str(record.path))
    metadata = _metadata(record.path)
    for alias, name in json.loads(metadata["tied_parameters"]).items():
        state[alias] = state[name]  # tied and shared weights are stored once
    model = Transformer(record.config)
    try:  # each weight's name and shape against the config, before torch's own error could list them all
        load_weights(model, upgrade_state_dict(state), str(record.path))
    except CheckpointError as error:
        raise PretrainedError(str(error)) from None
    tokenizer = tokenizer_from_dict(record.tokenizer)
    return Translator(model.to(parse_device(device)).eval(), tokenizer, tokenizer, metadata["task"], dict(record.data),
                      decoding=dict(record.decoding))


def save(translator: Translator, path: str | Path, run: Mapping[str, Any], tuning: Mapping[str, Any]) -> str:
    """Write ``translator`` in this format (half-precision weights, each shared tensor once) with the
    run's metrics and the decoding tuning; returns the file's SHA-256. Source and target must share
    one tokenizer (the shipped model does)."""
    from safetensors.torch import save_file

    src, tgt = translator.src_tokenizer.to_dict(), translator.tgt_tokenizer.to_dict()
    if src != tgt:
        raise PretrainedError("this format holds one tokenizer; the translator's source and target differ")
    if "chosen" not in tuning or not {"beam_size", "length_penalty"} <= set(tuning["chosen"]):
        raise PretrainedError(f"tuning needs chosen.beam_size and chosen.length_penalty, got {sorted(tuning)}")
    seen: dict[tuple[int, tuple[int, ...]], str] = {}
    tensors: dict[str, torch.Tensor] = {}
    aliases: dict[str, str] = {}
    for name, tensor in translator.model.state_dict().items():
        key = (tensor.data_ptr(), tuple(tensor.shape))
        if key in seen:
            aliases[name] = seen[key]
            continue
        seen[key] = name
        tensors[name] = tensor.detach().to("cpu", torch.float16).contiguous()
    metadata = {
        "format": FORMAT, "format_version": FORMAT_VERSION, "task": translator.task,
        "model_config": json.dumps(translator.model.config.to_dict()),
        "tokenizer": json.dumps(src, ensure_ascii=False), "tied_parameters": json.dumps(aliases),
        "data": json.dumps(translator.data), "run": json.dumps(run), "decoding": json.dumps(tuning),
    }
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(path), metadata=metadata)
    if path.stat().st_size > MAX_BYTES:
        raise PretrainedError(f"{path} is {path.stat().st_size:,} bytes, over the {MAX_BYTES:,} a repository should hold")
    return sha256_of(path)


def headline(record: PretrainedInfo | None = None) -> dict[str, Any]:
    """The numbers the book quotes about the shipped model, all read from its record.

    Keys: ``test_bleu`` and ``test_bleu_lowercased`` (test 2016, the validation-chosen decoding),
    ``test_greedy_bleu`` (and ``_lowercased``), ``val_bleu`` (chosen decoding, cased), ``beam_size``,
    ``length_penalty``, ``signature``, ``training_minutes`` (wall time of the run), ``epochs``,
    ``parameters``, ``cpu_count``, ``torch``, ``device``.
    """
    record = record or info()
    run, tuning = record.run, record.tuning
    chosen = tuning["chosen"]
    test = tuning["test"]
    greedy = run["bleu"]["test"]["greedy"]
    return {
        "test_bleu": test["bleu"], "test_bleu_lowercased": test["bleu_lowercased"],
        "test_greedy_bleu": greedy["cased"]["score"], "test_greedy_bleu_lowercased": greedy["lowercased"]["score"],
        "val_bleu": chosen["bleu"], "val_bleu_lowercased": chosen["bleu_lowercased"],
        "beam_size": chosen["beam_size"], "length_penalty": chosen["length_penalty"],
        "signature": test["signature"], "training_minutes": run["wall_time_s"] / 60, "epochs": run["epochs"],
        "parameters": run["parameters"], "cpu_count": run["hardware"]["cpu_count"],
        "torch": run["hardware"]["torch"], "device": run["hardware"]["device"],
    }
