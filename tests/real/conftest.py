"""Fixtures of the real-SGLang lane (tests/real): tiny checkpoints, launch variations, one server slot.

Start a variation from a test:

    def test_x(real_engines, dense_launch):
        engine = real_engines.get(dataclasses.replace(dense_launch, max_running_requests=1,
                                                      extra_args=("--context-length", "512"), probe=False))

`real_engines.get` reuses the running server while tests ask for an equal Launch and stops it before
starting another (one server at a time), so tests of one variation belong next to each other.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from tests.real import engine as engine_mod
from tests.real.checkpoints import DUMMY_WEIGHTS_ARGS, build_tiny_bailing_v2, build_tiny_llama
from tests.real.engine import NEXTN_ARGS, EngineSlot, Launch, RealEngine, standalone_args

TINY_LLAMA_NAME = "tiny-llama"
TINY_BAILING_NAME = "tiny-bailing-v2"


@pytest.fixture(scope="session")
def tiny_llama_path(tmp_path_factory) -> Path:
    return build_tiny_llama(tmp_path_factory.mktemp("checkpoints") / TINY_LLAMA_NAME)


@pytest.fixture(scope="session")
def tiny_bailing_v2_path(tmp_path_factory) -> Path:
    return build_tiny_bailing_v2(tmp_path_factory.mktemp("checkpoints") / TINY_BAILING_NAME)


@pytest.fixture(scope="session")
def real_engines(tmp_path_factory):
    """The session's one server slot; stopped (whole process tree) at the end of the session."""
    slot = EngineSlot(tmp_path_factory.mktemp("real-sglang"))
    yield slot
    slot.stop()


@pytest.fixture(scope="session")
def dense_launch(tiny_llama_path) -> Launch:
    """Dense tiny llama, torch_native attention, probe and metrics on, batch size 1 (what the gate wants)."""
    return Launch(model_path=tiny_llama_path, served_model_name=TINY_LLAMA_NAME, max_running_requests=1)


@pytest.fixture(scope="session")
def standalone_launch(dense_launch) -> Launch:
    """The dense tiny llama drafting for itself (STANDALONE): drafts get accepted, unlike a random MTP layer."""
    return dataclasses.replace(dense_launch, extra_args=standalone_args(dense_launch.model_path), cpu_amx=True)


@pytest.fixture(scope="session")
def bailing_launch(tiny_bailing_v2_path) -> Launch:
    """The tiny BailingMoeV2 (dummy weights) without speculation: the reference for NEXTN outputs."""
    return Launch(
        model_path=tiny_bailing_v2_path, served_model_name=TINY_BAILING_NAME, max_running_requests=1,
        extra_args=DUMMY_WEIGHTS_ARGS,
    )


@pytest.fixture(scope="session")
def nextn_launch(bailing_launch) -> Launch:
    """The same model with NEXTN speculation (its own MTP layer as the draft), via the CPU platform plugin."""
    return dataclasses.replace(bailing_launch, extra_args=(*bailing_launch.extra_args, *NEXTN_ARGS), cpu_amx=True)


@pytest.fixture
def dense_engine(real_engines, dense_launch) -> RealEngine:
    return real_engines.get(dense_launch)


@pytest.fixture
def standalone_engine(real_engines, standalone_launch) -> RealEngine:
    return real_engines.get(standalone_launch)


@pytest.fixture
def bailing_engine(real_engines, bailing_launch) -> RealEngine:
    return real_engines.get(bailing_launch)


@pytest.fixture
def nextn_engine(real_engines, nextn_launch) -> RealEngine:
    return real_engines.get(nextn_launch)


def pytest_terminal_summary(terminalreporter):
    """Start-up timings of every server this session started (also without -s)."""
    if not engine_mod.STARTED:
        return
    terminalreporter.write_sep("-", "real SGLang launches (process start -> /model_info 200, then first /health)")
    for engine in engine_mod.STARTED:
        startup = "never (start failed)" if engine.startup_s is None else f"{engine.startup_s:.1f} s"
        health = "-" if engine.first_health_s is None else f"{engine.first_health_s:.1f} s"
        stop = "-" if engine.stop_s is None else f"{engine.stop_s:.1f} s"
        name = engine.launch.served_model_name or engine.launch.model_path.name
        flags = " ".join(engine.launch.extra_args) or "-"
        terminalreporter.write_line(
            f"{name}: ready {startup}, first /health {health}, stop {stop}, cpu_amx={engine.launch.cpu_amx}, "
            f"extra args: {flags}"
        )
