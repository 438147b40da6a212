"""What the sentinel hands an optimization's own re-check (`rechecks(ctx)` in its module) after admission."""

from __future__ import annotations

from dataclasses import dataclass, field

from sparkgate.evidence.client import EngineClient


@dataclass
class RecheckContext:
    key: str  # the optimization being re-checked
    client: EngineClient  # the sentinel's quick client: a re-check must finish well inside one period
    period_s: float
    expectations: dict  # the bundle's expectations.json
    # The optimization's own memory between re-checks, emptied before each full verification.
    state: dict = field(default_factory=dict)

    @property
    def want(self) -> dict:
        """This optimization's section of the expectations."""
        return self.expectations["optimizations"][self.key]
