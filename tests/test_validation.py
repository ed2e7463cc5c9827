"""Tests of transformer_lib.validation: the checks at the library's boundaries, each naming the value
and what it must be."""

from __future__ import annotations

import pytest
import torch
from errors import raises

from transformer_lib.validation import check_choice, check_int, check_number, check_token_ids


def test_good_ids_pass() -> None:
    check_token_ids(torch.tensor([[0, 4, 9]]), vocab_size=10, batched=True)
    check_token_ids(torch.tensor([1, 2], dtype=torch.int32))


@pytest.mark.parametrize(
    ("tokens", "kwargs", "error", "named"),
    [
        ([[1, 2]], {}, TypeError, ["src", "list"]),
        (torch.tensor([[1.0, 2.0]]), {}, TypeError, ["src", "torch.float32"]),
        (torch.tensor([[True]]), {}, TypeError, ["torch.bool"]),
        (torch.tensor([[1, 2]], dtype=torch.uint8), {}, TypeError, ["torch.uint8"]),
        (torch.tensor([1, 2]), {"batched": True}, ValueError, ["src", "(2,)"]),
        (torch.tensor([[3, 10]]), {"vocab_size": 10}, ValueError, [10, "[0, 9]"]),
        (torch.tensor([[-1, 3]]), {"vocab_size": 10}, ValueError, [-1, "[0, 9]"]),
    ],
)
def test_bad_ids_are_named(tokens, kwargs, error, named) -> None:
    with raises(error, *named):
        check_token_ids(tokens, "src", **kwargs)


@pytest.mark.parametrize(("value", "minimum", "optional"), [(0, 1, False), (-1, 0, False), (True, 1, False),
                                                            (2.0, 1, False), (None, 1, False), ("3", 1, True)])
def test_check_int_names_the_value_and_the_minimum(value, minimum, optional) -> None:
    with raises(ValueError, "n_heads", repr(value), f">= {minimum}"):
        check_int("n_heads", value, minimum, optional=optional)


def test_check_int_accepts_integers_and_none_when_optional() -> None:
    check_int("n", 1)
    check_int("n", 0, minimum=0)
    check_int("n", None, optional=True)


@pytest.mark.parametrize(("value", "interval", "kwargs"), [
    (1.0, "[0, 1)", {}), (-0.1, "[0, 1)", {}), (float("nan"), "[0, 1)", {}), (float("inf"), "[0, 1)", {}),
    (0.0, "(0, 1]", {"low_open": True, "high_open": False}), ("0.5", "[0, 1)", {}), (True, "[0, 1)", {}),
])
def test_check_number_names_the_value_and_the_interval(value, interval, kwargs) -> None:
    with raises(ValueError, "dropout", repr(value), interval):
        check_number("dropout", value, 0, 1, **kwargs)


def test_check_number_accepts_the_interval_and_none_when_optional() -> None:
    check_number("p", 0.0, 0, 1)
    check_number("p", 1.0, 0, 1, high_open=False)
    check_number("p", None, 0, 1, optional=True)


def test_check_choice_names_the_value_and_the_choices() -> None:
    check_choice("activation", "gelu", ("relu", "gelu"))
    with raises(ValueError, "activation", "'swish'", "relu", "gelu"):
        check_choice("activation", "swish", ("relu", "gelu"))
