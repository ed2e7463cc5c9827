"""Chapter 6's page helpers (``transformer_lib.book.chapters.decoding``): the table of section 6.1's
decoding loop written out."""

from __future__ import annotations

import torch

from transformer_lib.book.chapters.decoding import top_choices
from transformer_lib.vocab import SPECIALS, Vocab

DIGITS = Vocab([*SPECIALS, *"0123456789"])


def test_top_choices_has_a_row_per_step_with_its_prefix_and_likeliest_tokens() -> None:
    tokens = [DIGITS.bos_id, DIGITS.token_to_id("7"), DIGITS.eos_id]  # <bos> 7 <eos>
    first = torch.zeros(len(DIGITS))
    first[DIGITS.token_to_id("7")], first[DIGITS.token_to_id("1")], first[DIGITS.token_to_id("2")] = 0.7, 0.2, 0.1
    second = torch.zeros(len(DIGITS))
    second[DIGITS.eos_id], second[DIGITS.token_to_id("7")], second[DIGITS.token_to_id("3")] = 0.9, 0.06, 0.04
    table = top_choices(DIGITS, tokens, [first, second])
    assert list(table.columns) == ["step", "prefix", "choice 1", "choice 2", "choice 3"]
    assert list(table["step"]) == [1, 2]
    assert list(table["prefix"]) == ["<bos>", "<bos> 7"]  # what each step read
    assert list(table.iloc[0, 2:]) == ["7  (0.700)", "1  (0.200)", "2  (0.100)"]
    assert table.loc[1, "choice 1"] == "<eos>  (0.900)"


def test_top_choices_shows_k_tokens() -> None:
    probs = torch.softmax(torch.arange(len(DIGITS), dtype=torch.float), dim=0)
    table = top_choices(DIGITS, [DIGITS.bos_id], [probs], k=5)
    assert [c for c in table.columns if c.startswith("choice")] == [f"choice {k}" for k in range(1, 6)]
    assert table.loc[0, "choice 1"].startswith("9 ")  # the last id is the likeliest
