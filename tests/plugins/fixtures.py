"""The suite's shared fixtures, registered once by `pytest_plugins` in tests/conftest.py.

Test modules and conftests take fixtures from here by name and import helpers from plain modules
(tests/plugins/simproc.py), never from another conftest.
"""

from __future__ import annotations

import pytest

from tests.plugins.simproc import Sim, profile_launch


@pytest.fixture
def start_sim(tmp_path):
    """start_sim(argv, env, scale=..., ready=True) -> a running simulator subprocess, stopped at teardown."""
    started: list[Sim] = []

    def start(argv: list[str], env: dict[str, str] | None = None, *, ready: bool = True, **kw) -> Sim:
        sim = Sim(list(argv), dict(env or {}), tmp_path / "logs", **kw).start()
        started.append(sim)
        if ready:
            sim.wait_ready()
        return sim

    yield start
    for sim in started:
        sim.stop()


@pytest.fixture
def start_profile(start_sim):
    """start_profile(name, extra_env=None, **kw): the profile's own argv/env plus simulator knobs."""

    def start(name: str, extra_env: dict[str, str] | None = None, **kw) -> Sim:
        argv, env = profile_launch(name)
        return start_sim(argv, {**env, **(extra_env or {})}, **kw)

    return start


@pytest.fixture
def isolated_bench(tmp_path, monkeypatch):
    """Bench runs keep their floor file in tmp_path (never the developer's build/bench) and print no progress."""
    monkeypatch.setenv("SPARKGATE_BENCH_FLOOR_FILE", str(tmp_path / "floor.json"))
    monkeypatch.setenv("SPARKGATE_BENCH_NO_PROGRESS", "1")
    return tmp_path
