"""Every section runs where readers run it: a Colab-like runtime, the section's own set-up cell, no internet.

The environment. A new virtual environment sees, through a ``.pth`` file, a folder of symlinks to
*only* the distributions a fresh Colab runtime ships that the book uses, with everything they need,
taken from this interpreter's site-packages (nothing is downloaded):

    torch, numpy, pandas, matplotlib, altair, spacy, tqdm, ipykernel (IPython, jupyter_client...)
    and pip, and the packages those require.

It does NOT see ``transformer_lib``, nor what Colab does not ship and the library needs: sacrebleu,
sacremoses, tokenizers (Colab has it, through transformers; left out so the test also covers it) and
vl-convert-python (the test checks they cannot be imported before the set-up cell runs).

The set-up cell. Each section is copied alone into a folder of its own, its set-up cell's repository
URL swapped for ``git+file://`` of this clone (the same cell, the same ``%pip install``). nbmake
executes the copies top to bottom (``pytest --nbmake --nbmake-kernel=colab --overwrite``, two at a
time) in a kernel of that environment, which this test registers as ``colab`` (``JUPYTER_PATH``); its
``--overwrite`` leaves each copy with its outputs, which the tests below read. pip runs with
``PIP_NO_INDEX`` and ``PIP_FIND_LINKS`` pointing at a wheel folder made here by repacking the installed
copies of the library's dependencies that the Colab runtime lacks (and setuptools, to build the
library). So pip installs only what ``pyproject.toml`` declares, and a dependency it forgot fails the
section that uses it (tried: without ``tokenizers`` in pyproject.toml, the subword section fails with
"No module named 'tokenizers'" where it learns BPE merges). pip installs the *committed* code
(``HEAD`` of this clone): commit before running it.

One runtime for all sections: the first section runs alone and its set-up cell installs the library
(the cell is the same in every notebook, ``tests/test_book.py`` checks it); then nbmake runs the others
in the same runtime, each in a kernel of its own. A fresh environment per section would cost a venv
and a pip install of about 20 local wheels each (about 6 s of CPU) for no new check, and two set-up
cells installing into one environment at once would race. Sections that need a model an earlier
section trained load it from the book's cache (``transformer_lib.book.cache``), as they do on Colab.
That cache is the machine's (``~/.cache/tested-transformer``), keyed by the library's code: a run whose
library code an earlier run on the machine already had reuses what that run computed. With an empty
cache, as in CI, the first section to need an entry makes it: section 6.1 trains the reverse model
(the rest of chapter 6 loads it), 7.5 the caption model (7.6 loads it); they took 32 s and 44 s in a
CI run here (2026-11-27, two sections at a time beside the library's tests).

What the executed sections must show:

- no cell prints after it displayed something (the site merges a cell's printed lines into one block
  in front of its displays, so a table would be shown apart from the line that names it);
- every figure (an image or an altair chart) outside an exercise's solution has a caption (cell
  metadata ``mystnb.figure.caption``), so the site numbers it;
- committed results: the sections that show the committed full Multi30k run (package data,
  ``transformer_lib/book/runs``) print its command and BLEU signature.

One execution serves the site too. Each section that passes is stored, outputs and all, in the site
build's execution cache (``_build/.jupyter_cache``, or ``$BOOK_EXECUTION_CACHE``): the notebook as
committed, with this run's outputs (the set-up cell's cleared: where the library is installed it
does nothing). ``_config.yml`` builds with ``execute_notebooks: cache``, so ``make test``'s site build
takes the outputs from there for every section whose code cells are unchanged, and executes only a
section this run did not store (one that failed here fails there too). ``make book`` empties the
cache first and executes every section itself. ``make test`` runs this file in one process (nbmake
runs the sections two at a time, ``COLAB_WORKERS``); ``make notebooks`` runs nbmake over ``book/`` in the
checkout's own environment instead (quicker while writing a section, and no Colab check).
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import venv
import zipfile
from xml.etree import ElementTree
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest
import yaml

nbformat = pytest.importorskip("nbformat")
pytest.importorskip("nbmake")
from packaging.markers import default_environment  # noqa: E402
from packaging.requirements import Requirement  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SECTIONS = sorted(p.relative_to(ROOT / "book").as_posix() for p in (ROOT / "book").glob("[0-9][0-9]_*/[0-9][0-9]_*.ipynb"))
# The sections that show the shipped model's run, read from its file (its command and signature must appear).
SHOW_THE_SHIPPED_RUN = ("05_training/08_full_result.ipynb",)
# The repository the set-up cells install from: _config.yml's, the one place it is written.
REPOSITORY = "git+" + yaml.safe_load((ROOT / "_config.yml").read_text())["repository"]["url"]
# The site build's execution cache (myst-nb's default place for `jupyter-book build .`).
SITE_CACHE = Path(os.environ.get("BOOK_EXECUTION_CACHE") or ROOT / "_build" / ".jupyter_cache")
# What a fresh Colab runtime ships that the book uses (their own requirements come with them).
COLAB_SHIPS = ("torch", "numpy", "pandas", "matplotlib", "altair", "spacy", "tqdm", "ipykernel", "ipython", "pip")
# The library's dependencies Colab lacks: they must come through the set-up cell's pip install.
NOT_ON_COLAB = ("sacrebleu", "sacremoses", "tokenizers", "vl_convert")
# nbmake's workers, sections at a time (`make colab` passes its PYTEST_WORKERS, two; three on two cores
# were slower).
WORKERS = int(os.environ.get("COLAB_WORKERS", "2"))

pytestmark = pytest.mark.skipif(
    shutil.which("git") is None or not (ROOT / ".git").exists(), reason="needs git and a clone of the repository"
)


def _name(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _requirement_closure(names: list[str]) -> dict[str, metadata.Distribution]:
    """The installed distributions ``names`` need, themselves included, following the extras a
    requirement asks for (a CUDA build of torch needs ``cuda-toolkit[cublas,...]``, whose
    ``nvidia-*`` packages are requirements of those extras)."""
    found: dict[str, metadata.Distribution] = {}
    seen: set[tuple[str, str]] = set()
    todo = [(name, "") for name in names]
    while todo:
        raw, extra = todo.pop()
        name = _name(raw)
        if (name, extra) in seen:
            continue
        seen.add((name, extra))
        if name not in found:
            try:
                found[name] = metadata.distribution(name)
            except metadata.PackageNotFoundError:
                continue  # a requirement for another platform, or an optional one not installed here
        environment = {**default_environment(), "extra": extra}
        for line in found[name].requires or []:
            requirement = Requirement(line)
            if requirement.marker is None or requirement.marker.evaluate(environment):
                todo += [(requirement.name, ""), *((requirement.name, e) for e in requirement.extras)]
    return found


def _files(dist: metadata.Distribution) -> list[str]:
    """The files of an installed distribution, relative to site-packages (no scripts, no caches)."""
    return [str(f) for f in dist.files or [] if not str(f).startswith("..") and "__pycache__" not in str(f)]


def _repack(dist: metadata.Distribution, folder: Path) -> Path:
    """An installed distribution as a wheel again (its files and metadata, a fresh RECORD)."""
    site = Path(dist.locate_file(""))
    info = next(f for f in _files(dist) if f.split("/")[0].endswith(".dist-info")).split("/")[0]
    wheel_meta = (site / info / "WHEEL").read_text() if (site / info / "WHEEL").exists() else ""
    tags = [tag.split("-") for tag in re.findall(r"^Tag: (\S+)", wheel_meta, re.M)] or [["py3", "none", "any"]]
    tag = "-".join(".".join(dict.fromkeys(part)) for part in zip(*tags))  # py2-none-any + py3-none-any: py2.py3-none-any
    stem = f"{_name(dist.metadata['Name']).replace('-', '_')}-{dist.version}-{tag}"
    record, skip = io.StringIO(), {f"{info}/{n}" for n in ("RECORD", "INSTALLER", "REQUESTED", "direct_url.json")}
    writer = csv.writer(record, lineterminator="\n")
    path = folder / f"{stem}.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as wheel:
        for name in _files(dist):
            if name in skip or not (site / name).is_file():
                continue
            data = (site / name).read_bytes()
            wheel.writestr(name, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            writer.writerow([name, f"sha256={digest}", len(data)])
        writer.writerow([f"{info}/RECORD", "", ""])
        wheel.writestr(f"{info}/RECORD", record.getvalue())
    return path


@pytest.fixture(scope="module")
def colab_view(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder of symlinks to the Colab runtime's distributions where this interpreter has them."""
    view = tmp_path_factory.mktemp("colab-site")
    for dist in _requirement_closure(list(COLAB_SHIPS)).values():
        for top in {name.split("/")[0] for name in _files(dist)}:
            if not top.endswith(".pth") and not (view / top).exists():
                (view / top).symlink_to(Path(dist.locate_file(top)))
    return view


