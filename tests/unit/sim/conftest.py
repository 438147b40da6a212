"""Fixtures that start simulator subprocesses and always stop them."""

from __future__ import annotations

import pytest

from .simproc import Sim, profile_launch


@pytest.fixture
def start_sim(tmp_path):
    """start_sim(argv, env, scale=..., ready=True) -> a running Sim, stopped at teardown."""
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
