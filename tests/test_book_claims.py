"""Claims in words are asserted where they are measured: no measured comparison in prose without its claim().

How it works. A claim word is one of the words that state a measured comparison or property
(:data:`CLAIM_WORDS`: "beats", "outperforms", "indistinguishable", "similar", "at least", "at most",
"grows linearly", "mostly", "roughly", "faster", "better", "ahead of", "behind", "matches", "within
noise", "within a change of seed" ..., each with its inflections as one family). The scanner reads the chapters' prose as
``tests/test_book_numbers.py`` does (every Markdown cell of every section notebook and every Markdown
page, with maths, code, glue roles' names and link targets replaced by "…"), and finds every claim word.
Each one must be either

1. **asserted**: a section notebook's word is covered when a code cell of the *same notebook* calls
   :func:`transformer_lib.book.claims.claim` with a sentence that uses a word of the *same family*
   (the page says "beats", a ``claim(...)`` of that page says "beat"/"beats"). A landing page's (or the
   introduction's) word is covered by such a claim in any section of its chapter. The sentence is read
   from the call's source: its string literals and f-strings, and for a variable or a formatted field,
   the strings assigned to that name in the same cell (so a sentence chosen by the numbers,
   ``verdict = "... beats ..." if ... else "..."``, counts). Requiring the same word, not any claim
   in a nearby cell, ties the prose's verb to the assertion that prints it; or
2. **not a measured claim**: listed, page by page, in ``book/unmeasured_claims.yml`` with the exact
   phrase as it reads in the normalised prose (one space between words) and why it needs no
   measurement: a definition or a statement true by construction ("its rank is at most d_k"),
   a quotation of a paper, a figure of speech ("behind the toggle"), or a fact about the world that
   this build does not measure (said so in the entry).

A claim word that is neither fails the test with its sentence. A second test fails on allowlist
entries that no longer match their page, or that give no reason.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest
import yaml
from test_book_numbers import _STRIP

ROOT = Path(__file__).resolve().parents[1]
UNMEASURED = ROOT / "book" / "unmeasured_claims.yml"

#: family -> pattern. Comparative and qualifying words that state something measurable. Left out on
#: purpose: "same"/"equal"/"close"/"nearly" (mostly definitions and exact checks, which assert
#: themselves), "as well as" (mostly "and").
CLAIM_WORDS: dict[str, str] = {
    "beat": r"beat(?:s|en|ing)?",
    "outperform": r"outperform(?:s|ed|ing)?",
    "indistinguishable": r"indistinguishable",
    "similar": r"similar(?:ly)?",
    "at least": r"at least",
    "at most": r"at most",
    "linear": r"(?:grows?|growing|grew|scales?|scaling) linearly|linear in",
    "mostly": r"mostly",
    "roughly": r"roughly",
    "about the same": r"about the same",
    "faster": r"faster",
    "slower": r"slower",
    "better": r"better",
    "worse": r"worse",
    "win": r"wins?|winning",
    "ahead of": r"ahead of",
    "behind": r"behind(?!\s+(?:(?:the|its|a)\s+)?toggles?\b)",  # not "(solutions are) behind the toggles"
    "as good as": r"as good as",
    "matches": r"match(?:es|ed)",
    "within noise": r"within (?:the )?noise|within (?:a |the )?chance|within (?:a |one )?(?:change of )?seed",
}
_FAMILY = re.compile("|".join(rf"\b(?P<w{i}>{p})\b" for i, p in enumerate(CLAIM_WORDS.values())), re.I)
_NAMES = list(CLAIM_WORDS)


def normalised(text: str) -> str:
    """The prose as test_book_numbers reads it, with maths and code as "…" rather than nothing, so that
    "at $d_k = 1024$ most rows" does not read as "at most rows"."""
    for pattern in _STRIP:
        text = pattern.sub(" … ", text)
    return " ".join(text.split())


def claim_words(text: str) -> list[tuple[str, int, int]]:
    """``(family, start, end)`` of every claim word in ``text``."""
    found = []
    for m in _FAMILY.finditer(text):
        index = next(i for i in range(len(_NAMES)) if m.group(f"w{i}"))
        found.append((_NAMES[index], m.start(), m.end()))
    return found


def families(sentence: str) -> set[str]:
    return {family for family, _, _ in claim_words(sentence)}


# --- the claims a notebook asserts -------------------------------------------------------------


def _parse(source: str) -> ast.Module | None:
    lines = ["pass" if line.lstrip().startswith(("%", "!")) else line for line in source.splitlines()]
    try:
        return ast.parse("\n".join(lines))
    except SyntaxError:
        return None


def _assigned(tree: ast.AST) -> dict[str, list[ast.AST]]:
    values: dict[str, list[ast.AST]] = {}
    for node in ast.walk(tree):
        if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.NamedExpr)) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                if isinstance(target, ast.Name):
                    values.setdefault(target.id, []).append(node.value)
    return values


def _text(node: ast.AST, assigned: dict[str, list[ast.AST]], seen: frozenset[str] = frozenset()) -> str:
    """The words a sentence expression can say: its literals, and what the cell assigns to its names."""
    if isinstance(node, ast.Constant):
        return node.value if isinstance(node.value, str) else ""
    if isinstance(node, ast.Name):
        if node.id in seen:
            return ""
        return " ".join(_text(v, assigned, seen | {node.id}) for v in assigned.get(node.id, []))
    return " ".join(_text(child, assigned, seen) for child in ast.iter_child_nodes(node))


def claimed_sentences(source: str) -> list[str]:
    """The sentences of the ``claim(holds, sentence)`` calls in one code cell's source."""
    tree = _parse(source)
    if tree is None:
        return []
    assigned = _assigned(tree)
    sentences = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) == "claim":
            arguments = node.args[1:2] + [k.value for k in node.keywords if k.arg == "sentence"]
            sentences += [_text(argument, assigned) for argument in arguments]
    return sentences


