"""Chapter 7's language-model figures and tables: sizes for a phone, what they draw, bad input."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from transformer_lib.book.language_figures import (  # noqa: E402
    NARROW_WIDTH_INCHES,
    attention_side_by_side,
    fill_in_table,
    narrow_panels,
)
from transformer_lib.masked_lm import MASK, EncoderOnlyTransformer
from transformer_lib.config import TransformerConfig
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
