"""Tests of transformer_lib.losses: label smoothing, both conventions, against PyTorch's cross-entropy."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from errors import raises

from transformer_lib.losses import annotated_smoothed_targets, label_smoothed_cross_entropy, smoothed_target_distribution

# --- the loss ------------------------------------------------------------------------------------


@pytest.mark.parametrize("label_smoothing", [0.0, 0.1, 0.5])
@pytest.mark.parametrize("pad_id", [0, 3])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_loss_equals_torch_cross_entropy(label_smoothing: float, pad_id: int, reduction: str) -> None:
    logits = torch.randn(4, 6, 11, dtype=torch.float64, requires_grad=True)
    target = torch.randint(0, 11, (4, 6))
    target[0, 3:] = pad_id
    target[2, 1:] = pad_id
    ours = label_smoothed_cross_entropy(logits, target, label_smoothing, pad_id, reduction)
    ref = F.cross_entropy(
        logits.reshape(-1, 11), target.reshape(-1), label_smoothing=label_smoothing, ignore_index=pad_id, reduction=reduction
    )
    torch.testing.assert_close(ours.reshape(ref.shape), ref, rtol=1e-12, atol=1e-12)
    (grad_ours,) = torch.autograd.grad(ours.sum(), logits)
    (grad_ref,) = torch.autograd.grad(ref.sum(), logits)
    torch.testing.assert_close(grad_ours, grad_ref, rtol=1e-12, atol=1e-12)


def test_loss_accepts_flat_inputs() -> None:
    logits, target = torch.randn(9, 5), torch.randint(1, 5, (9,))
    torch.testing.assert_close(
        label_smoothed_cross_entropy(logits, target, 0.1), F.cross_entropy(logits, target, label_smoothing=0.1, ignore_index=0)
    )


def test_loss_is_cross_entropy_against_the_smoothed_distribution() -> None:
    logits, target = torch.randn(7, 13, dtype=torch.float64), torch.randint(0, 13, (7,))
    q = smoothed_target_distribution(target, 13, 0.2).double()  # (N, V)
    torch.testing.assert_close(q.sum(-1), torch.ones(7, dtype=torch.float64))
    assert q[0, target[0]] == pytest.approx(0.8 + 0.2 / 13) and q.min() == pytest.approx(0.2 / 13)
    by_hand = -(q * logits.log_softmax(-1)).sum(-1).mean()
    torch.testing.assert_close(label_smoothed_cross_entropy(logits, target, 0.2, ignore_index=-100), by_hand)


def test_annotated_targets_equal_a_hand_built_distribution() -> None:
    q = annotated_smoothed_targets(torch.tensor([2, 4, 0]), vocab_size=5, label_smoothing=0.1, pad_id=0)
    third = 0.1 / 3  # epsilon over the V - 2 = 3 tokens that are neither the target nor the pad
    expected = torch.tensor([[0.0, third, 0.9, third, third], [0.0, third, third, third, 0.9], [0.0] * 5])
    torch.testing.assert_close(q, expected)


@pytest.mark.parametrize("pad_id", [0, 3])
@pytest.mark.parametrize("label_smoothing", [0.0, 0.1, 0.4])
def test_annotated_targets_rows_sum_to_one_with_a_zero_pad_column(pad_id: int, label_smoothing: float) -> None:
    torch.manual_seed(0)
    target = torch.randint(0, 9, (40,))
    q = annotated_smoothed_targets(target, 9, label_smoothing, pad_id=pad_id)  # (N, V)
    kept = target != pad_id
    torch.testing.assert_close(q[kept].sum(-1), torch.ones(int(kept.sum())))
    assert (q[:, pad_id] == 0).all() and (q[~kept] == 0).all()
    torch.testing.assert_close(q[kept, target[kept]], torch.full((int(kept.sum()),), 1.0 - label_smoothing))


def test_annotated_targets_match_the_annotated_transformers_code() -> None:
    # LabelSmoothing.forward of the Annotated Transformer (2022), written with today's tensor API
    torch.manual_seed(0)
    target, size, padding_idx, smoothing = torch.randint(0, 11, (30,)), 11, 0, 0.1
    true_dist = torch.empty(30, size).fill_(smoothing / (size - 2))
    true_dist.scatter_(1, target.unsqueeze(1), 1.0 - smoothing)
    true_dist[:, padding_idx] = 0
    mask = torch.nonzero(target == padding_idx)
    true_dist.index_fill_(0, mask.squeeze(-1), 0.0)
    torch.testing.assert_close(annotated_smoothed_targets(target, size, smoothing, padding_idx), true_dist)


@pytest.mark.parametrize("convention", ["pytorch", "annotated"])
def test_cross_entropy_is_kl_plus_entropy_and_has_the_same_gradient(convention: str) -> None:
    torch.manual_seed(0)
    logits = torch.randn(6, 7, dtype=torch.float64, requires_grad=True)
    target = torch.randint(1, 7, (6,))
    if convention == "pytorch":
        q = smoothed_target_distribution(target, 7, 0.1).double()
    else:
        q = annotated_smoothed_targets(target, 7, 0.1, pad_id=0).double()
    log_p = logits.log_softmax(-1)
    cross_entropy = -(q * log_p).sum()
    kl = F.kl_div(log_p, q, reduction="sum")
    entropy = -(q * q.clamp_min(1e-300).log()).sum()  # 0 log 0 = 0
    torch.testing.assert_close(cross_entropy, kl + entropy)
    (grad_ce,) = torch.autograd.grad(cross_entropy, logits, retain_graph=True)
    (grad_kl,) = torch.autograd.grad(kl, logits)
    torch.testing.assert_close(grad_ce, grad_kl)


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"label_smoothing": -0.1}, ["label_smoothing", -0.1]),
        ({"vocab_size": 2}, ["vocab_size", 3, 2]),
        ({"pad_id": 5}, ["pad_id", 5, "[0, 4]"]),
    ],
)
def test_annotated_targets_reject_bad_input(kwargs, named: list) -> None:
    args = {"target": torch.tensor([1, 2]), "vocab_size": 5, "label_smoothing": 0.1} | kwargs
    with raises(ValueError, *named):
        annotated_smoothed_targets(**args)


@pytest.mark.parametrize("scale", [1e-6, 1.0, 1e4])
def test_loss_is_finite_on_extreme_logits(scale: float) -> None:
    logits = torch.randn(2, 5, 8) * scale
    loss = label_smoothed_cross_entropy(logits, torch.randint(1, 8, (2, 5)), 0.1)
    assert torch.isfinite(loss)


def test_loss_of_an_all_padding_batch_is_zero_not_nan() -> None:
    logits, target = torch.randn(2, 3, 5, requires_grad=True), torch.zeros(2, 3, dtype=torch.long)
    assert torch.isnan(F.cross_entropy(logits.view(-1, 5), target.view(-1), ignore_index=0))  # PyTorch: 0 / 0
    loss = label_smoothed_cross_entropy(logits, target, 0.1)
    assert loss.item() == 0.0
    loss.backward()
    assert torch.count_nonzero(logits.grad) == 0


def test_loss_of_bf16_logits_is_computed_in_float32() -> None:
    logits, target = torch.randn(3, 4, 9), torch.randint(1, 9, (3, 4))
    loss = label_smoothed_cross_entropy(logits.bfloat16(), target, 0.1)
    assert loss.dtype == torch.float32 and torch.isfinite(loss)
    torch.testing.assert_close(loss, label_smoothed_cross_entropy(logits.bfloat16().float(), target, 0.1))


@pytest.mark.parametrize(
    ("logits", "target", "kwargs", "error", "named"),
    [
        (torch.randn(2, 3, 5), torch.randint(0, 5, (2, 4)), {}, ValueError, ["(2, 3, 5)", "(2, 4)"]),
        (torch.randn(2, 3, 5), torch.rand(2, 3), {}, TypeError, ["torch.float32"]),
        (torch.randint(0, 5, (2, 3, 5)), torch.randint(0, 5, (2, 3)), {}, TypeError, ["torch.int64"]),
        (torch.randn(2, 3, 5), torch.ones(2, 3, dtype=torch.long), {"label_smoothing": 1.5}, ValueError,
         ["label_smoothing", 1.5]),
        (torch.randn(2, 3, 5), torch.ones(2, 3, dtype=torch.long), {"reduction": "avg"}, ValueError, ["reduction", "'avg'"]),
    ],
)
def test_loss_rejects_bad_input(logits, target, kwargs, error, named: list) -> None:
    with raises(error, *named):
        label_smoothed_cross_entropy(logits, target, **kwargs)
