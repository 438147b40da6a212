"""Every `invoke …` and `sparkgate …` command line in README.md and docs/ names a task or subcommand that exists and
only options it takes: docs that name a removed task (or a renamed flag) fail here, not on a user's Spark.

Read from inline code spans and from the lines of fenced blocks. Placeholders (`P`, `NAME`, `[--x]`) need no
value; `a\\|b` (a table cell's alternation) is read as each alternative."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

import tasks
from sparkgate import cli

REPO = Path(__file__).resolve().parents[2]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
# A code span that opens with a command (behind sudo, VAR=value or a path at most): a span is found by its opening
# backtick, so a stray backtick earlier on the line cannot pair with it.
SPAN = re.compile(r"`((?:sudo\s+)?(?:\w+=\S*\s+)*(?:[\w.~/-]*/)?(?:invoke|sparkgate) [^`\n]+)`")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)
# A shell line's commands: split at `&&`, `||` and `;` (not at `|`: usage lines spell alternatives with it).
SEGMENTS = re.compile(r"\s+(?:&&|\|\|)\s+|;\s+")
# One command, after a prompt, sudo, VAR=value assignments and a path (`.venv/bin/invoke`); a comment ends it.
COMMAND = re.compile(r"^\s*(?:\$\s+)?(?:sudo\s+(?:-\S+\s+)*)?(?:\w+=\S*\s+)*(?:[\w.~/-]*/)?((?:invoke|sparkgate) [^#]*)")
OPTION = re.compile(r"(?<![\w-])(--[a-z][a-z0-9-]*)")
# Words of prose that follow "sparkgate" in running text, not subcommands.
NOT_A_COMMAND = {"admits", "deploys", "does", "is", "keeps", "reads", "refuses", "runs", "says", "writes", "verdict"}


def command_lines() -> list[tuple[str, str]]:
    found = []
    for doc in DOCS:
        text = doc.read_text()
        lines = [line for m in FENCE.finditer(text) for line in m.group(0).splitlines()]
        lines += [m.group(1) for m in SPAN.finditer(FENCE.sub("", text))]
        found += [(doc.relative_to(REPO).as_posix(), command) for line in lines for command in commands_in(line)]
    return found


def commands_in(line: str) -> list[str]:
    return [m.group(1).strip() for segment in SEGMENTS.split(line) if (m := COMMAND.match(segment))]


def invoke_options() -> dict[str, set[str]]:
    """Task name (as invoke spells it on the command line) -> its long options."""
    options = {}
    for name in tasks.ns.task_names:
        task = tasks.ns[name]
        names = {f"--{name.replace('_', '-')}" for arg in task.get_arguments() for name in arg.names if len(name) > 1}
        options[name] = names | {f"--no-{n[2:]}" for n in names} | {"--help"}
    for alias, names in tasks.ns.task_names.items():
        for other in names:
            options[other] = options[alias]
    return options


def sparkgate_options() -> dict[str, set[str]]:
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return {name: {opt for action in p._actions for opt in action.option_strings if opt.startswith("--")}
            for name, p in sub.choices.items()}


INVOKE, SPARKGATE = invoke_options(), sparkgate_options()
LINES = command_lines()


def test_the_docs_hold_command_lines():
    tools = {line.split()[0] for _, line in LINES}
    assert tools == {"invoke", "sparkgate"} and len(LINES) > 60


def problems(line: str) -> list[str]:
    words = line.split()
    tool, rest = words[0], words[1:]
    known = INVOKE if tool == "invoke" else SPARKGATE
    if not rest or rest[0].startswith("-"):
        return []  # `invoke --list`, `sparkgate --help`
    if tool == "sparkgate" and rest[0] in NOT_A_COMMAND:
        return []
    before_options = rest[:next((i for i, w in enumerate(rest) if w.startswith("-")), len(rest))]
    if any(word.endswith(":") for word in before_options):
        return []  # what a command printed ("sparkgate compare A,B: per workload ..."), not a command
    found, current = [], []
    for word in rest:
        names = word.split("\\|")
        if all(name in known for name in names):
            current = names
        elif current and (options := OPTION.findall(word.split("=", 1)[0])):
            for option in options:
                found += [f"{tool} {name}: no option {option}" for name in current if option not in known[name]]
        elif not current:
            return [f"{tool}: no task or subcommand {word!r}"]
    return found


@pytest.mark.parametrize(("doc", "line"), LINES, ids=[f"{d}:{line[:60]}" for d, line in LINES])
def test_command_line_parses_against_the_real_signatures(doc, line):
    assert not problems(line), f"{doc}: `{line}`: {problems(line)}"


@pytest.mark.parametrize(("line", "expected"), [
    ("invoke images.sim", "invoke: no task or subcommand 'images.sim'"),
    ("sparkgate fleet.deploy: rollout stopped", None),
    ("invoke deploy --profile all-three --tagret sim", "invoke deploy: no option --tagret"),
    ("sparkgate verify --replay FILE --bogus", "sparkgate verify: no option --bogus"),
    ("invoke status\\|down --profile P --refused", "invoke status: no option --refused"),
])
def test_a_stale_line_is_found(line, expected):
    assert (expected in problems(line)) if expected else not problems(line)


@pytest.mark.parametrize(("line", "expected"), [
    ("sudo .venv/bin/invoke images.base && invoke images.wheels   # note", ["invoke images.base", "invoke images.wheels"]),
    ("$ SPARKGATE_X=1 ~/bin/sparkgate verify --profile P; echo done", ["sparkgate verify --profile P"]),
    ("sparkgate verify (--profile NAME|PATH | --expectations FILE)", ["sparkgate verify (--profile NAME|PATH | --expectations FILE)"]),
    ("echo invoke deploy", []),
])
def test_commands_are_found_behind_sudo_paths_and_operators(line, expected):
    assert commands_in(line) == expected


@pytest.mark.parametrize(("text", "expected"), [
    ("x `y (`invoke down --bogus`)` z", ["invoke down --bogus"]),
    ("a lone ` tick, then `invoke deploy --bogus`", ["invoke deploy --bogus"]),
    ("`sudo .venv/bin/invoke images.base && invoke images.wheels`", ["invoke images.base", "invoke images.wheels"]),
    ("`echo invoke deploy`", []),
])
def test_spans_are_found_by_their_opening_command(text, expected):
    assert [c for m in SPAN.finditer(text) for c in commands_in(m.group(1))] == expected
