"""The engine's command line, checked against the committed SGLang 0.5.23 manifest.

The simulator must refuse what `sglang serve` refuses, with the same exit code (2) and argparse's
message shape, and accept what it accepts (including the unique prefix abbreviations SGLang's parser
allows: refusing those is the renderer's job, not the engine's).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from sparkgate.sglang_cli import (
    ArgvError,
    OptionSpec,
    committed_manifest,
    option_table,
    parse_argv,
)

PROG = "sglang serve"
USAGE = f"usage: {PROG} [-h] --model-path MODEL_PATH [--host HOST] [--port PORT] [options ...]"
REQUIRED = ("--model-path",)


class UsageError(Exception):
    """What argparse would print after `<prog>: error: ` before exiting 2."""


@dataclass
class EngineArgs:
    values: dict[str, Any] = field(default_factory=dict)  # dest -> value, as given on the argv
    launch_command: str = ""

    def get(self, dest: str, default: Any = None) -> Any:
        return self.values.get(dest, default)

    def given(self, dest: str) -> bool:
        return dest in self.values


def _candidates(written: str) -> list[str]:
    return sorted({spec.option for spelling, spec in option_table().items() if spelling.startswith(written)})


def _quote_choices(choices: tuple[str, ...]) -> str:
    return ", ".join(repr(c) for c in choices)


def _convert(spec: OptionSpec, value: str) -> Any:
    """argparse's type conversion, with its error text (Python 3.11 wording)."""
    if spec.choices is not None and value not in spec.choices:
        raise UsageError(f"argument {spec.option}: invalid choice: {value!r} (choose from {_quote_choices(spec.choices)})")
    try:
        if spec.type in ("int", "human_readable_int"):
            return int(value)
        if spec.type == "float":
            return float(value)
    except ValueError:
        raise UsageError(f"argument {spec.option}: invalid {spec.type} value: {value!r}") from None
    if spec.type == "loads":
        try:
            return json.loads(value)
        except ValueError:
            raise UsageError(f"argument {spec.option}: invalid loads value: {value!r}") from None
    return value


def _value_of(written: str, spec: OptionSpec, values: tuple[str, ...], inline: bool) -> Any:
    if not spec.takes_value:
        if values and inline:
            raise UsageError(f"argument {spec.option}: ignored explicit argument {values[0]!r}")
        if spec.kind == "store_false":
            return False
        if spec.kind == "boolean_optional":
            return not written.startswith("--no-")
        return True
    if spec.nargs in ("+", "*"):
        if spec.nargs == "+" and not values:
            raise UsageError(f"argument {spec.option}: expected at least one argument")
        return [_convert(spec, v) for v in values]
    if spec.nargs == "?":
        return _convert(spec, values[0]) if values else None
    if not values:
        raise UsageError(f"argument {spec.option}: expected one argument")
    return _convert(spec, values[0])


def parse_engine_argv(argv: list[str]) -> EngineArgs:
    """argv -> EngineArgs, or UsageError with argparse's message."""
    try:
        parsed = parse_argv(list(argv))
    except ArgvError as exc:
        raise UsageError(f"unrecognized arguments: {argv[exc.index]}") from None
    # SGLang records the argv joined by spaces, unquoted (only watermark keys are redacted).
    args = EngineArgs(launch_command=" ".join(argv))
    unrecognized: list[str] = []
    for occurrence in parsed:
        spec = occurrence.spec
        if spec is None:
            matches = _candidates(occurrence.written)
            if len(matches) > 1:
                raise UsageError(f"ambiguous option: {occurrence.written} could match {', '.join(matches)}")
            unrecognized.append(argv[occurrence.index])
            unrecognized.extend(occurrence.values)
            continue
        token = argv[occurrence.index]
        value = _value_of(occurrence.written, spec, occurrence.values, inline="=" in token)
        if spec.kind == "append":
            args.values.setdefault(spec.dest, []).append(value)
        else:
            args.values[spec.dest] = value
    missing = [flag for flag in REQUIRED if option_table()[flag].dest not in args.values]
    if missing:
        spellings = "/".join(committed_manifest()["options"][missing[0]]["option_strings"])
        raise UsageError(f"the following arguments are required: {spellings}")
    if unrecognized:
        raise UsageError(f"unrecognized arguments: {' '.join(unrecognized)}")
    return args


def usage_error_text(error: UsageError) -> str:
    return f"{USAGE}\n{PROG}: error: {error}\n"
