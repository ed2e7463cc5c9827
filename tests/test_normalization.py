"""Norms: RMSNorm against PyTorch's and against its formula; the table every norm of a model comes from."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from transformer_lib.blocks import Residual
from transformer_lib.config import TransformerConfig
from transformer_lib.model import DecoderOnlyTransformer, Transformer
from transformer_lib.normalization import NORMS, RMSNorm

U = 2.0**-24  # unit roundoff of float32


def rms_atol(x: torch.Tensor, out: torch.Tensor) -> float:
    """Two float32 evaluations of the same RMSNorm differ in the order of the D additions of the mean
    square (at most D * u relative each, Higham 2002, section 4.2), which the square root halves, plus
    a few roundings of the divide and the two products: each within (D / 2 + 4) * u of the exact
    output, the two within twice that."""
    return 2 * (x.size(-1) / 2 + 4) * U * float(out.detach().abs().max())


def randomised(norm: RMSNorm) -> RMSNorm:
    with torch.no_grad():
        norm.weight.normal_(1.0, 0.5)
    return norm


@pytest.mark.parametrize("shape", [(5, 8), (2, 3, 64), (1, 1, 7)])
@pytest.mark.parametrize("eps", [1e-5, 1e-2])
def test_rms_norm_matches_torch_rms_norm(shape: tuple[int, ...], eps: float) -> None:
    if not hasattr(nn, "RMSNorm"):
        pytest.skip(f"torch.nn.RMSNorm needs PyTorch >= 2.4, this is {torch.__version__}")
    torch.manual_seed(0)
    ours = randomised(RMSNorm(shape[-1], eps=eps))
    theirs = nn.RMSNorm(shape[-1], eps=eps)
    theirs.load_state_dict(ours.state_dict())  # the same parameter name, "weight"
    x = 3 * torch.randn(shape)
    expected = theirs(x)
    torch.testing.assert_close(ours(x), expected, atol=rms_atol(x, expected), rtol=0)


def test_rms_norm_is_its_formula_in_float64() -> None:
    """Runs on every PyTorch (the reference check above needs 2.4): y = x / sqrt(mean(x^2) + eps) * g."""
    torch.manual_seed(1)
    norm = randomised(RMSNorm(6, eps=1e-3)).double()
    x = torch.randn(4, 6, dtype=torch.float64)
    expected = x / torch.sqrt((x**2).sum(-1, keepdim=True) / 6 + 1e-3) * norm.weight
    torch.testing.assert_close(norm(x), expected, atol=1e-14, rtol=0)
    assert not torch.allclose(norm(x), nn.functional.layer_norm(x, (6,), norm.weight)), "no centring"


def test_rms_norm_keeps_a_zero_vector_finite_and_ignores_the_scale() -> None:
    assert torch.equal(RMSNorm(4)(torch.zeros(1, 4)), torch.zeros(1, 4)), "eps keeps 0 / 0 away"
    torch.manual_seed(2)
    norm, x = RMSNorm(4, eps=0.0), torch.randn(3, 4)
    expected = norm(x).detach()
    torch.testing.assert_close(norm(64 * x), expected, atol=rms_atol(x, expected), rtol=0)  # 64: exact in binary


@pytest.mark.parametrize("name", sorted(NORMS))
def test_every_norm_is_made_by_width_and_eps(name: str) -> None:
    norm = NORMS[name](8, eps=1e-3)
    assert norm.eps == 1e-3 and norm.weight.shape == (8,)
    residual = Residual(8, norm_first=True, eps=1e-3, norm=NORMS[name])
    assert type(residual.norm) is type(norm)


@pytest.mark.parametrize("decoder_only", [False, True])
def test_config_norm_reaches_every_norm_of_the_model(decoder_only: bool) -> None:
    values = dict(norm_first=True, norm="rmsnorm", layer_norm_eps=1e-4)
    if decoder_only:
        model = DecoderOnlyTransformer(TransformerConfig.decoder_only("tiny", vocab_size=11, **values))
        expected = 2 * 2 + 1  # two sublayers in each of 2 blocks, and the stack's final norm
    else:
        model = Transformer(TransformerConfig.from_preset("tiny", src_vocab_size=11, tgt_vocab_size=11, **values))
        expected = 2 * 2 + 3 * 2 + 2  # 2 encoder layers of 2 sublayers, 2 decoder layers of 3, two stacks
    norms = [m for m in model.modules() if isinstance(m, (nn.LayerNorm, RMSNorm))]
    assert len(norms) == expected and all(isinstance(m, RMSNorm) and m.eps == 1e-4 for m in norms)
    assert not any(name.endswith("norm.bias") for name in model.state_dict()), "RMSNorm has no bias"
