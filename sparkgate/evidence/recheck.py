"""What the sentinel hands an optimization's own re-check (`rechecks(ctx)` in its module) after admission."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from sparkgate.evidence import metrics as metrics_mod
from sparkgate.evidence.client import EngineClient, EngineUnreachable


class OwnTraffic:
    """Requests the sentinel itself sent after admission (the answer probe), each noted with the engine's /metrics
    read before and right after it: a re-check that tells client traffic from quiet (MTP's acceptance) takes the
    difference out of what it counts as served."""

    def __init__(self) -> None:
        self.seq = 0
        self.before: list | None = None
        self.after: list | None = None

    def note(self, client: EngineClient, before: list | None) -> None:
        """Note a request sent after `before` was read, reading the engine's /metrics after it here."""
        self.record(before, scrape(client))

    def record(self, before: list | None, after: list | None) -> None:
        """Note a request with both readings already taken (None: unreadable)."""
        self.before, self.after = before, after
        self.seq += 1


def scrape(client: EngineClient) -> list | None:
    """The engine's /metrics samples now, or None when they cannot be read."""
    try:
        return metrics_mod.parse(client.get_text("/metrics"))
    except EngineUnreachable:
        return None


@dataclass
class RecheckContext:
    key: str  # the optimization being re-checked
    client: EngineClient  # the sentinel's quick client: a re-check must finish well inside one period
    period_s: float
    expectations: dict  # the bundle's expectations.json
    # The optimization's own memory between re-checks, emptied before each full verification.
    state: dict = field(default_factory=dict)
    # This period's one read of the engine's /metrics, shared by every re-check (the sentinel sets it each
    # period); None reads it afresh.
    scrape: Callable[[], list] | None = None
    # Shared by every context of one sentinel: what the sentinel's own probes sent (None: nothing is noted).
    own_traffic: OwnTraffic | None = None

    @property
    def want(self) -> dict:
        """This optimization's section of the expectations."""
        return self.expectations["optimizations"][self.key]

    def metrics(self) -> list:
        """The engine's /metrics samples of this period (raises EngineUnreachable)."""
        if self.scrape is not None:
            return self.scrape()
        return metrics_mod.parse(self.client.get_text("/metrics"))


class PeriodScrape:
    """One /metrics read per period, on first use; a failed read is remembered for the period too, so a dead
    engine costs one timeout, not one per re-check."""

    def __init__(self, client: EngineClient):
        self.client = client
        self._samples: list | None = None
        self._error: Exception | None = None
        self.reads = 0

    def __call__(self) -> list:
        if self._samples is None and self._error is None:
            self.reads += 1
            try:
                self._samples = metrics_mod.parse(self.client.get_text("/metrics"))
            except Exception as exc:  # noqa: BLE001 - re-raised to every caller of this period
                self._error = exc
        if self._error is not None:
            raise self._error
        return self._samples
