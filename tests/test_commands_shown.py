"""Every command, module and flag a reader is shown runs (issue 42).

The commands are collected where a reader meets them: the README and the benchmarks' README, the
chapters' landing pages and prose (notebook Markdown), the strings of the chapters' code cells, the
committed results files and their READMEs (``transformer_lib/book/runs/**``), the shipped model's
record, the library's own strings (docstrings, error and advice messages), the comments of the
benchmark scripts, and what the chapters print about a run (:func:`~transformer_lib.book.results.describe_run`
over every record). Each command is dry-run: its module is imported (``python -m X``) or its script
found, and its arguments are parsed by the program's own parser, stopped right after parsing
(``argparse.ArgumentParser.parse_args``, the parser every command line here uses); the train command
line's options are also resolved into its run configuration, as ``--print-config`` does. A mention in
prose may leave out what the parser requires (``--out``, the model): placeholders fill it in.

A results file keeps the command as it was run. Where an earlier version ran it (another module,
options since renamed, defaults since changed), the command the reader is told to run today is the
derived one (:func:`transformer_lib.cli.history.current_command`), which must make the same run:
the same resolved settings and the same model.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import importlib
import importlib.util
import io
import json
import re
import runpy
import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from transformer_lib import pretrained
from transformer_lib.book.results import COMMITTED_RUNS, RAN_AS, TODAY, describe_run
from transformer_lib.cli import history

ROOT = Path(__file__).resolve().parents[1]
PROGRAMS = {"transformer-train": "transformer_lib.cli.train", "transformer-translate": "transformer_lib.cli.translate"}
# Where a command begins inside a line of text.
START = re.compile(r"(?:(?:\S*/)?python3? -m \S+|torchrun (?:--?[\w-]+(?: \d+)? )*-m \S+|transformer-(?:train|translate)\b"
                   r"|(?:\S*/)?python3? benchmarks/\S+\.py|bash benchmarks/\S+\.sh)")
SHELL_ENDS = {"|", ";", "&&", "||", "&", ">", ">>", "2>&1", "<", "do", "done", "(", ")"}
PLACEHOLDER = "PLACEHOLDER"


# --- where commands are shown ---------------------------------------------------------------------

def _code_strings(source: str) -> Iterator[str]:
    """Every string in Python source (docstrings, messages; an f-string with X for each field)."""
    source = "\n".join(line[: len(line) - len(line.lstrip())] + "pass" if line.lstrip().startswith(("%", "!")) else line
                       for line in source.splitlines())  # IPython's magics are no Python
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            yield node.value
        elif isinstance(node, ast.JoinedStr):
            yield "".join(part.value if isinstance(part, ast.Constant) else "X" for part in node.values)


def shown_texts() -> Iterator[tuple[str, str]]:
    """``(where, text)`` for every text a reader reads commands in."""
    pages = [ROOT / "README.md", ROOT / "benchmarks" / "README.md", ROOT / "book" / "intro.md",
             *sorted((ROOT / "book").glob("*/index.md")), *sorted(COMMITTED_RUNS.glob("**/README.md"))]
    for page in pages:
        yield str(page.relative_to(ROOT)), page.read_text(encoding="utf-8")
    for notebook in sorted((ROOT / "book").glob("*/*.ipynb")):
        for i, cell in enumerate(json.loads(notebook.read_text(encoding="utf-8"))["cells"]):
            where = f"{notebook.relative_to(ROOT)} cell {i}"
            if cell["cell_type"] == "markdown":
                yield where, cell["source"]
            elif cell["cell_type"] == "code":
                yield from ((where, text) for text in _code_strings(cell["source"]))
    for module in sorted((ROOT / "transformer_lib").glob("**/*.py")):
        yield from ((str(module.relative_to(ROOT)), text) for text in _code_strings(module.read_text(encoding="utf-8")))
    for script in sorted((ROOT / "benchmarks").glob("*.sh")):
        comments = [line.lstrip()[1:] for line in script.read_text().splitlines() if line.lstrip().startswith("#")]
        yield str(script.relative_to(ROOT)), "\n".join(comments)


def commands_in(text: str) -> Iterator[str]:
    """The command lines in a text: the lines of fenced code blocks and of indented (literal) blocks,
    where a trailing backslash continues a line, and code spans (which may wrap), each from where a
    command begins to where the shell would end it. Prose around a module's name is not a command."""
    fenced = re.findall(r"```[^\n]*\n(.*?)```", text, flags=re.S)
    prose = re.sub(r"```.*?```", "\n", text, flags=re.S)
    lines = [line for block in fenced for line in block.splitlines()]
    lines += [line for line in prose.splitlines() if line.startswith("    ") and not line.lstrip().startswith(("- ", "* ", ">>>"))]
    spans = [" ".join(span.split()) for span in re.findall(r"`([^`]+)`", prose.replace("``", "`"))]  # RST's too
    for line in re.sub(r"\\\n\s*", " ", "\n".join(lines)).splitlines():
        for match in START.finditer(line):  # where a shell command begins: not after a word of prose
            if re.fullmatch(r"(?:.*(?:\||;|&&|\bdo|\$))?\s*(?:\w+=\S*\s+)*", line[:match.start()]):
                yield line[match.start():].split("`")[0]
    for span in spans:
        for match in START.finditer(span):
            yield span[match.start():]


