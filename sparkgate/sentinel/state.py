"""The gate's state, shared between the checking loop and the HTTP server.

Besides the latest verdicts it keeps a bounded **history** since the last full verification (the status page's
plots, sentinel/page.py): one sample per re-check, and the full verdict's own as the first. A sample holds only
what the stored (already redacted) verdicts say, extracted defensively - every observed value is engine-sourced,
so anything that is not a finite number is a gap (None), never a zero:

    {"time": float, "kind": "admission" | "recheck", "passed": bool, "failing": [check names],
     "decode_tok_s": float | None, "accept_length": float | None, "mem_available_gib": float | None}
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sparkgate import optimizations
from sparkgate.evidence import context_bands
from sparkgate.evidence.stages import Stage

WAITING = "waiting"  # engine not healthy yet
VERIFYING = "verifying"  # full verification in progress, nothing refused yet; gate closed
OPEN = "open"  # latest verdict passed
CLOSED = "closed"  # latest verdict failed (also while a retry of it runs)

HISTORY_SAMPLES = 720  # an hour of re-checks at the default 5 s period
MAX_FAILING_NAMES = 20  # per sample: enough to name what failed, bounded whatever the engine sends
MAX_NAME_CHARS = 200
# Where the history's numbers live. Re-check: the host memory check (every period) and the speculative acceptance
# probes (when they ran; sentinel/service.py re-checks, optimizations/mtp_recheck.py). Full verdict: calibration.
MEMORY_CHECK = "host.memory_headroom"
PROBE_CHECKS = optimizations.figure_checks("accept_length", Stage.RECHECK_ONLY)
CALIBRATION_ACCEPT_CHECKS = optimizations.figure_checks("accept_length", Stage.CALIBRATION)
CALIBRATION_SPEED_CHECKS = ("engine.speed_floor", "engine.speed_vs_baseline")


def number(value: Any) -> float | None:
    """A finite real number, or None (bools, strings, NaN, infinities and oversized ints are not figures)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        figure = float(value)
    except (OverflowError, ValueError):
        return None
    return figure if math.isfinite(figure) else None


def checks_of(value: Any) -> list[dict]:
    """The dict entries of a stored verdict's `checks` list (none when it has no such list)."""
    checks = value.get("checks") if isinstance(value, dict) else None
    return [c for c in checks if isinstance(c, dict)] if isinstance(checks, list) else []


def _observed(checks: list[dict], name: str, key: str | None = None) -> float | None:
    """The number a named check observed (`observed[key]` when key is given), or None."""
    for check in checks:
        if check.get("name") == name:
            observed = check.get("observed")
            if key is not None:
                observed = observed.get(key) if isinstance(observed, dict) else None
            return number(observed)
    return None


def _first(*figures: float | None) -> float | None:
    return next((f for f in figures if f is not None), None)


def _failing(checks: list[dict]) -> list[str]:
    names = [str(c.get("name"))[:MAX_NAME_CHARS] for c in checks if c.get("passed") is not True]
    return names[:MAX_FAILING_NAMES]


def recheck_sample(recheck: Any, at: float | None = None) -> dict:
    """One history sample from a stored re-check ({"time", "passed", "checks": [...]})."""
    checks = checks_of(recheck)
    stamp = number(recheck.get("time")) if isinstance(recheck, dict) else None
    return {
        "time": stamp if stamp is not None else (at if at is not None else time.time()),
        "kind": "recheck",
        "passed": isinstance(recheck, dict) and recheck.get("passed") is True,
        "failing": _failing(checks),
        "decode_tok_s": _first(*(_observed(checks, name, "decode_tok_s") for name in PROBE_CHECKS)),
        "accept_length": _first(*(_observed(checks, name, "accept_length") for name in PROBE_CHECKS)),
        "mem_available_gib": _observed(checks, MEMORY_CHECK, "mem_available_gib"),
    }


