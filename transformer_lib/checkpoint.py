"""Checkpoint files: what a checkpoint holds, writing it atomically, reading it safely, averaging.

A checkpoint is a plain dict of Python values and tensors (:data:`CHECKPOINT_KEYS` lists what
every one holds; :func:`checkpoint_metadata` builds the part that describes the model and its
data), written atomically with a SHA-256 checksum and read with ``torch.load(weights_only=True)``.
Files of an older format are refused, naming the version that reads them
(:data:`READ_BY`). :func:`average_checkpoints` averages the weights of the last few (Vaswani et al. 2017,
section 6.1).
"""

from __future__ import annotations

import json
import os
import tempfile
import zipfile
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

import torch
from torch import Tensor

from .config import FILE_PARAMETER_LIMIT, TransformerConfig
from .model import Transformer, count_parameters
from .tokenizers import tokenizer_from_dict
from .validation import check_int, content_sha256, refusal_reason

__all__ = [
    "CHECKPOINT_FORMAT_VERSION",
    "parameter_count",
    "model_config_from_file",
    "CHECKPOINT_KEYS",
    "CheckpointError",
    "checkpoint_metadata",
    "atomic_write",
    "atomic_file",
    "staged_path",
    "checkpoint_digest",
    "save_checkpoint",
    "load_checkpoint",
    "check_contents",
    "load_weights",
    "read_json_fields",
    "save_kept_weights",
    "kept_weights",
    "average_checkpoints",
]

# --- Checkpoint files --------------------------------------------------------------------------

# 2: the tokenizers (each with its kind) replace format 1's vocabularies and BPE JSON, and the
# output layer's weight is "output_layer.weight" (format 1: "generator.weight").
CHECKPOINT_FORMAT_VERSION = 2
# The last release that reads each older format.
READ_BY = {1: "tested-transformer 0.2.0"}
# What every checkpoint holds. The first five describe the model and its data, so a checkpoint
# alone is enough to rebuild the model and translate; the rest let training resume exactly.
CHECKPOINT_KEYS = (
    "format_version",
    "model_config",  # TransformerConfig.to_dict()
    "model_state",  # model.state_dict()
    "tokenizers",  # {"src": Tokenizer.to_dict(), "tgt": Tokenizer.to_dict()}, each with its "kind"
    "task",  # "copy" | "reverse" | "multi30k"
    "data",  # how text became ids: {"src_lang": "de", "tgt_lang": "en", "source_format": ..., ...}
    "optimizer_state",
    "scheduler_state",
    "train_config",
    "step",
    "epoch",
    "rng_state",
    "metrics",
)
# The types torch.load(weights_only=True) accepts; anything else makes a checkpoint unloadable.
_PLAIN_TYPES = (type(None), bool, int, float, complex, str, bytes, torch.dtype, torch.device, torch.Size)


class CheckpointError(ValueError):
    """A file that is not a checkpoint of this library's format, or a dict that cannot be saved as one."""


