"""``show_source``: a chapter shows the library's code, rendered from the live object.

Chapters call this instead of copying code, so the page always shows the code that runs. The prose
around it carries the explanation, so docstrings are left out unless asked for; comments stay. The
checks of the arguments (the library validates at its boundaries, with messages that name the value
and the limit) are elided too, unless asked for: the page shows the computation, and one comment line
marks where the checks were.

What counts as a check is read from the syntax tree, not from names of particular functions:

- ``assert`` statements;
- a call, as a statement of its own, to a function or method whose name starts with ``check`` or
  ``validate`` (``check_mask(mask, shape)``, ``self._check_ids(src, "src")``);
- an ``if`` whose body (and ``else``/``elif``, if any) holds nothing but checks and ``raise``
  statements (and assignments that build the message before a ``raise``);
- a ``for`` loop whose body holds nothing but checks.

A run of consecutive checks, with the comment lines right above it, becomes one line
(:data:`ELISION`) at the same indentation, so the listing stays valid Python.
"""

from __future__ import annotations

import ast
import html
import inspect
import re
import textwrap
from typing import Any, cast

__all__ = ["ELISION", "Listing", "source_text", "show_source", "split_class"]

ELISION = "# ... checks of the arguments (show_source(..., validation=True))"
"""The comment that replaces each run of argument checks in a listing."""

_CHECKER = re.compile(r"^_*(check|validate)(_|$)", re.IGNORECASE)
_STATEMENT_LISTS = ("body", "orelse", "finalbody")


def _docstring_lines(tree: ast.AST) -> set[int]:
    """The 1-based line numbers of every module, class and function docstring in ``tree``."""
    lines: set[int] = set()
    for node in ast.walk(tree):
        if not isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        body = node.body
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                and isinstance(body[0].value.value, str):
            lines.update(range(body[0].lineno, (body[0].end_lineno or body[0].lineno) + 1))
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
            drop -= set(range(node.body[0].lineno, (node.body[0].end_lineno or node.body[0].lineno) + 1))
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


# --- argument checks --------------------------------------------------------------------------------


def _called_name(call: ast.Call) -> str | None:
    func = call.func
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return None


def _is_check_call(stmt: ast.stmt) -> bool:
    """``check_mask(mask, shape)`` or ``self._check_ids(x, "src")`` as a statement of its own."""
    return (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call)
            and bool(_CHECKER.match(_called_name(stmt.value) or "")))


def _only_checks_or_raises(body: list[ast.stmt]) -> bool:
    """A branch that only refuses: checks and ``raise``, with assignments only to build a message."""
    if not body:
        return True
    if not any(isinstance(s, ast.Raise) or is_check(s) for s in body):
        return False
    for position, stmt in enumerate(body):
        if isinstance(stmt, ast.Raise) or is_check(stmt):
            continue
        message_built = isinstance(stmt, (ast.Assign, ast.AnnAssign)) and isinstance(body[-1], ast.Raise)
        if not message_built or position == len(body) - 1:
            return False
    return True


def is_check(stmt: ast.stmt) -> bool:
    """Whether ``stmt`` only checks arguments (see the module's docstring for the rules)."""
    if isinstance(stmt, ast.Assert) or _is_check_call(stmt):
        return True
    if isinstance(stmt, ast.If):
        return _only_checks_or_raises(stmt.body) and _only_checks_or_raises(stmt.orelse)
    if isinstance(stmt, (ast.For, ast.AsyncFor)):
        return not stmt.orelse and all(is_check(s) or isinstance(s, ast.Raise) for s in stmt.body) \
            and any(is_check(s) for s in stmt.body)
    return False


