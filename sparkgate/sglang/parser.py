"""SGLang's command line as data: the committed manifest, and strict argv validation against it.

The manifest is generated from the pinned SGLang release (`invoke manifest`) and a test regenerates it
from the installed `sglang` to catch drift. Validation here is stricter than SGLang's own parser:
no prefix abbreviations, because an abbreviation that SGLang accepts today silently changes meaning
when a later release adds a longer flag with the same prefix.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any

from sparkgate.sglang import fork

SGLANG_VERSION = "0.5.23"
MANIFEST_RESOURCE = f"sglang-cli-{SGLANG_VERSION}.json"

# argparse action classes -> how many values follow the flag on the command line.
_NO_VALUE_KINDS = {"store_true", "store_false", "store_const", "boolean_optional", "help", "count"}


def _action_kind(action: argparse.Action) -> str:
    name = type(action).__name__
    table = {
        "_StoreAction": "store",
        "_StoreTrueAction": "store_true",
        "_StoreFalseAction": "store_false",
        "_StoreConstAction": "store_const",
        "_AppendAction": "append",
        "_CountAction": "count",
        "_HelpAction": "help",
        "BooleanOptionalAction": "boolean_optional",
        "DeprecatedStoreTrueAction": "store_true",
        "DeprecatedStoreConstAction": "store_const",
    }
    if name in table:
        return table[name]
    # Custom actions (e.g. LoRAPathAction) take values like a plain store.
    return "store"


def _type_name(action: argparse.Action) -> str | None:
    if action.type is None:
        return None
    return getattr(action.type, "__name__", type(action.type).__name__)


def _json_default(value: Any) -> Any:
    """A default as plain JSON; anything else by its type's name (never a repr, which may hold an address)."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if value == value and abs(value) != float("inf") else str(value)
    if isinstance(value, list | tuple):
        return [_json_default(v) for v in value]
    return f"<{type(value).__name__}>"


def manifest_from_parser(parser: argparse.ArgumentParser, version: str) -> dict[str, Any]:
    """Describe every option of `parser` as plain JSON data, deterministically ordered."""
    options: dict[str, dict[str, Any]] = {}
    for action in parser._actions:  # argparse has no public accessor for its actions
        if not action.option_strings:
            continue
        kind = _action_kind(action)
        if kind == "help":
            continue
        choices = list(action.choices) if action.choices is not None else None
        entry = {
            "dest": action.dest,
            "option_strings": list(action.option_strings),
            "kind": kind,
            "nargs": action.nargs if isinstance(action.nargs, (int, type(None))) else str(action.nargs),
            "type": _type_name(action),
            # Sorted: some SGLang choice lists are built from sets, whose order varies per process.
            "choices": sorted(str(c) for c in choices) if choices is not None else None,
            # What SGLang runs with when the flag is not passed: `invoke sglang.diff` reports a changed one.
            "default": _json_default(action.default),
        }
        for option in action.option_strings:
            options[option] = entry
    return {
        "sglang_version": version,
        "generated_by": "invoke manifest (sparkgate.sglang.parser.generate_manifest)",
        "options": {key: options[key] for key in sorted(options)},
    }


def build_sglang_parser(*, with_fork_options: bool) -> argparse.ArgumentParser:
    """SGLang's own parser, built the strict way (no abbreviations). Needs `sglang` importable."""
    from sglang.srt.server_args import ServerArgs  # heavy import: only when asked

    parser = argparse.ArgumentParser(prog="sglang serve", allow_abbrev=False)
    ServerArgs.add_cli_args(parser)
    if with_fork_options:
        for option, spec in fork.FORK_ONLY_OPTIONS.items():
            if spec["kind"] == "store_true":
                parser.add_argument(option, action="store_true")
            else:
                parser.add_argument(option, choices=spec.get("choices"))
    return parser


def generate_manifest() -> dict[str, Any]:
    import sglang

    version = getattr(sglang, "__version__", "unknown")
    return manifest_from_parser(build_sglang_parser(with_fork_options=False), version)


def manifest_text(manifest: dict[str, Any]) -> str:
    return json.dumps(manifest, indent=1, sort_keys=False) + "\n"


@lru_cache(maxsize=1)
def committed_manifest() -> dict[str, Any]:
    text = resources.files("sparkgate.sglang.data").joinpath(MANIFEST_RESOURCE).read_text(encoding="utf-8")
    return json.loads(text)


@dataclass(frozen=True)
class OptionSpec:
    option: str  # the canonical (first) spelling
    dest: str
    kind: str
    nargs: int | str | None
    type: str | None
    choices: tuple[str, ...] | None
    fork_only: bool = False

    @property
    def takes_value(self) -> bool:
        return self.kind not in _NO_VALUE_KINDS and self.nargs != 0


