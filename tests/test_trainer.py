"""Tests of transformer_lib.trainer: the training loop, resuming exactly, its config and its checkpoints."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from errors import raises
from test_metrics import _tiny_model

from transformer_lib.batching import collate, make_loader
from transformer_lib.checkpoint import CHECKPOINT_FORMAT_VERSION, CHECKPOINT_KEYS, checkpoint_metadata, kept_weights, load_checkpoint
from transformer_lib.config import TransformerConfig
from transformer_lib.device import autocast_context
from transformer_lib.losses import label_smoothed_cross_entropy
from transformer_lib.schedules import warmup_cosine_rate
from transformer_lib.tokenizers import SymbolTokenizer
from transformer_lib.toy_tasks import toy_task, toy_vocab
from transformer_lib.schedules import _torch_version, make_optimizer
from transformer_lib.trainer import TrainConfig, Trainer

# --- the training loop ---------------------------------------------------------------------------


def _trainer(tmp_path: Path, max_steps: int, model_seed: int = 0, model_dropout: float = 0.1, **config) -> Trainer:
    train, heldout = toy_task("reverse", 80, 16, n_symbols=8, longest=6, seed=1)
    settings = dict(epochs=None, max_steps=max_steps, schedule="noam", lr=3e-3, warmup_steps=4, log_every=1,
                    eval_every=3, progress=False)
    settings.update(config)
    model = _tiny_model(dropout=model_dropout, seed=model_seed)  # dropout on: resuming must restore the RNG too
    vocab = toy_vocab(8)
    return Trainer(
        model, make_loader(train, 16, seed=5), TrainConfig(**settings), val_loader=make_loader(heldout, 16, shuffle=False),
        device="cpu", checkpoint_path=tmp_path / "checkpoint.pt",
        metadata=checkpoint_metadata(model.config, SymbolTokenizer(vocab), SymbolTokenizer(vocab), "reverse", {"n_symbols": 8}),
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


def test_a_signal_s_stop_leaves_the_loss_history_as_an_uninterrupted_run_s(tmp_path: Path) -> None:
    """Ctrl-C in the middle of a logging window: the window's partial record used to be logged at the
    stop, so the resumed run's history (and metrics.json's curve) had a record the other lacks."""
    settings = dict(max_steps=13, log_every=4, eval_every=3)
    torch.manual_seed(123)
    uninterrupted = _trainer(tmp_path / "a", **settings)
    uninterrupted.fit()

    torch.manual_seed(123)
    stopped = _trainer(tmp_path / "b", **settings)

    def ctrl_c(record: dict) -> None:
        if record["step"] == 6:  # between the records of steps 4 and 8
            stopped.stop_requested = "SIGINT"

    stopped.on_eval = ctrl_c
    stopped.fit()
    assert stopped.step == 6 and [r["step"] for r in stopped.history["train"]] == [4]
    resumed = _trainer(tmp_path / "b", model_seed=1, **settings)
    resumed.load_state_dict(load_checkpoint(tmp_path / "b" / "checkpoint.pt"))
    resumed.fit()
    for kind in ("train", "val"):
        expected = [(r["step"], r["loss"]) for r in uninterrupted.history[kind]]
        assert [(r["step"], r["loss"]) for r in resumed.history[kind]] == expected, kind
    assert [r["step"] for r in resumed.history["train"]] == [4, 8, 12, 13]


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


def test_every_update_runs_in_training_mode_after_eval_mode_was_set(tmp_path: Path) -> None:
    """Validation (and anything a callback does) puts the model in eval mode; the next update trains
    with every module in training mode again (dropout on), though ``train()`` is called only then."""
    trainer = _trainer(tmp_path, max_steps=7, eval_every=3)  # dropout 0.1; validates after updates 3 and 6
    modes: list[tuple[bool, bool]] = []  # (gradients on, every module in training mode), per forward pass
    trainer.model.register_forward_pre_hook(
        lambda module, args: modes.append((torch.is_grad_enabled(), all(m.training for m in module.modules()))))
    trainer.fit()
    assert [training for grad, training in modes if grad] == [True] * 7
    assert any(not grad and not training for grad, training in modes)  # validation ran in eval mode
    trainer.model.eval()
    modes.clear()
    trainer.train_step(next(iter(trainer.train_loader)))
    assert modes == [(True, True)] and trainer.model.training


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"epochs": None, "max_steps": None}, ["epochs", "max_steps"]),
        ({"schedule": "cosine"}, ["cosine", "lr"]),
        ({"label_smoothing": 1.0}, ["label_smoothing", 1.0]),
        ({"warmup_steps": 0}, ["warmup_steps", 0]),
        ({"clip_norm": -1.0}, ["clip_norm", -1.0]),
        ({"amp": "fp8"}, ["amp", "'fp8'"]),
        ({"max_steps": 2.5}, ["max_steps", 2.5]),
        ({"target_exact_match": 2}, ["target_exact_match", 2]),
        ({"keep_weights": -1}, ["keep_weights", -1]),
        ({"schedule": "linear", "lr": 1e-3}, ["schedule", "'linear'"]),
    ],
)
def test_train_config_rejects_bad_settings(kwargs: dict, named: list) -> None:
    with raises(ValueError, *named):
        TrainConfig(**kwargs)


def test_train_config_round_trips() -> None:
    config = TrainConfig(epochs=3, lr=1e-3, schedule="cosine", betas=(0.9, 0.95))
    assert TrainConfig.from_dict(config.to_dict()) == config


def test_autocast_is_off_on_cpu_by_default() -> None:
    with autocast_context(torch.device("cpu")):
        assert torch.mm(torch.randn(2, 2), torch.randn(2, 2)).dtype == torch.float32
    with raises(ValueError, "fp8"):
        autocast_context(torch.device("cpu"), "fp8")


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
    # without dropout: a compiled graph draws its masks with F.dropout, not with the library's CPU draw
    plain = _trainer(tmp_path / "plain", max_steps=4, model_dropout=0.0)
    plain.fit()
    compiled = _trainer(tmp_path / "compiled", max_steps=4, model_dropout=0.0, compile=True)
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
    assert loaded["format_version"] == CHECKPOINT_FORMAT_VERSION and loaded["task"] == "reverse" and loaded["step"] == 3
    assert TransformerConfig.from_dict(loaded["model_config"]) == trainer.model.config


def test_collate_matches_what_the_loop_feeds_the_model() -> None:
    """The loop trains on tgt_in -> tgt_out: a model that copies tgt_out gets zero loss (sanity of the shift)."""
    batch = collate([([4, 5], [6, 7, 8])])
    logits = F.one_hot(batch.tgt_out, 9).float() * 100  # (B, T, V): certain of the right next token
    assert label_smoothed_cross_entropy(logits, batch.tgt_out).item() == pytest.approx(0.0, abs=1e-6)


# --- gradient accumulation -------------------------------------------------------------------------

U = 2.0**-24  # unit roundoff of float32


def _accumulation_trainer(model: torch.nn.Module, loader: list, **config) -> Trainer:
    settings = dict(epochs=None, max_steps=1, schedule="constant", lr=1e-3, warmup_steps=1, clip_norm=None,
                    amp="off", progress=False, log_every=1)
    return Trainer(model, loader, TrainConfig(**{**settings, **config}), device="cpu")


def _uneven_pairs() -> list[tuple[list[int], list[int]]]:
    """A micro-batch of one 1-token sentence, and one of six 7-token ones: 2 and 48 target tokens."""
    short = [([4], [5])]
    long = [([4 + (i + j) % 7 for j in range(7)], [5 + (i * j) % 6 for j in range(7)]) for i in range(6)]
    return short + long


def test_accumulated_micro_batches_make_the_update_of_one_batch_with_the_loss_per_token() -> None:
    """k micro-batches, then one update = one batch of them all: the same gradient (the mean loss per
    target token of the union, so the 2-token micro-batch weighs 2/50, not 1/2), the same loss and
    token count, the same weights after the step. They differ only in the order of the additions:
    each gradient entry is a sum over <= 50 target tokens, through 2 layers of sums of <= 64 terms
    (d_ff), so within 2 * 2 * 64 * u of its scale, twice over (Higham 2002, section 4.2)."""
    pairs = _uneven_pairs()
    micro = [collate(pairs[:1]), collate(pairs[1:])]
    whole = collate(pairs)
    assert [m.n_tokens for m in micro] == [2, 48]
    one = _accumulation_trainer(_tiny_model(seed=3), [whole])
    parts = _accumulation_trainer(_tiny_model(seed=3), micro, batches_per_update=2)
    loss_one, loss_parts = one.train_step(whole), parts.train_step(*micro)
    bound = 2 * 2 * 2 * 64 * U
    torch.testing.assert_close(loss_parts.float(), loss_one.float(), atol=bound * float(loss_one), rtol=0)
    assert float(parts.state.window_loss.count) == float(one.state.window_loss.count) == 50
    for (name, p), q in zip(one.model.named_parameters(), parts.model.parameters()):
        torch.testing.assert_close(q.grad, p.grad, atol=bound * float(p.grad.abs().max()), rtol=0, msg=name)
        if not name.endswith("in_proj_bias"):
            torch.testing.assert_close(q.detach(), p.detach(), atol=bound * float(p.detach().abs().max()), rtol=0,
                                       msg=name)
            continue
        # A key bias shifts every score of a query alike, which softmax ignores: its exact gradient is 0
        # and what is computed is rounding of terms at the scale of the key weight's gradient (and Adam's
        # first step, lr * g / |g|, turns that rounding into +-lr: those rows are compared apart).
        layer = one.model.get_submodule(name.rsplit(".", 1)[0])
        keys = slice(layer.widths[0], layer.widths[0] + layer.widths[1])
        key_scale = float(layer.in_proj_weight.grad[keys].abs().max())
        torch.testing.assert_close(q.grad[keys], p.grad[keys], atol=bound * key_scale, rtol=0, msg=name)
        others = torch.ones(p.numel(), dtype=torch.bool)
        others[keys] = False
        torch.testing.assert_close(q.detach()[others], p.detach()[others], atol=bound * float(p.detach().abs().max()),
                                   rtol=0, msg=name)
    per_micro_batch = _accumulation_trainer(_tiny_model(seed=3), micro[:1])
    per_micro_batch.train_step(micro[0])
    short_grad = [p.grad.clone() for p in per_micro_batch.model.parameters()]
    long_trainer = _accumulation_trainer(_tiny_model(seed=3), micro[1:])
    long_trainer.train_step(micro[1])
    mean_of_means = [(a + q.grad) / 2 for a, q in zip(short_grad, long_trainer.model.parameters())]
    gap = max(float((m - p.grad).abs().max() / p.grad.abs().max()) for m, p in zip(mean_of_means, one.model.parameters()))
    assert gap > 100 * bound, "the check could fail: averaging per micro-batch gives another gradient"


def test_fit_makes_one_update_per_group_of_batches_and_counts_epochs_in_batches() -> None:
    train, _ = toy_task("reverse", 40, 0, n_symbols=8, longest=6, seed=1)
    loader = make_loader(train, 8, seed=5)  # 5 batches: updates of 2, 2 and 1 batches
    trainer = _accumulation_trainer(_tiny_model(), loader, epochs=2, max_steps=None, batches_per_update=2)
    assert trainer.steps_per_epoch == 3 and trainer.total_steps == 6
    history = trainer.fit()
    assert trainer.step == 6 and trainer.epoch == 2
    assert [e["train_tokens"] for e in history["epochs"]] == [sum(len(t) + 1 for t in train.tgt)] * 2
    with raises(ValueError, "batches_per_update", 0):
        TrainConfig(batches_per_update=0)


@pytest.mark.parametrize(("version", "fused"), [("2.3.1+cpu", False), ("2.4.0", True), ("2.13.0+cpu", True), ("3.0.0a0", True)])
def test_adamw_is_fused_on_cpu_only_where_pytorch_has_the_kernel(monkeypatch: pytest.MonkeyPatch, version: str,
                                                                 fused: bool) -> None:
    """PyTorch 2.3 accepts fused=True for CPU tensors and fails at the first step (issue 30): the
    version decides, and the optimizer it gives takes a step."""
    if fused and _torch_version() < (2, 4):
        pytest.skip(f"this PyTorch ({torch.__version__}) has no fused CPU kernel: calling it {version} cannot add one")
    monkeypatch.setattr(torch, "__version__", version)
    model = torch.nn.Linear(3, 2)
    optimizer = make_optimizer(model)
    assert bool(optimizer.defaults.get("fused")) is fused and bool(optimizer.defaults.get("foreach")) is not fused
    model(torch.ones(1, 3)).sum().backward()
    optimizer.step()
