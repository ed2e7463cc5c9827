"""Chapter 7's figures (``transformer_lib.book.beyond_figures``): rotations, score biases and sparse
patterns draw what they claim; the language-model figures and tables fit a phone; bad input is refused."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from transformer_lib.book.beyond_figures import (  # noqa: E402
    NARROW_WIDTH_INCHES,
    attention_side_by_side,
    bias_heatmap,
    fill_in_table,
    mask_patterns,
    narrow_panels,
    rotation_plot,
)
from transformer_lib.embeddings import ALiBiBias, RotaryEmbedding  # noqa: E402
from transformer_lib.masking import causal_mask, sliding_window_mask  # noqa: E402
from transformer_lib.masked_lm import MASK, EncoderOnlyTransformer  # noqa: E402
from transformer_lib.config import TransformerConfig  # noqa: E402
from transformer_lib.vocab import SPECIALS, Vocab  # noqa: E402


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


@pytest.mark.parametrize("count, columns, rows", [(4, 2, 2), (3, 3, 1), (5, 2, 3), (1, 4, 1)])
def test_narrow_panels_gives_count_axes_in_a_phone_wide_figure(count: int, columns: int, rows: int) -> None:
    axes = narrow_panels(count, columns=columns)
    assert len(axes) == count
    fig = axes[0].figure
    assert fig.get_size_inches()[0] == NARROW_WIDTH_INCHES <= 5.4
    assert len(fig.axes) == count  # the unused cells of the grid are removed
    assert len({round(ax.get_position().y0, 3) for ax in axes}) == rows


def test_narrow_panels_refuses_no_panels() -> None:
    with pytest.raises(ValueError, match="count=0"):
        narrow_panels(0)


def test_attention_side_by_side_draws_each_grid_with_token_labels() -> None:
    tokens = ["<bos>", "a", "dog", "runs"]
    causal = torch.tril(torch.ones(4, 4))
    causal = causal / causal.sum(-1, keepdim=True)
    full = torch.full((4, 4), 0.25)
    axes = attention_side_by_side({"causal": causal, "full": full}, tokens)
    assert [ax.get_title() for ax in axes] == ["causal", "full"]
    assert [t.get_text() for t in axes[0].get_xticklabels()] == tokens
    assert (axes[0].images[0].get_array() == causal.numpy()).all()


def test_attention_side_by_side_refuses_weights_that_do_not_fit_the_tokens() -> None:
    with pytest.raises(ValueError, match=r"'wrong' have shape \(3, 3\)"):
        attention_side_by_side({"wrong": torch.ones(3, 3)}, ["a", "b"])


def test_fill_in_table_hides_one_word_per_sentence_and_lists_guesses() -> None:
    vocab = Vocab([*SPECIALS, MASK, "a", "dog", "runs", "."])
    model = EncoderOnlyTransformer(TransformerConfig.encoder_only("tiny", vocab_size=len(vocab), d_model=16, n_heads=2,
                                                       n_encoder_layers=1, d_ff=32, max_len=16))
    sentences = [vocab.encode(["a", "dog", "runs", "."]), vocab.encode(["."])]
    table = fill_in_table(model, sentences, vocab, mask_id=vocab.token_to_id(MASK), top=2)
    assert len(table) == 1  # a sentence of punctuation only has no word to hide
    row = table.iloc[0]
    assert row["caption (one word hidden)"].count("___") == 1 and row["hidden word"] in {"a", "dog", "runs"}
    assert len(row["model's top 2"].split(", ")) == 2
    again = fill_in_table(model, sentences, vocab, mask_id=vocab.token_to_id(MASK), top=2)
    assert again.equals(table)  # seeded


# --- Rotations, score biases, sparse patterns -------------------------------------------------

def test_rotation_plot_draws_one_arrow_per_position_of_equal_length() -> None:
    rope = RotaryEmbedding(8, max_len=16)
    x = torch.ones(1, 1, 6, 8)  # the same vector at every position
    pairs = rope(x)[0, 0].view(6, 4, 2).transpose(0, 1)  # (pairs, positions, 2)
    axes = rotation_plot(pairs[[0, 3]], pair_names=["fast", "slow"])
    assert len(axes) == 2 and [ax.get_title() for ax in axes] == ["fast", "slow"]
    tips = np.array([a.xy for a in axes[0].texts if getattr(a, "arrow_patch", None) is not None])
    assert tips.shape == (6, 2)
    np.testing.assert_allclose(np.linalg.norm(tips, axis=1), np.sqrt(2), rtol=1e-5)
    with pytest.raises(ValueError, match=r"pairs must have shape \(n_pairs, positions, 2\)"):
        rotation_plot(torch.zeros(3, 4))


def test_bias_heatmap_gives_each_alibi_head_its_own_scale_and_signed_biases_one() -> None:
    bias = ALiBiBias(4)(5, 7, 2)  # (1, H, T, L)
    axes = bias_heatmap(bias, head_names=[f"m = 1/{4 ** (h + 1)}" for h in range(4)])
    assert len(axes) == 4
    images = [ax.get_images()[0] for ax in axes]
    np.testing.assert_allclose(images[1].get_array(), bias[0, 1].numpy())
    # ALiBi's slopes differ 4-fold per head: on one scale the flat heads would look blank
    for image, head in zip(images, bias[0]):
        assert image.norm.vmax == 0.0 and image.norm.vmin == pytest.approx(head.min().item())
    assert axes[0].get_ylabel() == "query position"
    assert axes[0].figure.get_size_inches()[0] <= 6.6, "one page column wide: text is not shrunk"
    signed = bias_heatmap(torch.linspace(-2, 1, 4 * 3 * 3).view(4, 3, 3))
    assert len({(ax.get_images()[0].norm.vmin, ax.get_images()[0].norm.vmax) for ax in signed}) == 1
    with pytest.raises(ValueError, match=r"bias must have shape \(H, T, L\)"):
        bias_heatmap(torch.zeros(5, 7))
    with pytest.raises(ValueError, match="got 1 head names for 4 heads"):
        bias_heatmap(bias, head_names=["one"])


def test_mask_patterns_report_the_share_of_pairs_kept() -> None:
    T = 16
    masks = {"full causal": causal_mask(T), "local, window 4": sliding_window_mask(T, window=4)}
    axes = mask_patterns(masks)
    assert axes[0].figure.get_size_inches()[0] <= 6.6, "one page column wide: text is not shrunk"
    assert "full causal" in axes[0].get_title() and f"{(T + 1) / (2 * T):.0%}" in axes[0].get_title()
    kept = sliding_window_mask(T, window=4).float().mean().item()
    assert f"{kept:.0%} of pairs" in axes[1].get_title()
    np.testing.assert_array_equal(axes[1].get_images()[0].get_array(), sliding_window_mask(T, window=4)[0, 0].numpy())
    with pytest.raises(ValueError, match="'bad' must be boolean"):
        mask_patterns({"bad": torch.ones(4, 4)})
    with pytest.raises(ValueError, match="masks is empty"):
        mask_patterns({})