def shown_commands() -> list[tuple[str, str]]:
    found = {(where, command) for where, text in shown_texts() for command in commands_in(text)}
    return sorted(found)


# --- the dry run --------------------------------------------------------------------------------

class _Parsed(Exception):
    """Raised instead of running a program, once its parser has accepted the arguments."""

    def __init__(self, namespace: argparse.Namespace) -> None:
        self.namespace = namespace


def _words(command: str) -> list[str]:
    """The command's words up to where the shell ends it; shell variables become placeholders."""
    command = re.sub(r"\$\(\([^)]*\)\)|\$\{[^}]*\}|\$\w+", PLACEHOLDER, command)
    try:
        split = list(_lexer(command, quotes=True))
    except ValueError:  # an apostrophe in the prose after a mention: "python -m X: a run's model"
        split = list(_lexer(command, quotes=False))
    words = []
    for word in split:
        if word in SHELL_ENDS or word.startswith((">", "2>")):
            break
        if word not in ("...", "ARGS", "[...]"):  # "any further arguments"
            words.append(PLACEHOLDER if re.fullmatch(r"[A-Z][A-Z0-9_]*", word) else word)  # N, CKPT, FOLDER
    return words


def _lexer(command: str, quotes: bool) -> shlex.shlex:
    lexer = shlex.shlex(command, posix=True, punctuation_chars=";&|<>()")
    lexer.commenters = "#"
    lexer.whitespace_split = True
    if not quotes:
        lexer.quotes = lexer.escape = ""
    return lexer


def _filled(parser: argparse.ArgumentParser, args: list[str]) -> list[str]:
    """``args`` with placeholders for the required options a mention leaves out, and typed values for
    shell variables (``--vocab-size $v``)."""
    if not args:  # the program named, its arguments left out
        args = [PLACEHOLDER for action in parser._actions if not action.option_strings and action.required]
    args = list(args)
    for i, word in enumerate(args):
        if PLACEHOLDER in word and i > 0 and args[i - 1] in parser._option_string_actions:
            action = parser._option_string_actions[args[i - 1]]
            args[i] = str(action.choices[0]) if action.choices else "100" if action.type in (int, float) else word
    if args and args[-1] in parser._option_string_actions and parser._option_string_actions[args[-1]].nargs != 0:
        args.append(PLACEHOLDER)  # a mention of an option, its value left out
        return _filled(parser, args)
    if any(word in ("-h", "--help", "--version") for word in args):
        return args
    given = {word.split("=")[0] for word in args if word.startswith("--")}
    for action in parser._actions:
        if action.required and action.option_strings and not given & set(action.option_strings):
            args += [action.option_strings[0], str(action.choices[0]) if action.choices else PLACEHOLDER]
    for group in parser._mutually_exclusive_groups:
        if group.required and not any(given & set(a.option_strings) for a in group._group_actions):
            first = group._group_actions[0]
            args += [first.option_strings[0]] + ([] if first.nargs == 0 else [PLACEHOLDER])
    return args


