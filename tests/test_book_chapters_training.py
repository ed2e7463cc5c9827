"""Chapter 5's set-up helpers (transformer_lib.book.chapters.training) and the live loss plot."""

from __future__ import annotations

import pytest

from transformer_lib.book.chapters.training import reverse_task
from transformer_lib.cli.profiles import DEFAULTS


def test_reverse_task_configs_are_the_command_lines() -> None:
    task = reverse_task()
    s = task.settings
    model, train = task.model_config(), task.train_config()
    assert (model.src_vocab_size, model.tgt_vocab_size, model.dropout) == (len(task.vocab), len(task.vocab), 0.0)
    assert model.pad_id == task.vocab.pad_id
    assert (train.schedule, train.lr, train.warmup_steps, train.max_steps) == (
        s["schedule"], s["lr"], s["warmup_steps"], s["max_steps"])
    assert (train.label_smoothing, train.clip_norm, train.target_exact_match) == (
        s["label_smoothing"], s["clip_norm"], s["target_exact_match"])
    assert train.progress is False and task.train_config(progress=True).progress is True
    assert s == DEFAULTS["toy"][task.run_config().profile]


def test_live_loss_plot_displays_a_png(monkeypatch: pytest.MonkeyPatch) -> None:
    import IPython.display

    from transformer_lib.book.training_figures import LiveLossPlot

    shown = []

    class Handle:
        def update(self, obj: object) -> None:
            shown.append(obj)

    def display(obj: object, display_id: bool = False) -> Handle:
        shown.append(obj)
        return Handle()

    monkeypatch.setattr(IPython.display, "display", display)
    live = LiveLossPlot("t", min_interval_s=0.0)
    live.log({"step": 1, "loss": 2.0})
    live.eval({"step": 1, "loss": 2.5, "exact_match": 0.0})
    live.close()
    assert len(shown) == 3
    assert all(isinstance(obj, IPython.display.Image) and obj.data[:8] == b"\x89PNG\r\n\x1a\n" for obj in shown)