def _check_runs(tree: ast.AST) -> list[tuple[int, int, int, bool]]:
    """``(first line, last line, column, whole body)`` of each run of consecutive checks.

    ``whole body``: the run is all the statements of its block (the block then needs a ``...``).
    Checks inside a run are not listed again; nor are module-level statements (a listing shows a
    function or a class).
    """
    runs: list[tuple[int, int, int, bool]] = []

    def visit(node: ast.AST) -> None:
        for name in _STATEMENT_LISTS:
            block = getattr(node, name, None)
            if not isinstance(block, list) or not block or not isinstance(block[0], ast.stmt):
                continue
            if isinstance(node, ast.Module):
                for stmt in block:
                    visit(stmt)
                continue
            run: list[ast.stmt] = []
            for stmt in [*block, None]:
                if stmt is not None and is_check(stmt):
                    run.append(stmt)
                    continue
                if run:
                    runs.append((run[0].lineno, run[-1].end_lineno or run[-1].lineno, run[0].col_offset, len(run) == len(block)))
                    run = []
                if stmt is not None:
                    visit(stmt)
        for handler in getattr(node, "handlers", []) or []:
            visit(handler)

    visit(tree)
    return runs


def _without_checks(code: str) -> str:
    """``code`` with each run of argument checks (and the comments right above it) replaced by
    :data:`ELISION`. Lines are removed, not re-printed, so everything else stays as written."""
    lines = code.splitlines()
    replace: dict[int, str] = {}  # first line (0-based) of a run -> its replacement
    drop: set[int] = set()
    for first, last, column, whole in _check_runs(ast.parse(code)):
        start = first - 1
        indent = " " * column
        while start > 0 and lines[start - 1].startswith(indent + "#"):
            start -= 1  # the comment that introduces the checks goes with them
        drop.update(range(start, last))
        replace[start] = indent + ELISION + ("\n" + indent + "..." if whole else "")
    kept: list[str] = []
    for number, line in enumerate(lines):
        if number in replace:
            kept.append(replace[number])
        elif number not in drop:
            kept.append(line)
    return "\n".join(kept) + "\n"


# --- the listing ------------------------------------------------------------------------------------


def source_text(obj: Any, docstring: bool = False, validation: bool = False) -> str:
    """The source of a ``transformer_lib`` function, method or class, as a chapter shows it.

    Args:
        obj: a function, method, class or module of ``transformer_lib``, as the chapter imported it.
        docstring: keep the docstrings (default: leave them out, comments stay).
        validation: keep the checks of the arguments (default: each run of them becomes one
            comment line, :data:`ELISION`).

    Returns:
        The dedented source (decorators included), ending in a newline.

    Raises:
        ValueError: ``obj`` is not code from ``transformer_lib``.
    """
    module = inspect.getmodule(inspect.unwrap(obj) if callable(obj) else obj)
    if module is None or not module.__name__.startswith("transformer_lib"):
        raise ValueError(f"show_source is for transformer_lib code, got {obj!r}")
    code = textwrap.dedent(inspect.getsource(obj))
    if not docstring:
        code = _without_docstrings(code)
    if not validation:
        code = _without_checks(code)
    return code