@pytest.fixture(scope="module")
def wheelhouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Wheels of what the library and its [book] extra require and Colab lacks, and of setuptools (the build backend)."""
    from pyproject_file import read_pyproject

    folder = tmp_path_factory.mktemp("wheelhouse")
    project = read_pyproject()["project"]
    extras, declared = project["optional-dependencies"], list(project["dependencies"])
    todo = ["book"]  # the set-up cell installs [book], which names other extras of this project ([words])
    while todo:
        for line in extras[todo.pop()]:
            requirement = Requirement(line)
            if _name(requirement.name) == _name(project["name"]):
                todo += sorted(requirement.extras)
            else:
                declared.append(line)
    colab = _requirement_closure(list(COLAB_SHIPS))
    needed = _requirement_closure([Requirement(line).name for line in declared] + ["setuptools"])
    for name, dist in needed.items():
        if name not in colab or name == "setuptools":
            _repack(dist, folder)
    return folder


def _colab_runtime(home: Path, view: Path) -> None:
    """A new venv that sees only ``view``, and the spec of a kernel of it, ``colab``, in ``home/kernels``
    (nbmake finds it with ``JUPYTER_PATH=home``)."""
    venv.EnvBuilder(with_pip=False).create(home / "venv")
    python = home / "venv" / "bin" / "python"
    site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True, env=_clean_env()).stdout.strip()
    (Path(site) / "colab_runtime.pth").write_text(f"{view}\n")
    kernel = home / "kernels" / "colab"
    kernel.mkdir(parents=True)
    argv = [str(python), "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    (kernel / "kernel.json").write_text(json.dumps({"argv": argv, "display_name": "Colab-like", "language": "python"}))


def _clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without what would show it the checkout (PYTHONPATH, the venv), nor
    this machine's pip configuration (its constraint files, indexes and wheel folders: Colab has none
    of them). The runtime's packages are .venv's, which `make` installed from requirements.lock, and its
    pip can install only the wheels of those same versions (``wheelhouse``): one set of versions."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PIP_REQUIRE_VIRTUALENV") and not k.startswith("PIP_")}
    return {**env, "OMP_NUM_THREADS": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_CONFIG_FILE": os.devnull, **extra}


def _importable(python: Path, modules: tuple[str, ...]) -> list[str]:
    """Which of ``modules`` the runtime of ``python`` can import."""
    code = ("import importlib.util, json, sys\n"
            "print(json.dumps([m for m in sys.argv[1:] if importlib.util.find_spec(m)]))")
    found = subprocess.run([python, "-c", code, *modules], capture_output=True, text=True, env=_clean_env(),
                           cwd=python.parent)
    assert found.returncode == 0, found.stderr[-2000:]
    return json.loads(found.stdout)


def _probe(python: Path, code: str) -> subprocess.CompletedProcess:
    return subprocess.run([python, "-c", code], capture_output=True, text=True, env=_clean_env(), cwd=python.parent)


def _section_copy(section: str, folder: Path) -> Path:
    """The section, alone in a folder of its own under ``folder``, its set-up cell installing from this clone."""
    notebook = nbformat.read(ROOT / "book" / section, as_version=4)
    setup = [cell for cell in notebook.cells if cell.cell_type == "code" and REPOSITORY in cell.source]
    assert len(setup) == 1, f"{section}: one set-up cell installs from {REPOSITORY}"
    # this clone as it is, not the release the cell pins (@vX.Y.Z)
    setup[0].source = re.sub(re.escape(REPOSITORY) + r"(@[\w.\-]+)?", f"git+file://{ROOT}", setup[0].source)
    path = folder / _own_folder(section) / Path(section).name
    path.parent.mkdir(parents=True)
    nbformat.write(notebook, path)
    return path


def _own_folder(section: str) -> str:
    return section.removesuffix(".ipynb").replace("/", "-")


def _nbmake(copies: list[Path], folder: Path, runtime: dict[str, Path], workers: int,
            reporter: Any = None) -> dict[str, str | None]:
    """Execute ``copies`` (under ``folder``) with nbmake in the Colab-like kernel, writing their outputs
    into them; returns, per copy's folder, None where nbmake passed it and its failure text where not."""
    report = folder / f"nbmake-{copies[0].parent.name}.xml"
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-o", "addopts=", "--durations=10",
               "--rootdir", str(folder), "--nbmake", "--nbmake-kernel=colab", "--nbmake-timeout=600",
               "--overwrite", f"--junitxml={report}", *(["-n", str(workers), "--dist", "worksteal"] if workers > 1 else []),
               *(str(c.relative_to(folder)) for c in copies)]
    env = _clean_env(PIP_NO_INDEX="1", PIP_FIND_LINKS=str(runtime["wheelhouse"]), JUPYTER_PATH=str(runtime["home"]),
                     TMPDIR=str(runtime["tmp"]))
    run = subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True)
    if reporter is not None:  # nbmake's summary (its slowest sections, what failed) in this run's log
        with reporter.config.pluginmanager.get_plugin("capturemanager").global_and_fixture_disabled():
            reporter.write_line(f"\n$ {' '.join(command[2:14])} ... ({len(copies)} sections)")
            for line in run.stdout.splitlines()[-16:]:
                reporter.write_line(line)
    if not report.exists():  # nbmake did not run at all
        raise AssertionError(f"nbmake failed to start (exit {run.returncode}):\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}")
    results: dict[str, str | None] = {}
    for case in ElementTree.parse(report).iter("testcase"):
        failed = case.find("failure") if case.find("failure") is not None else case.find("error")
        text = None if failed is None else re.sub(r"#x1B\[[0-9;]*m|\x1b\[[0-9;]*m", "", failed.text or failed.get("message", ""))
        results[case.get("classname", "").split(".")[0]] = text
    return results


