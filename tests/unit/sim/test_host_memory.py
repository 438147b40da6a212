"""The simulated Spark's host meminfo (SPARKGATE_SIM_HOST_MEMINFO) and the `memory-pressure` runtime fault.

The sentinel reads this file on the simulator target as it reads /proc/meminfo on a Spark: it must always be a
complete meminfo text in the kernel's layout, follow the startup, and show the pressure within seconds."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest

from sparkgate_sim import cli, faults, host_memory, knobs
from sparkgate_sim.engine import Engine
from sparkgate_sim.image import engine_environment
from sparkgate_sim.logs import EngineLog
from tests.plugins.simproc import profile_launch

KIB_PER_MIB, KIB_PER_GIB = 1024, 1024 * 1024
KNOB = "SPARKGATE_SIM_HOST_MEMINFO"
REQUIRED = ("MemTotal", "MemFree", "MemAvailable", "Buffers", "Cached", "SwapTotal", "SwapFree")
LINE = re.compile(r"^([A-Za-z0-9_()]+):( +)(\d+) kB$")
PROMPT = "Question: A train travels 180 km in 2.5 hours. How far in 4 hours?"


def parse_meminfo(text: str) -> dict[str, int]:
    """A /proc/meminfo text, strictly: every line `Name:` padded to 16 columns, the kB value right-aligned in
    (at least) 8 more, newline-terminated; the required fields all there."""
    assert text.endswith("\n"), repr(text[-40:])
    fields: dict[str, int] = {}
    for line in text.splitlines():
        match = LINE.match(line)
        assert match, repr(line)
        name, value = match.group(1), match.group(3)
        assert line[:16].rstrip() == f"{name}:" and len(line[16:-3]) == max(8, len(value)), repr(line)
        assert name not in fields, name
        fields[name] = int(value)
    missing = [name for name in REQUIRED if name not in fields]
    assert not missing, missing
    return fields


def gib(kib: int) -> float:
    return kib / KIB_PER_GIB


def swap_used_mib(info: dict[str, int]) -> float:
    return (info["SwapTotal"] - info["SwapFree"]) / KIB_PER_MIB


# How long a wait may take before the test gives up: a bound on a hung simulator, never a judgement of speed
# (each wait ends on what the file or the writer's count shows).
GIVE_UP_S = 60.0


def wait_for(path: Path, predicate, what: str) -> dict[str, int]:
    """Poll the file until `predicate(fields)`; returns the fields."""
    deadline = time.monotonic() + GIVE_UP_S
    last = None
    while time.monotonic() < deadline:
        if path.exists():
            last = parse_meminfo(path.read_text())
            if predicate(last):
                return last
        time.sleep(0.02)
    raise AssertionError(f"{what}: not within {GIVE_UP_S} s; last figures {last}")


def writer_counts(sim) -> dict[str, int] | None:
    return sim.get("/admin/stats").json()["host_meminfo"]


def wait_for_writes(sim, more: int, key: str = "writes") -> dict[str, int]:
    """Until the simulator's meminfo writer made `more` further attempts (its own count, not the clock)."""
    target = writer_counts(sim)[key] + more
    deadline = time.monotonic() + GIVE_UP_S
    while (counts := writer_counts(sim))[key] < target:
        assert time.monotonic() < deadline, f"the writer made no {more} more {key} in {GIVE_UP_S} s: {counts}"
        time.sleep(0.05)
    return counts


def assert_healthy(info: dict[str, int]) -> None:
    assert round(gib(info["MemTotal"]), 1) == 121.7
    assert 19.0 <= gib(info["MemAvailable"]) <= 21.0, gib(info["MemAvailable"])
    assert 0 < info["MemFree"] <= info["MemAvailable"] <= info["MemTotal"]
    assert info["SwapTotal"] == 16 * KIB_PER_GIB and info["SwapFree"] == info["SwapTotal"]


def ready_figures(info: dict[str, int]) -> bool:
    return 19.0 <= gib(info["MemAvailable"]) <= 21.0


def assert_no_giveaway(sim, path: Path, *surfaces: str) -> None:
    """No fault name in the file, the names in its directory, the log, stderr or the API answers."""
    text = sim.log() + sim.stderr() + path.read_text() + " ".join(p.name for p in path.parent.iterdir())
    text += "".join(surfaces)
    for name in faults.ALL:
        assert name not in text, name


def test_the_file_follows_the_startup_down_from_110_gib(start_profile, tmp_path):
    """Before the weights load the host has ~110 GiB available; the load takes it down."""
    path = tmp_path / "host" / "meminfo"  # a directory that does not exist yet
    sim = start_profile("all-three", {KNOB: str(path), "SPARKGATE_SIM_STARTUP_S": "",
                                      "SPARKGATE_SIM_PHASES": "init=150,load_weights=300"}, ready=False)
    before = wait_for(path, lambda info: True, "the first file")
    assert 109.0 <= gib(before["MemAvailable"]) <= 111.0, gib(before["MemAvailable"])
    assert before["SwapFree"] == before["SwapTotal"]
    # during the weight load: part of the 61 GiB is in, the pools are not yet, and the engine is not ready
    loading = wait_for(path, lambda info: 55.0 < gib(info["MemAvailable"]) < 106.0, "a figure of the weight load")
    assert sim.get("/health").status == 503, gib(loading["MemAvailable"])
    assert "Load weight begin" in sim.log()


