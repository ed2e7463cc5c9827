"""Chapter 4's BatchNorm-against-LayerNorm probe and the static plots of ``transformer_lib.book.block_figures``."""

from __future__ import annotations

import matplotlib
import pytest
import torch
from torch import nn

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from transformer_lib.book import block_figures  # noqa: E402


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def _embed(ids: torch.Tensor) -> torch.Tensor:
    """A fixed embedding in which a pad (id 0) is not the zero vector, as with learned embeddings."""
    table = torch.randn(20, 6, generator=torch.Generator().manual_seed(0))
    return table[ids] + 0.1 * torch.arange(ids.size(1))[None, :, None]  # (B, L, D)


def test_batch_norm_statistics_are_over_every_position_of_the_batch() -> None:
    torch.manual_seed(0)
    x = torch.randn(3, 5, 4)  # (B, L, D)
    out = block_figures.normalise_tokens(nn.BatchNorm1d(4, affine=False), x)
    flat = x.reshape(-1, 4)  # (B * L, D)
    expected = (x - flat.mean(0)) / torch.sqrt(flat.var(0, unbiased=False) + 1e-5)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=0)


def test_layer_norm_is_applied_over_the_features() -> None:
    torch.manual_seed(0)
    x, norm = torch.randn(2, 3, 4), nn.LayerNorm(4)
    assert torch.equal(block_figures.normalise_tokens(norm, x), norm(x))


@pytest.mark.parametrize(("norm", "x", "message"), [
    (nn.LayerNorm(4), torch.zeros(3, 4), "must be \\(B, L, D\\)"),
    (nn.Linear(4, 4), torch.zeros(1, 3, 4), "BatchNorm1d or nn.LayerNorm, got Linear"),
])
def test_normalise_tokens_rejects_what_it_cannot_apply(norm: nn.Module, x: torch.Tensor, message: str) -> None:
    with pytest.raises((ValueError, TypeError), match=message):
        block_figures.normalise_tokens(norm, x)


def test_pad_batch_pads_at_the_end_and_refuses_a_short_length() -> None:
    assert block_figures.pad_batch([[5, 6, 7], [8]], 4).tolist() == [[5, 6, 7, 0], [8, 0, 0, 0]]
    with pytest.raises(ValueError, match="length 2 is shorter than the longest sentence \\(3 tokens\\)"):
        block_figures.pad_batch([[5, 6, 7]], 2)


def test_padding_moves_batch_norm_outputs_but_not_layer_norm_outputs() -> None:
    norms = {"BatchNorm": nn.BatchNorm1d(6), "LayerNorm": nn.LayerNorm(6)}
    drift = block_figures.padding_drift(norms, _embed, [[3, 4, 5, 6], [7, 8]], max_extra_pads=4)
    assert drift["LayerNorm"] == [0.0] * 5
    assert drift["BatchNorm"][0] == 0.0 and min(drift["BatchNorm"][1:]) > 0.05
    with pytest.raises(ValueError, match="max_extra_pads must be >= 0, got -1"):
        block_figures.padding_drift(norms, _embed, [[3]], max_extra_pads=-1)


def test_feature_means_and_drift_draws_two_panels_a_phone_can_read() -> None:
    fig = block_figures.feature_means_and_drift([0.1, 0.2], [0.3, 0.1], {"BatchNorm": [0.0, 0.5]})
    assert len(fig.axes) == 2 and fig.get_size_inches()[0] * fig.dpi <= 540
    assert fig.axes[1].get_xlabel() == "extra pad positions in the batch"
    with pytest.raises(ValueError, match="2 means with pads but 3 without"):
        block_figures.feature_means_and_drift([0.1, 0.2], [0.3, 0.1, 0.0], {})


def test_unbiased_layernorm_gap_follows_its_formula() -> None:
    torch.manual_seed(0)
    measured, formula = block_figures.unbiased_layernorm_gap([4, 64, 512])
    assert formula[0] == pytest.approx(1 - (3 / 4) ** 0.5)
    for m, f in zip(measured, formula):
        assert abs(m - f) < 0.05 * f
    with pytest.raises(ValueError, match="at least 2"):
        block_figures.unbiased_layernorm_gap([1])
    ax = block_figures.unbiased_gap_plot([4, 64, 512], measured, formula)
    assert ax.get_xscale() == "log" and ax.get_xlabel() == "width D"