def claimed_families(path: Path) -> set[str]:
    cells = json.loads(path.read_text())["cells"]
    return {family for c in cells if c["cell_type"] == "code"
            for sentence in claimed_sentences("".join(c["source"])) for family in families(sentence)}


# --- the prose ---------------------------------------------------------------------------------


def prose_claims() -> list[tuple[str, str, set[str]]]:
    """``(page, normalised prose, families its claim() calls assert)`` for every section notebook and
    Markdown page; a landing page gets its chapter's claims."""
    pages = []
    notebooks = sorted((ROOT / "book").rglob("*.ipynb"))
    for path in notebooks:
        cells = json.loads(path.read_text())["cells"]
        text = "\n\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
        pages.append((str(path.relative_to(ROOT)), normalised(text), claimed_families(path)))
    for path in sorted((ROOT / "book").rglob("*.md")):
        chapter = {f for nb in notebooks if nb.parent == path.parent for f in claimed_families(nb)}
        pages.append((str(path.relative_to(ROOT)), normalised(path.read_text()), chapter))
    return pages


def unmeasured() -> dict[str, list[dict[str, str]]]:
    values = yaml.safe_load(UNMEASURED.read_text()) if UNMEASURED.is_file() else {}
    return values or {}


def unasserted_claims(page: str, text: str, asserted: set[str]) -> list[str]:
    """The claim words of ``text`` that no claim() of the page asserts and the allowlist does not list,
    each with its sentence."""
    allowed = [(m.start(), m.end()) for entry in unmeasured().get(page, [])
               for m in re.finditer(re.escape(" ".join(entry["text"].split())), text)]
    missing = []
    for family, start, end in claim_words(text):
        if family in asserted or any(a <= start and end <= b for a, b in allowed):
            continue
        left = text.rfind(". ", 0, start)
        left = max(0 if left < 0 else left + 2, start - 120)
        right = text.find(". ", end)
        missing.append(f"[{family}] {text[left: right + 1 if 0 <= right < end + 120 else end + 80].strip()}")
    return missing


