"""``show_source``: a chapter shows the library's code, rendered from the live object.

Chapters call this instead of copying code, so the page always shows the code that runs. The prose
around it carries the explanation, so docstrings are left out unless asked for; comments stay.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from typing import Any

__all__ = ["source_text", "show_source"]


def _docstring_lines(tree: ast.AST) -> set[int]:
    """The 1-based line numbers of every module, class and function docstring in ``tree``."""
    lines: set[int] = set()
    for node in ast.walk(tree):
        if not isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        body = node.body
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                and isinstance(body[0].value.value, str):
            lines.update(range(body[0].lineno, body[0].end_lineno + 1))
    return lines


def _without_docstrings(code: str) -> str:
    """``code`` less its docstrings, and less the blank line each leaves at the top of a body.

    Lines are removed, not re-printed from the syntax tree, so comments and layout stay as written.
    A body that was only a docstring keeps it (an empty body would not be Python).
    """
    tree = ast.parse(code)
    drop = _docstring_lines(tree)
    for node in ast.walk(tree):
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and len(node.body) == 1:
            drop -= set(range(node.body[0].lineno, node.body[0].end_lineno + 1))
    lines = code.splitlines()
    kept: list[str] = []
    previous_dropped = False
    for number, line in enumerate(lines, start=1):
        if number in drop:
            previous_dropped = True
            continue
        if previous_dropped and not line.strip():
            continue  # the blank line that separated the docstring from the code
        previous_dropped = False
        kept.append(line)
    return "\n".join(kept) + "\n"


def source_text(obj: Any, docstring: bool = False) -> str:
    """The source of a ``transformer_lib`` function, method or class, as a chapter shows it.

    Args:
        obj: a function, method, class or module of ``transformer_lib``, as the chapter imported it.
        docstring: keep the docstrings (default: leave them out, comments stay).

    Returns:
        The dedented source (decorators included), ending in a newline.

    Raises:
        ValueError: ``obj`` is not code from ``transformer_lib``.
    """
    module = inspect.getmodule(inspect.unwrap(obj) if callable(obj) else obj)
    if module is None or not module.__name__.startswith("transformer_lib"):
        raise ValueError(f"show_source is for transformer_lib code, got {obj!r}")
    code = textwrap.dedent(inspect.getsource(obj))
    return code if docstring else _without_docstrings(code)


def show_source(obj: Any, docstring: bool = False) -> Any:
    """Display the source of a ``transformer_lib`` object, syntax-highlighted, without docstrings.

    Returns an ``IPython.display.Code`` object (the notebook displays it as a cell's value); see
    :func:`source_text` for the arguments.
    """
    from IPython.display import Code

    return Code(source_text(obj, docstring=docstring), language="python")
