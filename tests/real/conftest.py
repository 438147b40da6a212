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
from tests.real.checkpoints import DUMMY_WEIGHTS_ARGS, build_tiny_bailing_v2, build_tiny_llama, build_tiny_thinker
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
def thinker_launches(tmp_path_factory) -> dict[str, Launch]:
    """The thinker (checkpoints.py), reasoning before a right and before a wrong final answer, each with SGLang's
    deepseek-r1 reasoning parser (what the shipped profiles launch with)."""
    root = tmp_path_factory.mktemp("checkpoints")
    return {kind: Launch(model_path=build_tiny_thinker(root / f"tiny-thinker-{kind}", wrong=kind == "wrong"),
                         served_model_name=f"tiny-thinker-{kind}", max_running_requests=1,
                         extra_args=("--reasoning-parser", "deepseek-r1"))
            for kind in ("right", "wrong")}


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


def product_engine_env() -> dict[str, str]:
    """The SGLang variables a rendered all-three bundle gives the engine (sparkgate/bundle/launch.py), minus the plugin list
    (the lane chooses plugins) and Humming's cache paths: with them the env checks judge what stock SGLang lists."""
    from sparkgate.profile import loading as profiles
    env = profiles.load("all-three").plan.env_map()
    return {k: v for k, v in env.items() if k.startswith("SGLANG_") and k != "SGLANG_PLUGINS"}


@pytest.fixture(scope="session")
def bailing_launch(tiny_bailing_v2_path) -> Launch:
    """The tiny BailingMoeV2 (dummy weights) without speculation, with the product's engine env: the reference for
    NEXTN outputs. It starts SGLang's children as SGLang does (spawn), unlike the lane's other launches (forked,
    engine.Launch.spawn_children): its probe report (test_engine_starts) proves that the probe loads, attaches every
    hook and reports in a freshly started scheduler, not only in one that inherits the launcher's plugins."""
    return Launch(
        model_path=tiny_bailing_v2_path, served_model_name=TINY_BAILING_NAME, max_running_requests=1,
        extra_args=DUMMY_WEIGHTS_ARGS, env=product_engine_env(), spawn_children=True,
    )


@pytest.fixture(scope="session")
def nextn_launch(bailing_launch) -> Launch:
    """The same model with NEXTN speculation (its own MTP layer as the draft), via the CPU platform plugin."""
    return dataclasses.replace(bailing_launch, extra_args=(*bailing_launch.extra_args, *NEXTN_ARGS), cpu_amx=True,
                               spawn_children=False)


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


def launch_lines() -> list[str]:
    """One line per server this process started (start-up, first /health, stop), and any launch started twice."""
    lines = []
    for engine in engine_mod.STARTED:
        startup = "never (start failed)" if engine.startup_s is None else f"{engine.startup_s:.1f} s"
        health = "-" if engine.first_health_s is None else f"{engine.first_health_s:.1f} s"
        stop = "-" if engine.stop_s is None else f"{engine.stop_s:.1f} s"
        name = engine.launch.served_model_name or engine.launch.model_path.name
        flags = " ".join(engine.launch.extra_args) or "-"
        lines.append(f"{name}: ready {startup}, first /health {health}, stop {stop}, cpu_amx={engine.launch.cpu_amx}, "
                     f"extra args: {flags}")
    launches = [engine.launch for engine in engine_mod.STARTED]
    repeated = {str(launch.served_model_name): launches.count(launch) for launch in launches if launches.count(launch) > 1}
    if repeated:  # the ordering below failed to keep a launch's tests together (each start costs 12-25 s)
        lines.append(f"started more than once: {repeated}; see LAUNCH_BLOCKS in tests/real/conftest.py")
    return lines


LAUNCHES_TITLE = "real SGLang launches (process start -> /model_info 200, then first /health)"


def pytest_sessionfinish(session):
    """Under pytest-xdist the lane runs on a worker: its lines travel to the controller (tests/conftest.py prints)."""
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None and engine_mod.STARTED:
        workeroutput.setdefault("sparkgate_summaries", {})[LAUNCHES_TITLE] = launch_lines()


def pytest_terminal_summary(terminalreporter):
    """Start-up timings of every server this process started (a run without xdist; also without -s)."""
    lines = launch_lines()
    if lines:
        terminalreporter.write_sep("-", LAUNCHES_TITLE)
        for line in lines:
            terminalreporter.write_line(line)


# One server at a time, and a start costs 12-25 s: the lane's tests are ordered by the launch they need, so each
# launch starts once. A test belongs to the last block among the launches its fixtures start (the earlier ones
# are cached, session-scoped, by then); within a block the order is the modules', then the file's. The lifecycle
# tests start their own servers and need the slot empty, so tests that need no launch come first.
LAUNCH_BLOCKS = ("dense", "dense variations", "standalone", "bailing", "humming", "nextn", "thinker")
FIXTURE_BLOCK = {
    "dense_engine": "dense", "dense_reference": "dense", "sides_dense": "dense",
    "dense_verdicts": "dense variations",
    "standalone_engine": "standalone",
    "bailing_engine": "bailing", "bailing_reference": "bailing", "nextn_off_verdicts": "bailing",
    "humming_verdicts": "humming",
    "nextn_engine": "nextn", "sides_nextn": "nextn", "nextn_on_verdicts": "nextn", "outputs": "nextn",
    "thinker_answers": "thinker",
}
MODULE_ORDER = ("test_engine_lifecycle", "test_engine_starts", "test_differential", "test_fixture_in_real_output",
                "test_gate_verdicts")


def launch_block(item) -> int:
    """1 + the index in LAUNCH_BLOCKS of the last launch `item` needs; 0 for a test that needs none."""
    blocks = {FIXTURE_BLOCK[name] for name in getattr(item, "fixturenames", ()) if name in FIXTURE_BLOCK}
    params = getattr(getattr(item, "callspec", None), "params", {})
    if params.get("launch") in LAUNCH_BLOCKS:  # test_differential names its launch by parameter (fixture `side`)
        blocks.add(params["launch"])
    return 1 + max((LAUNCH_BLOCKS.index(block) for block in blocks), default=-1)


def pytest_collection_modifyitems(config, items):
    def rank(indexed) -> tuple[int, int, int, int]:
        index, item = indexed
        if "tests/real/" not in str(item.path):
            return (0, 0, 0, index)  # other lanes keep their place, before this one
        module = item.module.__name__.rpartition(".")[2] if item.module else ""
        module_rank = MODULE_ORDER.index(module) if module in MODULE_ORDER else len(MODULE_ORDER)
        return (1, launch_block(item), module_rank, index)

    items[:] = [item for _, item in sorted(enumerate(items), key=rank)]