PAGES = prose_claims()


@pytest.mark.parametrize("page,text,asserted", PAGES, ids=[page for page, _, _ in PAGES])
def test_every_claim_in_words_is_asserted_where_it_is_measured(page: str, text: str, asserted: set[str]) -> None:
    missing = unasserted_claims(page, text, asserted)
    assert not missing, (
        f"{page}: claims in words with no claim() of the same word in the cell that measures them "
        f"(write them with transformer_lib.book.claims.claim, or list a sentence that states no measurement "
        f"in book/unmeasured_claims.yml with why):\n  " + "\n  ".join(missing)
    )


def test_every_unmeasured_entry_says_why_and_is_still_on_its_page() -> None:
    pages = {page: text for page, text, _ in PAGES}
    for page, entries in unmeasured().items():
        assert page in pages, f"book/unmeasured_claims.yml lists {page}, which is not a page of the book"
        for entry in entries:
            assert entry.get("why"), f"{page}: {entry['text']!r} says no why"
            assert claim_words(entry["text"]), f"{page}: {entry['text']!r} holds no claim word"
            assert " ".join(entry["text"].split()) in pages[page], f"{page} no longer says {entry['text']!r}"


@pytest.mark.parametrize("text,expected", [
    ("On the hidden words the encoder beats the decoder.", ["beat"]),
    ("Post-LN ends far behind; Pre-LN is ahead of it.", ["behind", "ahead of"]),
    ("memory grows linearly, the cost is linear in T", ["linear", "linear"]),
    ("at least one and at most two, mostly three, roughly four", ["at least", "at most", "mostly", "roughly"]),
    ("It is no better and no worse, slightly faster, within noise.", ["better", "worse", "faster", "within noise"]),
    ("The beaten path; a beating heart", ["beat", "beat"]),
    ("Batches of 64 captions; the BLEU of a model; a better-known name", ["better"]),
    ("Beatles, similarity, linearity, worsen, matching", []),
    ("Solutions are behind the toggles; the table behind its toggle; code behind toggles", []),
])
def test_the_scanner_finds_the_claim_words(text: str, expected: list[str]) -> None:
    assert [family for family, _, _ in claim_words(text)] == expected


@pytest.mark.parametrize("source,expected", [
    ('claim(a > b, "the encoder beats the decoder")', {"beat"}),
    ('claim(a > b, f"{x:.3f} beats {y:.3f}")', {"beat"}),
    ('claim(a > b, sentence="roughly the same")', {"roughly"}),
    ('v = "ahead of" if a > b else "behind"\nclaim(a != b, f"Post-LN is {v} Pre-LN")', {"ahead of", "behind"}),
    ('%pip install x\nfrom transformer_lib.book.claims import claim\nclaims.claim(ok, "matches to 1e-6")', {"matches"}),
    ('assert a > b\nprint("✓ the encoder beats the decoder")', set()),
    ('claim(a > b, "a holds")\nnote = "beats"', set()),
])
def test_the_claims_of_a_cell_are_read_from_its_calls(source: str, expected: set[str]) -> None:
    assert {f for sentence in claimed_sentences(source) for f in families(sentence)} == expected


def test_a_page_without_the_claim_fails_and_the_allowlist_or_a_claim_covers_it() -> None:
    text = "Pre-LN beats Post-LN here. Solutions are behind the toggles. Post-LN is behind."
    assert unasserted_claims("nowhere.ipynb", text, set()) == [
        "[beat] Pre-LN beats Post-LN here.", "[behind] Post-LN is behind."]
    assert unasserted_claims("nowhere.ipynb", text, {"beat", "behind"}) == []
