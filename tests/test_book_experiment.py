"""The fast/full switch: TRANSFORMER_BOOK_PROFILE, its default, and its error on a bad value."""

from __future__ import annotations

import pytest
import torch

from transformer_lib.book.experiment import PROFILE_ENV, current_profile, pick


@pytest.mark.parametrize(("value", "expected"), [("fast", "fast"), ("full", "full"), (" FULL ", "full")])
def test_the_variable_chooses_the_profile(monkeypatch: pytest.MonkeyPatch, value: str, expected: str) -> None:
    monkeypatch.setenv(PROFILE_ENV, value)
    assert current_profile() == expected
    assert pick(fast="small", full="big") == ("small" if expected == "fast" else "big")


@pytest.mark.parametrize("cuda", [False, True])
def test_unset_it_follows_the_gpu(monkeypatch: pytest.MonkeyPatch, cuda: bool) -> None:
    monkeypatch.delenv(PROFILE_ENV, raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    assert current_profile() == ("full" if cuda else "fast")


def test_a_bad_value_names_itself_and_the_choices(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PROFILE_ENV, "medium")
    with pytest.raises(ValueError, match=r"TRANSFORMER_BOOK_PROFILE='medium' is not a profile; use 'fast' or 'full'"):
        current_profile()
    with pytest.raises(ValueError, match="medium"):
        pick(fast=1, full=2)
