"""Dependencies by use: installing the library brings what the model, training and translation need;
the book's libraries are the ``[book]`` extra.

Read from the source: every third-party module the core and the command lines import (anywhere in
a file, lazy imports included) belongs to a base dependency of pyproject.toml. Run: in a fresh
interpreter where the book's libraries cannot be imported, every core and command-line module
imports, and the training and translation command lines work end to end.
"""

from __future__ import annotations

import functools
import importlib
import importlib.metadata
import re
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from pyproject_file import read_pyproject
from test_layout import APPS, CORE, ROOT, imports

BOOK_LIBRARIES = ["altair", "pandas", "matplotlib", "vl_convert", "IPython", "jupyter_book", "sphinx"]


def _pyproject() -> dict:
    return read_pyproject()["project"]


def _name(requirement: str) -> str:
    return re.split(r"[<>=!~\[; ]", requirement, maxsplit=1)[0].lower().replace("_", "-")


@functools.cache
def _packages_distributions() -> Mapping[str, list[str]]:
    return importlib.metadata.packages_distributions()  # reads every installed distribution's files


def _distributions(module: str) -> set[str]:
    """The distributions that install the top-level package of ``module``."""
    top = module.split(".")[0]
    found = {d.lower().replace("_", "-") for d in _packages_distributions().get(top, [])}
    if found:
        return found
    # Python 3.10 reads only top_level.txt, which wheels built without setuptools (jiwer, tokenizers,
    # safetensors, filelock at their floors) lack: look for the package among each distribution's files.
    return {dist.metadata["Name"].lower().replace("_", "-") for dist in importlib.metadata.distributions()
            if any(f.parts[0] in (top, f"{top}.py") for f in dist.files or [])}


# Imported by the core, but an extra: what the module does with it fails, naming the extra, when it is missing.
EXTRAS_OF_THE_CORE = {"spacy": ("words", "tokenizers.py"), "onnx": ("onnx", "onnx_export.py"),
                      "onnxscript": ("onnx", "onnx_export.py"), "onnxruntime": ("onnx", "onnx_export.py")}


def test_the_base_install_is_what_the_core_and_the_command_lines_import() -> None:
    base = {_name(r) for r in _pyproject()["dependencies"]}
    extras = _pyproject()["optional-dependencies"]
    used: dict[str, set[str]] = {}
    for path in CORE + APPS:
        for module in imports(path):
            top = module.split(".")[0]
            if top in sys.stdlib_module_names or top in ("transformer_lib", "__future__") or module.startswith("."):
                continue
            if path.name == "results.py" and top == "matplotlib":
                continue  # optional: loss.png, drawn only when the [book] extra is installed
            if top in EXTRAS_OF_THE_CORE and path.name == EXTRAS_OF_THE_CORE[top][1]:
                assert top in {_name(r) for r in extras[EXTRAS_OF_THE_CORE[top][0]]}, top
                continue  # an extra ([words]): tests/test_dependencies.py runs the library without it
            used.setdefault(top, set()).add(str(path.relative_to(ROOT)))
    missing = {top: sorted(files) for top, files in used.items() if not _distributions(top) & base}
    assert not missing, f"imported but not a base dependency of pyproject.toml: {missing}"
    # numpy is used without an import: checkpoint.checkpoint_digest reads tensors' bytes by Tensor.numpy().
    unused = base - {d for top in used for d in _distributions(top)} - {"numpy"}
    assert not unused, f"base dependencies nothing in the core or the command lines imports: {sorted(unused)}"


def test_the_book_libraries_are_an_extra() -> None:
    project = _pyproject()
    base = {_name(r) for r in project["dependencies"]}
    book = {_name(r) for r in project["optional-dependencies"]["book"]}
    assert {"altair", "pandas", "matplotlib", "vl-convert-python"} <= book
    assert not book & base
    assert "jupyter-book" in {_name(r) for r in project["optional-dependencies"]["site"]}
    setup = (ROOT / "tools" / "release.py").read_text()  # setup_cell(): every section's first code cell
    # pip refuses a direct reference whose name is not the distribution's ("inconsistent name").
    assert f'"{project["name"]}[book] @ git+' in setup, "the chapters' set-up cell installs the extra, by the project's name"
    assert "-e .[book,site,onnx]" in (ROOT / "requirements.txt").read_text(), "make installs the extras"


