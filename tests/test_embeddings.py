"""Token embeddings and positional encodings."""

from __future__ import annotations

import math

import pytest
import torch
from errors import raises

from transformer_lib.embeddings import (
    LearnedPositionalEmbedding,
    SinusoidalPositionalEncoding,
    TokenEmbedding,
    sinusoidal_table,
)


def test_token_embedding_is_a_scaled_lookup() -> None:
    emb = TokenEmbedding(vocab_size=10, d_model=16)
    tokens = torch.tensor([[1, 2, 9], [0, 0, 3]])
    out = emb(tokens)
    assert out.shape == (2, 3, 16)
    torch.testing.assert_close(out, emb.weight[tokens] * 4.0)  # sqrt(16) = 4
    one_hot = torch.nn.functional.one_hot(tokens, 10).float()
    torch.testing.assert_close(out, one_hot @ emb.weight * 4.0)  # a lookup is a one-hot matmul


def test_token_embedding_reads_no_id_values() -> None:
    """The forward pass trusts its ids (reading them would stall a GPU every step): an id outside the
    table fails in PyTorch's own lookup; the boundaries that name it are tested where data enter
    (tests/test_batching.py, tests/test_decoding.py, tests/test_translate_cli.py)."""
    with pytest.raises(IndexError):
        TokenEmbedding(10, 4)(torch.tensor([[1, 10]]))


@pytest.mark.parametrize("d_model", [4, 7, 32])
def test_sinusoidal_table_follows_the_paper_formula(d_model: int) -> None:
    table = sinusoidal_table(50, d_model)
    assert table.shape == (50, d_model) and table.dtype == torch.float32
    for p in (0, 1, 17, 49):
        for i in range(d_model):
            angle = p / 10000 ** (2 * (i // 2) / d_model)
            expected = math.sin(angle) if i % 2 == 0 else math.cos(angle)
            assert abs(table[p, i].item() - expected) < 1e-6, (p, i)


@pytest.mark.parametrize("k", [1, 3, 10])
def test_sinusoidal_shift_is_a_fixed_linear_map(k: int) -> None:
    # PE[p + k] = M_k PE[p] with M_k block-diagonal rotations that do not depend on p.
    d_model = 16
    table = sinusoidal_table(64, d_model).double()
    inv_freq = 1.0 / 10000 ** (torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    M = torch.zeros(d_model, d_model, dtype=torch.float64)
    for i, w in enumerate(inv_freq):
        c, s = math.cos(k * w), math.sin(k * w)
        # (sin(a + b), cos(a + b)) = R(b) (sin a, cos a)
        M[2 * i : 2 * i + 2, 2 * i : 2 * i + 2] = torch.tensor([[c, s], [-s, c]], dtype=torch.float64)
    shifted = table[:-k] @ M.T
    torch.testing.assert_close(shifted, table[k:], atol=1e-6, rtol=0)


def test_sinusoidal_encoding_is_a_non_persistent_buffer_and_adds() -> None:
    pe = SinusoidalPositionalEncoding(d_model=6, max_len=20)
    assert "pe" in dict(pe.named_buffers()) and len(list(pe.parameters())) == 0
    assert "pe" not in pe.state_dict()  # a pure function of (max_len, d_model): not saved
    x = torch.randn(2, 5, 6)
    torch.testing.assert_close(pe(x), x + sinusoidal_table(20, 6)[:5])
    torch.testing.assert_close(pe(x, start=3), x + sinusoidal_table(20, 6)[3:8])


@pytest.mark.parametrize("module", [SinusoidalPositionalEncoding(8, max_len=10), LearnedPositionalEmbedding(8, max_len=10)])
def test_positional_modules_name_the_limit_when_a_sequence_is_too_long(module: torch.nn.Module) -> None:
    module(torch.randn(1, 10, 8))  # exactly max_len fits
    with raises(ValueError, 'max_len=10'):
        module(torch.randn(1, 11, 8))
    with raises(ValueError, "8..10", "max_len=10"):
        module(torch.randn(1, 3, 8), start=8)


def test_learned_positions_have_one_vector_per_position() -> None:
    pos = LearnedPositionalEmbedding(8, max_len=10)
    assert sum(p.numel() for p in pos.parameters()) == 80
    x = torch.zeros(2, 4, 8)
    torch.testing.assert_close(pos(x, start=2), pos.embedding.weight[2:6].expand(2, 4, 8))
