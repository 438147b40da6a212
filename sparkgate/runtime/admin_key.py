"""The engine's admin key: a fresh secret per engine start that only the engine and the sentinel hold.

SGLang 0.5.23 locks its ADMIN_OPTIONAL routes (weight updates, cache flushes, profiling, pause/continue,
...) behind `--admin-api-key` (sglang/srt/utils/auth.py `decide_request_auth`); normal routes stay open,
so the sentinel and the gateway need no key for them. The key must never be on a command line, so the
engine container writes it into an SGLang `--config` YAML (merged into the args by
sglang/srt/utils/server_args_config_parser.py `ConfigArgumentMerger`) and passes only that file's path.

Both files live on a tmpfs volume that only the engine (read-write) and the sentinel (read-only) mount,
created 0600 (sparkgate.runtime.secret_files). SGLang itself still echoes the key: `/server_info` reports
`admin_api_key` and a `launch_command` built after the config merge, and the startup log line
`server_args=...` prints it. So the engine entrypoint redacts it from every log line it forwards and the
sentinel from everything it keeps (`redact` below).
"""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from sparkgate.runtime.secret_files import require_tmpfs, write_secret
from sparkgate.sglang import flags

# The tmpfs volume shared by engine (rw) and sentinel (ro); the compose templates mount it here.
ADMIN_DIR = Path("/run/sparkgate-admin")
KEY_FILE_NAME = "admin-key"
# SGLang refuses a --config file whose suffix is not .yaml/.yml.
CONFIG_FILE_NAME = "engine-admin.yaml"
CONFIG_KEY = flags.ADMIN_API_KEY.removeprefix("--")  # the YAML key becomes the flag verbatim in the merged argv
REDACTED = "<redacted>"

# Server-arg fields that hold secrets: the secret flags' argparse dests (sglang/srt/server_args.py).
SECRET_FIELDS = tuple(flag.removeprefix("--").replace("-", "_") for flag in flags.SECRET_FLAGS)
# The same secrets as flags inside a string (launch_command, a log line): `--api-key KEY`, `--api-key=KEY`.
_SECRET_FLAG_VALUE = re.compile(
    r"((?:{})(?:=|\s+))(?!{}(?!\S))(\S+)".format("|".join(map(re.escape, flags.SECRET_FLAGS)), re.escape(REDACTED)))


class AdminKeyError(Exception):
    """The admin key file is missing or unreadable (one line: path, cause, fix)."""


def install(directory: Path = ADMIN_DIR, mountinfo: str | None = None) -> tuple[str, Path]:
    """Make a fresh key and write it twice under `directory` (tmpfs only, 0600 from creation): the key
    file the sentinel reads, and the SGLang config the engine is launched with. (key, config path)."""
    require_tmpfs(directory, mountinfo)
    key = secrets.token_urlsafe(32)
    write_secret(directory / KEY_FILE_NAME, key + "\n")
    config = directory / CONFIG_FILE_NAME
    # A JSON string is a YAML string: quoted, so no key spelling can turn into another YAML type.
    write_secret(config, f"{CONFIG_KEY}: {json.dumps(key)}\n")
    return key, config


def read_key(path: Path) -> str:
    try:
        key = path.read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise AdminKeyError(
            f"{path}: {exc.strerror or exc}. Likely cause: the engine has not started yet, or the compose file "
            f"lost the admin-key volume. Fix: re-render the bundle (`invoke render --profile <name>`) and redeploy"
        ) from None
    if not key:
        raise AdminKeyError(f"{path} is empty. Fix: restart the engine container, which writes a fresh key")
    return key


def redact_text(text: str, keys: Iterable[str]) -> str:
    for key in keys:
        if key:
            text = text.replace(key, REDACTED)
    return _SECRET_FLAG_VALUE.sub(lambda m: m.group(1) + REDACTED, text)


def redact(value: Any, keys: Iterable[str] = ()) -> Any:
    """A copy of JSON-like `value` with secret fields, secret flag values and every occurrence of a known
    key replaced by REDACTED."""
    keys = tuple(k for k in keys if k)
    if isinstance(value, dict):
        return {
            name: REDACTED if name in SECRET_FIELDS and item not in (None, "") else redact(item, keys)
            for name, item in value.items()
        }
    if isinstance(value, (list, tuple)):
        return [redact(item, keys) for item in value]
    if isinstance(value, str):
        return redact_text(value, keys)
    return value
