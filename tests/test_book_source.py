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

from transformer_lib.book.source import Listing, show_source, source_text, split_class

from library_names import resolve

ROOT = Path(__file__).resolve().parent.parent
# Every notebook of the book: a chapter's sections live in its folder (book/01_attention/*.ipynb).
CHAPTERS = sorted(p for p in (ROOT / "book").rglob("*.ipynb") if ".ipynb_checkpoints" not in p.parts)

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
    with_docs, without = source_text(obj, docstring=True, validation=True), source_text(obj, validation=True)
    assert with_docs == textwrap.dedent(inspect.getsource(obj))  # rendered from the live object
    assert len(without.splitlines()) < len(with_docs.splitlines())  # every one of these has a docstring
    assert _code_only(ast.parse(without)) == _code_only(ast.parse(with_docs))  # the same program


def test_show_source_returns_highlighted_code_and_refuses_other_packages() -> None:
    from transformer_lib.masking import causal_mask

    shown = show_source(causal_mask)
    assert shown.data == source_text(causal_mask) and "def causal_mask(" in shown.data
    assert show_source(causal_mask, docstring=True).data == source_text(causal_mask, docstring=True)
    assert show_source(causal_mask, validation=True).data == source_text(causal_mask, validation=True)
    with pytest.raises(ValueError, match="transformer_lib code"):
        show_source(json.dumps)


# --- argument checks are elided by default ----------------------------------------------------------


def _checked_example() -> str:
    return '''\
class Layer:
    def __init__(self, width, heads, rate=0.1):
        super().__init__()
        # the sizes must agree
        if width % heads:
            message = f"width={width} is not a multiple of heads={heads}"
            raise ValueError(message)
        if not 0 <= rate < 1:
            raise ValueError(f"rate must be in [0, 1), got {rate}")
        elif rate > 0.5:
            raise ValueError(f"rate {rate} is too high")
        self.width = width

    def forward(self, x, mask=None):
        self._check_input(x)
        assert x.dim() == 3, x.shape
        for name, t in (("x", x), ("mask", mask)):
            if t is not None and t.dim() != 3:
                raise ValueError(f"{name} must have 3 dimensions")
        if mask is not None:
            validate_mask(mask)
            x = x.masked_fill(~mask, 0.0)  # a computation: this if stays
        if x.numel() == 0:
            return x  # not a check: returns
        if x.dtype == 1:
            raise TypeError("no")
        else:
            x = x.float()  # the else computes: this if stays
        return self.width * x

    @staticmethod
    def _check_input(x):
        if x is None:
            raise ValueError("x is None")

    def raising(self):
        raise NotImplementedError  # the body: not a check of arguments
'''


def _elided(code: str) -> str:
    from transformer_lib.book import source

    return source._without_checks(code)


def test_checks_of_the_arguments_become_one_marked_line_per_run() -> None:
    from transformer_lib.book.source import ELISION

    code = _elided(_checked_example())
    ast.parse(code)  # still Python
    lines = code.splitlines()
    # __init__: the comment above the checks, the if/raise with its message, the if/elif/raise: one line
    init = lines[lines.index("    def __init__(self, width, heads, rate=0.1):"):lines.index("    def forward(self, x, mask=None):")]
    assert init == ["    def __init__(self, width, heads, rate=0.1):", "        super().__init__()",
                    f"        {ELISION}", "        self.width = width", ""]
    forward = lines[lines.index("    def forward(self, x, mask=None):"):lines.index("    @staticmethod")]
    # a checker call, an assert and a loop of checks in a row: one line
    assert forward[1] == f"        {ELISION}" and forward[2] == "        if mask is not None:"
    # inside a block that also computes, the check goes and the computation stays
    assert forward[3] == f"            {ELISION}" and "masked_fill" in forward[4]
    assert "return x  # not a check: returns" in code and 'raise TypeError("no")' in code
    # a checker whose whole body is a check keeps a body
    checker = lines[lines.index("    def _check_input(x):"):]
    assert checker[1:3] == [f"        {ELISION}", "        ..."]
    assert "raise NotImplementedError" in code
    assert code.count(ELISION) == 4
    for gone in ("is not a multiple", "too high", "must have 3 dimensions", "assert ", "the sizes must agree",
                 "self._check_input(x)", "validate_mask"):
        assert gone not in code, gone