def _text_of(cells: list) -> str:
    """Every text output of executed cells (streams, plain-text and HTML results), joined."""
    parts = []
    for cell in cells:
        for output in cell.get("outputs", []):
            parts.append(output.get("text", ""))
            parts.append(output.get("data", {}).get("text/plain", ""))
            parts.append(output.get("data", {}).get("text/html", ""))
    return "\n".join(parts)


def _prints_after_a_display(cell: Any) -> bool:
    """A stream output after a displayed one: the site would show them in another order."""
    kinds = [output["output_type"] for output in cell.get("outputs", [])]
    shown = [i for i, (kind, output) in enumerate(zip(kinds, cell.get("outputs", [])))
             if kind in ("display_data", "execute_result") and not _is_glue_record(output)]
    return bool(shown) and any(kind == "stream" for kind in kinds[shown[0]:])


def _is_glue_record(output: Any) -> bool:
    """A number glued for the prose (transformer_lib.book.numbers.glue): an output no page shows."""
    from transformer_lib.book.numbers import GLUE_MIME_PREFIX

    data = output.get("data", {})
    return bool(data) and all(key.startswith(GLUE_MIME_PREFIX) for key in data)


def _is_figure(output: Any) -> bool:
    data = output.get("data", {})
    return any(key.startswith("image/") for key in data) or 'class="tt-altair"' in data.get("text/html", "")


