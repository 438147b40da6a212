"""Bench tests: reuse the simulator subprocess fixtures, and keep every test's floor file and run
directories in its own tmp_path (never the developer's build/bench)."""

from __future__ import annotations

import pytest

from tests.unit.sim.conftest import start_profile, start_sim  # noqa: F401  (fixtures, re-exported)


@pytest.fixture(autouse=True)
def isolated_bench(tmp_path, monkeypatch):
    monkeypatch.setenv("SPARKGATE_BENCH_FLOOR_FILE", str(tmp_path / "floor.json"))
    monkeypatch.setenv("SPARKGATE_BENCH_NO_PROGRESS", "1")
    return tmp_path
