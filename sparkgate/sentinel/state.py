"""The gate's state, shared between the checking loop and the HTTP server."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

WAITING = "waiting"  # engine not healthy yet
VERIFYING = "verifying"  # full verification in progress, nothing refused yet; gate closed
OPEN = "open"  # latest verdict passed
CLOSED = "closed"  # latest verdict failed (also while a retry of it runs)


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

    @property
    def ready(self) -> bool:
        return self.state == OPEN

    def snapshot(self) -> dict:
        with self.lock:
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
            }