def checkpoint_metadata(
    model_config: Any, src_tokenizer: Any, tgt_tokenizer: Any, task: str, data: Mapping[str, Any] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """What a checkpoint holds besides the training state: enough to rebuild the model and translate.

    Args:
        model_config: a ``TransformerConfig`` (or its ``to_dict()``).
        src_tokenizer, tgt_tokenizer: :class:`~transformer_lib.vocab.Tokenizer` s (or their ``to_dict()``).
        task: ``"copy"``, ``"reverse"`` or ``"multi30k"``.
        data: how text became ids (``src_lang``, ``tgt_lang``, ``source_format``, ...).
        extra: more entries, e.g. ``run`` (the command line's settings).

    Returns:
        The dict for ``transformer_lib.trainer.Trainer(metadata=...)``: ``model_config``,
        ``tokenizers``, ``task``, ``data`` (see :data:`CHECKPOINT_KEYS`) and ``extra``.
    """
    tokenizers = {"src": _as_dict(src_tokenizer), "tgt": _as_dict(tgt_tokenizer)}
    for side, given in (("src", src_tokenizer), ("tgt", tgt_tokenizer)):
        if "kind" not in tokenizers[side]:
            raise TypeError(f"the {side} tokenizer must be a Tokenizer (or its dict, with its kind), got a {type(given).__name__}")
    return {
        "model_config": _as_dict(model_config),
        "tokenizers": tokenizers,
        "task": task,
        "data": dict(data or {}),
        **extra,
    }


def _as_dict(value: Any) -> dict[str, Any]:
    return value.to_dict() if hasattr(value, "to_dict") else dict(value)


def _check_plain(value: Any, where: str) -> None:
    if isinstance(value, Tensor) or type(value) in _PLAIN_TYPES:
        return
    if type(value) in (dict, OrderedDict):
        for key, item in value.items():
            if type(key) not in (str, int):
                raise CheckpointError(f"{where} has a key {key!r} of type {type(key).__name__}; use str or int keys")
            _check_plain(item, f"{where}[{key!r}]")
        return
    if type(value) in (list, tuple):
        for i, item in enumerate(value):
            _check_plain(item, f"{where}[{i}]")
        return
    raise CheckpointError(
        f"{where} is a {type(value).__module__}.{type(value).__qualname__}; a checkpoint holds only plain "
        "Python values (dict, list, str, int, float, bool, None) and tensors, so that torch.load(weights_only=True) "
        "can read it. Convert it (e.g. with .to_dict() or float())"
    )


def _check_keys(checkpoint: Mapping[str, Any], source: str) -> None:
    missing = [key for key in CHECKPOINT_KEYS if key not in checkpoint]
    if missing:
        raise CheckpointError(f"{source} lacks the checkpoint entries {missing} (a checkpoint holds {list(CHECKPOINT_KEYS)})")


def save_checkpoint(path: str | Path, checkpoint: Mapping[str, Any]) -> None:
    """Write ``checkpoint`` to ``path`` atomically: a crash leaves the previous file intact.

    The data goes to a temporary file in the same folder, is flushed to disk (``fsync``), and only
    then renamed over ``path`` (``os.replace`` is atomic on POSIX and Windows). A reader, or a
    resumed run after a crash, thus sees the old checkpoint or the new one, never half of one.

    Raises:
        CheckpointError: an entry of :data:`CHECKPOINT_KEYS` is missing, ``format_version`` is
            not :data:`CHECKPOINT_FORMAT_VERSION`, or a value is not a plain type or tensor.
    """
    path = Path(path)
    if type(checkpoint) is not dict:
        raise CheckpointError(f"a checkpoint is a dict, got {type(checkpoint).__name__}")
    _check_keys(checkpoint, "the checkpoint to save")
    if checkpoint["format_version"] != CHECKPOINT_FORMAT_VERSION:
        raise CheckpointError(f"format_version must be {CHECKPOINT_FORMAT_VERSION}, got {checkpoint['format_version']!r}")
    _check_plain(checkpoint, "checkpoint")
    payload = {key: value for key, value in checkpoint.items() if key != "checksum"}
    _atomic_save(path, {**payload, "checksum": {"sha256": checkpoint_digest(payload)}})


def checkpoint_digest(checkpoint: Mapping[str, Any]) -> str:
    """SHA-256 of a checkpoint's contents: every key, plain value, and tensor (dtype, shape, bytes).

    :func:`save_checkpoint` stores it under ``"checksum"`` and :func:`load_checkpoint` recomputes it,
    so a file changed after it was written (a disk or copy error) is refused instead of trained on.
    """
    return content_sha256({key: value for key, value in checkpoint.items() if key != "checksum"})


def atomic_write(path: str | Path, write: Callable[[Any], None], check: Callable[[Path], None] | None = None) -> None:
    """Call ``write(file)`` on a temporary file beside ``path``, ``fsync``, then rename over ``path``.

    A crash (or a full disk) leaves the previous ``path`` intact and no half-written file; the
    temporary file (``.NAME.*.tmp``) is removed on any error, and by the trainer's command line
    when a killed process left one behind. ``check(temporary_path)``, if given, runs on the whole
    written file before it replaces ``path`` (a size limit, say): what it raises leaves ``path`` as
    it was. ``path`` may be the file the data was read from (it is read before this is called), and
    a symbolic link is followed (its target is replaced, as ``open()`` would write it). Errors
    writing become ``OSError`` s naming ``path``.
    """
    with atomic_file(path, check=check) as f:
        write(f)


@contextmanager
def atomic_file(path: str | Path, check: Callable[[Path], None] | None = None) -> Iterator[IO[bytes]]:
    """The context-manager form of :func:`atomic_write`: a binary file to write, renamed over ``path``
    when the block ends without an error (and ``check`` accepts it), removed when it raises."""
    with staged_path(path, check) as staged, open(staged, "wb") as f:
        yield f
        f.flush()
        os.fsync(f.fileno())


@contextmanager
def staged_path(path: str | Path, check: Callable[[Path], None] | None = None) -> Iterator[Path]:
    """A temporary file's path beside ``path`` for a writer that takes a file name (``safetensors``):
    renamed over ``path`` when the block ends without an error and ``check(staged)`` accepts the
    file, removed otherwise (see :func:`atomic_write`)."""
    path = Path(path)
    if path.is_symlink():
        path = Path(os.path.realpath(path))  # write where the link points, keep the link
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as error:
        raise OSError(f"could not write {path}: {error.strerror or error} (is the folder read-only?)") from None
    staged = Path(tmp_name)
    try:
        os.close(fd)
        yield staged
        _as_the_umask_allows(staged, like=path)  # after the writer, which may have made the file anew
        if check is not None:
            check(staged)
        os.replace(staged, path)
    except BaseException as error:
        staged.unlink(missing_ok=True)
        if isinstance(error, (OSError, RuntimeError)) and not isinstance(error, CheckpointError):
            reason = " ".join(str(error).split())[:200]
            raise OSError(f"could not write {path}: {reason} (is the disk full, or the folder read-only?)") from error
        raise
    _fsync_folder(path.parent)


def _as_the_umask_allows(file: Path, like: Path | None = None) -> None:
    """Give a new file the mode ``open()`` would (0666 less the user's umask; an existing file's own
    mode when it replaces ``like``): ``mkstemp`` makes it 0600, which others on a shared machine could
    not read whatever the user's umask says."""
    if os.name != "posix":
        return
    if like is not None and like.is_file():
        os.chmod(file, like.stat().st_mode & 0o777)
        return
    umask = os.umask(0o022)  # reading the umask means setting it; put it back at once
    os.umask(umask)
    os.chmod(file, 0o666 & ~umask)


def _atomic_save(path: Path, payload: Any) -> None:
    """``torch.save`` atomically (see :func:`atomic_write`)."""
    atomic_write(path, lambda f: torch.save(payload, f))


def _fsync_folder(folder: Path) -> None:
    """Make a rename durable: on POSIX the folder entry itself must reach the disk (no-op elsewhere)."""
    if os.name != "posix":
        return
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    except OSError:
        pass  # some file systems do not support fsync on folders
    finally:
        os.close(fd)


def load_checkpoint(path: str | Path, map_location: str | torch.device | None = "cpu") -> dict[str, Any]:
    """Read a checkpoint written by :func:`save_checkpoint`, with ``torch.load(weights_only=True)``.

    ``weights_only=True`` unpickles only plain values and tensors, so a checkpoint from elsewhere
    cannot run code when loaded.

    Raises:
        FileNotFoundError: there is no file at ``path``.
        CheckpointError: the file is not a checkpoint of this format (another file, a truncated
            one, a plain state_dict, another format version, Python objects torch refuses to
            unpickle), its checksum does not match, or an entry is wrong (:func:`check_contents`).
    """
    path = Path(path)
    if not path.is_file():
        hint = " (it is a folder; checkpoints are files such as FOLDER/checkpoint.pt)" if path.is_dir() else ""
        raise FileNotFoundError(
            f"no checkpoint at {path}{hint}; train one with `python -m transformer_lib.cli.train --task reverse --out FOLDER`"
        )
    if not zipfile.is_zipfile(path):
        raise CheckpointError(f"{path} is not a transformer_lib checkpoint: not a file torch.save writes (a zip archive)")
    try:
        checkpoint = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as error:  # noqa: BLE001 - torch raises many kinds for a file that is not a checkpoint
        raise CheckpointError(f"{path} is not a transformer_lib checkpoint: {refusal_reason(error)}") from error
    if not isinstance(checkpoint, dict) or "format_version" not in checkpoint:
        kind = "dict" if isinstance(checkpoint, dict) else type(checkpoint).__name__
        raise CheckpointError(
            f"{path} holds a {kind} without 'format_version': not a transformer_lib checkpoint "
            "(a bare state_dict, perhaps; load that with model.load_state_dict(torch.load(...)))"
        )
    version = checkpoint["format_version"]
    if version in READ_BY:
        raise CheckpointError(f"{path} is a checkpoint of format {version}, which {READ_BY[version]} reads "
                              f"(pip install '{READ_BY[version].replace(' ', '==')}'); this version reads format "
                              f"{CHECKPOINT_FORMAT_VERSION}")
    if version != CHECKPOINT_FORMAT_VERSION:
        raise CheckpointError(f"{path} has checkpoint format_version {version!r}; this library reads version "
                              f"{CHECKPOINT_FORMAT_VERSION}")
    stored = checkpoint.get("checksum")  # absent in checkpoints written before checksums existed
    if stored is not None:
        expected = stored.get("sha256") if isinstance(stored, dict) else None
        if checkpoint_digest(checkpoint) != expected:
            raise CheckpointError(
                f"{path} is corrupt: its contents do not match the SHA-256 checksum stored when it was "
                "written (the file changed on disk or in a copy); use a backup, or start over with --restart"
            )
    _check_keys(checkpoint, str(path))
    check_contents(checkpoint, path)
    return checkpoint


def parameter_count(config: TransformerConfig) -> int:
    """The parameters of the :class:`~transformer_lib.model.Transformer` ``config`` describes (a tied or
    shared matrix counts once): the model built on PyTorch's ``meta`` device, which has shapes but no
    storage, so the count is exact for every norm, positional scheme and feed-forward kind, and nothing
    is allocated (about 0.1 s for the paper's big model)."""
    with torch.device("meta"):
        return count_parameters(Transformer(config))


def model_config_from_file(values: Any) -> TransformerConfig:
    """A model config read from a file: :meth:`TransformerConfig.from_dict` (each size within its
    limit), then the model as a whole within :data:`~transformer_lib.config.FILE_PARAMETER_LIMIT`, from
    its sizes alone, before anything is allocated.

    Raises:
        ValueError: a field, a size or the total is wrong; the message names it and the limit.
    """
    config = TransformerConfig.from_dict(values)
    total = parameter_count(config)
    if total > FILE_PARAMETER_LIMIT:
        raise ValueError(
            f"model config describes a model of {total:,} parameters, more than this library accepts "
            f"from a file ({FILE_PARAMETER_LIMIT:,}); every size is within its limit, but together they "
            "would fill the memory"
        )
    return config


def check_contents(checkpoint: Mapping[str, Any], path: str | Path) -> None:
    """Every entry a checkpoint's reader uses, checked before anything is built from it; one
    :class:`CheckpointError` naming ``path`` and the entry. A valid checksum only says the file is as
    written, not that what was written makes sense (a hand-edited or hostile file has a valid one too).

    - ``model_config``: :func:`model_config_from_file` (types, bounds, the total parameter count);
    - ``tokenizers``: :func:`~transformer_lib.tokenizers.tokenizer_from_dict` for each side, whose
      vocabulary size and ``<pad>`` id must be the config's;
    - ``task`` (a str), ``data`` (a dict), ``step`` and ``epoch`` (integers >= 0), ``rng_state``
      (the random generators' states, of the sizes torch restores).
    """
    def fail(field: str, problem: object) -> CheckpointError:
        return CheckpointError(f"{path}: {field}: {problem}")

    try:
        config = model_config_from_file(checkpoint["model_config"])
    except (TypeError, ValueError) as error:
        raise fail("model_config", error) from None
    if not isinstance(checkpoint["tokenizers"], Mapping) or set(checkpoint["tokenizers"]) != {"src", "tgt"}:
        raise fail("tokenizers", "must be a dict of 'src' and 'tgt'")
    for side in ("src", "tgt"):
        try:
            vocab = tokenizer_from_dict(checkpoint["tokenizers"][side], f"tokenizers['{side}']").vocab
        except (TypeError, ValueError) as error:
            raise fail(f"tokenizers['{side}']", error) from None
        size = getattr(config, f"{side}_vocab_size")
        if len(vocab) != size:
            raise fail(f"tokenizers['{side}']", f"{len(vocab)} tokens, but model_config.{side}_vocab_size={size}")
        if vocab.pad_id != config.pad_id:
            raise fail("model_config.pad_id", f"{config.pad_id}, but <pad> is id {vocab.pad_id} of tokenizers['{side}']")
    for field, kind in (("task", str), ("data", dict)):
        if not isinstance(checkpoint[field], kind):
            raise fail(field, f"must be a {kind.__name__}, got {checkpoint[field]!r}")
    for field in ("step", "epoch"):
        try:
            check_int(field, checkpoint[field], minimum=0)
        except ValueError as error:
            raise fail(field, error) from None
    _check_rng_state(checkpoint["rng_state"], fail)


def load_weights(model: torch.nn.Module, state: Mapping[str, Any], where: str) -> None:
    """``model.load_state_dict(state)``, each name, shape and dtype kind checked first: a file whose
    checksum is right but whose weights do not fit its configuration is one :class:`CheckpointError`
    naming ``where``, the weight and both shapes, not torch's ``RuntimeError`` listing every mismatch.

    Raises:
        CheckpointError: a weight missing, unexpected, not a tensor, of another shape, or not of the
            model's kind (floating point or integer).
    """
    expected = model.state_dict()
    missing, unexpected = sorted(set(expected) - set(state)), sorted(set(state) - set(expected))
    if missing or unexpected:
        raise CheckpointError(f"{where}: the weights do not fit its model_config: "
                              + "; ".join(f"{kind} {names[:3]}{' ...' if len(names) > 3 else ''}"
                                          for kind, names in (("missing", missing), ("unexpected", unexpected)) if names))
    for name, own in expected.items():
        tensor = state[name]
        if not isinstance(tensor, Tensor):
            raise CheckpointError(f"{where}: weight {name!r} is a {type(tensor).__name__}, not a tensor")
        if tuple(tensor.shape) != tuple(own.shape):
            raise CheckpointError(f"{where}: weight {name!r} has shape {tuple(tensor.shape)}, but its model_config "
                                  f"makes {tuple(own.shape)}")
        if tensor.dtype.is_floating_point != own.dtype.is_floating_point:
            raise CheckpointError(f"{where}: weight {name!r} is {tensor.dtype}, the model's is {own.dtype}")
    model.load_state_dict(dict(state))


def read_json_fields(metadata: Mapping[str, Any], names: Sequence[str], where: str) -> dict[str, Any]:
    """The JSON text fields ``names`` of a file's metadata (a safetensors header), parsed: a field that
    is missing, not text or not JSON is one :class:`CheckpointError` naming ``where`` and the field."""
    values = {}
    for name in names:
        text = metadata.get(name)
        if not isinstance(text, str):
            raise CheckpointError(f"{where} lacks the metadata field {name!r} (it has {sorted(metadata)})")
        try:
            values[name] = json.loads(text)
        except json.JSONDecodeError as error:
            raise CheckpointError(f"{where}: the metadata field {name!r} is not JSON ({error})") from None
    return values


def _check_rng_state(rng: Any, fail: Callable[[str, object], CheckpointError]) -> None:
    """The random generators' states: what ``torch.set_rng_state`` (and CUDA's) accept, or an error now
    rather than a ``RuntimeError`` from deep inside resuming."""
    expected = tuple(torch.get_rng_state().shape)
    if isinstance(rng, Mapping) and not rng:
        return  # a checkpoint made for translating only (no training to resume) may hold none
    states = [("rng_state", rng)]
    if isinstance(rng, Mapping) and "processes" in rng:
        if not isinstance(rng["processes"], list):
            raise fail("rng_state['processes']", f"must be a list, got {type(rng['processes']).__name__}")
        states += [(f"rng_state['processes'][{i}]", state) for i, state in enumerate(rng["processes"])]
    for field, state in states:
        if not isinstance(state, Mapping) or not isinstance(state.get("torch"), Tensor):
            raise fail(field, "must be a dict holding the CPU generator's state under 'torch'")
        cpu, cuda = state["torch"], state.get("cuda")
        if cpu.dtype != torch.uint8 or tuple(cpu.shape) != expected:
            raise fail(f"{field}['torch']", f"a {cpu.dtype} tensor of shape {tuple(cpu.shape)}; the CPU generator's "
                       f"state is torch.uint8 of shape {expected}")
        if cuda is not None and (not isinstance(cuda, Tensor) or cuda.dtype != torch.uint8 or cuda.dim() != 1 or not cuda.numel()):
            raise fail(f"{field}['cuda']", "must be a non-empty 1-D torch.uint8 tensor")


# --- Checkpoint averaging ----------------------------------------------------------------------


def save_kept_weights(folder: str | Path, step: int, model_state: Mapping[str, Tensor], keep: int) -> Path:
    """Write ``model_state`` to ``folder/step_NNNNNNN.pt`` atomically, and keep only the newest ``keep`` such files."""
    path = Path(folder) / f"step_{step:07d}.pt"
    _atomic_save(path, {"step": step, "model_state": model_state})
    for old in kept_weights(folder)[:-keep]:
        old.unlink()
    return path


def kept_weights(folder: str | Path) -> list[Path]:
    """The weight files :func:`save_kept_weights` keeps (``TrainConfig.keep_weights``), oldest first."""
    return sorted(Path(folder).glob("step_*.pt"))


def average_checkpoints(sources: Sequence[str | Path | Mapping[str, Tensor]]) -> dict[str, Tensor]:
    """The element-wise mean of several models' weights: checkpoint averaging.

    The paper's base models average the last 5 checkpoints, written 10 minutes apart (Vaswani et
    al. 2017, section 6.1). Late in training, successive checkpoints scatter around a minimum that
    the optimizer keeps overshooting; their mean usually lies closer to it, and typically scores a
    little higher (often ~0.5 BLEU) at no training cost. It only makes sense for checkpoints of one
    run (weights that differ by a few updates), never for separately trained models.

    Floating-point tensors are averaged in float64 and returned in their own dtype; other tensors
    (integer buffers) must be equal in every source.

    Args:
        sources: model ``state_dict`` s, or paths to files holding one: a checkpoint (its
            ``model_state``) or a weight file kept by :func:`save_kept_weights`.

    Returns:
        A ``state_dict`` for ``model.load_state_dict``.

    Example:
        >>> a, b = {"w": torch.tensor([1.0, 2.0])}, {"w": torch.tensor([3.0, 6.0])}
        >>> average_checkpoints([a, b])["w"]
        tensor([2., 4.])
    """
    if isinstance(sources, (str, Path)) or len(sources) == 0:
        raise ValueError("average_checkpoints needs a list of at least one state_dict or file")
    states = []
    for source in sources:
        if isinstance(source, (str, Path)):
            try:
                loaded = torch.load(source, map_location="cpu", weights_only=True)
            except Exception as error:  # noqa: BLE001 - as in load_checkpoint
                raise CheckpointError(f"{source} cannot be averaged: {refusal_reason(error)}") from error
            source = loaded["model_state"] if isinstance(loaded, dict) and "model_state" in loaded else loaded
        states.append(source)
    first = states[0]
    for i, state in enumerate(states[1:], start=1):
        if set(state) != set(first):
            raise ValueError(
                f"source {i} has different weights than source 0 (only in 0: {sorted(set(first) - set(state))[:5]}, "
                f"only in {i}: {sorted(set(state) - set(first))[:5]}): average checkpoints of one model only"
            )
    averaged = {}
    for name, tensor in first.items():
        shapes = {tuple(state[name].shape) for state in states}
        if len(shapes) > 1:
            raise ValueError(f"{name} has different shapes in the sources: {sorted(shapes)}")
        if tensor.is_floating_point():
            total = torch.zeros(tensor.shape, dtype=torch.float64)
            for state in states:
                total += state[name].detach().to("cpu", torch.float64)
            averaged[name] = (total / len(states)).to(tensor.dtype)
        else:
            if any(not torch.equal(state[name].cpu(), tensor.cpu()) for state in states):
                raise ValueError(f"{name} is not floating point and differs between the sources; it cannot be averaged")
            averaged[name] = tensor.detach().cpu().clone()
    return averaged
