"""The environment variables SGLang 0.5.23 declares (`class Envs` in sglang/srt/environ.py), committed as a
manifest so the profile boundary can refuse a name SGLang would never read.

SGLang reads a variable only through a declared `EnvField`; nothing scans `os.environ` for unknown
`SGLANG_*` names, so a typo (or a variable from another release) is ignored without a word. The manifest
records each declared name with its field type, so values can be judged the way SGLang parses them
(`EnvBool` accepts only true/1/yes/y and false/0/no/n; anything else makes SGLang warn and use the default).

Regenerate with `invoke manifest` after changing the SGLang pin; a test compares it with the installed SGLang.
"""

from __future__ import annotations

import difflib
import json
from functools import lru_cache
from importlib import resources
from typing import Any

from sparkgate.sglang.flags import FALSE_STRINGS, TRUE_STRINGS, env_bool
from sparkgate.sglang.parser import SGLANG_VERSION

MANIFEST_RESOURCE = f"sglang-env-{SGLANG_VERSION}.json"
ENV_PREFIX = "SGLANG_"
LEGACY_ENV_PREFIX = "SGL_"



def generate_manifest() -> dict[str, Any]:
    """Read the installed SGLang's `Envs` (takes a few seconds: environ imports torch)."""
    from sglang.srt import environ

    declared = {}
    for name, field in sorted(vars(environ.Envs).items()):
        if isinstance(field, environ.EnvField):
            declared[name] = {"kind": type(field).__name__, "secret": bool(getattr(field, "secret", False))}
    deprecated = {name: getattr(entry, "note", None) or "" for name, entry in sorted(environ._DEPRECATED_ENVS.items())}
    return {
        "sglang_version": SGLANG_VERSION,
        "generated_by": "invoke manifest (sparkgate.sglang.env.generate_manifest)",
        "declared": declared,
        "deprecated": deprecated,
    }


def manifest_text(manifest: dict[str, Any]) -> str:
    return json.dumps(manifest, indent=1, sort_keys=True) + "\n"


@lru_cache(maxsize=1)
def committed_manifest() -> dict[str, Any]:
    text = resources.files("sparkgate.sglang.data").joinpath(MANIFEST_RESOURCE).read_text(encoding="utf-8")
    return json.loads(text)


def declared(extra: tuple[str, ...] = ()) -> dict[str, str]:
    """name -> EnvField kind for stock SGLang plus `extra` (names an image's SGLang adds, e.g. the fork's)."""
    names = {name: entry["kind"] for name, entry in committed_manifest()["declared"].items()}
    names.update({name: "EnvBool" for name in extra if name not in names})
    return names


def is_secret(name: str) -> bool:
    entry = committed_manifest()["declared"].get(name)
    return bool(entry and entry["secret"])


def deprecation_note(name: str) -> str | None:
    return committed_manifest()["deprecated"].get(name)


def suggestions(name: str, known: dict[str, str] | list[str]) -> list[str]:
    return difflib.get_close_matches(name, list(known), n=3, cutoff=0.75)


def value_problem(kind: str, value: str) -> str | None:
    """Why SGLang could not parse `value` for a field of this kind (it would warn and use the default)."""
    if kind.startswith("EnvBool") and env_bool(value) is None:
        return (f"SGLang's EnvBool reads only {'/'.join(sorted(TRUE_STRINGS))} or {'/'.join(sorted(FALSE_STRINGS))}, "
                f"got {value!r}")
    if kind.startswith("EnvInt"):
        try:
            int(value)
        except ValueError:
            return f"SGLang's EnvInt needs an integer, got {value!r}"
    if kind.startswith("EnvFloat"):
        try:
            float(value)
        except ValueError:
            return f"SGLang's EnvFloat needs a number, got {value!r}"
    return None