@lru_cache(maxsize=1)
def option_table() -> dict[str, OptionSpec]:
    """Every spelling SGLang (plus the fork's documented additions) accepts -> its spec."""
    table: dict[str, OptionSpec] = {}
    for spelling, entry in committed_manifest()["options"].items():
        choices = tuple(entry["choices"]) if entry["choices"] is not None else None
        table[spelling] = OptionSpec(
            option=entry["option_strings"][0],
            dest=entry["dest"],
            kind=entry["kind"],
            nargs=entry["nargs"],
            type=entry["type"],
            choices=choices,
        )
    for spelling, entry in fork.FORK_ONLY_OPTIONS.items():
        table[spelling] = OptionSpec(
            option=spelling,
            dest=spelling.lstrip("-").replace("-", "_"),
            kind=entry["kind"],
            nargs=0 if entry["kind"] == "store_true" else None,
            type="str",
            choices=tuple(entry["choices"]) if entry.get("choices") else None,
            fork_only=True,
        )
    return table


@dataclass(frozen=True)
class ParsedOption:
    """One option occurrence in an argv, with where in the argv it came from."""

    written: str  # as the user wrote it (before `=`), e.g. `--enable-fp32-lm`
    spec: OptionSpec | None  # None: SGLang does not know it, even as an abbreviation
    exact: bool  # False when `written` is only a prefix SGLang's default parser would expand
    values: tuple[str, ...]
    index: int  # position of the flag token in the argv


class ArgvError(ValueError):
    """A token sequence SGLang would reject, or that we refuse (abbreviations)."""

    def __init__(self, message: str, index: int):
        super().__init__(message)
        self.index = index


def resolve_spelling(written: str) -> tuple[OptionSpec | None, bool]:
    """Map a flag as written to its spec; second item is True for an exact spelling.

    Mirrors argparse's default (allow_abbrev=True) expansion: a unique prefix of one option resolves
    to it. That is what SGLang itself would do, so conflict rules must see through it.
    """
    table = option_table()
    if written in table:
        return table[written], True
    candidates = {spec.option: spec for spelling, spec in table.items() if spelling.startswith(written)}
    if len(candidates) == 1:
        return next(iter(candidates.values())), False
    return None, False


def _coerce_ok(spec: OptionSpec, value: str) -> bool:
    try:
        if spec.type == "int":
            int(value)
        elif spec.type == "float":
            float(value)
    except ValueError:
        return False
    return True


def parse_argv(argv: list[str]) -> list[ParsedOption]:
    """Split an argv into option occurrences, leniently: unknown flags and abbreviations are kept
    (with spec None / exact False) so that conflict rules can still name them. Structural errors
    (a value with no flag, a flag missing its value) raise ArgvError."""
    parsed: list[ParsedOption] = []
    i = 0
    while i < len(argv):
        token, start = argv[i], i
        if not token.startswith("--"):
            raise ArgvError(f"stray value {token!r} does not follow a flag that takes a value", i)
        written, eq, inline = token.partition("=")
        spec, exact = resolve_spelling(written)
        values: list[str] = []
        if eq:
            values.append(inline)
            i += 1
        elif spec is None:
            i += 1
            while i < len(argv) and not argv[i].startswith("--"):  # unknown flag: swallow its values
                values.append(argv[i])
                i += 1
        elif spec.takes_value:
            i += 1
            if spec.nargs in ("+", "*"):
                while i < len(argv) and not argv[i].startswith("--"):
                    values.append(argv[i])
                    i += 1
            elif spec.nargs == "?":
                if i < len(argv) and not argv[i].startswith("--"):
                    values.append(argv[i])
                    i += 1
            else:
                count = spec.nargs if isinstance(spec.nargs, int) else 1
                for _ in range(count):
                    if i >= len(argv) or argv[i].startswith("--"):
                        break
                    values.append(argv[i])
                    i += 1
        else:
            i += 1
        parsed.append(ParsedOption(written, spec, exact, tuple(values), start))
    return parsed


def strict_problems(option: ParsedOption) -> list[str]:
    """Why SGLang (or our no-abbreviation policy) would reject this occurrence; [] if fine."""
    spec = option.spec
    if spec is None:
        return [f"unrecognized SGLang {SGLANG_VERSION} argument {option.written!r}"]
    problems: list[str] = []
    if not option.exact:
        problems.append(f"{option.written!r} is an abbreviation of {spec.option!r}; write the flag in full")
    if not spec.takes_value:
        if option.values:
            problems.append(f"{spec.option} takes no value, got {list(option.values)}")
        return problems
    if spec.nargs in (None, 1) and len(option.values) != 1:
        problems.append(f"{spec.option} expects one value")
    if spec.nargs == "+" and not option.values:
        problems.append(f"{spec.option} expects at least one value")
    for value in option.values:
        if spec.choices is not None and value not in spec.choices:
            shown = ", ".join(spec.choices[:12]) + (", ..." if len(spec.choices) > 12 else "")
            problems.append(f"{spec.option}: invalid choice {value!r} (choose from {shown})")
        elif not _coerce_ok(spec, value):
            problems.append(f"{spec.option}: invalid {spec.type} value {value!r}")
    return problems
