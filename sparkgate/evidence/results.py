"""Check results and the verdict they add up to."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class CheckResult:
    name: str  # "<family>.<what>", e.g. "mtp.accept_length"
    passed: bool
    observed: Any
    expected: Any
    source: str  # where the evidence came from: "/server_info", "engine log", "calibration", ...
    hint: str  # likely cause + what to do (shown for failures)

    def as_dict(self) -> dict:
        return asdict(self)


def failed(name: str, observed: Any, expected: Any, source: str, hint: str) -> CheckResult:
    return CheckResult(name, False, observed, expected, source, hint)


def checked(name: str, ok: bool, observed: Any, expected: Any, source: str, hint: str) -> CheckResult:
    return CheckResult(name, bool(ok), observed, expected, source, hint)


@dataclass
class Verdict:
    profile: str
    engine_url: str
    time: str
    checks: list[CheckResult] = field(default_factory=list)
    engine: dict[str, Any] = field(default_factory=dict)
    calibration: dict[str, Any] = field(default_factory=dict)
    answers: dict[str, Any] = field(default_factory=dict)  # the answer set's version and every reply

    @property
    def passed(self) -> bool:
        # Fail closed: a verdict with no checks proves nothing.
        return bool(self.checks) and all(c.passed for c in self.checks)

    def failures(self) -> list[CheckResult]:
        return [c for c in self.checks if not c.passed]

    def as_dict(self) -> dict:
        return {
            "verdict_version": 1,
            "profile": self.profile,
            "engine_url": self.engine_url,
            "time": self.time,
            "passed": self.passed,
            "engine": self.engine,
            "calibration": self.calibration,
            "answers": self.answers,
            "checks": [c.as_dict() for c in self.checks],
        }
