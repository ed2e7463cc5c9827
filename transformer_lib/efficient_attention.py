"""Attention in linear time (chapter 7): linear attention (Katharopoulos et al. 2020), softmax attention's
weights replaced by a kernel feature map so that no ``T x L`` matrix is formed, and its causal case as
running sums.

Shapes::

    T   number of queries    L   number of keys/values    Dk  query/key width    Dv  value width
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = ["linear_attention", "causal_linear_attention"]


def linear_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    causal: bool = False,
    eps: float = 1e-6,
    chunk_size: int = 64,
) -> Tensor:
    r"""Linear attention (Katharopoulos et al. 2020): the softmax replaced by a kernel feature map.

    .. math:: \mathrm{out}_i = \frac{\phi(q_i)^\top \sum_j \phi(k_j)\, v_j^\top}
                                    {\phi(q_i)^\top \sum_j \phi(k_j)},
              \qquad \phi(x) = \mathrm{elu}(x) + 1 > 0

    The weights :math:`\phi(q_i)^\top\phi(k_j) / \sum_{j'} \phi(q_i)^\top\phi(k_{j'})` are positive
    and sum to one, like softmax's, but the similarity factorises. So the sums over the keys,
    :math:`S = \sum_j \phi(k_j) v_j^\top` (``Dk x Dv``) and :math:`z = \sum_j \phi(k_j)` (``Dk``),
    are computed once and shared by every query: time ``O((T + L) Dk Dv)``, and no ``T x L``
    matrix is ever formed. (There is no :math:`1/\sqrt{d_k}`: the feature map replaces the
    exponential, as in the paper.)

    Causal: query ``i`` sums over ``j <= i`` only, i.e. the running sums :math:`S_i, z_i`: an RNN
    with a ``Dk x Dv`` state ("Transformers are RNNs"). They are computed ``chunk_size`` positions
    at a time: inside a chunk the small masked ``C x C`` product, across chunks the running state,
    so memory stays linear in ``T`` (``chunk_size=1`` is the plain recurrence).

    Args:
        query: ``(..., T, Dk)``.
        key: ``(..., L, Dk)``.
        value: ``(..., L, Dv)``.
        causal: query ``i`` sees keys ``0..i`` only (needs ``T == L``).
        eps: added to the denominator, which is positive, to guard against underflow.
        chunk_size: positions per chunk in the causal case.

    Returns:
        ``(..., T, Dv)``. No weights: returning them would need the ``T x L`` matrix this avoids.

    Example:
        >>> q, k, v = torch.randn(2, 5, 4), torch.randn(2, 5, 4), torch.randn(2, 5, 3)
        >>> linear_attention(q, k, v, causal=True).shape
        torch.Size([2, 5, 3])
    """
    if query.size(-1) != key.size(-1):
        raise ValueError(f"query width {query.size(-1)} must equal key width {key.size(-1)} (both are Dk)")
    if key.size(-2) != value.size(-2):
        raise ValueError(f"key has {key.size(-2)} positions but value has {value.size(-2)}; they must match")
    if causal and query.size(-2) != key.size(-2):
        raise ValueError(
            f"causal linear attention needs as many queries as keys, got {query.size(-2)} and {key.size(-2)}"
        )
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
        raise ValueError(f"chunk_size must be a positive integer, got {chunk_size!r}")
    phi_q = F.elu(query) + 1  # (..., T, Dk)
    phi_k = F.elu(key) + 1  # (..., L, Dk)
    if causal:
        return causal_linear_attention(phi_q, phi_k, value, eps, chunk_size)
    state = phi_k.transpose(-2, -1) @ value  # (..., Dk, Dv)
    normaliser = phi_k.sum(dim=-2)[..., None]  # (..., Dk, 1)
    return (phi_q @ state) / (phi_q @ normaliser + eps)  # (..., T, Dv)


def causal_linear_attention(phi_q: Tensor, phi_k: Tensor, value: Tensor, eps: float = 1e-6, chunk_size: int = 64) -> Tensor:
    """The causal case of :func:`linear_attention`, on features ``phi_q (..., T, Dk)``,
    ``phi_k (..., T, Dk)``: running sums over the keys, ``chunk_size`` positions at a time."""
    state = phi_k.new_zeros(*phi_k.shape[:-2], phi_k.size(-1), value.size(-1))  # (..., Dk, Dv)
    normaliser = phi_k.new_zeros(*phi_k.shape[:-2], phi_k.size(-1), 1)  # (..., Dk, 1)
    outputs = []
    for start in range(0, phi_q.size(-2), chunk_size):
        q = phi_q[..., start : start + chunk_size, :]  # (..., C, Dk)
        k = phi_k[..., start : start + chunk_size, :]  # (..., C, Dk)
        v = value[..., start : start + chunk_size, :]  # (..., C, Dv)
        within = (q @ k.transpose(-2, -1)).tril()  # (..., C, C): keys of this chunk up to the query
        numerator = q @ state + within @ v  # (..., C, Dv)
        denominator = q @ normaliser + within.sum(dim=-1, keepdim=True)  # (..., C, 1)
        outputs.append(numerator / (denominator + eps))
        state = state + k.transpose(-2, -1) @ v  # (..., Dk, Dv)
        normaliser = normaliser + k.sum(dim=-2)[..., None]  # (..., Dk, 1)
    return torch.cat(outputs, dim=-2)  # (..., T, Dv)
