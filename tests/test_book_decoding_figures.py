"""Chapter 6's decoding-loop diagram shows the loop and its caches, and fits a phone; so does the
introduction's teaser."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from transformer_lib.book.decoding_figures import (  # noqa: E402
    DECODING_LOOP_WIDTH_INCHES, decoding_loop_diagram, translation_teaser)
from transformer_lib.book import style  # noqa: E402
from transformer_lib.book.figures import PAGE_WIDTH_INCHES  # noqa: E402


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def _labels(ax) -> list[str]:
    """Each text of the drawing, its lines joined (a box's text is wrapped to fit a phone's column)."""
    return [t.get_text().replace("\n", " ") for t in ax.texts]


def test_the_diagram_has_every_stage_of_the_loop_in_order() -> None:
    labels = _labels(decoding_loop_diagram())
    stages = ["encoder: run once", "masked self-attention", "cross-attention", "pick yₜ: greedy, beam or sample",
              "append yₜ to the output", "yₜ = <eos> (every sentence)?", "yes: done"]
    assert all(stage in labels for stage in stages), set(stages) - set(labels)
    ax = decoding_loop_diagram()
    y = {t.get_text().replace("\n", " "): t.get_position()[1] for t in ax.texts}
    # the step runs top to bottom: each stage is drawn below the one before
    decoder_stages = stages[1:-1]
    assert [y[s] for s in decoder_stages] == sorted((y[s] for s in decoder_stages), reverse=True)


def test_the_two_caches_are_lit_and_say_what_they_hold() -> None:
    ax = decoding_loop_diagram()
    lit = [p for p in ax.patches if matplotlib.colors.to_hex(p.get_facecolor()) == "#f6ad55"]
    assert len(lit) == 3  # the two caches and the newest token's embedding
    labels = " ".join(_labels(ax))
    assert "self-attention cache" in labels and "one more each step" in labels
    assert "cross-attention cache" in labels and "made at step 1, reused" in labels
    assert "the newest token" in labels and "cache.length" in labels


def test_the_loop_goes_back_to_the_top() -> None:
    """The 'no' arrow ends at the first box of the step, not anywhere else."""
    ax = decoding_loop_diagram()
    output_box = next(t for t in ax.texts if t.get_text().startswith("output so far"))
    heads = [a.xy for a in ax.texts if isinstance(a, matplotlib.text.Annotation)]
    assert any(abs(y - output_box.get_position()[1]) < 1e-9 and x > output_box.get_position()[0] for x, y in heads)


def test_the_diagram_is_narrower_than_the_page_for_phones() -> None:
    width, _ = decoding_loop_diagram().figure.get_size_inches()
    assert width == DECODING_LOOP_WIDTH_INCHES < PAGE_WIDTH_INCHES
    _, ax = plt.subplots()
    assert decoding_loop_diagram(ax=ax) is ax


# The site shows a drawing 342 px wide in a 390 px phone's column (tests/test_site.py measures it there):
# its smallest text, scaled to that width, must be at least 9 px (issue 44).
PHONE_COLUMN_PX, MIN_TEXT_PX = 342, 9


def smallest_text_on_a_phone(figure) -> float:
    """The smallest text of ``figure`` in CSS px, saved as the site saves it (``bbox_inches="tight"``,
    0.1 inch of padding) and shown ``PHONE_COLUMN_PX`` wide."""
    figure.canvas.draw()
    width_pt = (figure.get_tightbbox(figure.canvas.get_renderer()).width + 0.2) * 72
    sizes = [t.get_fontsize() for t in figure.findobj(matplotlib.text.Text) if t.get_visible() and t.get_text().strip()]
    return min(sizes) * PHONE_COLUMN_PX / width_pt


@pytest.mark.parametrize("draw", [decoding_loop_diagram, translation_teaser])
def test_the_drawing_text_is_readable_on_a_phone(draw) -> None:
    with matplotlib.rc_context():
        style.apply()  # the book's fonts and sizes, as the site draws it
        assert smallest_text_on_a_phone(draw().figure) >= MIN_TEXT_PX
