"""The Makefile and `.ci/run` read as recipes (issue 47): each target says in a comment what it runs and
why, and no comment carries a dated measurement or a timing, which go stale and belong in
benchmarks/README.md and CHANGELOG.md."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
RECIPES = [ROOT / "Makefile", ROOT / ".ci" / "run"]

# A date (2026-11-27), a duration (17 s, 3 min), a share (20%) or a size (4.5 GB) in a comment.
STALE = re.compile(r"\b20\d\d-\d\d-\d\d\b|\b\d+(\.\d+)?\s?(s|ms|min|minutes|seconds|GB|MB)\b|\d%")


def comments(path):
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if line.lstrip().startswith("#") and not line.startswith("#!"):
            yield number, line


@pytest.mark.parametrize("path", RECIPES, ids=lambda p: p.name)
def test_no_dated_measurement_in_comments(path):
    stale = [f"{path.name}:{n}: {line.strip()}" for n, line in comments(path) if STALE.search(line)]
    assert not stale, "measurements and history belong in benchmarks/README.md:\n" + "\n".join(stale)


def test_the_pattern_finds_what_it_should():
    assert STALE.search("# Here (2026-11-27) it took 17 s") and STALE.search("# code at most 20% of a page")
    assert not STALE.search("# two workers, one BLAS thread each (the machines have two cores)")


def test_every_make_target_says_what_it_does():
    lines = (ROOT / "Makefile").read_text().splitlines()
    phony = re.search(r"^\.PHONY:(.*)$", "\n".join(lines), re.M).group(1).split()
    silent = []
    for target in phony:
        index = next((i for i, line in enumerate(lines) if re.match(rf"{re.escape(target)}:", line)), None)
        assert index is not None, f"make {target} is declared .PHONY but has no rule"
        above = lines[:index]
        # The comment block just above the rule (variables between the comment and the rule allowed).
        while above and not above[-1].startswith("#") and above[-1].strip() and not above[-1].startswith("\t"):
            above.pop()
        if not (above and above[-1].startswith("#")):
            silent.append(target)
    assert not silent, f"targets without a comment saying what they do: {silent}"
