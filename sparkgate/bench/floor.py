"""The recorded baseline speed of this host: the gate's floor for stacked profiles.

`invoke bench --profile baseline --record-floor` stores the measured baseline decode speed in
build/bench/floor.json (per checkout, so per host; `SPARKGATE_BENCH_FLOOR_FILE` points elsewhere, and an
empty value turns the recorded floor off). Expectations read it through `recorded_baseline_tok_s(target)`:
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

from sparkgate.bench.runs import bench_root, write_json_atomic

FLOOR_ENV = "SPARKGATE_BENCH_FLOOR_FILE"
FLOOR_VERSION = 1
MIN_REQUESTS = 8


class FloorError(ValueError):
    pass


def floor_path() -> Path | None:
    override = os.environ.get(FLOOR_ENV)
    if override is not None:
        return Path(override).expanduser() if override.strip() else None
    return bench_root() / "floor.json"


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


def record(summary: dict, run_dir: Path, margin: float = 0.0) -> tuple[Path, dict]:
    """Store a baseline run's decode speed as the floor of its target. Refuses what would be a bad floor."""
    if not 0.0 <= margin < 0.5:
        raise FloorError(f"floor margin {margin} must be in [0, 0.5)")
    requested = summary.get("requested_optimizations")
    if requested:
        raise FloorError(f"--record-floor needs the baseline profile (no optimizations); {summary.get('profile')} "
                         f"requests {', '.join(requested)}")
    numbers = summary.get("results") or {}
    if not summary.get("complete"):
        raise FloorError("the run did not complete; a floor comes only from a complete run")
    if numbers.get("errors"):
        raise FloorError(f"the run had {numbers['errors']} failed request(s); a floor comes only from a clean run")
    if (numbers.get("completed") or 0) < MIN_REQUESTS:
        raise FloorError(f"only {numbers.get('completed')} requests: record a floor from at least {MIN_REQUESTS}")
    speed = numbers.get("decode_tok_s")
    if not speed:
        raise FloorError("the run measured no decode speed")
    target = summary.get("environment", {}).get("target") or "spark"
    path = floor_path()
    if path is None:
        raise FloorError(f"{FLOOR_ENV} is empty: recorded floors are turned off")
    data = _read(path) if path.is_file() else {"floor_version": FLOOR_VERSION, "targets": {}}
    entry = {
        "floor_tok_s": round(speed * (1.0 - margin), 3),
        "measured_decode_tok_s": round(speed, 3),
        "margin": margin,
        "profile": summary.get("profile"),
        "run": str(run_dir),
        "workload": (summary.get("workload") or {}).get("name"),
        "requests": numbers.get("completed"),
        "images": summary.get("environment", {}).get("images"),
        "engine": summary.get("environment", {}).get("engine"),
        "host": (summary.get("environment", {}).get("host") or {}).get("hostname"),
        "recorded_at": summary.get("finished_at"),
    }
    data["targets"][target] = entry
    write_json_atomic(path, data)
    return path, entry