def split_class(code: str, methods: tuple[str, ...]) -> tuple[str, str, list[str]]:
    """A class's listing in two: ``(shown, rest, rest's names)``. ``shown`` is the class line and the
    ``methods`` named (the computation the text is about), with a comment where the rest was;
    ``rest`` is the class line and everything else in its body, each as valid Python.

    Raises:
        ValueError: ``code`` is not one class, or it has no method of a name in ``methods``.
    """
    tree = ast.parse(code)
    if len(tree.body) != 1 or not isinstance(tree.body[0], ast.ClassDef):
        raise ValueError("show_source(..., methods=...) is for a class")
    cls = tree.body[0]
    lines = code.splitlines()
    first = cls.body[0]
    decorators = getattr(first, "decorator_list", None)
    body_start = (decorators[0].lineno if decorators else first.lineno) - 1
    header, spans, start = lines[:body_start], [], body_start
    for stmt in cls.body:  # each statement with the blank and comment lines above it
        spans.append((stmt, lines[start:stmt.end_lineno]))
        start = stmt.end_lineno
    def named(stmt: ast.stmt) -> str | None:
        return stmt.name if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) else None
    unknown = set(methods) - {named(stmt) for stmt, _ in spans}
    if unknown:
        raise ValueError(f"{cls.name} has no method {sorted(unknown)[0]!r} to show")
    kept = [part for stmt, part in spans if named(stmt) in methods]
    rest = [part for stmt, part in spans if named(stmt) not in methods]
    rest_names = [named(stmt) or ast.unparse(stmt).split("=")[0].strip() for stmt, _ in spans if named(stmt) not in methods]
    indent = " " * (first.col_offset)
    note = f"{indent}# ... {', '.join(rest_names)}: under \"Show the rest of {cls.name}\""
    def joined(parts: list[list[str]]) -> list[str]:  # one blank line between two parts
        out: list[str] = []
        for part in parts:
            while part and not part[0].strip():
                part = part[1:]
            out.extend(([""] if out else []) + part)
        return out
    shown_lines = header + ([note, ""] if rest else []) + joined(kept)
    rest_lines = header + joined(rest)
    return "\n".join(shown_lines).rstrip() + "\n", "\n".join(rest_lines).rstrip() + "\n", rest_names


def split_lines(code: str, first: str, last: str, what: str) -> tuple[str, str]:
    """A listing in two: ``(shown, rest)``. ``rest`` is the run of lines from the first that starts
    with ``first`` up to (not including) the last that starts with ``last`` (leading spaces ignored);
    in ``shown`` one comment line, ``# ... {what} (under "Show the rest")``, stands in for it.

    For a function whose listing mixes what a section discusses with what it does not (how
    :func:`~transformer_lib.schedules.make_optimizer` picks AdamW's fused or foreach kernel, a matter
    of speed, next to the parameter groups and the paper's betas that section 5.3 explains).

    Raises:
        ValueError: ``first`` or ``last`` starts no line, or ``last`` comes before ``first``.
    """
    lines = code.splitlines()
    starts = [line.lstrip() for line in lines]
    try:
        i = next(k for k, line in enumerate(starts) if line.startswith(first))
        j = max(k for k in range(i + 1, len(lines)) if starts[k].startswith(last))  # the last such line
    except (StopIteration, ValueError):
        raise ValueError(f"no line starts with {first!r}, then a later one with {last!r}, in the listing") from None
    indent = lines[i][: len(lines[i]) - len(starts[i])]
    shown = [*lines[:i], f'{indent}# ... {what} (under "Show the rest")', *lines[j:]]
    return "\n".join(shown) + "\n", "\n".join(lines[i:j]) + "\n"


