"""Every ``transformer_lib`` module or name that the library shows a user exists: errors, warnings, log
lines, help texts, printed lines and docstrings name today's modules, not ones that moved
(``transformer_lib.train``)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LIBRARY = sorted((ROOT / "transformer_lib").rglob("*.py"))
DOTTED = re.compile(r"\btransformer_lib(?:\.\w+)+")
# Names that are about modules that no longer exist, on purpose: the command-line history translates
# commands recorded with them (cli/history.py).
HISTORY = {"transformer_lib.train"}
FILE_FORMATS = {"transformer_lib.prepared_translation"}  # the name a prepared data file records, not a module


def message_texts(path: Path) -> list[str]:
    """Every string literal of ``path``: messages, help texts, printed lines, and the docstrings the API pages show."""
    return [node.value for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
            if isinstance(node, ast.Constant) and isinstance(node.value, str)]


def _defines(body: list[ast.stmt], names: list[str]) -> bool:
    """Whether statements ``body`` define ``names[0]`` (a function, class, assignment or import, also inside
    ``if``/``try`` blocks), and, for a class, its attributes ``names[1:]``."""
    name, rest = names[0], names[1:]
    for node in body:
        if isinstance(node, (ast.If, ast.Try)):
            blocks = [node.body, node.orelse] + ([node.finalbody] + [h.body for h in node.handlers] if isinstance(node, ast.Try) else [])
            if any(_defines(block, names) for block in blocks):
                return True
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name:
            return not rest or not isinstance(node, ast.ClassDef) or _defines(node.body, rest)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == name for target in targets for t in ast.walk(target)):
                return True
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            if any((alias.asname or alias.name.split(".")[0]) == name for alias in node.names):
                return True
    return False


def resolves(dotted: str) -> bool:
    """Whether ``dotted`` is a module of this checkout, or a name inside one (``transformer_lib.cli.train``,
    ``...model.Transformer.masks_for``), read from the source: no import, so the book's modules are
    checked where the book's libraries are not installed (`make lowest`)."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        folder = ROOT.joinpath(*parts[:cut])
        module = next((f for f in (folder.with_suffix(".py"), folder / "__init__.py") if f.is_file()), None)
        if module is None:
            continue
        rest = parts[cut:]
        return not rest or _defines(ast.parse(module.read_text(encoding="utf-8")).body, rest)
    return False


def test_the_check_finds_a_module_that_does_not_exist() -> None:
    assert resolves("transformer_lib.cli.train") and resolves("transformer_lib.model.Transformer")
    assert resolves("transformer_lib.model.Transformer.masks_for") and resolves("transformer_lib.book.figures")
    assert not resolves("transformer_lib.train") and not resolves("transformer_lib.training.Trainer")
    assert not resolves("transformer_lib.model.Transformer.make_masks") and not resolves("transformer_lib.model.Transformr")


@pytest.mark.parametrize("path", LIBRARY, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_module_a_message_names_exists(path: Path) -> None:
    named = {name.rstrip(".") for text in message_texts(path) for name in DOTTED.findall(text)}
    allowed = FILE_FORMATS | (HISTORY if path.name == "history.py" else set())
    missing = sorted(name for name in named - allowed if not resolves(name))
    assert not missing, f"{path.relative_to(ROOT)} names {missing}, which do not exist"
