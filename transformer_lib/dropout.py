"""Dropout, with its random mask drawn faster on CPU.

``Dropout`` behaves exactly like ``nn.Dropout``: in training each element is kept with probability
``1 - p`` and scaled by ``1 / (1 - p)``, so the expected output equals the input; in ``eval()`` it
returns its input unchanged. What differs is how the random keep/drop decisions are drawn on a CPU:

- ``nn.Dropout`` draws one Bernoulli number per element (``bernoulli_``). On CPUs where PyTorch
  does not use Intel's MKL generator, that is one call of its Mersenne twister per element, on a
  single thread: about a sixth of a training update of the book's translation model on a 2-core
  CPU (``benchmarks/bench_training.py --breakdown``).
- ``Dropout`` draws 64 random bits at a time from the same generator and reads them as two 32-bit
  integers, each uniform on ``[-2^31, 2^31)``. An element is kept when its integer is at least
  ``-2^31 + round(p * 2^32)``: probability ``1 - p`` to within ``2^-32``.

Both use PyTorch's default generator, so ``torch.manual_seed`` makes a run repeat exactly and a
checkpoint that saves the generator's state resumes exactly. The masks differ from
``nn.Dropout``'s for the same seed. On other devices (CUDA, MPS), where PyTorch's own dropout is a
fused kernel, and inside a ``torch.compile`` graph (which draws its own random numbers), ``Dropout``
calls it.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["Dropout", "dropout"]

_WORD = 2**32  # each element is decided by one uniform 32-bit integer


def dropout(x: Tensor, p: float, training: bool = True) -> Tensor:
    """Zero each element of ``x`` with probability ``p`` and scale the rest by ``1 / (1 - p)``.

    The same distribution as ``F.dropout(x, p, training)``, drawn as described in the module's
    docstring on CPU.

    Args:
        x: any shape, floating point.
        p: drop probability in ``[0, 1]``.
        training: ``False`` returns ``x`` itself.

    Example:
        >>> _ = torch.manual_seed(0)
        >>> y = dropout(torch.ones(100_000), p=0.1)
        >>> y.unique()  # dropped, or kept and scaled by 1 / 0.9
        tensor([0.0000, 1.1111])
        >>> round((y == 0).float().mean().item(), 2)
        0.1
    """
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout probability must be in [0, 1], got {p}")
    if not training or p == 0.0:
        return x
    drop = round(p * _WORD)  # how many of the 2^32 integers mean "drop"
    # Fused kernels elsewhere, and in compiled graphs (which draw their own random numbers; the
    # in-place random_ below would break the graph); p of almost 0 or 1.
    if x.device.type != "cpu" or torch.compiler.is_compiling() or not 0 < drop < _WORD:
        return F.dropout(x, p, training=True)
    with torch.inference_mode():  # random bits, never part of the graph: no autograd bookkeeping (one detach fewer)
        if x.dim() > 0 and x.size(-1) % 2 == 0:  # words laid out as x's rows: one view, no copy (same bits)
            words = torch.empty(*x.shape[:-1], x.size(-1) // 2, dtype=torch.int64).random_(-(2**63), None)
            uniform = words.view(torch.int32)  # x's shape, uniform on [-2^31, 2^31), two per word
        else:
            n = x.numel()
            words = torch.empty((n + 1) // 2, dtype=torch.int64).random_(-(2**63), None)  # 64 uniform random bits each
            uniform = words.view(torch.int32)[:n].view(x.shape)  # uniform on [-2^31, 2^31), two per word
    keep = uniform >= drop - _WORD // 2  # probability 1 - drop / 2^32 (outside inference mode: it may be saved for backward)
    scale = _WORD / (_WORD - drop)  # kept elements scaled so that E[output] = x
    if x.dtype == torch.get_default_dtype():  # the mask scaled in x's dtype: the backward pass is one product
        return x * (keep * scale)
    return (x * keep).mul_(scale)  # bf16 or fp16: the scale is not rounded to x's dtype


class Dropout(nn.Dropout):
    """``nn.Dropout`` (same arguments, same ``p``, same ``train()``/``eval()`` behaviour) whose
    mask is drawn faster on CPU; see :func:`dropout`.

    Shape:
        any shape ``->`` the same shape.
    """

    def forward(self, x: Tensor) -> Tensor:
        if self.inplace:  # nothing here writes in place; keep PyTorch's behaviour for that
            return super().forward(x)
        return dropout(x, self.p, self.training)