class Listing:
    """Library source as a notebook output: highlighted HTML, and the code as plain text.

    The HTML uses the Pygments classes of the website's own code blocks and no colours of its own,
    so a listing looks like the page's code cells in light and in dark mode. Where the page has no
    such styles (Jupyter, Colab: no ``data-theme`` on ``<html>``) it carries Pygments' default
    colours, scoped so that they never apply on the website.
    """

    CSS_CLASS = "tt-source"

    def __init__(self, code: str, name: str | None = None, methods: tuple[str, ...] = (),
                 elide: tuple[str, str, str] | None = None) -> None:
        self.data = code
        self.name = name  # where the code lives, e.g. "transformer_lib.blocks.FeedForward"
        self.methods = tuple(methods)  # a class shown by these methods, the rest behind a toggle
        self.elide = elide  # (first, last, what): a run of lines behind a toggle (split_lines)
        if self.methods:
            split_class(code, self.methods)  # refuses a name the class does not have, now
        if self.elide:
            split_lines(code, *self.elide)  # refuses lines it cannot find, now

    def parts(self) -> tuple[str, str | None, str | None]:
        """``(shown, hidden, toggle's label)``: what the listing shows, and what its toggle hides."""
        short = self.name.rsplit(".", 1)[-1] if self.name else "the listing"
        if self.methods:
            shown, rest, names = split_class(self.data, self.methods)
            return (shown, rest, f"Show the rest of {short} ({', '.join(names)})") if names else (shown, None, None)
        if self.elide:
            shown, rest = split_lines(self.data, *self.elide)
            return shown, rest, f"Show the rest of {short} ({self.elide[2]})"
        return self.data, None, None

    def __repr__(self) -> str:
        return self.data

    def _repr_html_(self) -> str:
        shown, rest, label = self.parts()  # what the text is about; the rest behind a toggle
        block = self._block(shown) + (
            f'<details class="tt-source-rest"><summary>{html.escape(label or "")}</summary>{self._block(rest)}</details>'
            if rest else "")
        # The listing says where its code lives: the website shows it without the call that made it.
        caption = (f'<div class="tt-source-name">from <code>{html.escape(self.name)}</code></div>'
                   if self.name else "")
        return (f"<style>{_notebook_css()}</style>"
                f'<div class="{self.CSS_CLASS} highlight-python notranslate">{caption}{block}</div>')

    @staticmethod
    def _block(code: str) -> str:
        from pygments import highlight
        from pygments.formatters import HtmlFormatter
        from pygments.lexers import PythonLexer

        body = highlight(code, PythonLexer(), HtmlFormatter(nowrap=True))
        elision = html.escape(ELISION, quote=False)
        body = body.replace(f'<span class="c1">{elision}</span>', f'<span class="c1 tt-elided">{elision}</span>')
        # One span per line (Pygments closes its spans at each line's end), with the line's indent:
        # where the page wraps code (print), a long line's continuation hangs under its own indent
        # instead of going back to column 0 (site.css).
        lines = []
        for source, marked in zip(code.splitlines(), body.splitlines()):
            indent = len(source) - len(source.lstrip(" "))
            lines.append(f'<span class="tt-line" style="--tt-indent:{indent}">{marked}\n</span>')
        return f'<div class="highlight"><pre>{"".join(lines)}</pre></div>'



def _notebook_css() -> str:
    from pygments.formatters import HtmlFormatter

    scope = f'html:not([data-theme]) body:not([data-jp-theme-light="false"]) .{Listing.CSS_CLASS} .highlight'
    # Only the scoped rules: Pygments adds global ones too (``pre { line-height: 125% }``).
    rules = [line.split(" /*")[0] for line in HtmlFormatter().get_style_defs(scope).splitlines()]
    return " ".join(rule for rule in rules if rule.startswith(scope))


def show_source(obj: Any, docstring: bool = False, validation: bool = False,
                methods: tuple[str, ...] = (), elide: tuple[str, str, str] | None = None) -> Listing:
    """Display the source of a ``transformer_lib`` object, highlighted, without docstrings or checks.

    Returns a :class:`Listing` (the notebook displays it as a cell's value); see :func:`source_text`
    for ``docstring`` and ``validation``. ``show_source(f, validation=True)`` shows the checks of the
    arguments too. ``methods``, for a class: the methods the text is about, shown in the class; the
    rest of the class (its constructor, say) is one click away, behind a toggle that names it.
    ``elide=(first, last, what)``: the run of lines from ``first`` to ``last`` is behind a toggle
    instead (see :func:`split_lines`).
    """
    return Listing(source_text(obj, docstring=docstring, validation=validation), name=_qualified_name(obj),
                   methods=tuple(methods), elide=cast("tuple[str, str, str]", tuple(elide)) if elide else None)


def _qualified_name(obj: Any) -> str | None:
    """``transformer_lib.blocks.FeedForward.forward`` for a function, method, class or module."""
    target = inspect.unwrap(obj) if callable(obj) else obj
    qualname = getattr(target, "__qualname__", None)
    module = getattr(target, "__module__", None) or getattr(target, "__name__", None)
    if inspect.ismodule(target):
        return target.__name__
    return f"{module}.{qualname}" if module and qualname else None
