"""Tests of transformer_lib.training: loss, schedules, metrics, the loop and resuming."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from transformer_lib import training
from transformer_lib.batching import collate, make_loader
from transformer_lib.toy_tasks import toy_task, toy_vocab
from transformer_lib.checkpoint import CHECKPOINT_KEYS, checkpoint_metadata, kept_weights, load_checkpoint
from transformer_lib.model import Transformer, TransformerConfig
from transformer_lib.training import (
    RunningMean,
    TrainConfig,
    Trainer,
    annotated_smoothed_targets,
    evaluate,
    exact_match_counts,
    label_smoothed_cross_entropy,
    make_optimizer,
    make_scheduler,
    noam_rate,
    smoothed_target_distribution,
    warmup_cosine_rate,
)

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
    ("kwargs", "message"),
    [
        ({"label_smoothing": -0.1}, "label_smoothing"),
        ({"vocab_size": 2}, "vocab_size must be at least 3"),
        ({"pad_id": 5}, r"pad_id 5 is outside the vocabulary \[0, 4\]"),
    ],
)
def test_annotated_targets_reject_bad_input(kwargs, message: str) -> None:
    args = {"target": torch.tensor([1, 2]), "vocab_size": 5, "label_smoothing": 0.1} | kwargs
    with pytest.raises(ValueError, match=message):
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
    ("logits", "target", "kwargs", "error", "message"),
    [
        (torch.randn(2, 3, 5), torch.randint(0, 5, (2, 4)), {}, ValueError, r"logits \(2, 3, 5\) must be target \(2, 4\)"),
        (torch.randn(2, 3, 5), torch.rand(2, 3), {}, TypeError, "integer token ids"),
        (torch.randint(0, 5, (2, 3, 5)), torch.randint(0, 5, (2, 3)), {}, TypeError, "floating point"),
        (torch.randn(2, 3, 5), torch.full((2, 3), 7), {}, ValueError, r"target id 7 is outside the vocabulary \[0, 4\]"),
        (torch.randn(2, 3, 5), torch.ones(2, 3, dtype=torch.long), {"label_smoothing": 1.5}, ValueError, "label_smoothing"),
        (torch.randn(2, 3, 5), torch.ones(2, 3, dtype=torch.long), {"reduction": "avg"}, ValueError, "reduction"),
    ],
)
def test_loss_rejects_bad_input(logits, target, kwargs, error, message: str) -> None:
    with pytest.raises(error, match=message):
        label_smoothed_cross_entropy(logits, target, **kwargs)


# --- schedules -----------------------------------------------------------------------------------


@pytest.mark.parametrize("warmup", [1, 10, 400, 4000])
def test_noam_peaks_exactly_at_the_warmup_step(warmup: int) -> None:
    rates = [noam_rate(step, 512, warmup) for step in range(1, 3 * warmup + 2)]
    assert rates.index(max(rates)) + 1 == warmup
    assert max(rates) == pytest.approx((512 * warmup) ** -0.5)


def test_noam_matches_the_paper() -> None:
    assert noam_rate(4000, 512, 4000) == pytest.approx(6.988e-4, rel=1e-3)  # base model peak
    assert noam_rate(100, 512, 4000) == pytest.approx(512**-0.5 * 100 * 4000**-1.5)  # linear warm-up
    assert noam_rate(16000, 512, 4000) == pytest.approx(noam_rate(4000, 512, 4000) / 2)  # 1/sqrt(step) decay
    with pytest.raises(ValueError, match="from 1"):
        noam_rate(0, 512)


@pytest.mark.parametrize(("schedule", "peak"), [("noam", None), ("noam", 2e-3), ("cosine", 1e-3), ("constant", 5e-4)])
def test_scheduler_applies_the_rate_to_each_update(schedule: str, peak: float | None) -> None:
    model = torch.nn.Linear(3, 3)
    optimizer = make_optimizer(model)
    scheduler = make_scheduler(optimizer, schedule, warmup_steps=5, peak_lr=peak, d_model=64, total_steps=20)
    used = []
    for _ in range(20):
        used.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    assert used.index(max(used)) + 1 == 5  # the peak is the 5th update's rate
    expected_peak = peak if peak is not None else (64 * 5) ** -0.5
    assert max(used) == pytest.approx(expected_peak)
    if schedule == "noam":
        assert used == pytest.approx([noam_rate(s, 64, 5) * (1 if peak is None else peak / (64 * 5) ** -0.5) for s in range(1, 21)])
    if schedule == "cosine":
        assert used == pytest.approx([warmup_cosine_rate(s, peak, 5, 20) for s in range(1, 21)])
        assert used[-1] == pytest.approx(0.0) and all(a >= b for a, b in zip(used[4:], used[5:]))


def test_scheduler_rejects_unknown_or_incomplete_settings() -> None:
    optimizer = make_optimizer(torch.nn.Linear(2, 2))
    with pytest.raises(ValueError, match="unknown schedule 'linear'"):
        make_scheduler(optimizer, "linear", warmup_steps=1)
    with pytest.raises(ValueError, match="needs d_model"):
        make_scheduler(optimizer, "noam", warmup_steps=1)
    with pytest.raises(ValueError, match="total_steps=3 must be at least warmup_steps=5"):
        warmup_cosine_rate(1, 1e-3, 5, 3)


def test_optimizer_decays_matrices_only() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.LayerNorm(4))
    decayed, plain = make_optimizer(model, weight_decay=0.1).param_groups
    assert decayed["weight_decay"] == 0.1 and all(p.dim() == 2 for p in decayed["params"])
    assert plain["weight_decay"] == 0.0 and len(plain["params"]) == 3  # linear bias, norm weight and bias
    assert decayed["betas"] == (0.9, 0.98) and decayed["eps"] == 1e-9


# --- metrics -------------------------------------------------------------------------------------


def _tiny_model(vocab_size: int = 12, dropout: float = 0.0, seed: int = 0) -> Transformer:
    torch.manual_seed(seed)
    config = TransformerConfig.from_preset(
        "tiny", src_vocab_size=vocab_size, tgt_vocab_size=vocab_size, d_model=32, n_heads=2, d_ff=64,
        n_encoder_layers=1, n_decoder_layers=1, dropout=dropout,
    )
    return Transformer(config)


@torch.no_grad()
def _greedy(model: Transformer, src: torch.Tensor, steps: int) -> torch.Tensor:
    """The simplest greedy decoder, for the check only (decoding.py has the real one)."""
    tgt = torch.full((src.size(0), 1), 2)
    for _ in range(steps):
        logits = model(src, tgt, *model.make_masks(src, tgt))  # (B, t, V)
        tgt = torch.cat([tgt, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
    return tgt[:, 1:]


def test_teacher_forced_exact_match_equals_greedy_exact_match() -> None:
    model = _tiny_model().eval()
    src = torch.randint(4, 12, (8, 5))
    greedy = _greedy(model, src, steps=6)  # (B, 6)
    target = greedy.clone()
    target[1::2, 2] = (target[1::2, 2] - 4 + 1) % 8 + 4  # odd rows: one token differs from greedy's
    tgt_in = torch.cat([torch.full((8, 1), 2), target[:, :-1]], dim=1)
    with torch.no_grad():
        logits = model(src, tgt_in, *model.make_masks(src, tgt_in))
    matches, total = exact_match_counts(logits, target)
    per_row = [(logits[i].argmax(-1) == target[i]).all().item() for i in range(8)]
    assert per_row == [(greedy[i] == target[i]).all().item() for i in range(8)] == [True, False] * 4
    assert (matches, total) == (4, 8)


def test_running_mean_weights_by_count_and_resets() -> None:
    meter = RunningMean()
    assert meter.mean == 0.0 and meter.updates == 0
    meter.update(torch.tensor(6.0, dtype=torch.float64), 3)
    meter.update(4.0, 1)
    assert (meter.mean, float(meter.count), meter.updates) == (2.5, 4.0, 2)
    meter.reset()
    assert (meter.mean, float(meter.count), meter.updates) == (0.0, 0.0, 0)


def test_evaluate_reports_loss_perplexity_and_accuracy() -> None:
    model = _tiny_model()
    train, _ = toy_task("copy", 40, 0, n_symbols=8, max_len=5)
    metrics = evaluate(model, make_loader(train, 16, shuffle=False))
    assert metrics["ppl"] == pytest.approx(math.exp(metrics["loss"]))
    assert 0.0 <= metrics["token_accuracy"] <= 1.0 and metrics["n_sentences"] == 40
    assert model.training  # evaluate puts the model back in the mode it found


# --- the training loop ---------------------------------------------------------------------------


def _trainer(tmp_path: Path, max_steps: int, model_seed: int = 0, **config) -> Trainer:
    train, heldout = toy_task("reverse", 80, 16, n_symbols=8, max_len=6, seed=1)
    settings = dict(epochs=None, max_steps=max_steps, schedule="noam", lr=3e-3, warmup_steps=4, log_every=1,
                    eval_every=3, progress=False)
    settings.update(config)
    model = _tiny_model(dropout=0.1, seed=model_seed)  # dropout on: resuming must restore the RNG too
    vocab = toy_vocab(8)
    return Trainer(
        model, make_loader(train, 16, seed=5), TrainConfig(**settings), val_loader=make_loader(heldout, 16, shuffle=False),
        device="cpu", checkpoint_path=tmp_path / "checkpoint.pt",
        metadata=checkpoint_metadata(model.config, vocab, vocab, "reverse", {"n_symbols": 8}),
    )


@pytest.mark.parametrize("stop_at", [5, 7, 10])  # mid-epoch, mid-epoch after an evaluation, end of epoch 2
def test_stopping_and_resuming_gives_the_same_losses_as_an_uninterrupted_run(tmp_path: Path, stop_at: int) -> None:
    torch.manual_seed(123)
    uninterrupted = _trainer(tmp_path / "a", max_steps=13)
    uninterrupted.fit()

    torch.manual_seed(123)
    first = _trainer(tmp_path / "b", max_steps=stop_at)
    first.fit()
    torch.manual_seed(999)  # a different process state: everything must come from the checkpoint
    torch.randn(100)
    resumed = _trainer(tmp_path / "b", max_steps=13, model_seed=1)
    resumed.load_state_dict(load_checkpoint(tmp_path / "b" / "checkpoint.pt"))
    assert resumed.step == stop_at
    resumed.fit()

    assert [r["loss"] for r in resumed.history["train"]] == [r["loss"] for r in uninterrupted.history["train"]]
    assert [r["loss"] for r in resumed.history["val"]] == [r["loss"] for r in uninterrupted.history["val"]]
    for name, value in uninterrupted.model.state_dict().items():
        assert torch.equal(resumed.model.state_dict()[name], value), name


class PowerCut(Exception):
    """A crash in the middle of training."""


@pytest.mark.parametrize("schedule", ["cosine", "noam"])
def test_resuming_after_a_crash_gives_the_same_losses(tmp_path: Path, schedule: str) -> None:
    settings = dict(max_steps=13, schedule=schedule, checkpoint_every=4)
    torch.manual_seed(123)
    uninterrupted = _trainer(tmp_path / "a", **settings)
    uninterrupted.fit()

    torch.manual_seed(123)
    crashing = _trainer(tmp_path / "b", **settings)

    def power_cut(record: dict) -> None:
        if record["step"] == 10:
            raise PowerCut

    crashing.on_log = power_cut
    with pytest.raises(PowerCut):
        crashing.fit()
    resumed = _trainer(tmp_path / "b", model_seed=1, **settings)
    resumed.load_state_dict(load_checkpoint(tmp_path / "b" / "checkpoint.pt"))
    assert resumed.step == 8  # the last checkpoint before the crash
    resumed.fit()
    assert [r["loss"] for r in resumed.history["train"]] == [r["loss"] for r in uninterrupted.history["train"]]
    assert [r["lr"] for r in resumed.history["train"]] == [r["lr"] for r in uninterrupted.history["train"]]


def test_resuming_with_more_steps_stretches_the_cosine_schedule(tmp_path: Path) -> None:
    short = _trainer(tmp_path, max_steps=6, schedule="cosine")
    short.fit()
    longer = _trainer(tmp_path, max_steps=20, schedule="cosine")
    longer.load_state_dict(load_checkpoint(tmp_path / "checkpoint.pt"))
    assert longer.optimizer.param_groups[0]["lr"] == pytest.approx(warmup_cosine_rate(7, 3e-3, 4, 20))
    longer.fit()
    assert [r["lr"] for r in longer.history["train"][6:]] == pytest.approx([warmup_cosine_rate(s, 3e-3, 4, 20) for s in range(7, 21)])


def test_training_stops_at_the_target_exact_match_or_max_steps(tmp_path: Path) -> None:
    trainer = _trainer(tmp_path, max_steps=6, target_exact_match=1e-9)  # any match at all stops it
    trainer.history["val"].append({"exact_match": 0.5})
    trainer.fit()
    assert trainer.step == 0 and "exact match" in trainer.stopped_because
    trainer = _trainer(tmp_path, max_steps=6)
    trainer.fit()
    assert trainer.step == 6 and trainer.stopped_because == "reached 6 steps"
    assert trainer.total_steps == 6 and len(trainer.history["val"]) == 2  # evaluated at steps 3 and 6


def test_training_lowers_the_loss(tmp_path: Path) -> None:
    trainer = _trainer(tmp_path, max_steps=30, eval_every=30, log_every=10)
    trainer.fit()
    losses = [r["loss"] for r in trainer.history["train"]]
    assert losses[-1] < losses[0] - 0.3
    assert all(r["lr"] > 0 and r["tokens_per_s"] > 0 for r in trainer.history["train"])


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"epochs": None, "max_steps": None}, "set epochs or max_steps"),
        ({"schedule": "cosine"}, "needs lr"),
        ({"label_smoothing": 1.0}, "label_smoothing"),
        ({"warmup_steps": 0}, "warmup_steps"),
        ({"clip_norm": -1.0}, "clip_norm"),
        ({"amp": "fp8"}, "amp"),
        ({"max_steps": 2.5}, "max_steps"),
        ({"target_exact_match": 2}, "target_exact_match"),
        ({"keep_weights": -1}, "keep_weights"),
    ],
)
def test_train_config_rejects_bad_settings(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        TrainConfig(**kwargs)


def test_train_config_round_trips() -> None:
    config = TrainConfig(epochs=3, lr=1e-3, schedule="cosine", betas=(0.9, 0.95))
    assert TrainConfig.from_dict(config.to_dict()) == config


def test_autocast_is_off_on_cpu_by_default() -> None:
    with training.autocast_context(torch.device("cpu")):
        assert torch.mm(torch.randn(2, 2), torch.randn(2, 2)).dtype == torch.float32
    with pytest.raises(ValueError, match="amp"):
        training.autocast_context(torch.device("cpu"), "fp16")


def test_epochs_record_their_mean_training_loss_and_resume_exactly(tmp_path: Path) -> None:
    whole = _trainer(tmp_path / "a", max_steps=13, eval_every=None)  # 80 pairs in batches of 16: 5 per epoch
    whole.fit()
    epochs = whole.history["epochs"]
    assert [(r["epoch"], r["step"]) for r in epochs] == [(1, 5), (2, 10)]
    assert all(r["train_tokens"] > 80 for r in epochs)  # every target token and <eos> of the 80 pairs
    for r, first in zip(epochs, (0, 5)):  # a token-weighted mean of the epoch's per-update losses (log_every=1)
        losses = [t["loss"] for t in whole.history["train"][first : first + 5]]
        assert min(losses) < r["train_loss"] < max(losses)
    assert all("elapsed_s" in r for r in whole.history["val"])

    first = _trainer(tmp_path / "b", max_steps=7, eval_every=None)
    first.fit()  # stops mid-epoch 2: the epoch's running sums go into the checkpoint
    resumed = _trainer(tmp_path / "b", max_steps=13, eval_every=None)
    resumed.load_state_dict(load_checkpoint(tmp_path / "b" / "checkpoint.pt"))
    resumed.fit()
    without_time = [{k: v for k, v in r.items() if k != "elapsed_s"} for r in epochs]
    assert [{k: v for k, v in r.items() if k != "elapsed_s"} for r in resumed.history["epochs"]] == without_time


def test_compiled_training_saves_the_plain_modules_weights(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """torch.compile wraps the model (``_orig_mod.`` prefixes); checkpoints must not see the wrapper.

    The eager backend runs the captured graphs without generating code, so the numbers are those of
    the plain model (inductor's fused kernels, used on a GPU, round differently).
    """
    real_compile = torch.compile
    monkeypatch.setattr(torch, "compile", lambda module: real_compile(module, backend="eager"))
    plain = _trainer(tmp_path / "plain", max_steps=4)
    plain.fit()
    compiled = _trainer(tmp_path / "compiled", max_steps=4, compile=True)
    assert compiled.train_module is not compiled.model
    compiled.fit()
    saved = load_checkpoint(tmp_path / "compiled" / "checkpoint.pt")["model_state"]
    assert list(saved) == list(plain.model.state_dict())  # no "_orig_mod." prefix
    assert [r["loss"] for r in compiled.history["train"]] == pytest.approx([r["loss"] for r in plain.history["train"]], rel=1e-5)
    resumed = _trainer(tmp_path / "compiled", max_steps=6, compile=True)
    resumed.load_state_dict(load_checkpoint(tmp_path / "compiled" / "checkpoint.pt"))  # loads into the plain module
    resumed.fit()
    assert resumed.step == 6


# --- checkpoints the trainer writes ------------------------------------------------------------


def test_trainer_keeps_the_weights_of_its_last_checkpoints(tmp_path: Path) -> None:
    trainer = _trainer(tmp_path, max_steps=12, eval_every=None, checkpoint_every=3, keep_weights=2)
    trainer.fit()
    kept = kept_weights(tmp_path / "weights")
    assert [p.name for p in kept] == ["step_0000009.pt", "step_0000012.pt"]
    last = torch.load(kept[-1], weights_only=True)
    assert last["step"] == 12
    assert all(torch.equal(last["model_state"][k], v) for k, v in trainer.model.state_dict().items())


def test_trainer_checkpoints_hold_every_entry(tmp_path: Path) -> None:
    trainer = _trainer(tmp_path, max_steps=3)
    trainer.fit()
    loaded = load_checkpoint(tmp_path / "checkpoint.pt")
    assert set(CHECKPOINT_KEYS) <= set(loaded)
    assert loaded["format_version"] == 1 and loaded["task"] == "reverse" and loaded["step"] == 3
    assert TransformerConfig.from_dict(loaded["model_config"]) == trainer.model.config


def test_collate_matches_what_the_loop_feeds_the_model() -> None:
    """The loop trains on tgt_in -> tgt_out: a model that copies tgt_out gets zero loss (sanity of the shift)."""
    batch = collate([([4, 5], [6, 7, 8])])
    logits = F.one_hot(batch.tgt_out, 9).float() * 100  # (B, T, V): certain of the right next token
    assert label_smoothed_cross_entropy(logits, batch.tgt_out).item() == pytest.approx(0.0, abs=1e-6)
