"""An engine that exits before it is ready leaves only its log: judge what the log can prove.

Once the process has exited its log is final, so every engine-log check is definitive: a line that must
never appear has appeared (a drafter whose config could not be read, a degraded mode), or a line that must
appear never will. The deploy names these checks in its refusal instead of a bare exit code.
"""

from __future__ import annotations

from sparkgate.evidence import catalog
from sparkgate.evidence.gather import Evidence
from sparkgate.evidence.logs import EngineLog
from sparkgate.evidence.results import CheckResult
from sparkgate.evidence.stages import Stage
from sparkgate.evidence.verify import run_checks


def judge_exited_engine(expectations: dict, log: EngineLog) -> list[CheckResult]:
    """The failing engine-log checks of the profile's expectations, read from the exited engine's log."""
    evidence = Evidence(expectations=expectations, log=log)
    return [c for c in run_checks(evidence) if not c.passed and catalog.stage_of(c.name) is Stage.ENGINE_LOG]
