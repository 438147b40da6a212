"""The stages a check belongs to: the order of the verdict table, and whether the sentinel's cheap
re-check runs the check again after admission.

Every check declares its stage where it is written (`CHECKS` in evidence/engine_checks.py and in each
optimization module); sparkgate/evidence/catalog.py collects the declarations. This module imports
nothing from sparkgate, so optimization modules can import it at top level.
"""

from __future__ import annotations

import enum


class Stage(enum.IntEnum):
    HEALTH = 0
    CONFIGURATION = 1
    ENVIRONMENT = 2
    PROBE_REPORT = 3
    ENGINE_LOG = 4
    # Gathered before calibration: its first question is the engine's cold first request.
    ANSWERS = 5
    CALIBRATION = 6
    # Emitted only by the sentinel's re-check (restart detection, acceptance and answers after admission).
    RECHECK_ONLY = 7

    @property
    def title(self) -> str:
        return _TITLES[self]

    @property
    def rechecked(self) -> bool:
        """Whether the sentinel's periodic re-check runs checks of this stage.

        Not the log: its startup signatures cannot change without a restart, which
        `sentinel.engine_unchanged` catches, and re-reading a log that grows for days every period would
        only cost I/O. Not answers or calibration: they send requests a client would queue behind (batch 1);
        after admission the answers are asked one question at a time, when the engine is idle."""
        return self not in (Stage.ENGINE_LOG, Stage.ANSWERS, Stage.CALIBRATION)


_TITLES = {
    Stage.HEALTH: "health",
    Stage.CONFIGURATION: "identity and configuration",
    Stage.ENVIRONMENT: "engine environment",
    Stage.PROBE_REPORT: "probe report",
    Stage.ENGINE_LOG: "engine log",
    Stage.ANSWERS: "answers",
    Stage.CALIBRATION: "calibration",
    Stage.RECHECK_ONLY: "sentinel re-check",
}

# The stages of a `sparkgate verify` verdict, in table order ("[i/6] title").
VERDICT_STAGES = tuple(stage for stage in Stage if stage is not Stage.RECHECK_ONLY)