def _uncaptioned_figures(cells: list) -> list[str]:
    found = []
    for cell in cells:
        if cell.cell_type != "code" or "solution" in cell.metadata.get("tags", []):
            continue
        caption = cell.metadata.get("mystnb", {}).get("figure", {}).get("caption")
        if not caption and any(_is_figure(output) for output in cell.get("outputs", [])):
            found.append(cell.get("id", "?"))
    return found


def _store_for_the_site(section: str, executed: Any) -> None:
    """The section as committed, with this run's outputs, into the site build's execution cache."""
    from filelock import FileLock
    from jupyter_cache import get_cache
    from jupyter_cache.base import CacheBundleIn

    committed = nbformat.read(ROOT / "book" / section, as_version=4)
    assert [cell.cell_type for cell in committed.cells] == [cell.cell_type for cell in executed.cells]
    for cell, ran in zip(committed.cells, executed.cells):
        if cell.cell_type == "code":
            cell.outputs = [] if REPOSITORY in cell.source else ran.outputs  # the set-up cell does nothing there
            cell.execution_count = ran.get("execution_count")
    committed.metadata["language_info"] = executed.metadata.get("language_info", {})
    SITE_CACHE.mkdir(parents=True, exist_ok=True)
    with FileLock(f"{SITE_CACHE}.lock"):  # two pytest workers share the cache's database
        get_cache(SITE_CACHE).cache_notebook_bundle(
            CacheBundleIn(committed, str(ROOT / "book" / section)), check_validity=False, overwrite=True)


