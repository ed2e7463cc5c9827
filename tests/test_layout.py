"""The package's layout: the model core never loads the book's support, nor the book's plotting stack.

The core is every module directly in ``transformer_lib/``; what exists for the book (figures, the
chart renderer, ``show_source``, the experiment-size switch, committed results) is under
``transformer_lib/book/``. A core module that needs a plot (the train CLI's ``loss.png``) imports it
inside the function that draws it, so importing the core stays light and changes nothing.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CORE = sorted(f"transformer_lib.{p.stem}" for p in (ROOT / "transformer_lib").glob("*.py") if p.stem != "__init__")
FORBIDDEN = ("transformer_lib.book", "altair", "pandas", "matplotlib")

# Imports each core module in turn, in a fresh interpreter, and names which forbidden modules it loaded.
_PROBE = """
import importlib, json, sys
forbidden = tuple(json.loads(sys.argv[1]))
def loaded():
    return {m for m in sys.modules if any(m == f or m.startswith(f + ".") for f in forbidden)}
found, before = {}, loaded()
for name in ["transformer_lib", *json.loads(sys.argv[2])]:
    importlib.import_module(name)
    new = sorted(loaded() - before)
    if new:
        found[name] = new
    before |= set(new)
elsewhere = sorted(m.__name__ for m in list(sys.modules.values())
                   if m.__name__.startswith("transformer_lib") and getattr(m, "__file__", None)
                   and not m.__file__.startswith(sys.argv[3]))
print(json.dumps({"found": found, "elsewhere": elsewhere}))
"""


def test_there_is_a_core_and_a_book_package() -> None:
    assert "transformer_lib.attention" in CORE and "transformer_lib.evaluation" in CORE
    assert (ROOT / "transformer_lib" / "book" / "__init__.py").is_file()
    assert not (ROOT / "transformer_lib" / "viz.py").exists() and not (ROOT / "transformer_lib" / "profile.py").exists()


def test_no_core_module_imports_the_book_package_or_its_plotting_stack() -> None:
    result = subprocess.run(
        [sys.executable, "-c", _PROBE, json.dumps(FORBIDDEN), json.dumps(CORE), str(ROOT)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    # An editable install of another checkout can supply a module this one has deleted.
    assert not report["elsewhere"], f"modules loaded from outside {ROOT}: {report['elsewhere']}"
    found = report["found"]
    assert not found, (
        "importing the core loaded what only the book needs (import it inside the function that uses it, "
        "or move the code to transformer_lib/book/): "
        + "; ".join(f"{name} -> {', '.join(mods[:6])}{' ...' if len(mods) > 6 else ''}" for name, mods in found.items())
    )


def test_the_book_package_imports_none_of_its_modules() -> None:
    """``import transformer_lib.book.experiment`` (what the train CLI needs) must not load altair."""
    result = subprocess.run(
        [sys.executable, "-c", _PROBE, json.dumps(["altair", "pandas", "matplotlib"]),
         json.dumps(["transformer_lib.book", "transformer_lib.book.experiment", "transformer_lib.book.source"]), str(ROOT)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert json.loads(result.stdout.strip().splitlines()[-1]) == {"found": {}, "elsewhere": []}


def test_every_core_module_is_on_the_map_with_its_tests() -> None:
    """A newcomer finds a concept's module, chapter and tests by one name: the package docstring
    lists every core module, and the README's table names each module's test files, which exist."""
    import re

    import transformer_lib

    modules = {name.split(".", 1)[1] for name in CORE}
    listed = set(re.findall(r"^    (\w+) ", transformer_lib.__doc__, re.M))
    assert modules <= listed, f"missing from transformer_lib/__init__.py's map: {sorted(modules - listed)}"
    readme = (ROOT / "README.md").read_text()
    rows = dict(re.findall(r"^\| `(\w+)` \|.*\| ([^|]*test_[^|]*) \|$", readme, re.M))
    assert modules <= set(rows), f"missing from the README's table: {sorted(modules - set(rows))}"
    for module, tests in rows.items():
        for test in re.findall(r"`(test_\w+\.py)`", tests):
            assert (ROOT / "tests" / test).is_file(), f"README: {module}'s tests {test} do not exist"