def admission_sample(full: Any, at: float | None = None) -> dict:
    """The first sample of a history: the full verdict's calibration and host memory."""
    full = full if isinstance(full, dict) else {}
    verification = full.get("verification") if isinstance(full.get("verification"), dict) else {}
    calibration = verification.get("calibration") if isinstance(verification.get("calibration"), dict) else {}
    checks = checks_of(verification)
    failing = _failing(checks)
    for suite in ("infra", "smoke"):
        result = full.get(suite)
        if isinstance(result, dict) and result.get("passed") is not True:
            failing.append(f"suite.{suite}")
    return {
        "time": at if at is not None else time.time(),
        "kind": "admission",
        "passed": full.get("passed") is True,
        "failing": failing[:MAX_FAILING_NAMES],
        "decode_tok_s": _first(number(calibration.get("decode_tok_s")),
                               *(_observed(checks, name) for name in CALIBRATION_SPEED_CHECKS)),
        "accept_length": _first(number(calibration.get("accept_length")),
                                *(_observed(checks, name) for name in CALIBRATION_ACCEPT_CHECKS)),
        "mem_available_gib": _observed(checks, MEMORY_CHECK, "mem_available_gib"),
    }


def speculation_by_context(recheck: Any) -> dict | None:
    """What the latest re-check read of acceptance per context band (speculative profiles), or None."""
    return next((check["observed"] for check in checks_of(recheck)
                 if check.get("name") == context_bands.CHECK and isinstance(check.get("observed"), dict)), None)


@dataclass
class GateState:
    profile: str
    state: str = WAITING
    reason: str = "engine not verified yet"
    engine_phase: str = "unknown"
    engine_startup_time: Any = None
    full: dict | None = None  # last full verdict: verification + infra + smoke
    recheck: dict | None = None  # last cheap re-check
    opened_at: float | None = None
    changed_at: float = field(default_factory=time.time)
    last_verdict_at: float | None = None
    full_runs: int = 0
    rechecks: int = 0
    transitions: list[dict] = field(default_factory=list)
    captures: dict | None = None  # the capture files of full verifications (sentinel/captures.py)
    # A start that died before any verification: its checks (evidence/startup.judge_start) and when it started.
    refused_start: dict | None = None
    # When the engine last answered a question of the answer set right (the admitting verdict or an answer probe),
    # and whether a probe is overdue: how long the gate has gone without checking answers. {"at", "overdue"}
    answers_checked: dict | None = None
    # Re-check samples since the last full verification (module docstring), oldest first, bounded.
    history: deque = field(default_factory=lambda: deque(maxlen=HISTORY_SAMPLES))
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    # Applied to every reason kept (and by the sentinel to every verdict): removes the engine's secrets.
    redactor: Callable[[Any], Any] = field(default=lambda value: value, repr=False)

    def set(self, state: str, reason: str) -> None:
        reason = self.redactor(reason)
        with self.lock:
            if state != self.state:
                self.transitions.append({"at": time.time(), "from": self.state, "to": state, "reason": reason})
                self.transitions = self.transitions[-50:]
                self.changed_at = time.time()
                self.opened_at = time.time() if state == OPEN else None
            self.state, self.reason = state, reason

    def record_admission(self) -> None:
        """After a full verification is stored: the history starts afresh with its sample."""
        with self.lock:
            self.history.clear()
            self.history.append(admission_sample(self.full, at=self.last_verdict_at))

    def record_recheck(self) -> None:
        """After a re-check is stored: its sample joins the history (the oldest falls off past the bound)."""
        with self.lock:
            self.history.append(recheck_sample(self.recheck, at=self.last_verdict_at))

    @property
    def ready(self) -> bool:
        return self.state == OPEN

    def snapshot(self, history: bool = False) -> dict:
        """Everything /verdict shows; with `history`, also the re-check samples (the status page's plots)."""
        with self.lock:
            extra = {"history": [dict(sample) for sample in self.history]} if history else {}
            return {
                "profile": self.profile,
                "state": self.state,
                "ready": self.state == OPEN,
                "reason": self.reason,
                "engine_phase": self.engine_phase,
                "engine_startup_time": self.engine_startup_time,
                "opened_at": self.opened_at,
                "changed_at": self.changed_at,
                "last_verdict_at": self.last_verdict_at,
                "full_runs": self.full_runs,
                "rechecks": self.rechecks,
                "full": self.full,
                "recheck": self.recheck,
                "transitions": list(self.transitions),
                "captures": self.captures,
                "refused_start": self.refused_start,
                "answers_checked": self.answers_checked,
                "speculation_by_context": speculation_by_context(self.recheck),
                **extra,
            }
