"""One source for every number: the chapters' prose and the README quote no measured number by hand.

How it works. A measured-looking number is one with a unit of measurement beside it (BLEU, %, a
ratio, minutes, seconds, bytes, tokens per second, parameters, FLOP, screens), or a decimal after
"BLEU", "loss" or "perplexity". Counts that are facts of the data or settings (29,000 training pairs,
a vocabulary of 8,000 tokens, 4,000 warm-up steps) are not measurements and may be typed. In a chapter's prose (the Markdown cells of every section notebook, and the
Markdown pages) such a number must either come from the build, glued by the cell that measured it
(``{glue}`name``` roles, see :mod:`transformer_lib.book.numbers`), or be a quotation of someone
else's result listed, page by page and with its source, in ``book/quoted_numbers.yml``. In the
README the same rule holds outside the headline, whose numbers ``tests/test_pretrained.py`` reads
from the shipped model. A second test fails on sentences that narrate the project's history
(that belongs in git and CHANGELOG.md).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
QUOTES = ROOT / "book" / "quoted_numbers.yml"

_STRIP = [
    re.compile(r"\$\$.*?\$\$", re.S), re.compile(r"\$[^$\n]+\$"),  # maths
    re.compile(r"```.*?```", re.S), re.compile(r"`[^`\n]*`"),  # code (and the glue roles' names)
    re.compile(r"\]\([^)]*\)"), re.compile(r"https?://\S+"),  # link targets
    re.compile(r"<!--.*?-->", re.S), re.compile(r"^#+ [\d.]+", re.M),  # comments, section numbers in titles
]
_UNIT = (r"%|×|x\b|-fold|\s?(?:min\b|minutes?|hours?|s\b|seconds?|ms\b|MB\b|GB\b|KB\b|GiB\b|MiB\b|bytes?"
         r"|BLEU|chrF|tokens/s|tokens per second|sentences/s|parameters|GFLOP|TFLOP|FLOP|screens|points?\b|times (?:faster|slower|as))")
MEASURED = re.compile(
    rf"(?<![\w.,])((?:\d{{1,3}}(?:,\d{{3}})+|\d+)(?:\.\d+)?(?=\s?(?:{_UNIT}))|(?:BLEU|perplexity|loss)( of)? \d+\.\d+)"
)
HISTORY = re.compile(
    r"\b(used to (?:use|be|train|score)|before this (?:change|comparison)|"
    r"did before|as (?:the book|it|chapter \d) did before|earlier (?:version|profile|run) of (?:this|the) book|"
    r"ten of them while|\d+(?:\.\d+)? ?(?:min|minutes|BLEU)? instead of \d+|was changed|we changed|since the (?:last|previous) (?:run|version))\b",
    re.I,
)


def prose_pages() -> list[tuple[str, str]]:
    """(page, text) for every Markdown cell of every section and every Markdown page of the book."""
    pages = []
    for path in sorted((ROOT / "book").rglob("*.ipynb")):
        cells = json.loads(path.read_text())["cells"]
        text = "\n\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
        pages.append((str(path.relative_to(ROOT)), text))
    for path in sorted((ROOT / "book").rglob("*.md")):
        pages.append((str(path.relative_to(ROOT)), path.read_text()))
    return pages


def _normalised(text: str) -> str:
    for pattern in _STRIP:
        text = pattern.sub(" ", text)
    return " ".join(text.split())


def measured_numbers(text: str, page: str | None = None) -> list[str]:
    """The measured-looking numbers typed into ``text``, each with a little context; with ``page``,
    those inside a quotation that ``book/quoted_numbers.yml`` lists for it are left out."""
    text = _normalised(text)
    quoted = [(m.start(), m.end()) for entry in quotations().get(page, []) if page
              for m in re.finditer(re.escape(" ".join(entry["text"].split())), text)]
    return [text[max(0, m.start() - 30): m.end() + 15].strip() for m in MEASURED.finditer(text)
            if not any(start <= m.start() and m.end() <= end for start, end in quoted)]


def quotations() -> dict[str, list[dict[str, str]]]:
    values = yaml.safe_load(QUOTES.read_text()) if QUOTES.is_file() else {}
    return values or {}


@pytest.mark.parametrize("page,text", prose_pages(), ids=[page for page, _ in prose_pages()])
def test_prose_quotes_no_measured_number_by_hand(page: str, text: str) -> None:
    typed = measured_numbers(text, page)
    assert not typed, (
        f"{page}: measured numbers typed into the prose (glue them from the cell that measures them, "
        f"or list a quotation in book/quoted_numbers.yml with its source): {typed}"
    )


def test_every_quotation_names_its_source_and_is_still_there() -> None:
    pages = dict(prose_pages()) | {"README.md": (ROOT / "README.md").read_text()}
    for page, entries in quotations().items():
        assert page in pages, f"book/quoted_numbers.yml lists {page}, which is not a page of the book"
        for entry in entries:
            assert entry.get("source"), f"{page}: the quotation {entry['text']!r} names no source"
            assert " ".join(entry["text"].split()) in _normalised(pages[page]), f"{page} no longer quotes {entry['text']!r}"


def test_the_readme_quotes_no_measured_number_outside_its_headline() -> None:
    text = (ROOT / "README.md").read_text()
    text = re.sub(r"<!-- headline -->.*?<!-- /headline -->", " ", text, flags=re.S)
    typed = measured_numbers(text, "README.md")
    assert not typed, f"README.md: measured numbers typed by hand outside the headline: {typed}"


@pytest.mark.parametrize("page,text", prose_pages(), ids=[page for page, _ in prose_pages()])
def test_prose_does_not_narrate_the_projects_history(page: str, text: str) -> None:
    found = [m.group(0) for m in HISTORY.finditer(text.replace("\n", " "))]
    assert not found, f"{page}: history belongs in git and CHANGELOG.md, not in the reader's text: {found}"


@pytest.mark.parametrize("text,expected", [
    ("It scores 41.5 BLEU on test.", 1), ("trained in 53 min on a CPU", 1), ("1,142,848 parameters", 1),
    ("beam wins by 0.77 BLEU", 1), ("a speed-up of 4.2×", 1), ("12% of the weight", 1),
    ("It scores {glue}`test_bleu` BLEU.", 0), ("8 heads and 6 layers", 0), ("in $O(n^2)$ time", 0),
    ("the `1e-9` fill", 0), ("Section 5.8 shows", 0), ("a BLEU of 27.3 in the paper", 1),
    ("# 6.5 BLEU, computed right", 0), ("29,000 training pairs", 0),
])
def test_the_scanner_finds_what_it_should(text: str, expected: int) -> None:
    assert len(measured_numbers(text)) == expected, measured_numbers(text)


@pytest.mark.parametrize("text", ["the setting chapter 5 used to use", "as the book's full profile did before this comparison",
                                  "53 minutes instead of 59", "ten of them while the tests"])
def test_the_history_check_finds_changelog_phrases(text: str) -> None:
    assert HISTORY.search(text)


def test_glue_records_what_myst_nb_reads_without_myst_nb() -> None:
    """``glue`` writes the same hidden output as ``myst_nb.glue(..., display=False)``, without needing
    myst-nb: the site build reuses the outputs of the Colab-like run, where myst-nb is not installed."""
    from IPython.core.interactiveshell import InteractiveShell
    from IPython.utils.capture import capture_output

    from transformer_lib.book.numbers import GLUE_MIME_PREFIX, glue

    InteractiveShell.instance()
    with capture_output() as ours:
        text = glue("pi", 3.14159, ".2f")
    assert text == "3.14" and repr(text) == "3.14"
    [record] = ours.outputs
    assert record.data == {GLUE_MIME_PREFIX + "text/plain": "3.14"}
    assert record.metadata["scrapbook"] == {"name": "pi", "mime_prefix": GLUE_MIME_PREFIX}
    myst_nb_glue = pytest.importorskip("myst_nb").glue
    with capture_output() as theirs:
        myst_nb_glue("pi", text, display=False)
    assert (theirs.outputs[0].data, theirs.outputs[0].metadata) == (record.data, record.metadata)