def test_validation_true_shows_every_check_and_the_default_hides_them() -> None:
    from transformer_lib.book.source import ELISION
    from transformer_lib.decoding import greedy_decode  # a public boundary: it validates its arguments

    full = source_text(greedy_decode, validation=True)
    short = source_text(greedy_decode)
    assert ELISION not in full and ELISION in short
    assert "check_source(" in full and "check_source" not in short
    assert show_source(greedy_decode).data == short


@pytest.mark.parametrize(
    "dotted",
    ["transformer_lib.attention.MultiHeadAttention", "transformer_lib.attention.softmax_attention",
     "transformer_lib.masking", "transformer_lib.decoding", "transformer_lib.trainer", "transformer_lib.model"],
)
def test_eliding_checks_removes_only_checks(dotted: str) -> None:
    """The listing without checks is still Python, and every statement it drops is a check: the
    program with its checks removed from the syntax tree is the same as the listing's program."""
    from transformer_lib.book.source import is_check

    obj = resolve(dotted)
    full, short = source_text(obj, validation=True), source_text(obj)
    short_tree = ast.parse(short)

    class DropChecks(ast.NodeTransformer):  # top-down: a check is dropped whole, its insides unseen
        def generic_visit(self, node: ast.AST) -> ast.AST:
            for name in ("body", "orelse", "finalbody"):
                block = getattr(node, name, None)
                if isinstance(block, list) and block and isinstance(block[0], ast.stmt) and not isinstance(node, ast.Module):
                    kept = [s for s in block if not is_check(s)]
                    setattr(node, name, kept or [ast.Expr(ast.Constant(Ellipsis))])
            return super().generic_visit(node)

    expected = DropChecks().visit(ast.parse(full))
    assert ast.dump(expected) == ast.dump(short_tree)


def test_a_listing_is_html_in_the_sites_own_colours_and_marks_the_elision() -> None:
    from transformer_lib.decoding import greedy_decode

    listing = show_source(greedy_decode)
    page = listing._repr_html_()
    assert 'class="tt-source' in page and '<div class="highlight"><pre>' in page
    assert 'class="c1 tt-elided"' in page  # the elision stands out (site.css)
    # it names where its code lives (the website shows it without the show_source call)
    assert '<div class="tt-source-name">from <code>transformer_lib.decoding.greedy_decode</code></div>' in page
    # its own colours apply only off the website (no data-theme on <html>), never in dark mode
    assert all(rule.strip().startswith("html:not([data-theme])") for rule in re.findall(r"([^{}]+)\{", page.split("</style>")[0].split("<style>")[1]))
    assert repr(listing) == listing.data


