"""How SGLang 0.5.23 reads its environment, written here for the simulator from SGLang's own rules and
deliberately not shared with the checker (a mistake on one side then shows up as disagreement):

- `EnvBool.parse` (sglang/srt/environ.py, class EnvBool) lower-cases the value and accepts only
  true/1/yes/y and false/0/no/n; anything else ("on", "enabled", "") raises ValueError, which
  `EnvField.get` catches: it warns `Invalid value for NAME: "<v>" is not a valid boolean value, using
  default "<d>"` and returns the default.
- `_handle_deprecated_envs` (environ.py) copies every `SGL_*` variable to `SGLANG_*` at import
  (`key.replace("SGL_", "SGLANG_", 1)`), overwriting a value already set under the new name.
"""

from __future__ import annotations

from collections.abc import Mapping

TRUE_VALUES = ("true", "1", "yes", "y")
FALSE_VALUES = ("false", "0", "no", "n")
LEGACY_PREFIX, PREFIX = "SGL_", "SGLANG_"


class InvalidBool(ValueError):
    pass


def parse_bool(value: str) -> bool:
    """EnvBool.parse: True/False, or InvalidBool for anything SGLang refuses."""
    lowered = value.lower()
    if lowered in TRUE_VALUES:
        return True
    if lowered in FALSE_VALUES:
        return False
    raise InvalidBool(f'"{lowered}" is not a valid boolean value')


def read_bool(env: Mapping[str, str], name: str, default: bool = False) -> tuple[bool, str | None]:
    """EnvField.get for an EnvBool: (value, the warning SGLang prints or None). Unset -> the default."""
    raw = env.get(name)
    if raw is None:
        return default, None
    try:
        return parse_bool(raw), None
    except InvalidBool as exc:
        return default, f'Invalid value for {name}: {exc}, using default "{default}"'


def is_true(env: Mapping[str, str], name: str, default: bool = False) -> bool:
    return read_bool(env, name, default)[0]


def with_legacy_names_rewritten(environ: Mapping[str, str]) -> dict[str, str]:
    """The environment after SGLang's import-time SGL_ -> SGLANG_ rewrite (the legacy value wins)."""
    env = dict(environ)
    for key, value in environ.items():
        if key.startswith(LEGACY_PREFIX):
            env[key.replace(LEGACY_PREFIX, PREFIX, 1)] = value
    return env
