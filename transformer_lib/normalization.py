"""The normalisations a model can use, by name (chapter 4; RMSNorm and QK-norm: chapter 7).

Shapes: ``...`` any leading dimensions, ``D`` the normalised width (``d_model``, or a head's width
``Dh`` when queries and keys are normalised).

- ``"layernorm"`` (the paper, Ba et al. 2016): subtract the mean, divide by the standard deviation,
  then a learned gain and bias.
- ``"rmsnorm"`` (Zhang & Sennrich 2019, used by T5 and LLaMA): divide by the root mean square only,
  then a learned gain; no centring and no bias, so cheaper, and in their experiments as good.

:data:`NORMS` is the one table: ``TransformerConfig.norm`` names an entry, and each entry is called
as ``NORMS[name](width, eps=eps)``. The same table makes the QK-norm of attention
(``TransformerConfig.qk_norm``): a norm over each head's queries and keys before their dot product.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn

from .validation import check_int, check_number

__all__ = ["RMSNorm", "NORMS"]


class RMSNorm(nn.Module):
    r"""Root-mean-square normalisation: :math:`y = x / \sqrt{\mathrm{mean}(x^2) + \epsilon} \cdot g`.

    The same function as ``torch.nn.RMSNorm`` (PyTorch 2.4 and later) with ``elementwise_affine``;
    written here because the library supports PyTorch 2.3. The parameter is called ``weight``, as
    there and in ``nn.LayerNorm``, so state dicts read alike.

    Args:
        d_model: the width ``D`` of the last dimension, which is normalised.
        eps: added to the mean square, so a zero vector stays finite.

    Shape:
        ``(..., D)`` -> ``(..., D)``.

    Example:
        >>> norm = RMSNorm(4)
        >>> norm(torch.tensor([[3.0, -3.0, 3.0, -3.0]]))
        tensor([[ 1.0000, -1.0000,  1.0000, -1.0000]], grad_fn=<MulBackward0>)
    """

    def __init__(self, d_model: int, eps: float = 1e-5) -> None:
        super().__init__()
        check_int("RMSNorm d_model", d_model)
        check_number("RMSNorm eps", eps, 0)  # 0 is allowed (as in nn.LayerNorm): a zero vector then gives NaN
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))

    def forward(self, x: Tensor) -> Tensor:
        inverse_rms = torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps)  # (..., 1)
        return x * inverse_rms * self.weight  # (..., D)

    def extra_repr(self) -> str:
        return f"{self.weight.numel()}, eps={self.eps}"


# Each entry is called as NORMS[name](width, eps=eps). TransformerConfig.norm and the training command's
# --norm take their names from here, and the parameter count builds the model: a new norm is one entry.
NORMS: dict[str, Callable[..., nn.Module]] = {"layernorm": nn.LayerNorm, "rmsnorm": RMSNorm}
