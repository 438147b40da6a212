"""A refused engine is verified again after 1, 2, 4, then every 6 periods, never back to back, and at once when it
restarts; a passing verdict ends the back-off. The gate stays closed and its reason says when the next try is."""

from __future__ import annotations

import json

import pytest

from sparkgate.sentinel import service
from sparkgate.sentinel.service import Sentinel, SentinelConfig
from sparkgate.sentinel.state import CLOSED

PERIOD_S = 5.0


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def sentinel(tmp_path, monkeypatch):
    clock = Clock()
    monkeypatch.setattr(service.time, "monotonic", clock)
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "expectations.json").write_text(json.dumps({"profile": "all-three", "requested": [], "optimizations": {}}))
    made = Sentinel(SentinelConfig("http://engine:30000", bundle, "/nonexistent.log", period_s=PERIOD_S))
    made.startup = "t0"
    made.outcomes: list[bool] = []
    made.runs: list[float] = []

    def full_verification() -> bool:
        made.runs.append(clock.now)
        passed = made.outcomes.pop(0) if made.outcomes else False
        made.state.full = {"passed": passed, "verification": {"checks": [{"name": "mtp.accept_length", "passed": passed}]}}
        made.state.engine_startup_time = made.startup
        return passed

    monkeypatch.setattr(made, "full_verification", full_verification)
    monkeypatch.setattr(made, "_server_info", lambda: {"startup_time": made.startup})
    monkeypatch.setattr(made, "cold_refusal_stands", lambda: False)
    made.client = type("Healthy", (), {"status": staticmethod(lambda path: 200)})()
    made.clock = clock
    return made


def run_periods(sentinel, periods: int) -> None:
    for _ in range(periods):
        sentinel.step()
        sentinel.clock.now += PERIOD_S


def test_a_refused_engine_is_verified_after_1_2_4_then_every_6_periods(sentinel):
    run_periods(sentinel, 40)
    gaps = [round((b - a) / PERIOD_S) for a, b in zip(sentinel.runs, sentinel.runs[1:], strict=False)]
    assert gaps[:5] == [1, 2, 4, 6, 6] and set(gaps[3:]) == {6}
    assert sentinel.state.state == CLOSED
    assert "mtp.accept_length" in sentinel.state.reason and "verifying again in" in sentinel.state.reason


def test_a_restart_is_verified_at_once_and_a_pass_ends_the_back_off(sentinel):
    run_periods(sentinel, 8)  # runs at periods 0, 1, 3, 7: the next is 6 periods later
    before = len(sentinel.runs)
    sentinel.startup = "t1"  # the engine restarted
    sentinel.outcomes = [True]
    run_periods(sentinel, 1)
    assert len(sentinel.runs) == before + 1 and sentinel.refused_in_a_row == 0 and not sentinel.need_full
