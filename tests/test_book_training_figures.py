"""Chapter 5's matplotlib figures (transformer_lib.book.training_figures).

Each draws the data it was given on axes it returns (never shows them), stays within 540 px at
100 dpi, and rejects input it cannot draw with a message that names the shapes.
"""

from __future__ import annotations

import matplotlib
import pytest
import torch

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from transformer_lib.book import style  # noqa: E402
from transformer_lib.book.training_figures import (  # noqa: E402
    smoothing_conventions_figure, target_mask_figure, training_pipeline_diagram)


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def test_target_mask_figure_draws_the_mask_with_token_labels() -> None:
    mask = torch.tril(torch.ones(4, 4, dtype=torch.bool))
    ax = target_mask_figure(mask, ["<bos>", "1", "2", "3"], "causal")
    image = ax.get_images()[0].get_array()
    assert (image == mask.float().numpy()).all()
    assert [t.get_text() for t in ax.get_yticklabels()] == ["<bos>", "1", "2", "3"]
    title = "".join(ax.get_title(loc) for loc in ("left", "center", "right"))  # the style may place titles left
    assert title == "causal" and ax.figure.get_figwidth() * ax.figure.dpi <= 540


def test_target_mask_figure_rejects_a_mask_that_does_not_match_its_labels() -> None:
    with pytest.raises(ValueError, match=r"T = len\(labels\) = 3, got \(4, 4\)"):
        target_mask_figure(torch.ones(4, 4, dtype=torch.bool), ["a", "b", "c"], "x")


def test_smoothing_conventions_figure_has_one_bar_per_token_and_convention() -> None:
    ours, theirs = torch.tensor([0.02, 0.02, 0.92, 0.02, 0.02]), torch.tensor([0.0, 0.1 / 3, 0.9, 0.1 / 3, 0.1 / 3])
    ax = smoothing_conventions_figure({"ours": ours, "theirs": theirs}, list("abcde"))
    heights = [p.get_height() for p in ax.patches]
    assert heights == pytest.approx(ours.tolist() + theirs.tolist())
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["ours", "theirs"]
    assert ax.figure.get_figwidth() * ax.figure.dpi <= 540


@pytest.mark.parametrize(("distributions", "message"), [({}, "empty"), ({"q": torch.ones(4)}, r"'q' must be \(V,\) with V = len")])
def test_smoothing_conventions_figure_rejects_bad_input(distributions, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        smoothing_conventions_figure(distributions, list("abcde"))


def test_the_pipeline_diagram_has_every_step_and_text_readable_on_a_phone() -> None:
    """Its smallest text, once the site's SVG (``bbox_inches="tight"``, 0.1 inch of padding) is shown
    342 px wide in a 390 px phone's column, is at least 9 px (issue 44; tests/test_site.py measures it)."""
    with matplotlib.rc_context():
        style.apply()
        figure = training_pipeline_diagram().figure
        figure.canvas.draw()
    texts = [t for t in figure.findobj(matplotlib.text.Text) if t.get_visible() and t.get_text().strip()]
    titles = {t.get_text() for t in texts}
    assert {"text", "tokens", "ids", "batches", "forward", "loss", "backward", "clip", "step", "checkpoint"} <= titles
    width_pt = (figure.get_tightbbox(figure.canvas.get_renderer()).width + 0.2) * 72
    assert min(t.get_fontsize() for t in texts) * 342 / width_pt >= 9
