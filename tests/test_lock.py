"""One lock for .venv: ``requirements.lock`` pins every package `make` installs, and .venv holds exactly those.

`make` installs the lock with uv and ``--no-deps`` (the Makefile says why), torch first in the build
that fits the machine. These tests run in .venv (`make unit`); `make lowest` and `make latest` test
other version sets on purpose and leave this file out.
"""

from __future__ import annotations

import re
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parent.parent
LOCK = ROOT / "requirements.lock"
# PyPI's Linux torch requires these; the lock leaves them out so that a machine without a GPU gets the
# CPU build (`make torch` installs them with the CUDA build).
CUDA_ONLY = re.compile(r"^(nvidia-|cuda-|triton)")


def _pins() -> dict[str, Requirement]:
    pins = {}
    for line in LOCK.read_text().splitlines():
        line = line.split(" #")[0].strip()
        if line and not line.startswith(("#", "-e ")):
            requirement = Requirement(line)
            if requirement.marker is None or requirement.marker.evaluate():
                pins[canonicalize_name(requirement.name)] = requirement
    return pins


def test_every_pin_is_exact_and_the_cuda_libraries_are_left_out() -> None:
    pins = _pins()
    assert pins, "requirements.lock pins nothing for this Python"
    loose = [str(r) for r in pins.values() if len(r.specifier) != 1 or next(iter(r.specifier)).operator != "=="]
    assert not loose, f"a lock pins exact versions: {loose}"
    assert not [name for name in pins if CUDA_ONLY.match(name)], "the CUDA libraries come with torch's CUDA build only"
    assert "torch" in pins and "-e ." in LOCK.read_text().splitlines(), "the lock pins torch and installs this checkout"


def test_venv_has_exactly_the_locked_versions() -> None:
    """What .venv runs (and the Colab-like run, which takes .venv's packages) is what the lock says."""
    differ = {}
    for name, requirement in _pins().items():
        try:
            installed = Version(metadata.version(name))
        except metadata.PackageNotFoundError:
            differ[name] = "missing"
            continue
        pinned = Version(next(iter(requirement.specifier)).version)
        # torch's CPU build is 2.13.0+cpu: the same release as the lock's 2.13.0 (PEP 440 local label)
        if installed.public != pinned.public:
            differ[name] = f"{installed} installed, {pinned} locked"
    assert not differ, f".venv differs from requirements.lock (run `make setup`): {differ}"


def test_every_requirement_of_requirements_txt_is_locked() -> None:
    pins = _pins()
    named = [Requirement(line.split(" #")[0].strip()) for line in (ROOT / "requirements.txt").read_text().splitlines()
             if line.strip() and not line.startswith(("#", "-e "))]
    missing = [str(r) for r in named if (r.marker is None or r.marker.evaluate())
               and canonicalize_name(r.name) not in pins]
    assert not missing, f"requirements.txt names what requirements.lock does not pin (run `make lock`): {missing}"
    outside = [str(r) for r in named if canonicalize_name(r.name) in pins
               and not r.specifier.contains(next(iter(pins[canonicalize_name(r.name)].specifier)).version)]
    assert not outside, f"the lock pins versions requirements.txt's ranges refuse: {outside}"


def test_one_installer() -> None:
    """`make` and `.ci/run` install with uv only: pip obeys the machine's pip configuration (constraint
    files) and uv does not, so two installers can resolve the same names to different versions."""
    for path in (ROOT / "Makefile", ROOT / ".ci" / "run"):
        lines = [line for line in path.read_text().splitlines()
                 if re.search(r"\bpip install\b", line) and not line.lstrip().startswith("#")]
        via_pip = [line.strip() for line in lines if not re.search(r"\buv\)? pip install|\$\(UV\) pip install", line)]
        # the one exception: pip installing uv itself into .venv
        via_pip = [line for line in via_pip if not re.search(r'pip install .*"uv', line)]
        assert not via_pip, f"{path.name} installs with pip: {via_pip}"
