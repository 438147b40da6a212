"""The recorded baseline speed of this host: the gate's floor for stacked profiles (product side).

`invoke bench --profile baseline --record-floor` (sparkgate.bench.record_floor) stores the measured baseline decode
speed in build/bench/floor.json (per checkout, so per host; `SPARKGATE_BENCH_FLOOR_FILE` points elsewhere,
and an empty value turns the recorded floor off). Expectations read it through `recorded_baseline_tok_s`:
a stacked profile whose calibration decodes slower than this is refused at deploy time, which is the trap
the published write-up warns about (all three with a broken draft: 24.0 tok/s against a 37.8 baseline).

Floors are kept per target: a simulator measurement is never the floor of a Spark and vice versa. A floor
file that cannot be read is an error, not a missing floor: a regression guard that silently disappears is
worse than a deploy that stops and says why.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from sparkgate import atomic
from sparkgate.errors import Refusal
from sparkgate.paths import build_dir

FLOOR_ENV = "SPARKGATE_BENCH_FLOOR_FILE"
FLOOR_VERSION = 1


class FloorError(Refusal, ValueError):
    pass


def floor_path() -> Path | None:
    override = os.environ.get(FLOOR_ENV)
    if override is not None:
        return Path(override).expanduser() if override.strip() else None
    return build_dir() / "bench" / "floor.json"


def _read(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise FloorError(f"{path}: unreadable recorded baseline floor ({exc}); re-record it with "
                         "`invoke bench --profile baseline --record-floor` or remove the file") from None
    if not isinstance(data, dict) or data.get("floor_version") != FLOOR_VERSION or not isinstance(data.get("targets"), dict):
        raise FloorError(f"{path}: not a sparkgate floor file (floor_version {FLOOR_VERSION}); re-record or remove it")
    return data


def recorded_floor(target: str) -> dict | None:
    """The whole record for a target (value, provenance), or None when none was recorded."""
    path = floor_path()
    if path is None or not path.is_file():
        return None
    entry = _read(path)["targets"].get(target)
    if entry is None:
        return None
    value = entry.get("floor_tok_s")
    if not isinstance(value, (int, float)) or value <= 0:
        raise FloorError(f"{path}: target {target!r} has no positive floor_tok_s; re-record or remove it")
    return entry


def recorded_baseline_tok_s(target: str) -> float | None:
    """The decode-speed floor recorded on this host for `target` ("spark" or "sim"), or None."""
    entry = recorded_floor(target)
    return float(entry["floor_tok_s"]) if entry else None


def recorded_baseline_answers(target: str) -> dict | None:
    """The baseline engine's answers recorded with the floor of `target`: answer set version, its exact replies
    to the questions it answered right (`texts`) with their per-token log-probabilities (`logprobs`), and how each
    reply was read (`read_as`)."""
    entry = recorded_floor(target)
    answers = entry.get("answers") if entry else None
    return answers if isinstance(answers, dict) and isinstance(answers.get("texts"), dict) else None


def store(target: str, entry: dict) -> Path:
    """Write `entry` as the floor of `target`, keeping the other targets' floors."""
    path = floor_path()
    if path is None:
        raise FloorError(f"{FLOOR_ENV} is empty: recorded floors are turned off")
    data = _read(path) if path.is_file() else {"floor_version": FLOOR_VERSION, "targets": {}}
    data["targets"][target] = entry
    atomic.write_text_atomically(path, json.dumps(data, indent=1, default=str) + "\n")
    return path
