"""Every ``transformer_lib`` module or name that the library shows a user exists: errors, warnings, log
lines, help texts, printed lines and docstrings name today's modules, not ones that moved
(``transformer_lib.train``)."""

from __future__ import annotations

import ast
import importlib
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


def resolves(dotted: str) -> bool:
    """Whether ``dotted`` is a module, or a name inside one (``transformer_lib.cli.train``, ``...model.Transformer``)."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            target = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        try:
            for name in parts[cut:]:
                target = getattr(target, name)
        except AttributeError:
            return False
        return True
    return False


def test_the_check_finds_a_module_that_does_not_exist() -> None:
    assert resolves("transformer_lib.cli.train") and resolves("transformer_lib.model.Transformer")
    assert not resolves("transformer_lib.train") and not resolves("transformer_lib.training.Trainer")


@pytest.mark.parametrize("path", LIBRARY, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_module_a_message_names_exists(path: Path) -> None:
    named = {name.rstrip(".") for text in message_texts(path) for name in DOTTED.findall(text)}
    allowed = FILE_FORMATS | (HISTORY if path.name == "history.py" else set())
    missing = sorted(name for name in named - allowed if not resolves(name))
    assert not missing, f"{path.relative_to(ROOT)} names {missing}, which do not exist"
