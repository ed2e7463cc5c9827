"""``pip install`` from the repository gives a working library, from any folder.

A new virtual environment gets this interpreter's third-party packages (pip included) through a ``.pth`` file (torch
and the rest are large, and what is tested here is our package, not PyPI), but not ``transformer_lib``:
an editable install is an import hook that a ``.pth`` directory entry does not run. Then ``pip
install git+file://<this repository>`` installs the committed code, exactly the path the chapters'
Colab set-up cell takes, and the library is used from an empty folder: the package data is there (the
chart script, the committed results and artifacts the chapters show), and the train CLI writes where
it is told and nowhere else.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.skipif(
    shutil.which("git") is None or not (ROOT / ".git").exists(), reason="needs git and a clone of the repository"
)

_PROBE = """
import json, importlib.metadata, importlib.resources, transformer_lib
from transformer_lib.book import charts, results, artifacts
runs = results.committed_results()
print(json.dumps({
    "file": transformer_lib.__file__,
    "project": transformer_lib.__project__,
    "version": transformer_lib.__version__,
    "metadata_version": importlib.metadata.version("tested-transformer"),
    "typed": importlib.resources.files("transformer_lib").joinpath("py.typed").is_file(),
    "script": len(charts._embed_script()),
    "runs": sorted(runs),
    "recipes": len(results.committed_results(results.COMMITTED_RUNS / "recipes")),
    "artifacts": artifacts.load_artifacts() is not None,
}))
"""


def _run(python: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["OMP_NUM_THREADS"] = "1"
    return subprocess.run([str(python), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The python of a new venv with transformer_lib installed from git+file:// of this clone."""
    home = tmp_path_factory.mktemp("install")
    venv.EnvBuilder(with_pip=False).create(home / "venv")  # pip and setuptools come with the .pth below
    python = home / "venv" / "bin" / "python"
    site = Path(_run(python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])", cwd=home).stdout.strip())
    (site / "third_party.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    before = _run(python, "-c", "import transformer_lib", cwd=home)
    assert before.returncode != 0, "the new environment must not see this checkout's transformer_lib"
    pip = _run(python, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
               f"tested-transformer[book] @ git+file://{ROOT}", cwd=home)
    assert pip.returncode == 0, pip.stderr[-3000:]
    return python


def test_the_installed_package_has_its_data(installed: Path, tmp_path: Path) -> None:
    probe = _run(installed, "-c", _PROBE, cwd=tmp_path)
    assert probe.returncode == 0, probe.stderr[-3000:]
    found = json.loads(probe.stdout.strip().splitlines()[-1])
    assert "site-packages" in found["file"] and not found["file"].startswith(str(ROOT)), found["file"]
    assert "multi30k_full_metrics" in found["runs"], "chapters 5 and 6 show the committed full run"
    assert found["recipes"] >= 20 and found["artifacts"] and found["script"] > 1000, found
    # One version, read by pyproject from the package; the project's mark that tells it from PyPI's transformer-lib.
    assert found["project"] == "tested-transformer" and found["metadata_version"] == found["version"], found
    assert found["typed"], "py.typed ships, so type checkers read the package's annotations"


def test_the_train_cli_writes_where_it_is_told_from_any_folder(installed: Path, tmp_path: Path) -> None:
    work, out = tmp_path / "work", tmp_path / "elsewhere" / "run"
    work.mkdir()
    run = _run(installed, "-m", "transformer_lib.cli.train", "--task", "reverse", "--n-train", "500", "--n-heldout", "50",
               "--longest", "5", "--max-steps", "3", "--eval-every", "3", "--no-progress", "--out", str(out), cwd=work)
    assert run.returncode == 0, run.stderr[-3000:]
    assert {"checkpoint.pt", "metrics.json"} <= {p.name for p in out.iterdir()}
    assert not any(work.iterdir()), f"the CLI wrote into the folder it ran from: {list(work.iterdir())}"
    translate = _run(installed, "-m", "transformer_lib.cli.translate", "--checkpoint", str(out / "checkpoint.pt"),
                     "1 2 3", cwd=work)
    assert translate.returncode == 0, translate.stderr[-3000:]
    assert translate.stdout.strip(), "a translation is printed"


def test_the_console_scripts_run_and_say_their_version(installed: Path, tmp_path: Path) -> None:
    import transformer_lib

    bin_dir = installed.parent
    for script in ("transformer-train", "transformer-translate"):
        run = _run(bin_dir / script, "--version", cwd=tmp_path)
        assert run.returncode == 0, run.stderr[-3000:]
        assert transformer_lib.__version__ in run.stdout and script in run.stdout, run.stdout
    piped = subprocess.run([str(bin_dir / "transformer-translate"), "--pretrained", "--beam-size", "1"], input="Ein Hund rennt.\n",
                           cwd=tmp_path, capture_output=True, text=True, timeout=600,
                           env={**{k: v for k, v in os.environ.items() if k != "PYTHONPATH"}, "OMP_NUM_THREADS": "1"})
    assert piped.returncode == 0 and len(piped.stdout.splitlines()) == 1, piped.stderr[-3000:]


def _git(*args: str, cwd: Path) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "a user", "GIT_AUTHOR_EMAIL": "user@example.org",
           "GIT_COMMITTER_NAME": "a user", "GIT_COMMITTER_EMAIL": "user@example.org"}
    return subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True, check=True).stdout.strip()