def dry_run(command: str) -> str | None:
    """Import the command's module (or find its script) and parse its arguments with its own parser,
    without running it. Returns why it would not run, or ``None``."""
    words = _words(command)
    if words[0] in PROGRAMS:
        module, args = PROGRAMS[words[0]], words[1:]
    elif "-m" in words:
        at = words.index("-m") + 1
        module, args = words[at].rstrip(":,."), words[at + 1:]  # "python -m X: what it does"
    elif words[0] == "bash":
        return None if (ROOT / words[1]).is_file() else f"{words[1]} does not exist"
    else:  # python benchmarks/x.py
        module, args = words[1], words[2:]
    if module.endswith(".py"):
        if not (ROOT / module).is_file():
            return f"{module} does not exist"
        if "ArgumentParser" not in (ROOT / module).read_text():
            return None  # it reads sys.argv itself: there is no parser to ask
        return _parse(lambda: runpy.run_path(str(ROOT / module), run_name="__main__"), args)
    if not module.startswith("transformer_lib"):
        return None if importlib.util.find_spec(module.split(".")[0]) else f"no module named {module}"
    try:
        program = importlib.import_module(module)
    except ImportError as error:
        return f"python -m {module}: {error}"
    if not hasattr(program, "main"):
        return f"python -m {module}: the module is no program (it has no main)"
    if module == history.MODULE and not any(word in ("-h", "--help", "--version") for word in args):
        return _resolve_train(args)
    return _parse(lambda: program.main(args), args)


def _parse(start: Any, args: list[str]) -> str | None:
    """Run ``start`` until its parser has parsed ``args`` (placeholders filled), then stop."""
    original = argparse.ArgumentParser.parse_args

    def parse_only(parser: argparse.ArgumentParser, argv: Any = None, namespace: Any = None) -> Any:
        raise _Parsed(original(parser, _filled(parser, args), namespace))

    errors = io.StringIO()
    with pytest.MonkeyPatch.context() as patch, contextlib.redirect_stderr(errors), contextlib.redirect_stdout(io.StringIO()):
        patch.setattr(argparse.ArgumentParser, "parse_args", parse_only)
        patch.syspath_prepend(str(ROOT / "benchmarks"))  # as `python benchmarks/x.py` finds its neighbours
        try:
            start()
        except _Parsed:
            return None
        except SystemExit as stop:
            return None if stop.code in (0, None) else errors.getvalue().strip() or f"exit status {stop.code}"
    return "the program never parsed its arguments"


def _resolve_train(args: list[str]) -> str | None:
    """The train command line's options parsed and resolved into a run configuration (what
    ``--print-config`` prints), not run."""
    from transformer_lib.cli import options

    errors = io.StringIO()
    try:
        with contextlib.redirect_stderr(errors):
            options.resolve(options.parse_args(_filled(options._parser(), args)))
    except SystemExit:
        return errors.getvalue().strip()
    except ValueError as error:
        return str(error)
    return None


# --- the tests ------------------------------------------------------------------------------------

SHOWN = shown_commands()


def test_commands_are_found_where_readers_meet_them() -> None:
    """The collection works: the places the issue names each show commands, and the kinds are all here."""
    places = {where.split(" cell ")[0] for where, _ in SHOWN}
    for place in ("README.md", "benchmarks/README.md", "book/05_training/08_full_result.ipynb",
                  "transformer_lib/cli/translate.py", "transformer_lib/checkpoint.py", "benchmarks/recipe_grid.sh"):
        assert place in places, place
    starts = {command.split()[0] for _, command in SHOWN}
    assert {"transformer-train", "transformer-translate", "python", "torchrun", "bash"} <= starts
    assert dry_run("python -m transformer_lib.train --task reverse --out r") is not None  # the dry run can fail
    assert "--average-last" in dry_run("python -m transformer_lib.cli.train --task multi30k --average-last 5 --out r")
    assert "post" in dry_run("transformer-train --task multi30k --norm post --out r")
    assert "--beam-width" in dry_run("transformer-translate --pretrained --beam-width 4 x")


@pytest.mark.parametrize("where, command", SHOWN, ids=[f"{w}: {c[:60]}" for w, c in SHOWN])
def test_every_command_shown_runs(where: str, command: str) -> None:
    assert dry_run(command) is None, f"{where}: {command}\n{dry_run(command)}"