def test_a_class_shown_by_its_methods_keeps_the_rest_one_click_away() -> None:
    from transformer_lib.blocks import EncoderLayer

    shown, rest, names = split_class(source_text(EncoderLayer), ("forward",))
    assert names == ["__init__"]
    for part in (shown, rest):  # each half is Python of its own, with the class line
        assert isinstance(ast.parse(part).body[0], ast.ClassDef)
    assert "def forward(" in shown and "def __init__(" not in shown and 'Show the rest of EncoderLayer' in shown
    assert "def __init__(" in rest and "def forward(" not in rest
    page = show_source(EncoderLayer, methods=["forward"])._repr_html_()
    assert '<details class="tt-source-rest"><summary>Show the rest of EncoderLayer (__init__)</summary>' in page
    assert show_source(EncoderLayer, methods=["forward"]).data == source_text(EncoderLayer)  # plain text: all of it
    with pytest.raises(ValueError, match="'backward'"):
        show_source(EncoderLayer, methods=["backward"])


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
            options = {k.arg: ast.literal_eval(k.value) for k in node.keywords if k.arg in ("docstring", "validation")}
            toggles = {k.arg: ast.literal_eval(k.value) for k in node.keywords if k.arg in ("methods", "elide")}
            obj = eval(compile(ast.Expression(node.args[0]), path.name, "eval"), {}, dict(namespace))  # noqa: S307 - names and attributes only
            shown = Listing(source_text(obj, **options), **toggles).parts()[0]  # what is behind a toggle is not on show
            rendered.append((expression, source_text(obj, docstring=True, validation=True), shown))
    return rendered


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.relative_to(ROOT / "book").as_posix())
def test_no_chapter_renders_more_library_source_than_a_screen(path: Path) -> None:
    shown = rendered_sources(path)
    too_long = [f"{expression} ({len(text.splitlines())} lines)" for expression, _, text in shown
                if len(text.splitlines()) > RENDERED_LINE_LIMIT]
    assert not too_long, (
        f"{path.name} renders library source longer than {RENDERED_LINE_LIMIT} lines: {', '.join(too_long)}; "
        "show the smaller piece the text is about (a method, a helper) or split the function"
    )


def _chapter(path: Path) -> str:
    """``book/01_attention/02_heads.ipynb`` and ``book/01_attention.ipynb`` -> ``01_attention``."""
    return path.relative_to(ROOT / "book").parts[0].removesuffix(".ipynb")


def test_the_budget_test_finds_the_chapters_calls() -> None:
    found: dict[str, int] = {}
    for path in CHAPTERS:
        found[_chapter(path)] = found.get(_chapter(path), 0) + len(rendered_sources(path))
    assert found and all(found.values()), f"a chapter with no show_source call: {found}"


def rendered_line_table() -> list[tuple[str, int, int, int]]:
    """``(chapter, calls, lines with docstrings, lines as shown)``: the report's table."""
    rows = []
    for path in CHAPTERS:
        shown = rendered_sources(path)
        rows.append((path.relative_to(ROOT / "book").with_suffix("").as_posix(), len(shown), sum(len(d.splitlines()) for _, d, _ in shown),
                     sum(len(t.splitlines()) for _, _, t in shown)))
    return rows


if __name__ == "__main__":  # python tests/test_book_source.py: the per-chapter table
    total = [0, 0, 0]
    print("| notebook | show_source calls | lines with docstrings and checks | lines as shown |\n|---|---:|---:|---:|")
    for chapter, calls, before, after in rendered_line_table():
        print(f"| {chapter} | {calls} | {before} | {after} |")
        total = [total[0] + calls, total[1] + before, total[2] + after]
    print(f"| total | {total[0]} | {total[1]} | {total[2]} |")


def test_elide_puts_one_run_of_lines_behind_a_toggle() -> None:
    from transformer_lib.schedules import make_optimizer

    listing = show_source(make_optimizer, elide=("# fused:", "return torch.optim.AdamW", "the kernel"))
    shown, rest, label = listing.parts()
    full, shown, rest = source_text(make_optimizer).splitlines(), shown.splitlines(), rest.splitlines()
    marker = '    # ... the kernel (under "Show the rest")'
    at = shown.index(marker)
    assert shown[:at] + rest + shown[at + 1:] == full  # nothing lost, nothing added but the marker
    assert rest[0].lstrip().startswith("# fused:") and "foreach=True" in shown[-1]
    assert label == "Show the rest of make_optimizer (the kernel)"
    page = listing._repr_html_()
    assert "transformer_lib.schedules.make_optimizer" in page and f"<summary>{label}</summary>" in page


@pytest.mark.parametrize("first, last", [("# no such line", "return"), ("# fused:", "# no such line"),
                                         ("return torch.optim.AdamW", "params =")])
def test_elide_refuses_lines_it_cannot_find(first: str, last: str) -> None:
    from transformer_lib.schedules import make_optimizer

    with pytest.raises(ValueError, match="no line starts with"):
        show_source(make_optimizer, elide=(first, last, "x"))