@pytest.fixture(scope="module")
def runtime(colab_view: Path, wheelhouse: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One Colab-like runtime for every section: checked to lack the library before the first runs."""
    home = tmp_path_factory.mktemp("colab-runtime")
    _colab_runtime(home, colab_view)
    python = home / "venv" / "bin" / "python"
    assert _importable(python, ("transformer_lib", *NOT_ON_COLAB, "torch", "pandas", "altair", "spacy")) == [
        "torch", "pandas", "altair", "spacy"], "the fresh runtime has what Colab ships, and nothing else we need"
    # the sections' TMPDIR, which they must leave as they found it (see the test below)
    return {"home": home, "python": python, "wheelhouse": wheelhouse, "tmp": tmp_path_factory.mktemp("section-tmp")}


@pytest.fixture(scope="module")
def executed(runtime: dict[str, Path], tmp_path_factory: pytest.TempPathFactory,
             request: pytest.FixtureRequest) -> dict[str, tuple[Path, str | None]]:
    """The sections this run tests (all, or those ``-k`` picked) executed by nbmake in the runtime: per
    section, its executed copy and nbmake's failure text (None: it passed). The first runs alone (its
    set-up cell installs the library), then the others, ``WORKERS`` at a time."""
    picked = {item.callspec.params["section"] for item in request.session.items
              if "section" in getattr(getattr(item, "callspec", None), "params", {})}
    sections = sorted(picked) or SECTIONS[:1]
    folder = tmp_path_factory.mktemp("sections")
    copies = {section: _section_copy(section, folder) for section in sections}
    first, *others = sections
    # The later chapters' sections train and decode the most: they start first, so the last sections
    # to run are short ones and no worker waits long for the others at the end (``--dist worksteal``
    # moves what is left to an idle worker).
    others.sort(key=lambda s: s.split("/")[0], reverse=True)
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    results = _nbmake([copies[first]], folder, runtime, workers=1, reporter=reporter)
    if others:
        results.update(_nbmake([copies[s] for s in others], folder, runtime, workers=WORKERS, reporter=reporter))
    missing = [s for s in sections if _own_folder(s) not in results]
    assert not missing, f"nbmake reported nothing for {missing}"
    return {section: (copies[section], results[_own_folder(section)]) for section in sections}


@pytest.mark.parametrize("section", SECTIONS)
def test_the_section_runs_in_a_colab_like_runtime(section: str, executed: dict[str, tuple[Path, str | None]]) -> None:
    path, failure = executed[section]
    notebook = nbformat.read(path, as_version=4)
    if failure is not None:
        setup = [cell for cell in notebook.cells if "%pip install" in cell.source][0]
        raise AssertionError(f"{section} failed under nbmake in the Colab-like runtime:\n{failure[-4000:]}\n"
                             f"its set-up cell printed:\n{_text_of([setup])[-2000:]}")

    reordered = [cell.get("id") for cell in notebook.cells if cell.cell_type == "code" and _prints_after_a_display(cell)]
    assert not reordered, f"{section}: cells {reordered} print after they displayed something; print first, display last"
    uncaptioned = _uncaptioned_figures(notebook.cells)
    assert not uncaptioned, f"{section}: figures without a caption (cell metadata mystnb.figure.caption) in {uncaptioned}"
    _store_for_the_site(section, notebook)
    if section in SHOW_THE_SHIPPED_RUN:
        from transformer_lib import pretrained

        shipped = pretrained.info().run
        shown = _text_of(notebook.cells)
        signature = shipped["bleu"]["test"]["greedy"]["cased"]["signature"]
        command = shipped["command"].split(" --data ")[0]
        assert command in shown and signature in shown, (
            f"{section} must show the shipped model's run (package data) to an installed reader")


def test_the_set_up_cell_installed_the_library_into_the_runtime(runtime: dict[str, Path], executed: dict) -> None:
    """After the sections ran, the library and the dependencies Colab lacks are in the runtime's own
    environment (not found through this checkout)."""
    if not any((runtime["home"] / "venv").rglob("transformer_lib/__init__.py")):
        subprocess.run([runtime["python"], "-m", "pip", "install", "--quiet", f"tested-transformer[book] @ git+file://{ROOT}"],
                       env=_clean_env(PIP_NO_INDEX="1", PIP_FIND_LINKS=str(runtime["wheelhouse"])), check=True)
    where = _probe(runtime["python"], "import sacrebleu, transformer_lib; print(transformer_lib.__file__, sacrebleu.__file__)")
    assert where.returncode == 0, where.stderr[-2000:]
    assert all(str(runtime["home"] / "venv") in path for path in where.stdout.split()), (
        f"the set-up cell installed the library and its dependencies into the runtime: {where.stdout}")


def test_the_sections_leave_nothing_in_the_temporary_folder(runtime: dict[str, Path], executed: dict) -> None:
    """A section's scratch files (5.5's checkpoints) go when its kernel exits: running the book again and
    again does not fill a reader's /tmp."""
    # Caches made to be found again, not left behind: PyTorch's compiled kernels (torch.compile, reused
    # by the next run) and the temporary folders of nbmake's own pytest (which keeps its last three).
    left = sorted(path.name for path in runtime["tmp"].iterdir()
                  if not path.name.startswith(("torchinductor_", "pytest-of-")))
    assert not left, f"the sections left these in their TMPDIR ({runtime['tmp']}): {left}"
