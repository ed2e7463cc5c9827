"""``Dropout``: the distribution of ``nn.Dropout`` (keep with probability 1 - p, scale by 1 / (1 - p)),
drawn from 32-bit integers, two per 64-bit draw of the default generator.

Statistical checks use a bound of six binomial standard deviations, so a correct implementation
fails one about once in 10^8 runs, while a wrong lane, a biased threshold or correlated halves of a
64-bit word move the rate by far more than the bound at these sample sizes.
"""

from __future__ import annotations

import math

import pytest
import torch
from errors import raises
import torch.nn.functional as F
from torch import nn

from transformer_lib.dropout import Dropout, dropout
from transformer_lib.model import DecoderOnlyTransformer, Transformer
from transformer_lib.config import TransformerConfig
from transformer_lib.masked_lm import EncoderOnlyTransformer

N = 1_000_000


def _bound(p: float, n: int) -> float:
    return 6 * math.sqrt(p * (1 - p) / n)


@pytest.mark.parametrize("p", [0.05, 0.1, 0.3, 0.5, 0.9])
def test_drops_each_element_with_probability_p(p: float) -> None:
    torch.manual_seed(0)
    dropped = dropout(torch.ones(N), p) == 0
    assert abs(dropped.float().mean().item() - p) < _bound(p, N)


def test_both_halves_of_each_random_word_are_fair_and_independent() -> None:
    """Elements 2i and 2i+1 come from one 64-bit draw: each half alone drops at rate p, and the pair
    is dropped together at rate p^2 (a shared or sign-biased half would show here)."""
    p = 0.3
    torch.manual_seed(1)
    dropped = (dropout(torch.ones(N), p) == 0).view(-1, 2)
    for half in (0, 1):
        assert abs(dropped[:, half].float().mean().item() - p) < _bound(p, N // 2)
    both = (dropped[:, 0] & dropped[:, 1]).float().mean().item()
    assert abs(both - p * p) < _bound(p * p, N // 2)


def test_kept_elements_are_scaled_so_the_mean_is_unchanged() -> None:
    p = 0.1
    torch.manual_seed(2)
    x = torch.randn(N)
    y = dropout(x, p)
    kept = y != 0
    torch.testing.assert_close(y[kept], x[kept] / (1 - p))  # fp32 rounding of one multiply
    ones = dropout(torch.ones(N), p)
    assert abs(ones.mean().item() - 1.0) < 6 * math.sqrt(p / (1 - p) / N)  # std of one element: sqrt(p/(1-p))


def test_gradient_is_the_same_mask_and_scale() -> None:
    p = 0.2
    torch.manual_seed(3)
    x = torch.randn(64, 33, requires_grad=True)
    y = dropout(x, p)
    y.sum().backward()
    expected = (y != 0).float() / (1 - p)
    torch.testing.assert_close(x.grad, expected)


def test_same_seed_same_mask_and_the_generator_moves_on() -> None:
    """A run repeats under torch.manual_seed, and a checkpoint's saved generator state resumes it."""
    x = torch.ones(10_001)  # odd: the last word is half used
    torch.manual_seed(4)
    first, second = dropout(x, 0.1), dropout(x, 0.1)
    torch.manual_seed(4)
    state = torch.get_rng_state()
    assert torch.equal(dropout(x, 0.1), first)
    torch.set_rng_state(state)
    assert torch.equal(dropout(x, 0.1), first)
    assert not torch.equal(first, second)


def test_eval_and_p_zero_return_the_input_and_p_one_zeros_it() -> None:
    x = torch.randn(5, 7)
    module = Dropout(0.5).eval()
    assert module(x) is x
    assert dropout(x, 0.0) is x and dropout(x, 0.9, training=False) is x
    assert torch.equal(dropout(x, 1.0), torch.zeros_like(x))


def test_any_layout_shape_and_float_dtype() -> None:
    torch.manual_seed(5)
    x = torch.randn(6, 9, 4).transpose(0, 2)  # not contiguous
    y = dropout(x, 0.5)
    assert y.shape == x.shape and torch.equal(y != 0, (y != 0) & (x != 0))
    torch.testing.assert_close(y[y != 0], x[y != 0] * 2)
    assert dropout(torch.ones(0, 3), 0.5).shape == (0, 3)
    half = dropout(torch.ones(1000, dtype=torch.bfloat16), 0.5)
    assert half.dtype == torch.bfloat16 and set(half.unique().tolist()) <= {0.0, 2.0}


@pytest.mark.parametrize("p", [-0.1, 1.5])
def test_a_probability_outside_zero_one_is_refused_with_its_value(p: float) -> None:
    with raises(ValueError, "[0, 1]", p):
        dropout(torch.ones(3), p)
    with pytest.raises(ValueError):
        Dropout(p)  # nn.Dropout's own check


def test_is_an_nn_dropout_and_inplace_keeps_pytorchs_behaviour() -> None:
    module = Dropout(0.25, inplace=True)
    assert isinstance(module, nn.Dropout) and repr(module) == repr(nn.Dropout(0.25, inplace=True))
    x = torch.ones(1000)
    torch.manual_seed(6)
    out = module(x)
    assert out is x  # F.dropout(inplace=True) writes into its input
    torch.manual_seed(6)
    assert torch.equal(out, F.dropout(torch.ones(1000), 0.25, inplace=True))


@pytest.mark.parametrize("build", ["encoder-decoder", "decoder-only", "encoder-only"])
def test_every_dropout_in_the_models_is_ours(build: str) -> None:
    """The models use this dropout everywhere except inside attention (F.scaled_dot_product_attention
    applies its own), so the faster masks reach every training update."""
    if build == "encoder-decoder":
        model: nn.Module = Transformer(TransformerConfig.from_preset("tiny", src_vocab_size=11, tgt_vocab_size=11))
    elif build == "decoder-only":
        model = DecoderOnlyTransformer(TransformerConfig.decoder_only("tiny", vocab_size=11))
    else:
        model = EncoderOnlyTransformer(TransformerConfig.encoder_only("tiny", vocab_size=11))
    dropouts = [m for m in model.modules() if isinstance(m, nn.Dropout)]
    assert dropouts and all(type(m) is Dropout for m in dropouts)


@pytest.mark.parametrize("shape", [(6, 8), (5, 7)])
def test_the_mask_is_the_documented_draw_of_64_bit_words(shape: tuple[int, int]) -> None:
    """The keep/drop decisions are the module docstring's: 64-bit words from the default generator,
    read as two 32-bit integers each, kept when at least -2^31 + round(p 2^32). Runs recorded with a
    seed repeat only while this stays so."""
    p, drop = 0.25, round(0.25 * 2**32)
    torch.manual_seed(5)
    got = dropout(torch.ones(shape), p) != 0
    torch.manual_seed(5)
    n = math.prod(shape)
    words = torch.empty((n + 1) // 2 if shape[-1] % 2 else n // 2, dtype=torch.int64).random_(-(2**63), None)
    expected = (words.view(torch.int32)[:n] >= drop - 2**31).view(shape)
    assert torch.equal(got, expected)
