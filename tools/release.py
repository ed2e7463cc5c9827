"""Release the book: `make release VERSION=X.Y.Z` (the one command; see README, "Releasing").

What a release changes, in one commit, and the tag that names it:

- ``transformer_lib.__version__`` becomes ``X.Y.Z`` (both command lines' ``--version`` print it), and so
  does ``CITATION.cff``'s version, with the day as its ``date-released``;
- every section's Colab set-up cell installs ``tested-transformer[book] @ git+<repository>@vX.Y.Z``,
  the repository being ``_config.yml``'s ``repository.url`` (the one place it is written; the site's
  Colab buttons take it from there too);
- the annotated tag ``vX.Y.Z`` on that commit.

A second commit then moves the branch on to the next minor version's development release,
``X.(Y+1).0.dev0`` (PEP 440): between releases the version says it is not the release before it. The
set-up cells keep installing the newest release tag the branch holds, and the default branch
(``repository.branch``) before the first one, so that they never name a ref that does not exist.
``CHANGELOG.md`` must already have its ``## [X.Y.Z]`` section: a release says what it changed. A release
is newer than the last one, and may be the version a development release leads to (``0.3.0`` from
``0.3.0.dev2``). ``tests/test_book.py`` checks every set-up
cell against :func:`setup_cell` and that its ref resolves in the clone; ``tests/test_release.py`` runs
this script in a scratch clone.

Push with ``git push origin main vX.Y.Z``: nothing here talks to the network.
"""

from __future__ import annotations

import argparse
import datetime
import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
INIT = Path("transformer_lib") / "__init__.py"
VERSION_LINE = re.compile(r'^__version__ = "([^"]+)"$', re.M)
SEMVER = re.compile(r"\d+\.\d+\.\d+")
DEV = re.compile(r"(\d+\.\d+\.\d+)(?:\.dev(\d+))?")  # a release, or a development release of one
CITATION = Path("CITATION.cff")


def setup_cell(url: str, ref: str) -> str:
    """The first code cell of every section: install the library where it is missing."""
    return (
        "# On Colab (or wherever this book's library is missing) this installs it from the book's\n"
        "# repository, at its latest release (its default branch until one is tagged); where it is\n"
        "# installed (a clone, the website build) it does nothing. A look-alike package on PyPI also\n"
        "# imports as transformer_lib: the check tells.\n"
        "try:\n"
        "    import transformer_lib\n"
        '    assert transformer_lib.__project__ == "tested-transformer"\n'
        "except (ImportError, AttributeError, AssertionError):\n"
        f'    %pip install --quiet "tested-transformer[book] @ git+{url}@{ref}"'
    )


def repository(root: Path = ROOT) -> tuple[str, str]:
    """(url, default branch) from ``_config.yml``, the one place they are written."""
    import yaml

    config = yaml.safe_load((root / "_config.yml").read_text(encoding="utf-8"))["repository"]
    return config["url"], config["branch"]


def version(root: Path = ROOT) -> str:
    return VERSION_LINE.search((root / INIT).read_text(encoding="utf-8")).group(1)


def _git(root: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=check)


def released_ref(root: Path = ROOT) -> str | None:
    """The newest release tag (``vX.Y.Z``) HEAD descends from; None before the first release."""
    found = _git(root, "describe", "--tags", "--abbrev=0", "--match", "v[0-9]*.[0-9]*.[0-9]*", "HEAD", check=False)
    tag = found.stdout.strip()
    return tag if found.returncode == 0 and SEMVER.fullmatch(tag[1:]) else None


def _release_key(text: str) -> tuple[int, int, int, int]:
    """A version's order: X.Y.Z.devN comes before X.Y.Z (PEP 440)."""
    match = DEV.fullmatch(text)
    if match is None:
        raise SystemExit(f"release: the current version {text!r} is not X.Y.Z or X.Y.Z.devN")
    major, minor, patch = map(int, match.group(1).split("."))
    return major, minor, patch, -1 if match.group(2) is None else int(match.group(2)) - 10**6


def next_development(released: str) -> str:
    """The version the branch carries after releasing ``released``: the next minor's ``.dev0``."""
    major, minor, _ = map(int, released.split("."))
    return f"{major}.{minor + 1}.0.dev0"


def _set_version(root: Path, new: str) -> None:
    init = root / INIT
    init.write_text(VERSION_LINE.sub(f'__version__ = "{new}"', init.read_text(encoding="utf-8"), count=1),
                    encoding="utf-8")


def install_ref(root: Path = ROOT) -> str:
    """The ref every set-up cell installs: the release tag, or the default branch before the first."""
    return released_ref(root) or repository(root)[1]


def sections(root: Path = ROOT) -> list[Path]:
    return sorted((root / "book").glob("[0-9][0-9]_*/[0-9][0-9]_*.ipynb"))


def write_setup_cells(root: Path, ref: str) -> list[Path]:
    """Every section's set-up cell (its first code cell) installing ``ref``; returns the files changed."""
    url, _ = repository(root)
    cell = setup_cell(url, ref)
    changed = []
    for path in sections(root):
        text = path.read_text(encoding="utf-8")
        notebook = json.loads(text)
        first = next(c for c in notebook["cells"] if c["cell_type"] == "code")
        if "".join(first["source"]) != cell:
            first["source"] = cell
            path.write_text(json.dumps(notebook, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
            changed.append(path)
    return changed


def release(new: str, root: Path = ROOT) -> str:
    if not SEMVER.fullmatch(new):
        raise SystemExit(f"release: VERSION must be X.Y.Z, got {new!r}")
    tag = f"v{new}"
    if _git(root, "status", "--porcelain", "--untracked-files=no").stdout.strip():
        raise SystemExit("release: commit or stash your changes first (the release is one commit)")
    if _git(root, "rev-parse", "--verify", "--quiet", f"refs/tags/{tag}", check=False).returncode == 0:
        raise SystemExit(f"release: the tag {tag} exists already")
    old = version(root)
    if _release_key(new) <= _release_key(old):
        raise SystemExit(f"release: {new} must be newer than the current version {old}")
    if not re.search(rf"^## \[{re.escape(new)}\]", (root / "CHANGELOG.md").read_text(encoding="utf-8"), re.M):
        raise SystemExit(f"release: CHANGELOG.md has no '## [{new}]' section saying what {tag} changes")
    _set_version(root, new)
    citation = root / CITATION
    text = re.sub(r"^version: .*$", f"version: {new}", citation.read_text(encoding="utf-8"), count=1, flags=re.M)
    text = re.sub(r"^date-released: .*$", f'date-released: "{datetime.date.today().isoformat()}"', text, count=1, flags=re.M)
    citation.write_text(text, encoding="utf-8")
    changed = write_setup_cells(root, tag)
    _git(root, "add", str(INIT), str(CITATION), *map(str, changed))
    _git(root, "commit", "--quiet", "-m", f"Release {tag}: version {new}, the Colab set-up cells install {tag}")
    _git(root, "tag", "-a", tag, "-m", f"The Tested Transformer {new}")
    following = next_development(new)
    _set_version(root, following)
    _git(root, "add", str(INIT))
    _git(root, "commit", "--quiet", "-m", f"Development of {following.split('.dev')[0]} begins: version {following}")
    return tag


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("version", help="the new version, X.Y.Z")
    tag = release(parser.parse_args(argv).version)
    print(f"released {tag}: push it with `git push origin main {tag}`")


if __name__ == "__main__":
    sys.exit(main())
