"""``show_source``: what a chapter shows is the running code, without docstrings, and never too long.

The budget test executes no chapter: it parses each notebook, finds its ``show_source(...)`` calls,
imports the objects they name (through the chapter's own ``transformer_lib`` imports) and renders
them with the function the chapter uses.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import json
import re
import textwrap
from pathlib import Path
from typing import Any

import pytest

from transformer_lib.book.source import show_source, source_text

from library_names import resolve

ROOT = Path(__file__).resolve().parent.parent
CHAPTERS = sorted((ROOT / "book").glob("0*.ipynb"))

RENDERED_LINE_LIMIT = 40
"""The most lines one ``show_source`` may put on a page: about a screen, and what the Annotated
Transformer needs for its largest piece (multi-head attention, about 40 lines)."""


# --- show_source itself ---------------------------------------------------------------------------


def _example_module_source() -> str:
    return '''\
class Example:
    """Class docstring.

    More of it.
    """

    scale: float = 2.0  # a class attribute stays

    @staticmethod
    def double(x):
        """Method docstring."""

        # a comment stays
        return 2 * x  # so does this one

    def only_docstring(self):
        """A body that is only a docstring keeps it: an empty body is not Python."""
'''


def test_source_text_drops_docstrings_and_keeps_comments() -> None:
    from transformer_lib.book import source

    code = source._without_docstrings(_example_module_source())
    ast.parse(code)  # still Python
    assert "docstring." not in code.replace("A body that is only a docstring", "")
    assert "# a comment stays" in code and "# so does this one" in code and "# a class attribute stays" in code
    assert "@staticmethod" in code
    assert code.splitlines()[:2] == ["class Example:", "    scale: float = 2.0  # a class attribute stays"]
    assert '"""A body that is only a docstring keeps it' in code


@pytest.mark.parametrize(
    "dotted",
    ["transformer_lib.masking.causal_mask", "transformer_lib.attention.MultiHeadAttention",
     "transformer_lib.attention.MultiHeadAttention.forward", "transformer_lib.model.TransformerConfig"],
)
def test_rendered_code_is_the_live_code_less_its_docstrings(dotted: str) -> None:
    obj = resolve(dotted)
    with_docs, without = source_text(obj, docstring=True), source_text(obj)
    assert with_docs == textwrap.dedent(inspect.getsource(obj))  # rendered from the live object
    assert len(without.splitlines()) < len(with_docs.splitlines())  # every one of these has a docstring
    assert _code_only(ast.parse(without)) == _code_only(ast.parse(with_docs))  # the same program


def test_show_source_returns_highlighted_code_and_refuses_other_packages() -> None:
    from transformer_lib.masking import causal_mask

    shown = show_source(causal_mask)
    assert shown.data == source_text(causal_mask) and "def causal_mask(" in shown.data
    assert show_source(causal_mask, docstring=True).data == source_text(causal_mask, docstring=True)
    with pytest.raises(ValueError, match="transformer_lib code"):
        show_source(json.dumps)


def _code_only(tree: ast.AST) -> str:
    """The program without docstrings, for comparing two renderings."""
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) \
                and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str) and len(body) > 1:
            node.body = body[1:]
    return ast.dump(tree)


# --- the budget: how much library source each chapter renders -------------------------------------


def _code_cells(path: Path) -> list[str]:
    nb = json.loads(path.read_text(encoding="utf-8"))
    cells = ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]
    return [re.sub(r"^([ \t]*)[%!].*$", r"\1pass", c, flags=re.MULTILINE) for c in cells]


def _library_namespace(trees: list[ast.Module]) -> dict[str, Any]:
    """The names a chapter imports from transformer_lib, imported (nothing else of the chapter runs)."""
    namespace: dict[str, Any] = {}
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("transformer_lib"):
                module = importlib.import_module(node.module)
                for alias in node.names:
                    value = getattr(module, alias.name, None)
                    if value is None:
                        value = importlib.import_module(f"{node.module}.{alias.name}")
                    namespace[alias.asname or alias.name] = value
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.startswith("transformer_lib"):
                        module = importlib.import_module(alias.name)
                        namespace[alias.asname or alias.name.split(".")[0]] = (
                            module if alias.asname else importlib.import_module("transformer_lib"))
    return namespace


def rendered_sources(path: Path) -> list[tuple[str, str, str]]:
    """``(expression, source with docstrings, source as shown)`` for each ``show_source`` call of a chapter."""
    trees = [ast.parse(cell) for cell in _code_cells(path)]
    namespace = _library_namespace(trees)
    rendered = []
    for tree in trees:
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and node.args):
                continue
            func = node.func
            name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
            if name != "show_source":
                continue
            expression = ast.unparse(node.args[0])
            keep = any(k.arg == "docstring" and ast.literal_eval(k.value) for k in node.keywords)
            obj = eval(compile(ast.Expression(node.args[0]), path.name, "eval"), {}, dict(namespace))  # noqa: S307 - names and attributes only
            rendered.append((expression, source_text(obj, docstring=True), source_text(obj, docstring=keep)))
    return rendered


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.name)
def test_no_chapter_renders_more_library_source_than_a_screen(path: Path) -> None:
    shown = rendered_sources(path)
    too_long = [f"{expression} ({len(text.splitlines())} lines)" for expression, _, text in shown
                if len(text.splitlines()) > RENDERED_LINE_LIMIT]
    assert not too_long, (
        f"{path.name} renders library source longer than {RENDERED_LINE_LIMIT} lines: {', '.join(too_long)}; "
        "show the smaller piece the text is about (a method, a helper) or split the function"
    )


def test_the_budget_test_finds_the_chapters_calls() -> None:
    found = {path.name: len(rendered_sources(path)) for path in CHAPTERS}
    assert all(found.values()), f"a chapter with no show_source call: {found}"


def rendered_line_table() -> list[tuple[str, int, int, int]]:
    """``(chapter, calls, lines with docstrings, lines as shown)``: the report's table."""
    rows = []
    for path in CHAPTERS:
        shown = rendered_sources(path)
        rows.append((path.stem, len(shown), sum(len(d.splitlines()) for _, d, _ in shown),
                     sum(len(t.splitlines()) for _, _, t in shown)))
    return rows


if __name__ == "__main__":  # python tests/test_book_source.py: the per-chapter table
    total = [0, 0, 0]
    print("| chapter | show_source calls | lines with docstrings | lines as shown |\n|---|---:|---:|---:|")
    for chapter, calls, before, after in rendered_line_table():
        print(f"| {chapter} | {calls} | {before} | {after} |")
        total = [total[0] + calls, total[1] + before, total[2] + after]
    print(f"| total | {total[0]} | {total[1]} | {total[2]} |")
