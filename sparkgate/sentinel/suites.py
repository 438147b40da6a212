"""Run the testinfra and smoke suites with pytest and read their results from JUnit XML (fail closed:
a skipped test, an error, or no test at all is a failure)."""

from __future__ import annotations

import subprocess
import tempfile
import time
import xml.etree.ElementTree as ET
from dataclasses import asdict, dataclass, field
from pathlib import Path

from sparkgate import suites as gate_suites


@dataclass
class TestOutcome:
    name: str
    outcome: str  # passed | failed | error | skipped
    message: str = ""


@dataclass
class SuiteResult:
    suite: str
    passed: bool
    exit_code: int
    duration_s: float
    tests: list[TestOutcome] = field(default_factory=list)
    output_tail: str = ""

    def as_dict(self) -> dict:
        return asdict(self)


def _outcomes(junit: Path) -> list[TestOutcome]:
    try:
        root = ET.parse(junit).getroot()
    except (OSError, ET.ParseError):
        return []
    outcomes = []
    for case in root.iter("testcase"):
        name = f"{case.get('classname', '')}::{case.get('name', '')}".strip(":")
        outcome, message = "passed", ""
        for kind in ("failure", "error", "skipped"):
            node = case.find(kind)
            if node is not None:
                outcome = {"failure": "failed"}.get(kind, kind)
                message = (node.get("message") or node.text or "")[:500]
                break
        outcomes.append(TestOutcome(name, outcome, message))
    return outcomes


def run_suite(suite: str, marker: str, env: dict[str, str], timeout_s: float) -> SuiteResult:
    """One of the package's suites (sparkgate.suites), selected by `marker`."""
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as scratch:
        junit = Path(scratch) / "junit.xml"
        try:
            completed = subprocess.run(
                gate_suites.argv(suite, marker, junit), capture_output=True, text=True, timeout=timeout_s,
                env=gate_suites.environment(env), cwd=gate_suites.SUITES,
            )
            code, output = completed.returncode, completed.stdout + completed.stderr
        except subprocess.TimeoutExpired as exc:
            code, output = -1, f"suite timed out after {timeout_s}s: {exc}"
        tests = _outcomes(junit)
    passed = code == 0 and bool(tests) and all(t.outcome == "passed" for t in tests)
    return SuiteResult(suite, passed, code, round(time.monotonic() - started, 2), tests, output[-2000:])
