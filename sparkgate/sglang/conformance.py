"""SGLang 0.5.23's own strings (log lines, metric names, endpoint fields, class names, hook targets), read
from one package-data fixture that tests/unit/test_sglang_conformance.py checks against SGLang's source.

Both the gate and the simulator take SGLang's strings from here, never from each other: their agreement
then means agreement with SGLang, not with a shared typo. Imports nothing else from sparkgate, so the
simulator can use it without touching the checker.
"""

from __future__ import annotations

import json
import re
import string
from functools import lru_cache
from importlib import resources

SGLANG_VERSION = "0.5.23"
FIXTURE = f"sglang-conformance-{SGLANG_VERSION}.json"
SECTIONS = (
    "log_formats", "strings", "server_args", "metrics", "classes", "dtypes", "env", "attributes", "hook_targets",
    "fork_only",
)


@lru_cache(maxsize=1)
def fixture() -> dict:
    text = resources.files("sparkgate.sglang.data").joinpath(FIXTURE).read_text(encoding="utf-8")
    return json.loads(text)


def entry(section: str, key: str) -> dict:
    try:
        return fixture()[section][key]
    except KeyError:
        raise KeyError(f"{FIXTURE} has no {section}.{key}") from None


def text(section: str, key: str) -> str:
    return entry(section, key)["text"]


def log_format(key: str) -> str:
    """SGLang's log format, with str.format holes where SGLang substitutes values."""
    return text("log_formats", key)


def log_line(key: str, **values: object) -> str:
    """A log line as SGLang renders it (the simulator writes these)."""
    return log_format(key).format(**values)


def log_pattern(key: str, **pinned: str) -> re.Pattern[str]:
    """A regex matching every rendering of a log format; holes named in `pinned` must hold that value,
    the others match anything on the line."""
    # Literal runs (pinned holes join them) with a free hole between each two. A free hole matches up to the next
    # literal's first occurrence and never gives it back (a possessive tempered token): matching stays linear in the
    # line's length. A lazy `.*?` per hole backtracks polynomially on a hostile line (an engine log, or a capture
    # file's log), and for these patterns - anchored at the start, free holes, no end anchor - the first occurrence
    # of each literal matches whenever any occurrence does.
    runs: list[str] = [""]
    for literal, field, _spec, _conversion in string.Formatter().parse(log_format(key)):
        runs[-1] += literal
        if field is None:
            continue
        if field in pinned:
            runs[-1] += pinned[field]
        elif runs[-1] or len(runs) == 1:
            runs.append("")  # a free hole (two in a row are one)
    parts = [re.escape(runs[0])]
    for run in runs[1:]:
        parts.append(f"(?:(?!{re.escape(run)}).)*+{re.escape(run)}" if run else ".*?")
    return re.compile("".join(parts))


def log_fields(key: str) -> re.Pattern[str]:
    """A regex reading a log format's values: each named hole is a group (its first occurrence), matched up to the
    next literal run and never given back, as in log_pattern (linear in the line's length)."""
    parts: list[str] = []
    named: set[str] = set()
    pending: str | None = None  # a hole waiting for the literal run that ends it
    for literal, field, _spec, _conversion in string.Formatter().parse(log_format(key)):
        if pending is not None and literal:
            parts.append(f"(?P<{pending}>(?:(?!{re.escape(literal)}).)*+)" if pending else f"(?:(?!{re.escape(literal)}).)*+")
            pending = None
        parts.append(re.escape(literal))
        if field is not None:
            if pending is not None:  # two holes in a row: the first takes nothing it can be sure of
                parts.append(".*?")
            pending = field if field and field.isidentifier() and field not in named else ""
            named.add(field)
    if pending is not None:
        parts.append(f"(?P<{pending}>.*)" if pending else ".*")
    return re.compile("".join(parts))


def string_(key: str) -> str:
    return text("strings", key)


def metric(key: str) -> str:
    return text("metrics", key)


def class_name(key: str) -> str:
    return text("classes", key)


def dtype(key: str) -> str:
    return text("dtypes", key)


def env(key: str) -> str:
    return text("env", key)


def server_arg(key: str) -> str:
    return text("server_args", key)


def hook_target(key: str) -> str:
    return text("hook_targets", key)


def fork_only(key: str) -> str:
    return text("fork_only", key)


def fork_only_of_kind(kind: str) -> tuple[str, ...]:
    return tuple(e["text"] for e in fixture()["fork_only"].values() if e["kind"] == kind)
