"""The in-process engagement report and its log lines.

One report per process (the scheduler process owns the model runners).
Hooks write into it; the get_internal_state hook publishes a copy. The copy is
built from plain builtins only, because SGLang ships internal_state through
msgpack to the HTTP server.
"""

from __future__ import annotations

import copy
import json
import logging
import threading
from typing import Any

# Version of the report *format*; bump when a key changes meaning.
PROBE_VERSION = 1

# Errors are kept for diagnosis, but a hook that fails on every
# /server_info poll must not grow the report without bound.
MAX_ERRORS = 50

ROLES = ("target", "draft")

LOG_PREFIX = "ENGAGEMENT"
logger = logging.getLogger("sparkgate_probe")


def log_fact(event: str, **fields: Any) -> None:
    """One machine-readable line: ``ENGAGEMENT {"event": ..., ...}``."""
    logger.info("%s %s", LOG_PREFIX, json.dumps({"event": event, **fields}, sort_keys=True))


def log_error(event: str, exc: BaseException) -> None:
    logger.error("%s hook %s failed: %s", LOG_PREFIX, event, describe_error(exc), exc_info=exc)


def describe_error(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


class EngagementReport:
    """Thread-safe collector; ``snapshot()`` is the only way data leaves it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.clear()

    def clear(self) -> None:
        """Forget everything (a fresh process state; used by tests)."""
        with self._lock:
            self._roles: dict[str, dict[str, Any] | None] = {r: None for r in ROLES}
            self._sharing: dict[str, bool] | None = None
            self._registered: list[str] = []
            self._called: list[str] = []
            self._errors: list[str] = []
            self._errors_dropped = 0

    def note_registered(self, target: str) -> None:
        with self._lock:
            if target not in self._registered:
                self._registered.append(target)

    def note_called(self, event: str) -> None:
        """Remember that a hook ran (first-call order, no repeats)."""
        with self._lock:
            if event not in self._called:
                self._called.append(event)

    def record_role(self, role: str, record: dict[str, Any]) -> None:
        if role not in ROLES:
            raise ValueError(f"unknown role {role!r}")
        with self._lock:
            self._roles[role] = copy.deepcopy(record)

    def record_sharing(self, sharing: dict[str, bool]) -> None:
        with self._lock:
            self._sharing = dict(sharing)

    def record_error(self, event: str, exc: BaseException) -> None:
        with self._lock:
            if len(self._errors) < MAX_ERRORS:
                self._errors.append(f"{event}: {describe_error(exc)}")
            else:
                self._errors_dropped += 1

    def snapshot(self, hooks_attached: dict[str, bool] | None = None) -> dict[str, Any]:
        """A deep copy of the report in its published shape."""
        with self._lock:
            report: dict[str, Any] = {
                "probe_version": PROBE_VERSION,
                "target": self._roles["target"],
                "draft": self._roles["draft"],
                "lm_head_sharing": self._sharing,
                "hooks_registered": list(self._registered),
                "hooks_attached": hooks_attached,
                "hooks_called": list(self._called),
                "errors": list(self._errors),
            }
            if self._errors_dropped:
                report["errors_dropped"] = self._errors_dropped
            return copy.deepcopy(report)


REPORT = EngagementReport()
