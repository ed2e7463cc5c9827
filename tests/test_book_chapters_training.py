"""Chapter 5's set-up helpers (transformer_lib.book.chapters.training) and the live loss plot."""

from __future__ import annotations

import pytest

from transformer_lib.book.chapters.training import ElidedListing, elided_source, reverse_task
from transformer_lib.book.source import source_text
from transformer_lib.cli.profiles import DEFAULTS
from transformer_lib.schedules import make_optimizer


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


def test_elided_source_hides_one_run_of_lines_behind_a_toggle() -> None:
    listing = elided_source(make_optimizer, "# fused:", "return torch.optim.AdamW", "the kernel")
    full = source_text(make_optimizer).splitlines()
    shown, rest = listing.shown.splitlines(), listing.rest.splitlines()
    marker = '    # ... the kernel (under "Show the rest")'
    assert marker in shown
    at = shown.index(marker)
    assert shown[:at] + rest + shown[at + 1:] == full  # nothing lost, nothing added but the marker
    assert rest[0].lstrip().startswith("# fused:") and "fused=True" in listing.rest
    assert shown[-1].lstrip().startswith("return torch.optim.AdamW") and "foreach=True" in shown[-1]
    page = listing._repr_html_()
    assert "transformer_lib.schedules.make_optimizer" in page
    assert '<details class="tt-source-rest"><summary>Show the rest of make_optimizer (the kernel)</summary>' in page
    assert repr(listing) == listing.shown and isinstance(listing, ElidedListing)


@pytest.mark.parametrize("first, last", [("# no such line", "return"), ("# fused:", "# no such line"),
                                         ("return torch.optim.AdamW", "params =")])
def test_elided_source_refuses_markers_it_cannot_find(first: str, last: str) -> None:
    with pytest.raises(ValueError):
        elided_source(make_optimizer, first, last, "x")


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
