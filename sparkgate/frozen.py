"""Base class for every validated input: unknown keys are errors, values never change after load, and no
string anywhere carries a control or invisible formatting character."""

from __future__ import annotations

import unicodedata
from typing import Any

from pydantic import BaseModel, ConfigDict, field_validator

# Cc: C0/C1 controls (newline, tab, NUL, ESC...); Cf: invisible formatting (bidi overrides, zero-width);
# Zl/Zp: U+2028/U+2029, which YAML and some terminals treat as line breaks. None belongs in a profile, and
# each can smuggle a second line into an env file, a log or a terminal, or make displayed text lie.
# Cs/Co/Cn: surrogates, private-use and unassigned code points (incl. U+FFFE/U+FFFF), which YAML refuses raw.
_FORBIDDEN_CATEGORIES = {"Cc", "Cf", "Zl", "Zp", "Cs", "Co", "Cn"}


def control_characters(text: str) -> list[str]:
    """The offending characters of `text`, spelled U+XXXX, in order of appearance (empty when clean)."""
    return [f"U+{ord(c):04X}" for c in text if unicodedata.category(c) in _FORBIDDEN_CATEGORIES]


class ControlCharacters(ValueError):
    """`where` is the dotted suffix inside the field (`.NAME` of a mapping, `[3]` of a list), so a refusal can
    name e.g. `env.SGLANG_X` or `sglang.extra_args[3]` rather than the whole field."""

    def __init__(self, where: str, found: list[str]):
        self.where = where
        super().__init__(
            f"contains control or invisible formatting characters ({', '.join(dict.fromkeys(found))}); "
            "write plain single-line text"
        )


def _member(where: str, key: object) -> str:
    return f"{where}.{key}" if isinstance(key, str) and key.isidentifier() and key.isascii() else f"{where}[{key!r}]"


def _strings(value: Any, where: str = "") -> list[tuple[str, str]]:
    """(where, text) for every string in a field value; `where` names the entry inside a list or mapping."""
    if isinstance(value, str):
        return [(where, value)]
    if isinstance(value, dict):
        return [s for key, item in value.items()
                for s in (*_strings(key, _member(where, key)), *_strings(item, _member(where, key)))]
    if isinstance(value, (list, tuple, set, frozenset)):
        return [s for index, item in enumerate(value) for s in _strings(item, f"{where}[{index}]")]
    return []


class Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    @field_validator("*", mode="after")
    @classmethod
    def _no_control_characters(cls, value: Any) -> Any:
        for where, text in _strings(value):
            found = control_characters(text)
            if found:
                raise ControlCharacters(where, found)
        return value
