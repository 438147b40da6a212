"""Run directories: build/bench/<run-id>/ with

  requests.jsonl   one line per request, appended and flushed as the run goes (an interrupted run keeps
                   what it measured); renamed from requests.jsonl.partial when the run ends
  summary.json     the numbers, the protocol and the environment facts; written last, atomically. A run
                   directory without it is incomplete and `compare` refuses it.
"""

from __future__ import annotations

import json
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path

from sparkgate import atomic
from sparkgate.errors import Refusal
from sparkgate.paths import build_dir

SUMMARY = "summary.json"
REQUESTS = "requests.jsonl"
SUMMARY_VERSION = 1


class RunError(Refusal, ValueError):
    pass


def bench_root() -> Path:
    return build_dir() / "bench"


def write_json_atomic(path: Path, value) -> None:
    atomic.write_text_atomically(path, json.dumps(value, indent=1, sort_keys=False, default=str) + "\n")


def compare_dir(root: Path | None = None) -> Path:
    """A new compare-<UTC time> directory name under root (default build/bench)."""
    return (root or bench_root()) / f"compare-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}"


def write_compare(out_dir: Path, result: dict, text: str) -> None:
    """A comparison's compare.json and compare.txt, each written atomically."""
    out_dir.mkdir(parents=True, exist_ok=True)
    write_json_atomic(out_dir / "compare.json", result)
    atomic.write_text_atomically(out_dir / "compare.txt", text)


def new_run_id(profile: str, workload: str, root: Path) -> str:
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    safe = re.sub(r"[^a-z0-9-]+", "-", profile.lower()).strip("-") or "run"
    base = f"{stamp}-{safe}-{workload}"
    candidate, n = base, 1
    while (root / candidate).exists():
        n += 1
        candidate = f"{base}-{n}"
    return candidate


class RequestLog:
    """Appends records to requests.jsonl.partial, flushing each line; `close()` publishes requests.jsonl."""

    def __init__(self, run_dir: Path):
        run_dir.mkdir(parents=True, exist_ok=True)
        self.final = run_dir / REQUESTS
        self.partial = run_dir / (REQUESTS + ".partial")
        self._handle = open(self.partial, "w", encoding="utf-8")  # noqa: SIM115 - closed in close()

    def write(self, record: dict) -> None:
        self._handle.write(json.dumps(record, default=str) + "\n")
        self._handle.flush()

    def close(self) -> None:
        self._handle.flush()
        os.fsync(self._handle.fileno())
        self._handle.close()
        os.replace(self.partial, self.final)


@dataclass
class Run:
    path: Path
    summary: dict
    records: list[dict]

    @property
    def id(self) -> str:
        return self.path.name

    @property
    def profile(self) -> str:
        return self.summary.get("profile") or "?"

    @property
    def label(self) -> str:
        if self.summary.get("label"):
            return str(self.summary["label"])
        fault = self.summary.get("environment", {}).get("sim_faults")
        return f"{self.profile} [{','.join(fault)}]" if fault else self.profile

    def correctness(self) -> dict[str, bool]:
        return {r["item_id"]: bool(r.get("correct")) for r in self.records if r.get("expected") is not None}


def resolve(ref: str, root: Path | None = None) -> Path:
    root = root or bench_root()
    for candidate in (Path(ref), root / ref):
        if candidate.is_dir():
            return candidate
    matches = sorted(p for p in root.glob(f"*{ref}*") if p.is_dir()) if root.is_dir() else []
    if len(matches) == 1:
        return matches[0]
    if matches:
        raise RunError(f"{ref!r} matches {len(matches)} runs under {root}: " + ", ".join(p.name for p in matches[:6]))
    raise RunError(f"no run {ref!r} (a run id under {root}, or a run directory)")


def load(ref: str | Path, root: Path | None = None) -> Run:
    path = resolve(str(ref), root)
    summary_path = path / SUMMARY
    if not summary_path.is_file():
        raise RunError(f"{path}: no {SUMMARY}: the run did not finish (requests so far: {REQUESTS}.partial)")
    summary = json.loads(summary_path.read_text())
    records_path = path / REQUESTS
    records = [json.loads(line) for line in records_path.read_text().splitlines() if line.strip()] \
        if records_path.is_file() else []
    return Run(path, summary, records)


def latest_per_profile(root: Path | None = None) -> list[Path]:
    """The newest finished run of each profile (or label) on the newest run's prompt set (same fingerprint)."""
    root = root or bench_root()
    finished = sorted(root.glob("*/" + SUMMARY), key=lambda p: p.stat().st_mtime) if root.is_dir() else []
    if not finished:
        return []
    newest = json.loads(finished[-1].read_text())
    fingerprint = newest.get("workload", {}).get("fingerprint")
    chosen: dict[str, Path] = {}
    for path in finished:
        summary = json.loads(path.read_text())
        if summary.get("workload", {}).get("fingerprint") == fingerprint:
            chosen[Run(path.parent, summary, []).label] = path.parent
    return list(chosen.values())
