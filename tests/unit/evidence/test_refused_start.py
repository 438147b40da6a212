"""A start refused before any verification leaves its own capture: the engine entrypoint's exit record, the
sentinel's capture of that start (its log, phases reached and never reached, host memory, the deploy it is of),
`invoke capture`'s one line saying whose deploy a file is, and `verify --replay` judging the start again."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from sparkgate import cli
from sparkgate.bundle import expectations, render
from sparkgate.deploy import deploy, field_capture
from sparkgate.evidence import capture, startup
from sparkgate.evidence.logs import EngineLog
from sparkgate.evidence.results import Verdict, checked
from sparkgate.profile import loading as profiles
from sparkgate.runtime import engine_entrypoint, engine_run
from sparkgate.sentinel.service import Sentinel, SentinelConfig
from sparkgate.sentinel.state import CLOSED
from sparkgate.sentinel.suites import SuiteResult
from sparkgate.sglang import conformance as C
from sparkgate.sglang import phases
from sparkgate.sglang.phases import PHASES

NEVER_AFTER_LOAD_BEGIN = ["load_weight_end", "kv_cache", "cuda_graph_capture", "ready"]


def _record(message: str) -> str:
    return f"[2026-12-01 12:00:00 TP0] {message}"


DIED_LOADING = [
    _record(C.log_line("server_args", args="ServerArgs(model_path='/m')")),
    _record(C.log_line("load_weight_begin", avail=119.5)),
    "Traceback (most recent call last):",
    "RuntimeError: CUDA error: out of memory",
]


def _want(profile: str = "all-three") -> dict:
    return expectations.build(profiles.load(profile), "sim", 1.0)


def _health(checks) -> dict:
    return next(c for c in checks if c.name == "engine.health").observed


# -- judge_start -----------------------------------------------------------------------------------------------------

def test_a_start_dead_during_load_names_the_phases_it_never_reached_and_the_likely_cause():
    checks = startup.judge_start(_want(), EngineLog("test log", "\n".join(DIED_LOADING)), exit_code=1)
    assert checks[0].name == "engine.health" and not checks[0].passed
    observed = _health(checks)
    assert observed["exit_code"] == 1
    assert observed["phases_reached"] == ["arguments", "load_weight_begin"]
    assert observed["never_reached"] == NEVER_AFTER_LOAD_BEGIN
    assert observed["likely_cause"] == "out of unified memory during load"
    assert "Fix:" in checks[0].hint and "\n" not in checks[0].hint
    # the engine-log checks its final log fails come after it (as judge_exited_engine names them)
    assert "engine.log" in {c.name for c in checks[1:]}


@pytest.mark.parametrize(("lines", "code", "cause"), [
    ([*DIED_LOADING[:2], _record(C.log_line("load_weight_end", elapsed=1.0, model_class="M", quant="", avail=9.0,
                                             usage=60.0)),
      _record(C.log_line("memory_pool_end", avail=9.0)),
      _record(C.log_line("capture_failed", error="CUDA error: operation not permitted when stream is capturing"))],
     1, "CUDA graph capture failed"),
    ([*DIED_LOADING[:2], "ninja: build stopped: subcommand failed", "nvcc fatal"], 1, "JIT compile during weight load"),
    ([*DIED_LOADING[:2]], 137, "out of unified memory during load"),
    ([*DIED_LOADING[:2], "Ignore import error when loading sglang.srt.models.x: No module named 'deep_gemm'",
      "Traceback (most recent call last):", "ModuleNotFoundError: No module named 'humming'"], 1,
     "a Python module the launch needs is not installed: humming"),
    # A recovered import error earlier in the tail does not speak for a death that came after it.
    ([*DIED_LOADING[:2], "ModuleNotFoundError: No module named 'vllm'", "ninja: build stopped: subcommand failed",
      "RuntimeError: Error building extension 'humming_gemm'"], 1, "JIT compile during weight load"),
    (["INFO my-fork: starting", "loading shards 1/40", "boom"], 1, "no SGLang startup line in the log"),
    ([], 2, "unknown"),
])
def test_each_likely_cause_is_read_from_the_log(lines, code, cause):
    observed = _health(startup.judge_start(_want(), EngineLog("test log", "\n".join(lines)), exit_code=code))
    assert observed["likely_cause"] == cause


STOPPED = "stopped from outside (the deploy's start budget or `invoke down`)"


@pytest.mark.parametrize(("code", "signal"), [(143, "SIGTERM"), (130, "SIGINT"), (143, None), (130, None)])
def test_a_start_stopped_from_outside_is_not_blamed_on_a_crash(code, signal):
    """`invoke deploy` stops an engine whose start outlasts its budget (`compose stop -t 10 engine`: SIGTERM, 143):
    neither the JIT compile in its last lines nor the load it was in is named the cause."""
    lines = [*DIED_LOADING[:2], "Compiling flashinfer kernels (JIT)", "RuntimeError: CUDA error: out of memory"]
    record = engine_run.EngineRun(container="abc", started=engine_run.now(), argv_sha256="0" * 64, exit_code=code,
                                  signal=signal, phases=["arguments", "load_weight_begin"])
    for checks in (startup.judge_start(_want(), EngineLog("t", "\n".join(lines)), record),
                   startup.judge_start(_want(), EngineLog("t", "\n".join(lines)), exit_code=code)):
        assert _health(checks)["likely_cause"] == STOPPED
        assert "--budget" in checks[0].hint and "\n" not in checks[0].hint


def test_a_sigkill_during_load_keeps_the_memory_guess_and_says_it_may_be_docker_kill():
    record = engine_run.EngineRun(container="abc", started=engine_run.now(), argv_sha256="0" * 64, exit_code=137,
                                  signal="SIGKILL", phases=["arguments", "load_weight_begin"])
    checks = startup.judge_start(_want(), EngineLog("t", "\n".join(DIED_LOADING[:2])), record)
    assert _health(checks)["likely_cause"] == "out of unified memory during load"
    assert "docker kill" in checks[0].hint
    # another signal's exit code is read as what it is, not as a stop from outside
    other = record.model_copy(update={"exit_code": 143, "signal": "SIGSEGV"})
    assert _health(startup.judge_start(_want(), EngineLog("t", ""), other))["likely_cause"] != STOPPED


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=st.text(max_size=3000), code=st.none() | st.integers(-300, 600))
def test_hostile_log_text_is_judged_never_raises(text, code):
    checks = startup.judge_start(_want(), EngineLog("hostile", text), exit_code=code)
    observed = _health(checks)
    assert set(observed["phases_reached"]) | set(observed["never_reached"]) == set(PHASES)
    assert "\n" not in checks[0].hint.split("likely cause:")[0]


def test_a_missing_module_names_its_package_only_where_it_is_known():
    def hint(module: str) -> str:
        lines = [*DIED_LOADING[:2], "Traceback (most recent call last):", f"ModuleNotFoundError: No module named '{module}'"]
        return startup.judge_start(_want(), EngineLog("t", "\n".join(lines)), exit_code=1)[0].hint

    assert "humming-kernels" in hint("humming") and "humming-kernels" in hint("humming.layer")
    assert "humming" not in hint("flashinfer") and "`flashinfer`" in hint("flashinfer")


@settings(max_examples=80)
@given(name=st.text(alphabet=st.characters(exclude_characters="'"), max_size=300)
       | st.from_regex(r"[A-Za-z_][A-Za-z0-9_.]{0,110}", fullmatch=True))
def test_a_hostile_missing_module_name_is_named_only_as_an_identifier(name):
    """The module's name comes from the log (untrusted): only a dotted Python identifier of at most 100 characters
    reaches the refusal, on one line; anything else is not taken for a module."""
    line = f"ModuleNotFoundError: No module named '{name}'"
    cause = _health(startup.judge_start(_want(), EngineLog("hostile", "\n".join([*DIED_LOADING[:2], line])),
                                        exit_code=1))["likely_cause"]
    dotted = (len(name) <= 100 and name.isascii() and (name[:1].isalpha() or name[:1] == "_")
              and name.replace(".", "_").isidentifier())
    prefix = "a Python module the launch needs is not installed: "
    assert cause == prefix + name if dotted else not cause.startswith(prefix), (name, cause)


def _census_line(role: str, layers: object, event: str = "load_model") -> str:
    return _record(startup.PROBE_FACT[:-1] + json.dumps({"event": event, "role": role, "moe_layers": layers}))


def test_the_probe_fact_prefix_is_the_probes_own():
    from sparkgate_probe.report import LOG_PREFIX

    assert f"{LOG_PREFIX} {{" == startup.PROBE_FACT


def test_a_start_that_died_after_loading_names_what_ran_from_the_probes_census_at_load():
    """Another MoE runner loaded, then the start died (as the GPU lane's first Marlin start was cut short): /server_info never answered, and
    the census the probe logged at load still names what ran instead of Humming."""
    want = expectations.build(profiles.load("all-three"), "spark", 1.0)
    lines = [*DIED_LOADING[:2], _census_line("target", {"Mxfp4MarlinMoEMethod/marlin": 40})]
    checks = {c.name: c for c in startup.judge_start(want, EngineLog("t", "\n".join(lines)), exit_code=1)}
    census = checks["humming.moe_layers_target"]
    assert not census.passed and census.observed == {"Mxfp4MarlinMoEMethod/marlin": 40}
    assert "census at load" in census.source and "humming.moe_layers_draft" not in checks  # no draft fact: no claim
    engaged = [*DIED_LOADING[:2], _census_line("target", {"Mxfp4HummingMoEMethod/humming": 40})]
    assert "humming.moe_layers_target" not in {c.name for c in startup.judge_start(
        want, EngineLog("t", "\n".join(engaged)), exit_code=1)}  # Humming engaged: the start died of something else
    baseline = expectations.build(profiles.load("baseline"), "spark", 1.0)
    assert "humming.moe_layers_target" not in {c.name for c in startup.judge_start(
        baseline, EngineLog("t", "\n".join(lines)), exit_code=1)}  # not asked for: not judged


@given(layers=st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=300),
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=300), inner,
                                                                                        max_size=3), max_leaves=6),
       role=st.sampled_from(["target", "draft", "other", ""]), event=st.sampled_from(["load_model", "x"]),
       junk=st.text(max_size=200))
def test_a_hostile_census_line_is_kept_only_as_counts(layers, role, event, junk):
    log = EngineLog("hostile", "\n".join([_census_line(role, layers, event), _record(startup.PROBE_FACT + junk)]))
    report = startup.census_at_load(log)
    for fact in (report or {}).values():
        assert all(isinstance(k, str) and len(k) <= 200 and type(v) is int and v >= 0
                   for k, v in fact["moe_layers"].items())
    assert report is None or (event == "load_model" and set(report) <= {"target", "draft"})


def test_sglangs_own_arguments_line_proves_the_arguments_phase_however_long():
    """SGLang 0.5.23 logs every server argument on one line, about 15 KB on a CUDA machine (the GPU lane's records):
    longer than the lines the phase patterns search, and still the arguments phase."""
    line = C.log_line("server_args", args={f"argument_{i}": "x" * 40 for i in range(400)})
    assert len(line) > phases.MAX_PHASE_LINE
    assert phases.phases_reached(_record(line))[0] == "arguments"


# -- the engine entrypoint's records ---------------------------------------------------------------------------------

def _run_dying_engine(monkeypatch, logs: Path, admin: Path, lines: list[str], code: int,
                      argv: list[str] | None = None) -> int:
    monkeypatch.delenv("SGLANG_ENABLE_FP8_LM_HEAD", raising=False)
    script = f"import sys\nfor line in {lines!r}: print(line)\nsys.exit({code})"
    monkeypatch.setitem(engine_entrypoint.LAUNCHERS, "sim", ["-c", script])
    return engine_entrypoint.run("sim", logs / "engine.log", argv or ["--model-path", "/m"], admin_dir=admin,
                                 mountinfo=f"1 0 0:1 / {admin} rw - tmpfs tmpfs rw\n")


def _argv(bundle: Path) -> list[str]:
    """The bundle's argv, as the engine container's entrypoint gets it (compose passes argv.json's tokens)."""
    return json.loads((bundle / "argv.json").read_text())


def test_the_entrypoint_leaves_a_start_and_an_exit_record(monkeypatch, tmp_path, capfd):
    logs = tmp_path / "logs"
    logs.mkdir()
    stale = engine_run.EngineRun(container="old", started="2020-01-01T00:00:00+00:00", argv_sha256="0" * 64, exit_code=9)
    engine_run.write(logs / engine_run.EXIT_FILE, stale)
    assert _run_dying_engine(monkeypatch, logs, tmp_path / "admin", DIED_LOADING, 2) == 2
    start = engine_run.read(logs / engine_run.START_FILE)
    ended = engine_run.read(logs / engine_run.EXIT_FILE)
    assert start is not None and ended is not None and ended.container == start.container != "old"
    assert ended.exit_code == 2 and ended.signal is None and ended.exited
    assert ended.phases == ["arguments", "load_weight_begin"]
    assert ended.argv_sha256 == engine_run.argv_sha256(["--model-path", "/m"])  # the bundle's argv.json, hashed


@pytest.mark.parametrize("hostname", ["odd host!", "-leading-dash", "x" * 80, ""])
def test_a_record_that_cannot_be_made_never_costs_the_start(monkeypatch, tmp_path, capfd, hostname):
    """A hostname the record refuses (`docker run --hostname`, a hand-edited compose file): the engine starts and its
    exit code is the entrypoint's, without records; one line says so."""
    monkeypatch.setattr(engine_run, "this_container", lambda: hostname)
    logs = tmp_path / "logs"
    logs.mkdir()
    assert _run_dying_engine(monkeypatch, logs, tmp_path / "admin", DIED_LOADING, 2) == 2
    assert "Load weight begin" in (logs / "engine.log").read_text()  # the engine ran
    assert not (logs / engine_run.START_FILE).exists() and not (logs / engine_run.EXIT_FILE).exists()
    said = [line for line in capfd.readouterr().err.splitlines() if line.startswith("sparkgate engine:")]
    assert len(said) == 1 and "the engine starts without it" in said[0]


@pytest.mark.parametrize("junk", [b"", b"{", b"[]", b'{"container": "x"}', b"x" * (engine_run.MAX_RECORD_BYTES + 1)])
def test_a_damaged_record_reads_as_none(tmp_path, junk):
    path = tmp_path / engine_run.EXIT_FILE
    path.write_bytes(junk)
    assert engine_run.read(path) is None


# -- the sentinel captures the dead start ----------------------------------------------------------------------------

@pytest.fixture
def deployed(tmp_path):
    """A rendered sim bundle and the sentinel of its stack (no engine answers: it died)."""
    bundle = render.render(profiles.load("all-three"), render.RenderOptions(target="sim"), tmp_path / "bundle")
    logs = tmp_path / "logs"
    logs.mkdir()
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal: 128000000 kB\nMemAvailable: 2000000 kB\nSwapTotal: 0 kB\nSwapFree: 0 kB\n")
    sentinel = Sentinel(SentinelConfig("http://127.0.0.1:9", bundle, str(logs / "engine.log"), period_s=0.5,
                                       meminfo_path=str(meminfo), captures_dir=str(tmp_path / "captures")))
    return sentinel, bundle, logs


def test_the_sentinel_captures_a_start_that_died_and_it_replays_to_the_refusal(deployed, monkeypatch, tmp_path,
                                                                             capsys):
    sentinel, bundle, logs = deployed
    sentinel.step()  # the engine is still loading: no exit record, nothing captured
    assert sentinel.state.captures is None
    _run_dying_engine(monkeypatch, logs, tmp_path / "admin", DIED_LOADING, 2, _argv(bundle))
    sentinel.step()
    assert sentinel.state.state == CLOSED and sentinel.state.reason.startswith(
        "engine.health failed: observed exit code 2, needs an engine that reaches ready: the engine exited (code 2)")
    assert "never reaching load_weight_end" in sentinel.state.reason
    published = sentinel.state.snapshot()["refused_start"]  # /sparkgate/verdict: what `invoke deploy` names
    assert published["checks"][0]["name"] == "engine.health" and not published["checks"][0]["passed"]
    captured = capture.read(sentinel.state.captures["last"])
    assert [Path(p).name for p in sentinel.state.captures["refused"]][-1].startswith("refused-")
    manifest, start = captured.manifest, captured.context.start
    record = engine_run.read(logs / engine_run.EXIT_FILE)
    assert manifest.judged == "start" and not manifest.passed and "engine.health" in manifest.failing
    assert manifest.of == capture.DeployOf(bundle=engine_run.bundle_id_of(bundle), deploy=record.container,
                                           started=record.started)
    assert start.exit_code == 2 and start.never_reached == NEVER_AFTER_LOAD_BEGIN
    assert start.host_memory and start.host_memory[-1].available_kib == 2000000
    assert "Load weight begin" in captured.recording.log_text and captured.context.argv
    sentinel.step()  # the same dead start is captured once
    assert len(sentinel.state.captures["refused"]) == 1

    assert cli.main(["verify", "--replay", sentinel.state.captures["last"]]) == 1
    out, err = capsys.readouterr()
    out = " ".join(out.split())  # the console wraps long lines
    assert "never reached load_weight_end, kv_cache, cuda_graph_capture, ready" in out and "unchanged" in out
    assert len(err.strip().splitlines()) == 1 and "engine.health" in err
    assert "the start never reached load_weight_end, kv_cache, cuda_graph_capture, ready" in err
    again = capture.rejudge(captured).as_dict()
    assert capture.changes(captured.recording.verdict, again) == []


def test_an_exit_record_of_another_argv_is_not_taken_for_this_bundles(deployed, monkeypatch, tmp_path):
    """An engine started with another --model-path (by hand, or another bundle on the same volume) dies: whenever it
    started, its records are not this bundle's; nothing is captured and no deploy is named."""
    sentinel, bundle, logs = deployed
    _run_dying_engine(monkeypatch, logs, tmp_path / "admin", DIED_LOADING, 2,
                      [*_argv(bundle), "--model-path", "/SOME/OTHER/MODEL"])
    record = engine_run.read(logs / engine_run.EXIT_FILE)
    assert record is not None and record.argv_sha256 != engine_run.bundle_argv_sha256(bundle)
    sentinel.step()
    assert sentinel.state.captures is None and not sentinel.state.reason.startswith("engine exited")
    assert sentinel.state.snapshot()["refused_start"] is None
    assert sentinel.deploy_of().deploy is None  # nor its start record for this deploy's engine


def _shift(logs: Path, hours: float) -> engine_run.EngineRun:
    """Both records of the last start moved `hours` into the past (as written long before the sentinel started)."""
    import datetime as dt
    moved = None
    for name in (engine_run.START_FILE, engine_run.EXIT_FILE):
        record = engine_run.read(logs / name)
        started = dt.datetime.fromisoformat(record.started) - dt.timedelta(hours=hours)
        moved = record.model_copy(update={"started": started.isoformat(timespec="milliseconds")})
        engine_run.write(logs / name, moved)
    return moved


def test_a_sentinel_started_long_after_the_dead_start_still_captures_it(monkeypatch, tmp_path):
    """A slow import on a small host, or a sentinel restarted by hand: no clock decides whose start it is, the argv
    hash does, so the start that died an hour before the sentinel started is still captured as this bundle's."""
    bundle = render.render(profiles.load("all-three"), render.RenderOptions(target="sim"), tmp_path / "bundle")
    logs = tmp_path / "logs"
    logs.mkdir()
    _run_dying_engine(monkeypatch, logs, tmp_path / "admin", DIED_LOADING, 2, _argv(bundle))
    record = _shift(logs, hours=1)
    sentinel = Sentinel(SentinelConfig("http://127.0.0.1:9", bundle, str(logs / "engine.log"), period_s=0.5,
                                       captures_dir=str(tmp_path / "captures")))
    sentinel.step()
    assert sentinel.state.state == CLOSED and sentinel.state.reason.startswith(
        "engine.health failed: observed exit code 2, needs an engine that reaches ready: the engine exited (code 2)")
    captured = capture.read(sentinel.state.captures["last"])
    assert captured.manifest.of == capture.DeployOf(bundle=engine_run.bundle_id_of(bundle), deploy=record.container,
                                                    started=record.started)


def test_an_exit_record_of_an_earlier_start_than_the_recorded_one_is_not_taken(deployed, monkeypatch, tmp_path):
    sentinel, bundle, logs = deployed
    _run_dying_engine(monkeypatch, logs, tmp_path / "admin", DIED_LOADING, 2, _argv(bundle))
    ended = engine_run.read(logs / engine_run.EXIT_FILE)
    engine_run.write(logs / engine_run.START_FILE, ended.model_copy(update={
        "container": "fedcba987654", "started": engine_run.now(), "exit_code": None, "phases": []}))
    sentinel.step()  # the engine recorded now is still starting: the exit record left beside it is an earlier one's
    assert sentinel.state.captures is None and not sentinel.state.reason.startswith("engine exited")
    assert sentinel.deploy_of().deploy == "fedcba987654"


def test_an_earlier_start_of_this_bundle_is_captured_under_its_own_container(deployed, monkeypatch, tmp_path):
    """The engine-logs volume outlives a stack: an earlier start of the same bundle read before this deploy's engine
    has started is that start's capture, named by its own container, so `invoke capture` calls it another deploy's."""
    sentinel, bundle, logs = deployed
    _run_dying_engine(monkeypatch, logs, tmp_path / "admin", DIED_LOADING, 2, _argv(bundle))
    sentinel.step()
    captured = capture.read(sentinel.state.captures["last"])
    ours = capture.DeployOf(bundle=engine_run.bundle_id_of(bundle), deploy="fedcba987654")  # this deploy's engine
    assert "of ANOTHER deploy" in field_capture.describe(captured, ours)


# -- the published refused start is this engine's, or none -----------------------------------------------------------

def test_the_refused_start_is_cleared_when_the_engine_starts_again(deployed, monkeypatch, tmp_path):
    sentinel, bundle, logs = deployed
    _run_dying_engine(monkeypatch, logs, tmp_path / "admin", DIED_LOADING, 2, _argv(bundle))
    sentinel.step()
    assert sentinel.state.snapshot()["refused_start"] is not None
    # restarted by hand (docs/runbook.md): the entrypoint removes the exit record, then writes its start record
    (logs / engine_run.EXIT_FILE).unlink()
    engine_run.write(logs / engine_run.START_FILE, engine_run.EngineRun(
        container="newcontainer1", started=engine_run.now(), argv_sha256=engine_run.bundle_argv_sha256(bundle)))
    sentinel.step()
    assert sentinel.state.snapshot()["refused_start"] is None
    assert not sentinel.state.reason.startswith("engine exited")


def test_the_refused_start_is_cleared_when_a_verification_passes(deployed, monkeypatch, tmp_path):
    sentinel, bundle, logs = deployed
    _run_dying_engine(monkeypatch, logs, tmp_path / "admin", DIED_LOADING, 2, _argv(bundle))
    sentinel.step()
    assert sentinel.state.snapshot()["refused_start"] is not None
    (logs / engine_run.EXIT_FILE).unlink()  # restarted; its start record written with an argv not read as this one's
    engine_run.write(logs / engine_run.START_FILE, engine_run.EngineRun(
        container="newcontainer1", started=engine_run.now(), argv_sha256="0" * 64))
    monkeypatch.setattr(type(sentinel.client), "status", lambda *a, **k: 200)
    monkeypatch.setattr("sparkgate.sentinel.service.verify", lambda *a, **k: Verdict(
        profile="all-three", engine_url="x", time=engine_run.now(), checks=[checked("engine.health", True, 200, 200, "t", "")]))
    passed = SuiteResult("x", True, 0, 0.0)
    monkeypatch.setattr("sparkgate.sentinel.service.suites.run_suite", lambda *a, **k: passed)
    monkeypatch.setattr(sentinel, "_server_info", lambda: {"startup_time": 1.0})
    sentinel.step()
    snap = sentinel.state.snapshot()
    assert snap["state"] == "open" and snap["refused_start"] is None


@pytest.mark.parametrize(("refused", "container", "started_at", "this"), [
    ({"container": "0123456789ab", "started": "2026-12-05T08:00:01.000+00:00"}, "0123456789abcdef",
     "2026-12-05T08:00:00.123456789Z", True),
    ({"container": "0123456789ab", "started": "2026-12-05T08:00:00.123+00:00"}, "0123456789abcdef",
     "2026-12-05T08:00:00.123456789Z", True),  # the record's time is cut to the millisecond
    ({"container": "0123456789ab", "started": "2026-12-05T07:00:00.000+00:00"}, "0123456789abcdef",
     "2026-12-05T08:00:00.123456789Z", False),  # an earlier start of the same container
    ({"container": "0123456789ab", "started": "2026-12-05T08:00:01.000+00:00"}, "0123456789abcdef", None, True),
    ({"container": "fedcba987654", "started": "2026-12-05T08:00:01.000+00:00"}, "0123456789abcdef",
     "2026-12-05T08:00:00Z", False),  # another container's
    ({"container": "0123456789ab", "started": "not a time"}, "0123456789abcdef", None, False),
    ({"container": ["0123456789ab"], "started": "2026-12-05T08:00:01.000+00:00"}, "0123456789abcdef", None, False),
    ({"started": "2026-12-05T08:00:01.000+00:00"}, "0123456789abcdef", None, False),
    ("refused", "0123456789abcdef", None, False),
    (None, "0123456789abcdef", None, False),
    ({"container": "0123456789ab", "started": "2026-12-05T08:00:01.000+00:00"}, None, None, False),
])
def test_invoke_deploy_names_only_this_starts_refusal(refused, container, started_at, this):
    assert deploy.is_this_start(refused, container, started_at) is this


# -- invoke capture: whose deploy ------------------------------------------------------------------------------------

def test_invoke_capture_says_when_a_file_is_another_deploys(deployed, monkeypatch, tmp_path):
    sentinel, bundle, logs = deployed
    _run_dying_engine(monkeypatch, logs, tmp_path / "admin", DIED_LOADING, 2, _argv(bundle))
    sentinel.step()
    captured = capture.read(sentinel.state.captures["last"])
    of = captured.manifest.of
    this = capture.DeployOf(bundle=engine_run.bundle_id_of(bundle), deploy=of.deploy)
    line = field_capture.describe(captured, this)
    assert "of this deploy" in line and "refused start" in line and "ANOTHER" not in line
    for other in (this.model_copy(update={"deploy": "fedcba987654"}), this.model_copy(update={"bundle": "f" * 16}),
                  this.model_copy(update={"deploy": None}), None):
        line = field_capture.describe(captured, other)
        assert "of ANOTHER deploy" in line and of.bundle in line and of.started in line
    unnamed = captured.model_copy(update={"manifest": captured.manifest.model_copy(update={"of": None})})
    assert "of an unnamed deploy" in field_capture.describe(unnamed, this)
    assert len(line.splitlines()) == 1


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(started=st.text(max_size=40))
def test_a_hostile_start_time_in_a_capture_is_refused_or_stays_one_line(started):
    try:
        of = capture.DeployOf(bundle="a" * 16, deploy="0123456789ab", started=started)
    except ValidationError:
        return  # capture.read names the field in its one-line refusal
    line = field_capture.whose(of, capture.DeployOf(bundle="b" * 16, deploy="0123456789ab"))
    assert "ANOTHER" in line and len(line.splitlines()) == 1


def test_the_bundle_id_is_the_same_on_the_host_and_in_the_stack(tmp_path):
    bundle = render.render(profiles.load("all-three"), render.RenderOptions(target="sim"), tmp_path / "b")
    files = {name: (bundle / name).read_text() for name in engine_run.BUNDLE_FILES}
    assert engine_run.bundle_id_of(bundle) == engine_run.bundle_id(files)
    assert engine_run.bundle_id_of(tmp_path) is None
    other = render.render(profiles.load("baseline"), render.RenderOptions(target="sim"), tmp_path / "c")
    assert engine_run.bundle_id_of(other) != engine_run.bundle_id_of(bundle)


def test_a_start_capture_whose_manifest_and_context_disagree_is_refused(deployed, monkeypatch, tmp_path):
    sentinel, bundle, logs = deployed
    _run_dying_engine(monkeypatch, logs, tmp_path / "admin", DIED_LOADING, 2, _argv(bundle))
    sentinel.step()
    captured = capture.read(sentinel.state.captures["last"])
    lying = captured.model_copy(update={"context": captured.context.model_copy(update={"start": None})})
    path = capture.write(lying, tmp_path / "lying.capture.tar.gz")
    with pytest.raises(capture.CaptureRefused, match="judged 'start'"):
        capture.read(path)