_WITHOUT_THE_BOOK = """
import importlib, json, sys
for name in json.loads(sys.argv[1]):
    sys.modules[name] = None  # `import altair` (or pandas, matplotlib, ...) now raises ImportError
for name in json.loads(sys.argv[2]):
    importlib.import_module(name)
from transformer_lib.cli import train, translate
out = sys.argv[3]
metrics = train.main(["--task", "reverse", "--n-train", "300", "--n-heldout", "30", "--longest", "4", "--max-steps", "3",
                      "--eval-every", "3", "--no-progress", "--device", "cpu", "--out", out])
assert metrics["steps"] == 3
assert translate.main(["--checkpoint", out + "/checkpoint.pt", "--device", "cpu", "1 2 3"]) == 0
print("ok")
"""


def test_the_library_and_its_command_lines_run_without_the_book_libraries(tmp_path: Path) -> None:
    import json

    modules = ["transformer_lib"] + [".".join(p.relative_to(ROOT).with_suffix("").parts) for p in CORE + APPS
                                     if p.stem != "__init__"]
    result = subprocess.run(
        [sys.executable, "-c", _WITHOUT_THE_BOOK, json.dumps(BOOK_LIBRARIES), json.dumps(modules), str(tmp_path / "run")],
        cwd=tmp_path, capture_output=True, text=True, timeout=600, env={"OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin",
                                                                        "PYTHONPATH": str(ROOT)},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().endswith("ok")
    assert "no loss.png" in result.stdout  # said, not failed
    assert {p.name for p in (tmp_path / "run").iterdir()} >= {"checkpoint.pt", "metrics.json"}


def test_one_version_everywhere_and_a_name_of_our_own() -> None:
    """The version is written once (transformer_lib.__version__); pyproject reads it, the changelog and
    the citation file name it; the distribution's name is not PyPI's other transformer-lib."""
    import yaml

    import transformer_lib

    pyproject = read_pyproject()
    assert "version" not in pyproject["project"] and "version" in pyproject["project"]["dynamic"]
    assert pyproject["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "transformer_lib.__version__"}
    assert pyproject["project"]["name"] == transformer_lib.__project__ == "tested-transformer"
    changelog = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    released = [v for v in re.findall(r"^## \[(.+?)\]", changelog, re.M) if v != "Unreleased"]  # Keep a Changelog
    # Version X.Y.Z is the newest release in the changelog; between releases the package is a development
    # release of a newer one (X.Y.Z.devN, PEP 440) and the changelog has an [Unreleased] section.
    version = transformer_lib.__version__
    development = re.fullmatch(r"(\d+\.\d+\.\d+)\.dev\d+", version)
    if development:
        assert "## [Unreleased]" in changelog
        assert _version_tuple(development.group(1)) > _version_tuple(released[0]), (version, released[0])
    else:
        assert released[0] == version, "the newest released entry"
    citation = yaml.safe_load((ROOT / "CITATION.cff").read_text(encoding="utf-8"))
    assert str(citation["version"]) == released[0], "the citation names the newest release"
    scripts = pyproject["project"]["scripts"]
    for target in scripts.values():
        module, function = target.split(":")
        assert callable(getattr(importlib.import_module(module), function)), target
    assert "py.typed" in pyproject["tool"]["setuptools"]["package-data"]["transformer_lib"]
    assert (ROOT / "transformer_lib" / "py.typed").is_file()


def _version_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split("."))


def test_the_distribution_has_classifiers_and_the_sdist_its_changelog_and_citation(tmp_path) -> None:
    """Issue 46, item 12: PyPI's classifiers (the licence as an SPDX expression, not a classifier), and
    the source distribution built from the committed tree holds CHANGELOG.md and CITATION.cff."""
    import tarfile

    project = read_pyproject()["project"]
    classifiers = project["classifiers"]
    assert "Typing :: Typed" in classifiers and "Programming Language :: Python :: 3.10" in classifiers
    assert not any(c.startswith("License ::") for c in classifiers) and project["license"] == "MIT"
    tree = tmp_path / "tree"
    tree.mkdir()
    archive = subprocess.run(["git", "archive", "--format=tar", "HEAD"], cwd=ROOT, capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive.stdout, check=True)
    built = subprocess.run([sys.executable, "-c", "import sys; from setuptools import build_meta as b; "
                            "print(b.build_sdist(sys.argv[1]))", str(tmp_path / "dist")],
                           cwd=tree, capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stderr[-3000:]
    with tarfile.open(tmp_path / "dist" / built.stdout.strip().splitlines()[-1]) as sdist:
        names = {name.split("/", 1)[1] for name in sdist.getnames() if "/" in name}
    assert {"CHANGELOG.md", "CITATION.cff", "LICENSE", "README.md", "pyproject.toml",
            "transformer_lib/weights/multi30k-de-en.safetensors", "transformer_lib/py.typed"} <= names


def test_make_lowest_pins_every_floor_that_pyproject_declares() -> None:
    """`make lowest` tests the versions a user may get: each base dependency pinned at its floor."""
    pins = {}
    for line in (ROOT / "requirements-lowest.txt").read_text().splitlines():
        if "==" in line and not line.startswith("#"):
            name, version = line.split("#")[0].strip().split("==")
            pins[_name(name)] = version
    project = _pyproject()
    assert project["requires-python"] == ">=3.10" and "3.10" in (ROOT / "Makefile").read_text()
    for requirement in project["dependencies"]:
        floor = re.search(r">=\s*([\d.]+)", requirement).group(1).split(".")
        pinned = pins[_name(requirement)].split(".")
        assert pinned[: len(floor)] == floor, f"{requirement}: requirements-lowest.txt pins {'.'.join(pinned)}"


_WITHOUT_SPACY = """
import sys
sys.modules["spacy"] = None  # `import spacy` now raises ImportError, as in a core install without [words]
from transformer_lib import pretrained
from transformer_lib.cli import translate
from transformer_lib.tokenizers import WORDS_EXTRA, word_splitter
english = pretrained.load().translate(["Ein Hund rennt durch den Schnee."])[0]
assert len(english.split()) >= 3, english
try:
    word_splitter("de")
except ModuleNotFoundError as error:
    assert WORDS_EXTRA in str(error) and "pip install" in str(error), error
else:
    raise AssertionError("word_splitter worked without spaCy")
assert translate.main(["--checkpoint", sys.argv[1], "--device", "cpu", "Ein Mann."]) == 1
print("ok")
"""


def test_the_core_translates_with_bpe_without_spacy_and_words_name_their_extra(tmp_path: Path) -> None:
    """spaCy is the [words] extra (issue 46): the shipped BPE model translates without it; a word-level
    model fails in one line that says what to install (exit status 1: the run failed)."""
    import torch
    from test_translate_cli import checkpoint_dict

    words = tmp_path / "words.pt"
    torch.save(checkpoint_dict(), words)  # word tokenizers (made here, where spaCy is installed)
    result = subprocess.run([sys.executable, "-c", _WITHOUT_SPACY, str(words)], cwd=tmp_path, capture_output=True,
                            text=True, timeout=600, env={"OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)})
    assert result.returncode == 0 and result.stdout.strip().endswith("ok"), result.stderr[-3000:]
    assert "error: " in result.stderr and "tested-transformer[words]" in result.stderr, result.stderr
    words_extra = {_name(r) for r in _pyproject()["optional-dependencies"]["words"]}
    assert words_extra == {"spacy"} and "spacy" not in {_name(r) for r in _pyproject()["dependencies"]}
    assert "tested-transformer[words]" in _pyproject()["optional-dependencies"]["book"], "the chapters split words"
