"""The engine's command line, checked against the committed SGLang 0.5.23 manifest.

The simulator must refuse what `sglang serve` refuses, with the same exit code (2) and argparse's
message shape, and accept what it accepts (including the unique prefix abbreviations SGLang's parser
allows: refusing those is the renderer's job, not the engine's). `--config FILE` is merged first, as
sglang/srt/utils/server_args_config_parser.py `ConfigArgumentMerger` does it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from sparkgate.sglang.parser import (
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


def _candidates(written: str) -> list[str]:
    return sorted({spec.option for spelling, spec in option_table().items() if spelling.startswith(written)})


def _convert(spec: OptionSpec, value: str) -> Any:
    """argparse's type conversion, with its error text (Python 3.11 wording)."""
    if spec.choices is not None and value not in spec.choices:
        choices = ", ".join(map(repr, spec.choices))
        raise UsageError(f"argument {spec.option}: invalid choice: {value!r} (choose from {choices})")
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


class ConfigFileError(ValueError):
    """What ConfigArgumentMerger raises (SGLang then dies with a traceback, exit 1)."""


CONFIG_FLAG = "--config"
# ConfigArgumentMerger keeps a flag usable from a config file when its action is a plain store_true, a
# plain store, or takes exactly one value (nargs None); the CLI manifest records kinds, not classes, so
# the few SGLang actions that look plain there but are not are named here (tests/unit/sim/
# test_config_file.py holds this table against SGLang's own merger).
_NOT_PLAIN_ACTIONS = {
    "--disable-cuda-graph": "DeprecatedStoreTrueAction",
    "--enable-dp-attention": "DeprecatedStoreTrueAction",
    "--lora-paths": "LoRAPathAction",
}
_KIND_CLASSES = {"boolean_optional": "BooleanOptionalAction", "store_const": "DeprecatedStoreConstAction",
                 "store_false": "_StoreFalseAction", "count": "_CountAction"}


def config_key_table() -> tuple[set[str], dict[str, str]]:
    """(store_true keys, unsupported key -> action class) over every flag, where a flag's keys are its
    dest and each long spelling with `-` as `_` (YAML may use either)."""
    store_true: set[str] = set()
    supported: set[str] = set()
    unsupported: dict[str, str] = {}
    for spelling, spec in option_table().items():
        if spec.option == CONFIG_FLAG:
            continue
        keys = {spec.dest, spelling[2:].replace("-", "_")}
        action = _NOT_PLAIN_ACTIONS.get(spec.option)
        if action is None and spec.kind == "store_true":
            store_true |= keys
        if action is None and (spec.kind in ("store_true", "store") or spec.nargs is None):
            supported |= keys
        else:
            unsupported.update(dict.fromkeys(keys, action or _KIND_CLASSES.get(spec.kind, spec.kind)))
    # A key that a supported flag also reads (a shared dest) stays usable.
    return store_true, {k: v for k, v in unsupported.items() if k not in supported}


def _config_args(config: dict) -> list[str]:
    store_true, unsupported = config_key_table()
    args: list[str] = []
    for key, value in config.items():
        norm = str(key).replace("-", "_")
        if norm in unsupported:
            raise ConfigFileError(f"Unsupported config option '{norm}' with action '{unsupported[norm]}'")
        if isinstance(value, bool):
            # store_true flags appear only when true; other booleans are spelled out.
            if norm in store_true:
                args += [f"--{key}"] if value else []
            else:
                args += [f"--{key}", str(value).lower()]
        elif isinstance(value, list):
            args += [f"--{key}", *(str(item) for item in value)] if value else []
        elif isinstance(value, dict):
            args += [f"--{key}", json.dumps(value)]
        else:
            args += [f"--{key}", str(value)]
    return args


def merge_config(argv: list[str]) -> list[str]:
    """argv with `--config FILE` replaced by the file's options placed first (so the command line wins),
    exactly when the token `--config` is present; a `--config=FILE` spelling is parsed but not merged."""
    at = [i for i, token in enumerate(argv) if token == CONFIG_FLAG]
    if not at:
        return list(argv)
    if len(at) > 1:
        raise ConfigFileError("Multiple config files specified! Only one allowed.")
    if at[0] == len(argv) - 1:
        raise ConfigFileError("No config file specified after --config flag!")
    path = Path(argv[at[0] + 1])
    if path.suffix.lower() not in (".yaml", ".yml"):
        raise ConfigFileError(f"Config file must be YAML format, got: {path.suffix}")
    if not path.exists():
        raise ConfigFileError(f"Config file not found: {argv[at[0] + 1]}")
    with open(path) as handle:
        data = yaml.safe_load(handle)
    data = {} if data is None else data
    if not isinstance(data, dict):
        raise ConfigFileError("Config file must contain a dictionary at root level")
    return _config_args(data) + argv[: at[0]] + argv[at[0] + 2 :]


# What a bad --config raises before parsing (a traceback and exit 1 in SGLang, not argparse's exit 2).
CONFIG_ERRORS = (ConfigFileError, OSError, yaml.YAMLError)


def usage_error_text(error: UsageError) -> str:
    return f"{USAGE}\n{PROG}: error: {error}\n"