@pytest.mark.parametrize("profile", ["all-three", "baseline", "dspark"])
def test_a_ready_engine_leaves_about_20_gib_and_no_swap(start_profile, tmp_path, profile):
    path = tmp_path / "meminfo"
    start_profile(profile, {KNOB: str(path)})
    info = wait_for(path, ready_figures, "the ready engine's figures")
    assert_healthy(info)
    assert oct(path.stat().st_mode & 0o777) == oct(0o644)  # the sentinel may read it as another user


def test_the_file_is_always_complete_while_it_is_rewritten(start_profile, tmp_path):
    path = tmp_path / "meminfo"
    sim = start_profile("all-three", {KNOB: str(path), "SPARKGATE_SIM_ADMIN": "1"})
    wait_for(path, ready_figures, "the ready engine's figures")
    names = list(parse_meminfo(path.read_text()))
    seen, inodes, pressure = set(), set(), False
    start = writer_counts(sim)["writes"]
    deadline = time.monotonic() + GIVE_UP_S
    # Read as fast as possible across six of the writer's rewrites; a fault change is written at once, so
    # toggling the pressure after every second one adds rewrites to race against.
    while (writes := writer_counts(sim)["writes"] - start) < 6:
        assert time.monotonic() < deadline, f"{writes} rewrites in {GIVE_UP_S} s"
        for _ in range(50):
            text = path.read_text()
            assert list(parse_meminfo(text)) == names  # never partial, never a different layout
            seen.add(text)
            inodes.add(path.stat().st_ino)
        if bool(writes // 2 % 2) != pressure:
            pressure = not pressure
            assert sim.post("/admin/faults", {("add" if pressure else "remove"): [faults.MEMORY_PRESSURE]}).status == 200
    assert len(seen) >= 2, len(seen)  # it was rewritten (the jitter makes every write differ) ...
    assert len(inodes) >= 2  # ... by replacing the file, not writing into it
    # no temp file is left behind (one may exist for an instant during a write)
    deadline = time.monotonic() + GIVE_UP_S
    while [p.name for p in tmp_path.iterdir() if p.name != "logs"] != ["meminfo"]:
        assert time.monotonic() < deadline, sorted(p.name for p in tmp_path.iterdir())
        time.sleep(0.02)


def test_memory_pressure_set_and_cleared_at_runtime(start_profile, tmp_path):
    path = tmp_path / "meminfo"
    sim = start_profile("all-three", {KNOB: str(path), "SPARKGATE_SIM_ADMIN": "1"})
    healthy = wait_for(path, ready_figures, "the ready engine's figures")
    assert_healthy(healthy)
    request = {"text": PROMPT, "sampling_params": {"max_new_tokens": 24, "temperature": 0}}
    answer = sim.post("/generate", request).json()
    metric_names = {line.split("{")[0].split(" ")[0] for line in sim.metrics().splitlines() if line and line[0] != "#"}

    state = sim.post("/admin/faults", {"add": [faults.MEMORY_PRESSURE]}).json()
    assert state["active"] == [faults.MEMORY_PRESSURE]  # a runtime fault: nothing pending a restart
    assert state["pending_restart"] == []
    pressed = wait_for(path, lambda i: gib(i["MemAvailable"]) < 2.0 and swap_used_mib(i) >= 512, "memory pressure")
    assert gib(pressed["MemAvailable"]) == pytest.approx(1.5, abs=0.25)
    assert swap_used_mib(pressed) == pytest.approx(600, abs=1)
    assert pressed["MemTotal"] == healthy["MemTotal"] and pressed["SwapTotal"] == healthy["SwapTotal"]
    assert 0 < pressed["MemFree"] <= pressed["MemAvailable"]
    wait_for_writes(sim, 2)  # it stays (the periodic writes keep it)
    assert gib(parse_meminfo(path.read_text())["MemAvailable"]) < 2.0

    # nothing else changes: the same answer, health, the same metric families
    assert sim.get("/health").status == 200
    pressed_answer = sim.post("/generate", request).json()
    assert pressed_answer["text"] == answer["text"]
    assert pressed_answer["meta_info"]["completion_tokens"] == answer["meta_info"]["completion_tokens"]
    assert {line.split("{")[0].split(" ")[0] for line in sim.metrics().splitlines()
            if line and line[0] != "#"} == metric_names
    info = sim.server_info()
    assert_no_giveaway(sim, path, json.dumps(info), json.dumps(pressed_answer), sim.metrics())

    sim.post("/admin/faults", {"remove": [faults.MEMORY_PRESSURE]})
    restored = wait_for(path, lambda i: ready_figures(i) and i["SwapFree"] == i["SwapTotal"],
                        "recovery after the fault is cleared")
    assert_healthy(restored)


def test_memory_pressure_set_at_start(start_profile, tmp_path):
    path = tmp_path / "meminfo"
    sim = start_profile("baseline", {KNOB: str(path), "SPARKGATE_SIM_FAULTS": faults.MEMORY_PRESSURE})
    info = parse_meminfo(path.read_text())
    assert gib(info["MemAvailable"]) < 2.0 and swap_used_mib(info) >= 512
    response = sim.post("/generate", {"text": PROMPT, "sampling_params": {"max_new_tokens": 8}})
    assert response.status == 200  # the engine serves on
    assert_no_giveaway(sim, path, response.body.decode(), json.dumps(sim.server_info()))


def test_a_dead_engine_gives_its_memory_back(start_profile, tmp_path):
    path = tmp_path / "meminfo"
    sim = start_profile("baseline", {KNOB: str(path), "SPARKGATE_SIM_FAULTS": f"{faults.CRASH_AFTER_READY}:100s"})
    assert sim.wait_exit() == 1
    info = parse_meminfo(path.read_text())
    assert 109.0 <= gib(info["MemAvailable"]) <= 111.0


def test_an_unwritable_path_is_logged_and_the_engine_serves_on(start_profile, tmp_path):
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    path = blocker / "meminfo"
    sim = start_profile("baseline", {KNOB: str(path), "SPARKGATE_SIM_ADMIN": "1"})
    wait_for_writes(sim, 3, "failed_writes")  # a few more attempts, each failing
    assert sim.post("/generate", {"text": PROMPT, "sampling_params": {"max_new_tokens": 8}}).status == 200
    complaints = [line for line in sim.stderr().splitlines() if "host meminfo" in line]
    assert len(complaints) == 1 and str(path) in complaints[0], sim.stderr()  # once, not every second
    assert not path.exists()


def _engine(env: dict[str, str]) -> Engine:
    argv, profile_env = profile_launch("baseline")
    merged = {**profile_env, **env}
    return Engine(cli.parse_engine_argv(argv), engine_environment(merged), knobs.from_env(merged), EngineLog())


def test_without_the_knob_no_file_and_no_writer(tmp_path):
    assert knobs.from_env({}).host_meminfo is None
    assert knobs.from_env({KNOB: "  "}).host_meminfo is None
    assert _engine({}).meminfo is None
    assert _engine({KNOB: ""}).meminfo is None
    with_knob = _engine({KNOB: str(tmp_path / "meminfo")})
    assert with_knob.meminfo is not None and with_knob.meminfo.path == tmp_path / "meminfo"
    assert not (tmp_path / "meminfo").exists()  # written from process start (main), not on construction


def test_without_the_knob_the_engine_runs_as_before(start_profile, tmp_path):
    sim = start_profile("baseline", {"SPARKGATE_SIM_FAULTS": faults.MEMORY_PRESSURE, "SPARKGATE_SIM_ADMIN": "1"})
    assert writer_counts(sim) is None  # no writer runs
    assert [p.name for p in tmp_path.iterdir()] == ["logs"]
    assert sim.post("/generate", {"text": PROMPT, "sampling_params": {"max_new_tokens": 8}}).status == 200
    assert "meminfo" not in sim.log() + sim.stderr()


def test_the_model_in_process():
    """The figures as a function of what the engine holds, and the ramp a startup phase drives."""
    idle, ready = host_memory.figures(0.0, False), host_memory.figures(host_memory.ENGINE_READY_GIB, False)
    assert gib(idle["MemAvailable"]) == pytest.approx(110.0, abs=0.2)
    assert gib(ready["MemAvailable"]) == pytest.approx(20.0, abs=0.2)
    jittered = [gib(host_memory.figures(host_memory.ENGINE_READY_GIB, False, tick)["MemAvailable"]) for tick in range(50)]
    assert len(set(jittered)) > 40 and all(19.7 <= value <= 20.3 for value in jittered)
    for held in (0.0, 40.0, host_memory.ENGINE_READY_GIB):  # the pressure does not depend on the engine
        pressed = host_memory.figures(held, True, 7)
        assert gib(pressed["MemAvailable"]) == pytest.approx(1.5, abs=0.05) and swap_used_mib(pressed) == 600
        assert pressed["AnonPages"] > ready["AnonPages"]  # someone else's pages
    text = host_memory.render(ready)
    assert parse_meminfo(text) == {k: v for k, v in ready.items() if not k.startswith("_")}
    assert text.startswith("MemTotal:       127604736 kB\nMemFree:        ")
    assert all(value % 4 == 0 for value in parse_meminfo(text).values())  # whole 4 KiB pages

    now = [100.0]
    memory = host_memory.HostMemory(time_scale=1.0, clock=lambda: now[0])
    memory.restart(1)
    memory.ramp_to(1, 60.0, 0.4)
    now[0] += 0.2
    assert memory.held_gib() == pytest.approx(30.0)
    now[0] += 0.3
    assert memory.held_gib() == 60.0
    memory.ramp_to(0, 5.0, 0.0)  # a superseded startup changes nothing
    assert memory.held_gib() == 60.0
    memory.restart(2)  # a fresh process holds nothing
    assert memory.held_gib() == 0.0
