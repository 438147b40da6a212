"""The fleet report: one row per host of the inventory, built from what the play recorded on the
controller (outcomes/<host>.json, written by the sparkgate_stack role) and what each host serves now
(status/<host>.json, written by playbooks/status.yml). A host with no outcome was not reached."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from rich.table import Table

from sparkgate import atomic

OUTCOMES = ("admitted", "refused", "rolled_back", "not_reached")


def _read(path: Path) -> dict:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return {}


def _find(value, key: str):
    """The first `key` anywhere in a verdict (calibration numbers sit a few levels down)."""
    if isinstance(value, dict) and value.get(key) is not None:
        return value[key]
    children = value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
    return next((found for child in children if (found := _find(child, key)) is not None), None)


def failing_checks(verdict: dict | None) -> list[str]:
    """Names of the verdict's failed checks and suites, e.g. ["mtp.accept_length", "suite.smoke"]."""
    full = (verdict or {}).get("full") or {}
    names = [c["name"] for c in (full.get("verification") or {}).get("checks", []) if not c.get("passed")]
    names += [f"suite.{suite}" for suite in ("infra", "smoke") if (full.get(suite) or {}).get("passed") is False]
    return names


def _round(value, digits: int):
    return round(value, digits) if isinstance(value, (int, float)) else None


def host_row(host: str, outcome: dict, status: dict) -> dict:
    current = status.get("current") or {}
    serving_verdict = status.get("verdict") or {}
    deciding = outcome.get("verdict") or {}
    # The numbers of the release that serves now: the admitting verdict, else the live one.
    if outcome.get("outcome") in ("admitted", "rolled_back"):
        measured = outcome.get("rollback_verdict") or deciding
    else:
        measured = serving_verdict
    return {
        "host": host,
        "outcome": outcome.get("outcome", "not_reached"),
        "profile": current.get("profile") if status else outcome.get("profile"),
        "release": current.get("release") if status else outcome.get("release"),
        "requested_profile": outcome.get("requested_profile"),
        "requested_release": outcome.get("requested_release"),
        "image": ", ".join(sorted((current.get("image_ids") or {}).values()))[:80] or None,
        "image_ids": current.get("image_ids") or {},
        "gate": serving_verdict.get("state") if status else None,
        "accept_length": _round(_find(measured, "accept_length"), 2),
        "decode_tok_s": _round(_find(measured, "decode_tok_s"), 1),
        "time_to_admit_s": outcome.get("time_to_admit_s"),
        "failing_checks": sorted(set(outcome.get("failing_checks") or []) | set(failing_checks(deciding)))
        if outcome.get("outcome") in ("refused", "rolled_back") else [],
        "refusal": outcome.get("refusal"),
        "project": status.get("project") or outcome.get("project"),
        "gateway": status.get("gateway") or outcome.get("gateway"),
    }


def build(hosts: Iterable[str], run_dir: Path, profile: str | None = None, host_outcomes: bool = False) -> dict:
    """With `host_outcomes` (fleet.status), a host's outcome is the last one it recorded itself."""
    rows = []
    for host in hosts:
        status = _read(run_dir / "status" / f"{host}.json")
        outcome = (status.get("last_outcome") or {}) if host_outcomes else _read(run_dir / "outcomes" / f"{host}.json")
        rows.append(host_row(host, outcome, status))
    return {"profile": profile, "hosts": rows,
            "summary": {name: sum(r["outcome"] == name for r in rows) for name in OUTCOMES}}


def write(report: dict, path: Path) -> None:
    atomic.write_text_atomically(path, json.dumps(report, indent=1, sort_keys=False) + "\n")


def table(report: dict, title: str) -> Table:
    grid = Table(title=title)
    for column in ("host", "profile", "image", "gate", "accept", "decode tok/s", "to admit (s)", "outcome",
                   "failing checks"):
        grid.add_column(column)
    for row in report["hosts"]:
        # Short image IDs (12 hex, as `docker images` prints them) of every image the release runs.
        image = " ".join(sorted(i.split(":")[-1][:12] for i in row["image_ids"].values())) or "-"
        grid.add_row(row["host"], row["profile"] or "-", image,
                     row["gate"] or "-", _cell(row["accept_length"]), _cell(row["decode_tok_s"]),
                     _cell(row["time_to_admit_s"]), row["outcome"], ", ".join(row["failing_checks"]) or "-")
    return grid


def _cell(value) -> str:
    return "-" if value is None else str(value)