def _foreign_repository(folder: Path) -> str:
    """``folder`` made a git repository of someone else's project, with one commit; returns the commit."""
    _git("init", "-q", cwd=folder)
    (folder / "pyproject.toml").write_text('[project]\nname = "someone-elses-project"\n')
    _git("add", "pyproject.toml", cwd=folder)
    _git("commit", "-q", "-m", "their project", cwd=folder)
    return _git("rev-parse", "HEAD", cwd=folder)


def test_provenance_does_not_take_the_commit_of_a_repository_around_the_package(tmp_path: Path) -> None:
    """A package whose folder sits inside another project's git repository (a virtual environment in the
    user's project) records no commit of that repository; this checkout's own commit is recorded."""
    from transformer_lib.cli import provenance

    foreign = _foreign_repository(tmp_path)
    package = tmp_path / ".venv" / "lib" / "site-packages" / "transformer_lib"
    package.mkdir(parents=True)
    (tmp_path / "transformer_lib").mkdir()  # and the repository's top holds a folder of the package's name
    for where in (package, tmp_path / "transformer_lib"):
        source = provenance.code_source(where)
        assert source["commit"] != foreign and source["checkout"] is None, source
    own = provenance.code_source()
    assert own["checkout"] == str(ROOT) and own["commit"] == _git("rev-parse", "HEAD", cwd=ROOT)
    recorded = provenance.software()
    assert {"tokenizers", "safetensors", "sacrebleu", "jiwer", "torch", "numpy"} <= set(recorded)
    assert recorded["tokenizers"] == importlib.metadata.version("tokenizers")


def test_a_run_trained_and_exported_from_the_wheel_loads_anywhere(installed: Path, tmp_path: Path) -> None:
    """Issue 46: train -> ``python -m transformer_lib.cli.export RUN --out FILE`` from an installed wheel,
    with no tuning report (benchmarks/ is not in the wheel), inside a user's own git repository; the file,
    copied elsewhere without its SHA256SUMS, loads with ``pretrained.load(path)`` alone; the run records
    where the code came from (the git+file install's commit), not the user's repository's commit."""
    home = installed.parents[2]
    foreign = _foreign_repository(home) if not (home / ".git").exists() else _git("rev-parse", "HEAD", cwd=home)
    work, run_dir = home / "project", home / "project" / "run"
    work.mkdir(exist_ok=True)
    train = _run(installed, "-m", "transformer_lib.cli.train", "--task", "reverse", "--n-train", "200", "--n-heldout", "20",
                 "--longest", "4", "--max-steps", "3", "--eval-every", "3", "--no-progress", "--out", str(run_dir), cwd=work)
    assert train.returncode == 0, train.stderr[-3000:]
    software = json.loads((run_dir / "metrics.json").read_text())["software"]
    assert software["git_commit"] != foreign, software
    # what `pip install git+file://` installed: a commit of this repository (others may have committed since)
    _git("merge-base", "--is-ancestor", software["git_commit"], "HEAD", cwd=ROOT)
    assert software["source"]["installed_from"] == f"file://{ROOT}" and software["source"]["checkout"] is None
    assert software["tokenizers"] and software["safetensors"] and software["jiwer"], software

    default = _run(installed, "-m", "transformer_lib.cli.export", str(run_dir), cwd=work)
    assert default.returncode == 2 and "--out" in default.stderr  # no default target, the package's file least of all
    out = work / "shared" / "reverse.safetensors"
    export = _run(installed, "-m", "transformer_lib.cli.export", str(run_dir), "--out", str(out), cwd=work)
    assert export.returncode == 0, export.stderr[-3000:]
    given = tmp_path / "given.safetensors"
    shutil.copy(out, given)
    probe = _run(installed, "-c", "import json, sys; from transformer_lib import pretrained; "
                 "r = pretrained.info(sys.argv[1]); t = pretrained.load(sys.argv[1]); "
                 "print(json.dumps({'card': r.card, 'decoding': r.decoding, 'out': t.translate(['1 2 3'])}))",
                 str(given), cwd=tmp_path)
    assert probe.returncode == 0, probe.stderr[-3000:]
    found = json.loads(probe.stdout.strip().splitlines()[-1])
    assert found["decoding"]["beam_size"] == 1 and found["card"]["task"] == "reverse" and found["out"], found
    assert found["card"]["code_license"] == "MIT" and "default" in found["card"]["decoding"]["chosen_by"]
    data = bytearray(given.read_bytes())
    data[-1] ^= 0xFF
    given.write_bytes(bytes(data))
    tampered = _run(installed, "-c", "import sys; from transformer_lib import pretrained; pretrained.load(sys.argv[1])",
                    str(given), cwd=tmp_path)
    assert tampered.returncode != 0 and "PretrainedError" in tampered.stderr and "SHA-256" in tampered.stderr
