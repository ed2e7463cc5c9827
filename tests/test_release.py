"""`make release VERSION=X.Y.Z` (tools/release.py), run in a scratch clone of this repository."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
from release import install_ref, repository, sections, setup_cell, version  # noqa: E402

pytestmark = pytest.mark.skipif(shutil.which("git") is None or not (ROOT / ".git").exists(),
                                reason="needs git and a clone of the repository")


def _git(folder: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=folder,
                          capture_output=True, text=True)


def _release(folder: Path, new: str) -> subprocess.CompletedProcess:
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t",
           "PATH": "/usr/bin:/bin"}
    return subprocess.run([sys.executable, "tools/release.py", new], cwd=folder, capture_output=True, text=True, env=env)


def _cells(folder: Path) -> set[str]:
    return {next(c for c in json.loads(p.read_text())["cells"] if c["cell_type"] == "code")["source"]
            for p in sections(folder)}


@pytest.fixture
def clone(tmp_path: Path) -> Path:
    folder = tmp_path / "clone"
    assert _git(tmp_path, "clone", "--quiet", str(ROOT), str(folder)).returncode == 0
    return folder


def test_a_release_sets_the_version_the_cells_and_the_tag(clone: Path) -> None:
    url, branch = repository(clone)
    assert install_ref(clone) == branch, "before its first release tag, the cells install the default branch"
    old = version(clone)
    assert re.fullmatch(r"\d+\.\d+\.\d+\.dev\d+", old), f"between releases the branch carries X.Y.Z.devN, not {old}"
    new = old.split(".dev")[0]  # the release the development version leads to
    changelog = clone / "CHANGELOG.md"
    refused = _release(clone, new)
    assert refused.returncode != 0 and "CHANGELOG.md" in refused.stderr, "a release says what it changes"
    changelog.write_text(changelog.read_text().replace("## [Unreleased]", f"## [Unreleased]\n\n## [{new}] - 2026-12-01", 1))
    assert _git(clone, "commit", "-qam", "changelog").returncode == 0

    done = _release(clone, new)
    assert done.returncode == 0, done.stderr
    released = _git(clone, "show", f"v{new}:transformer_lib/__init__.py").stdout
    assert f'__version__ = "{new}"' in released, "the tagged commit is version X.Y.Z"
    citation = yaml.safe_load(_git(clone, "show", f"v{new}:CITATION.cff").stdout)
    assert str(citation["version"]) == new and citation["date-released"]
    major, minor, _ = map(int, new.split("."))
    assert version(clone) == f"{major}.{minor + 1}.0.dev0", "then the branch moves on to the next development release"
    assert install_ref(clone) == f"v{new}", "the cells install the newest release the branch holds"
    assert _cells(clone) == {setup_cell(url, f"v{new}")}, "every set-up cell installs the release's tag"
    assert _git(clone, "status", "--porcelain").stdout == "", "the release and the move on are commits"
    assert _git(clone, "rev-parse", f"v{new}^{{commit}}").stdout == _git(clone, "rev-parse", "HEAD~1").stdout
    again = _release(clone, new)
    assert again.returncode != 0 and ("exists" in again.stderr or "newer" in again.stderr)


@pytest.mark.parametrize("bad", ["1.2", "v1.0.0", "0.0.1"])
def test_a_bad_or_older_version_is_refused(clone: Path, bad: str) -> None:
    result = _release(clone, bad)
    assert result.returncode != 0 and bad in result.stderr
    assert _git(clone, "tag").stdout == "" and _git(clone, "status", "--porcelain").stdout == ""