def _records() -> dict[str, dict[str, Any]]:
    """Every run record a chapter can print: the shipped model's, and every committed results file."""
    records = {"the shipped model (pretrained.info().run)": pretrained.info().run}
    for path in sorted(COMMITTED_RUNS.glob("**/*.json")):
        data = json.loads(path.read_text(encoding="utf-8"))
        if isinstance(data, dict) and "settings" in data and "command" in data:
            records[str(path.relative_to(COMMITTED_RUNS))] = data
    return records


RECORDS = _records()


@pytest.mark.parametrize("name", sorted(RECORDS))
def test_a_recorded_run_is_shown_with_a_command_that_makes_it_today(name: str) -> None:
    """What the page prints about a run (:func:`describe_run`): the command as run is labelled as an
    earlier version's where today's parser would not make that run from it, and beside it stands the
    command that makes the same run today, which the dry run accepts and which resolves to the
    recorded settings and model."""
    record = RECORDS[name]
    today = history.current_command(record)
    assert history.differences(today, record) == []
    assert dry_run(today) is None
    lines = describe_run(record).splitlines()
    if history.differences(record["command"], record):
        assert lines[0].startswith(RAN_AS) and lines[1].startswith(TODAY)
        shown = lines[1][len(TODAY):]
    else:
        assert today == record["command"] and lines[0].startswith("command:")
        shown = lines[0][len("command:"):].strip()
    assert dry_run(shown) is None and history.differences(shown.replace("…/", "/"), record) == []


def test_the_committed_records_name_only_commands_of_runs_or_commands_that_run() -> None:
    """Every other command in a committed results file (how an artifact or a decoding grid was made)
    runs today, or is a copy of a recorded run's command (which that run's record shows as above)."""
    runs = {record["command"] for record in RECORDS.values()}

    def commands(value: Any) -> Iterator[str]:
        if isinstance(value, dict):
            for key, item in value.items():
                if key in ("command", "commands"):
                    yield from [item] if isinstance(item, str) else item
                else:
                    yield from commands(item)
        elif isinstance(value, list):
            for item in value:
                yield from commands(item)

    found = 0
    for path in sorted(COMMITTED_RUNS.glob("**/*.json")):
        for command in commands(json.loads(path.read_text(encoding="utf-8"))):
            found += 1
            assert command in runs or dry_run(command) is None, f"{path}: {command}\n{dry_run(command)}"
    assert found > len(RECORDS)


def test_the_recipe_grid_makes_the_committed_runs() -> None:
    """``benchmarks/recipe_grid.sh``, which section 5.8 says made the committed recipe runs, makes each
    of them with this version: its options, for every run it names, resolve to the recorded settings."""
    script = (ROOT / "benchmarks" / "recipe_grid.sh").read_text()
    common = re.search(r"^common=\((.*)\)$", script, re.M).group(1).replace('"$EPOCHS"', "16")
    runs = dict(re.findall(r'^\s*\[([\w.-]+)\]="([^"]*)"', script, re.M))
    recipes = {Path(name).stem: record for name, record in RECORDS.items() if name.startswith("recipes/")}
    assert len(runs) >= 20 and set(runs) <= set(recipes)
    for name, options in runs.items():
        command = f"python -m {history.MODULE} {common} {options} --out /tmp/grid/{name}"
        assert history.differences(command, recipes[name]) == [], (name, history.differences(command, recipes[name]))


def test_a_command_shown_for_a_recorded_run_makes_that_run() -> None:
    """A train command shown with the output folder of a committed run (the READMEs say "this run came
    from this command") makes that run with this version: the same settings and model."""
    by_folder: dict[str, list[dict[str, Any]]] = {}
    for record in RECORDS.values():
        words = shlex.split(record["command"])
        if "--out" in words and words[words.index("--out") + 1].startswith("/"):
            by_folder.setdefault(words[words.index("--out") + 1], []).append(record)
    checked = 0
    for where, command in SHOWN:
        words = _words(command)
        if history.MODULE in words and "--out" in words and words[words.index("--out") + 1] in by_folder:
            for record in by_folder[words[words.index("--out") + 1]]:
                assert history.differences(" ".join(shlex.quote(w) for w in words), record) == [], (where, command)
                checked += 1
    assert checked >= 2  # the shipped model's run and the earlier full profile's, in benchmarks/README.md
