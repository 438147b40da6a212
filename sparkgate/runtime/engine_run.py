"""Which engine start this is, and how it ended: the records the engine entrypoint leaves on the shared log volume.

    engine-start.json  written when the entrypoint starts the engine (a stale engine-exit.json is removed first)
    engine-exit.json   written when the engine process exits: its code (or signal) and the startup phases it reached

Both atomically (temp file, then rename). They tie a capture to one deploy: the bundle (argv, engine env and
expectations, hashed) and the engine container's start (its id, which Docker also gives its hostname, and time).
A record is taken for a bundle's engine only when its argv_sha256 is the hash of that bundle's argv.json
(bundle_argv_sha256): an engine started by hand with another argv, or by another bundle on the same volume, is not.
A container killed from outside (`docker kill`, the kernel's OOM killer on the whole container) writes no exit
record: the deploy then reads the container's exit code instead. The volume is written by the engine container,
so reading is a trust boundary: bounded, validated, and anything else is read as no record.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import socket
from collections.abc import Iterable, Mapping
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from sparkgate.atomic import write_text_atomically

START_FILE = "engine-start.json"
EXIT_FILE = "engine-exit.json"
MAX_RECORD_BYTES = 16 * 1024
# The bundle files whose text names a deploy (what the sentinel reads; render.SENTINEL_BUNDLE_FILES).
BUNDLE_FILES = ("argv.json", "engine-env.json", "expectations.json")

# The line the engine's own host preflight leaves in the log when it refuses a start (deploy/engine_preflight.py).
PREFLIGHT_REFUSED = "sparkgate engine preflight failed"
# The entrypoint's exit code for every start it refused before SGLang ran (EX_CONFIG): the guard, the preflight, the
# admin key (runtime/engine_entrypoint.py); its one line is then the whole log.
EXIT_REFUSED = 78


class EngineRun(BaseModel):
    """One engine start; `exit_code` and the rest are set once it has exited."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    container: str = Field(max_length=64, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    started: str = Field(max_length=40)
    argv_sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    exit_code: int | None = Field(None, ge=-255, le=512)
    signal: str | None = Field(None, max_length=16)
    exited: str | None = Field(None, max_length=40)
    phases: list[str] = Field(default_factory=list, max_length=16)

    def started_at(self) -> float | None:
        return epoch(self.started)


def now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds")


def epoch(text: str | None) -> float | None:
    try:
        return dt.datetime.fromisoformat(str(text)).timestamp()
    except (TypeError, ValueError):
        return None


def argv_sha256(argv: Iterable[str]) -> str:
    """The hash a record carries of the engine's argv (the entrypoint's, after `--`: the bundle's argv.json)."""
    return hashlib.sha256(json.dumps(list(argv)).encode("utf-8")).hexdigest()


def bundle_argv_sha256(directory: Path) -> str | None:
    """argv_sha256 of a rendered bundle's argv.json: what a record of this bundle's engine carries. None when the
    file cannot be read as a list of strings (then no record is taken for this bundle's)."""
    try:
        argv = json.loads((Path(directory) / "argv.json").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    if not isinstance(argv, list) or not all(isinstance(token, str) for token in argv):
        return None
    return argv_sha256(argv)


def this_container() -> str:
    """The container's id as Docker sets its hostname (the first 12 hex digits of the id)."""
    return socket.gethostname()[:64]


def bundle_id(files: Mapping[str, str]) -> str:
    """A short hash naming a rendered bundle: the same text of BUNDLE_FILES, the same id, on the host and inside."""
    digest = hashlib.sha256()
    for name in BUNDLE_FILES:
        digest.update(f"{name}\0{hashlib.sha256(files.get(name, '').encode('utf-8')).hexdigest()}\n".encode())
    return digest.hexdigest()[:16]


def bundle_id_of(directory: Path) -> str | None:
    """The bundle id of a directory holding the rendered files; None when one cannot be read."""
    try:
        return bundle_id({name: (Path(directory) / name).read_text(encoding="utf-8") for name in BUNDLE_FILES})
    except (OSError, UnicodeDecodeError):
        return None


def write(path: Path, record: EngineRun) -> None:
    write_text_atomically(path, record.model_dump_json(indent=1) + "\n")


def read(path: Path) -> EngineRun | None:
    """The record in `path`; None when there is none or it is not one (bounded, validated)."""
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_RECORD_BYTES + 1)
    except OSError:
        return None
    if len(data) > MAX_RECORD_BYTES:
        return None
    try:
        return EngineRun.model_validate_json(data)
    except ValueError:  # pydantic's ValidationError is a ValueError
        return None
