"""Properties the book asserts of anything that maps a sequence to a sequence (chapters 1, 2).

A mask bug rarely crashes: a mask that is built but not applied, or applied with the wrong
polarity, gives outputs of the right shape and a loss that goes down. These checks catch such bugs
by *behaviour*, so they work on any callable, from one attention function to a whole model. Each
raises ``AssertionError`` when the property fails (the library's input validators, which raise
``ValueError``, are in :mod:`transformer_lib.validation`):

- :func:`assert_causal`: output position ``t`` must not change when inputs after ``t`` change.
- :func:`assert_padding_invariant`: outputs at real tokens must not change when the contents of
  padded positions change.
- :func:`assert_permutation_equivariant`: permuting the input positions permutes the outputs the
  same way (true of attention without positional information, chapter 1).

Both first run the callable twice on the same input and require identical outputs, so a layer
that is random at evaluation time (a dropout that ignores ``eval()``) is reported as such instead
of as a leak. Both raise ``AssertionError`` with a message that names the position that failed.

Shapes::

    B  batch size    L  sequence length (dimension ``dim`` of the input and of the output)
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

__all__ = ["assert_deterministic", "assert_causal", "assert_padding_invariant", "assert_permutation_equivariant"]

Perturb = Callable[[Tensor, torch.Generator], Tensor]


def _default_perturb(x: Tensor, generator: torch.Generator) -> Tensor:
    """A different tensor of the same shape: ``x`` plus standard normal noise (floats only)."""
    if not x.is_floating_point():
        raise TypeError(
            f"cannot invent new values for a {x.dtype} input; pass perturb=..., e.g. a function that "
            "draws random token ids: lambda x, g: torch.randint(1, vocab_size, x.shape, generator=g)"
        )
    noise = torch.randn(x.shape, generator=generator, dtype=x.dtype)  # CPU generator, then move
    return x + noise.to(x.device)


def _perturbed(x: Tensor, perturb: Perturb | None, seed: int) -> Tensor:
    """``x`` with new values everywhere, from ``perturb`` (default :func:`_default_perturb`) and a
    generator seeded by ``seed``: the global random state is not touched."""
    perturb = _default_perturb if perturb is None else perturb
    return perturb(x, torch.Generator().manual_seed(seed))


def _run(fn: Callable[[Tensor], Tensor], x: Tensor) -> Tensor:
    with torch.no_grad():
        out = fn(x)
    if not isinstance(out, Tensor):
        raise TypeError(f"fn must return a tensor, got {type(out).__name__} (wrap it: lambda x: f(x)[0])")
    return out


def assert_deterministic(fn: Callable[[Tensor], Tensor], x: Tensor, atol: float = 0.0) -> Tensor:
    """Run ``fn`` twice on ``x``; raise unless both outputs agree. Returns the output.

    Modules must be in ``eval()`` mode. A difference means something random is still active, most
    often a dropout that ignores ``eval()``: ``F.dropout(x, p)`` (whose ``training`` defaults to
    ``True``) or an ``nn.Dropout`` constructed inside ``forward`` (a fresh module is in training mode).
    """
    first, second = _run(fn, x), _run(fn, x)
    if first.shape != second.shape or not torch.allclose(first, second, atol=atol, rtol=0.0):
        diff = (first - second).abs().max().item() if first.shape == second.shape else float("nan")
        raise AssertionError(
            f"fn is not deterministic: two calls on the same input differ by up to {diff:.3g}. "
            "Is the module in eval() mode? A dropout created inside forward, or F.dropout without "
            "training=self.training, stays active in eval()"
        )
    return first


def _check_same_length(x: Tensor, out: Tensor, dim: int) -> None:
    if out.dim() <= dim or out.size(dim) != x.size(dim):
        raise ValueError(
            f"fn must keep the sequence dimension {dim}: input {tuple(x.shape)}, output {tuple(out.shape)}"
        )


def assert_causal(
    fn: Callable[[Tensor], Tensor],
    x: Tensor,
    *,
    dim: int = 1,
    perturb: Perturb | None = None,
    atol: float = 1e-5,
    seed: int = 0,
) -> None:
    """Raise ``AssertionError`` unless output position ``t`` depends only on inputs ``0..t``.

    For every ``t``, the inputs at positions ``t+1, t+2, ...`` are replaced by different values and
    the outputs at positions ``0..t`` must stay the same (up to ``atol``).

    Args:
        fn: maps ``x`` to an output with the same length along ``dim``, e.g.
            ``lambda x: layer(x, memory, tgt_mask=mask)[0]``. Modules must be in ``eval()`` mode.
        x: an input, e.g. embeddings ``(B, L, D)`` or token ids ``(B, L)``.
        dim: the sequence dimension of input and output.
        perturb: ``perturb(x, generator)`` returns new values of ``x``'s shape (only the future part
            is used). Default: ``x`` plus Gaussian noise, which needs a floating-point ``x``.
        atol: allowed absolute difference.
        seed: seeds the perturbation (the global random state is not touched).

    Example:
        >>> from transformer_lib.attention import scaled_dot_product_attention
        >>> from transformer_lib.masking import causal_mask
        >>> assert_causal(lambda x: scaled_dot_product_attention(x, x, x, causal_mask(5)[0])[0],
        ...              torch.randn(2, 5, 4))
    """
    reference = assert_deterministic(fn, x)
    _check_same_length(x, reference, dim)
    other = _perturbed(x, perturb, seed)
    length = x.size(dim)
    positions = torch.arange(length, device=x.device).view([-1 if d == dim else 1 for d in range(x.dim())])
    for t in range(length - 1):
        changed = torch.where(positions > t, other, x)  # inputs after t replaced
        out = _run(fn, changed)
        past, new_past = reference.narrow(dim, 0, t + 1), out.narrow(dim, 0, t + 1)
        if not torch.allclose(past, new_past, atol=atol, rtol=0.0):
            per_position = (past - new_past).abs().transpose(0, dim).reshape(t + 1, -1).amax(dim=1)
            first = int((per_position > atol).nonzero()[0])
            raise AssertionError(
                f"not causal: output position {first} changed by {per_position[first].item():.3g} when only "
                f"inputs at positions {t + 1}..{length - 1} changed (information flows from the future)"
            )


def assert_padding_invariant(
    fn: Callable[[Tensor], Tensor],
    x: Tensor,
    is_real: Tensor,
    *,
    perturb: Perturb | None = None,
    atol: float = 1e-5,
    seed: int = 0,
) -> None:
    """Raise ``AssertionError`` unless outputs at real positions ignore what padded positions hold.

    The inputs at padded positions (``is_real == False``) are replaced by different values; the
    outputs at real positions must stay the same. ``fn`` keeps its mask fixed (build the mask from
    the original tokens, outside ``fn``), so the check asks: does anything get through the mask?
    Outputs *at* padded positions are not checked: padding masks keys, not queries.

    Args:
        fn: maps ``x`` to an output whose first two dimensions are ``(B, L)``.
        x: input whose first two dimensions are ``(B, L)``: embeddings ``(B, L, D)`` or ids ``(B, L)``.
        is_real: boolean ``(B, L)``, ``True`` at real tokens.
        perturb, atol, seed: as in :func:`assert_causal`.
    """
    if is_real.dtype != torch.bool or tuple(is_real.shape) != tuple(x.shape[:2]):
        raise ValueError(
            f"is_real must be a boolean (B, L) tensor matching x's first two dimensions {tuple(x.shape[:2])}, "
            f"got {is_real.dtype} {tuple(is_real.shape)}"
        )
    reference = assert_deterministic(fn, x)
    _check_same_length(x, reference, 1)
    pad = (~is_real).view(*is_real.shape, *([1] * (x.dim() - 2)))  # broadcast over feature dims
    out = _run(fn, torch.where(pad, _perturbed(x, perturb, seed), x))
    diff = (reference - out).abs().reshape(*is_real.shape, -1).amax(dim=-1)  # (B, L)
    diff = diff.masked_fill(~is_real, 0.0)
    if (diff > atol).any():
        b, position = (int(i) for i in (diff > atol).nonzero()[0])
        raise AssertionError(
            f"padding leaks: the output at real position {position} of sequence {b} changed by "
            f"{diff[b, position].item():.3g} when only padded positions changed"
        )


def assert_permutation_equivariant(
    fn: Callable[[Tensor], Tensor],
    x: Tensor,
    *,
    dim: int = 1,
    atol: float = 1e-5,
    seed: int = 0,
) -> None:
    """Raise ``AssertionError`` unless ``fn(x permuted) == fn(x) permuted`` along ``dim``.

    Self-attention without positional information has this property: it sees a set of tokens, not
    a sequence. A reshape that mixes positions into heads breaks it (see chapter 1).

    Args:
        fn: maps ``x`` to an output with the same length along ``dim``; modules in ``eval()`` mode.
        x: e.g. embeddings ``(B, L, D)``.
        dim: the sequence dimension.
        atol: allowed absolute difference.
        seed: seeds the random permutation (never the identity when ``L > 1``).
    """
    generator = torch.Generator().manual_seed(seed)
    length = x.size(dim)
    perm = torch.randperm(length, generator=generator)
    if length > 1 and torch.equal(perm, torch.arange(length)):
        perm = perm.roll(1)
    perm = perm.to(x.device)
    reference = assert_deterministic(fn, x)
    _check_same_length(x, reference, dim)
    out = _run(fn, x.index_select(dim, perm))
    expected = reference.index_select(dim, perm)
    if not torch.allclose(out, expected, atol=atol, rtol=0.0):
        raise AssertionError(
            f"not permutation-equivariant: permuting the positions by {perm.tolist()} changed the outputs by up "
            f"to {(out - expected).abs().max().item():.3g} beyond the same permutation"
        )
