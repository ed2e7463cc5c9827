"""Count the lines of the library that check arguments, per module, at the working tree or at a commit.

A checking line is one of:

- an ``if`` whose body only raises (its test and its ``raise``, every line they span);
- a call statement of a function named ``check_*`` or ``_check*`` (``check_int("d_model", d_model)``);
- the body of a function named ``check_*`` or ``_check*`` (the checks themselves, ``validation.py``'s).

Blank lines, comments and docstrings are not counted, nor is anything else. Usage::

    python tools/validation_lines.py              # the working tree
    python tools/validation_lines.py fec1504      # a commit (read with git show, nothing checked out)
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "transformer_lib"


def _checking(name: str) -> bool:
    return name.startswith(("check_", "_check"))


def _called(node: ast.AST) -> str:
    if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
        function = node.value.func
        return function.id if isinstance(function, ast.Name) else function.attr if isinstance(function, ast.Attribute) else ""
    return ""


def checking_lines(source: str) -> set[int]:
    """The line numbers of ``source`` that check arguments (see the module's docstring)."""
    lines: set[int] = set()
    for node in ast.walk(ast.parse(source)):
        span: tuple[int, int] | None = None
        if isinstance(node, ast.If) and not node.orelse and all(isinstance(s, ast.Raise) for s in node.body):
            span = (node.lineno, node.end_lineno or node.lineno)
        elif _checking(_called(node)):
            span = (node.lineno, node.end_lineno or node.lineno)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and _checking(node.name):
            body = node.body[1:] if ast.get_docstring(node) is not None else node.body
            if body:
                span = (body[0].lineno, body[-1].end_lineno or body[-1].lineno)
        if span is not None:
            lines.update(range(span[0], span[1] + 1))
    text = source.splitlines()
    return {n for n in lines if text[n - 1].strip() and not text[n - 1].strip().startswith("#")}


def _files(commit: str | None) -> dict[str, str]:
    if commit is None:
        return {str(p.relative_to(ROOT)): p.read_text(encoding="utf-8") for p in sorted((ROOT / PACKAGE).rglob("*.py"))}
    names = subprocess.run(["git", "ls-tree", "-r", "--name-only", commit, PACKAGE], cwd=ROOT, check=True,
                           capture_output=True, text=True).stdout.split()
    return {name: subprocess.run(["git", "show", f"{commit}:{name}"], cwd=ROOT, check=True, capture_output=True,
                                 text=True).stdout for name in names if name.endswith(".py")}


def main(argv: list[str]) -> None:
    commit = argv[0] if argv else None
    totals = {"core": [0, 0], "cli": [0, 0], "book": [0, 0]}
    for name, source in _files(commit).items():
        layer = "cli" if "/cli/" in name else "book" if "/book/" in name else "core"
        code = sum(1 for line in source.splitlines() if line.strip() and not line.strip().startswith("#"))
        totals[layer][0] += len(checking_lines(source))
        totals[layer][1] += code
    for layer, (checks, code) in totals.items():
        print(f"{layer:5} {checks:5} checking lines of {code:6} ({checks / max(code, 1):.1%})")


if __name__ == "__main__":
    main(sys.argv[1:])
