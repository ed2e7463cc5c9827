"""Checking input where it enters the library: settings, and token ids where data are made.

The library validates at its boundaries (configurations, command lines, the translator, the public
decoding functions, the data pipeline) and nowhere else: a layer's forward pass trusts its input,
because a check that reads a tensor's values (``.item()``, ``min()``, ``max()``, an ``if`` on a
tensor) makes the CPU wait for the GPU, every step. Each check here raises a ``ValueError`` (a
``TypeError`` for the wrong kind of object) whose message names the value, what it must be, and
what it was. Checks that read only shapes and dtypes, never values, may also guard a layer where a
mistake would otherwise pass silently (:func:`check_mask`: a mask that broadcasts the scores to a
larger shape).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Collection, Mapping
from math import isfinite
from typing import Any, cast

import torch
from torch import Tensor

__all__ = [
    "check_int", "check_bool", "check_number", "check_choice", "check_token_ids", "check_floats", "check_mask", "check_bias",
    "content_sha256", "refusal_reason",
]


def check_int(name: str, value: object, minimum: int = 1, *, maximum: int | None = None, optional: bool = False) -> None:
    """``value`` is an integer (not a bool) of at least ``minimum`` (and at most ``maximum``); or ``None``
    when ``optional``.

    Example:
        >>> check_int("n_heads", 0)
        Traceback (most recent call last):
        ...
        ValueError: n_heads must be an integer >= 1, got 0
    """
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}{' or None' if optional else ''}, got {value!r}")
    if maximum is not None and value > maximum:
        raise ValueError(f"{name} must be an integer in [{minimum}, {maximum}], got {value!r}")


def check_bool(name: str, value: object) -> None:
    """``value`` is ``True`` or ``False``: a yes/no setting, never a string such as ``"no"`` (which is truthy).

    Example:
        >>> check_bool("norm_first", "no")
        Traceback (most recent call last):
        ...
        ValueError: norm_first must be True or False, got 'no'
    """
    if not isinstance(value, bool):
        raise ValueError(f"{name} must be True or False, got {value!r}")


def check_number(
    name: str, value: object, low: float, high: float = float("inf"), *,
    low_open: bool = False, high_open: bool = True, optional: bool = False,
) -> None:
    """``value`` is a finite real number in the interval from ``low`` to ``high`` (open or closed at
    each end; by default ``[low, high)``); or ``None`` when ``optional``.

    Example:
        >>> check_number("dropout", 1.5, 0, 1)
        Traceback (most recent call last):
        ...
        ValueError: dropout must be a finite number in [0, 1), got 1.5
    """
    if value is None and optional:
        return
    interval = f"{'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"
    x = cast(float, value)  # compared only once it is known to be a number
    number = isinstance(value, (int, float)) and not isinstance(value, bool) and isfinite(x)
    inside = number and (low < x if low_open else low <= x) and (x < high if high_open else x <= high)
    if not inside:
        raise ValueError(f"{name} must be a finite number in {interval}{' or None' if optional else ''}, got {value!r}")


def check_choice(name: str, value: object, choices: Collection[object]) -> None:
    """``value`` is one of ``choices``.

    Example:
        >>> check_choice("activation", "swish", ("relu", "gelu"))
        Traceback (most recent call last):
        ...
        ValueError: activation must be one of ['relu', 'gelu'], got 'swish'
    """
    if value not in choices:
        raise ValueError(f"{name} must be one of {list(choices)}, got {value!r}")


def check_token_ids(tokens: Tensor, name: str = "token ids", vocab_size: int | None = None, *, batched: bool = False) -> None:
    """Raise a clear error unless ``tokens`` is an integer tensor (``torch.long`` or ``int32``, the
    dtypes ``nn.Embedding`` indexes with), of shape ``(B, L)`` when ``batched``, with every id in
    ``[0, vocab_size)`` when ``vocab_size`` is given.

    The range check reads the values (one synchronisation with a GPU): call it where data enter
    (decoding functions, the translator), never inside a training or decoding step.
    """
    if not isinstance(tokens, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of token ids, got {type(tokens).__name__}")
    if tokens.dtype not in (torch.long, torch.int32):
        # float or bool ids are no index; uint8 ids would wrap at 256
        raise TypeError(f"{name} must hold integer token ids (torch.long or int32), got dtype {tokens.dtype}; convert with .long()")
    if batched and tokens.dim() != 2:
        raise ValueError(f"{name} must have shape (B, L), got {tuple(tokens.shape)}")
    if vocab_size is not None and tokens.numel():
        low, high = (int(x) for x in torch.aminmax(tokens))
        if low < 0 or high >= vocab_size:
            bad = low if low < 0 else high
            raise ValueError(f"{name}: token id {bad} is outside the vocabulary [0, {vocab_size - 1}] (vocab_size={vocab_size})")


def check_floats(name: str, x: object, dtype: torch.dtype, width: int) -> None:
    """Raise a clear error unless ``x`` is a ``(..., width)`` floating-point tensor of the module's ``dtype``
    (any floating dtype inside autocast, which casts it). Reads only the shape and dtype, never a value."""
    if not isinstance(x, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if not x.is_floating_point() or (x.dtype != dtype and not _autocast_enabled(x.device.type)):
        raise TypeError(
            f"{name} has dtype {x.dtype}, but the module's weights are {dtype}; convert with .to({dtype}) "
            "(or convert the module, e.g. .double())"
        )
    if x.dim() == 0 or x.size(-1) != width:
        raise ValueError(f"{name} of shape {tuple(x.shape)} must end in the width {width}")


def _autocast_enabled(device_type: str) -> bool:
    try:
        return torch.is_autocast_enabled(device_type)
    except TypeError:  # torch < 2.4 takes no device type
        return torch.is_autocast_enabled() or torch.is_autocast_cpu_enabled()


def check_mask(mask: Tensor, scores_shape: torch.Size | tuple[int, ...]) -> None:
    """Raise a clear error unless ``mask`` is boolean and broadcasts to ``scores_shape``
    (``True`` = may attend, see :mod:`transformer_lib.masking`).

    Broadcasting must not *enlarge* the scores: a ``(B, 1, 1, L)`` mask against ``(B, T, L)``
    scores would silently produce ``(B, B, T, L)``, which is always a bug.
    """
    if not isinstance(mask, Tensor):
        raise TypeError(f"mask must be a boolean torch.Tensor, got {type(mask).__name__}")
    if mask.dtype != torch.bool:
        raise TypeError(
            f"mask must be boolean with True = may attend, got dtype {mask.dtype}. "
            "(Additive float masks are a different convention; build a boolean mask instead.)"
        )
    _check_broadcast("mask", mask, scores_shape)


def check_bias(bias: Tensor, scores_shape: torch.Size | tuple[int, ...]) -> None:
    """Raise a clear error unless ``bias`` is a float tensor that broadcasts to ``scores_shape``
    without enlarging it (the rule of :func:`check_mask`, for additive biases).
    """
    if not isinstance(bias, Tensor) or not bias.is_floating_point():
        kind = bias.dtype if isinstance(bias, Tensor) else type(bias).__name__
        raise TypeError(
            f"bias must be a floating-point tensor added to the scores, got {kind}; "
            "a boolean tensor is a mask: pass it as mask="
        )
    _check_broadcast("bias", bias, scores_shape)


def _check_broadcast(name: str, tensor: Tensor, scores_shape: torch.Size | tuple[int, ...]) -> None:
    """``tensor`` broadcasts to ``scores_shape`` and leaves it as it is."""
    scores_shape = tuple(scores_shape)
    try:
        broadcast = torch.broadcast_shapes(tensor.shape, scores_shape)
    except RuntimeError:
        broadcast = None
    if broadcast is None or tuple(broadcast) != scores_shape:  # no torch.Size(...): a graph break in torch 2.4's compiler
        raise ValueError(
            f"{name} of shape {tuple(tensor.shape)} does not broadcast to the attention scores of shape "
            f"{scores_shape} (batch..., queries, keys); each of its dimensions must be 1 or equal the "
            "scores' size there"
        )


# --- files: checksums and refusals ------------------------------------------------------------------


def content_sha256(value: Any) -> str:
    """SHA-256 of plain values and tensors (each tensor's dtype, shape and bytes), nested in dicts and
    lists: what checkpoints and prepared data store on saving and recompute on loading."""
    digest = hashlib.sha256()
    _update_digest(digest, value)
    return digest.hexdigest()


def _update_digest(digest: Any, value: Any) -> None:
    if isinstance(value, Tensor):
        flat = value.detach().to("cpu").contiguous().reshape(-1)
        digest.update(f"tensor {flat.dtype} {tuple(value.shape)};".encode())
        digest.update(flat.view(torch.uint8).numpy())
    elif isinstance(value, Mapping):
        digest.update(f"dict {len(value)};".encode())
        for key, item in value.items():
            digest.update(f"{key!r}:".encode())
            _update_digest(digest, item)
    elif isinstance(value, (list, tuple)):
        digest.update(f"{type(value).__name__} {len(value)};".encode())
        for item in value:
            _update_digest(digest, item)
    else:
        digest.update(f"{type(value).__name__} {value!r};".encode())


def refusal_reason(error: BaseException) -> str:
    """Why ``torch.load(weights_only=True)`` refused a file, without torch's advice to load it with
    ``weights_only=False``: that would run whatever code the file holds, and no reader of this library
    should take it. For a file of Python objects, the one it names (``GLOBAL posix.system``)."""
    text = str(error)
    if "Weights only load failed" in text:
        named = re.findall(r"GLOBAL ([\w.]+)", text)  # the object the file asked for, e.g. posix.system
        detail = f", such as {named[0][:100]}" if named else ""
        return ("it holds Python objects besides tensors and plain values, which this library never unpickles "
                f"(unpickling them can run code){detail}; it was not loaded")
    lines = [line.strip() for line in text.splitlines() if line.strip() and "weights_only" not in line]
    return f"torch.load could not read it ({type(error).__name__}: {(lines[0] if lines else '')[:200]})"
