"""A start refused before any verification leaves its own capture: the engine entrypoint's exit record, the
sentinel's capture of that start (its log, phases reached and never reached, host memory, the deploy it is of),
`invoke capture`'s one line saying whose deploy a file is, and `verify --replay` judging the start again."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from sparkgate import cli
from sparkgate.bundle import expectations, render
from sparkgate.deploy import field_capture
from sparkgate.evidence import capture, startup
from sparkgate.evidence.logs import EngineLog
from sparkgate.profile import loading as profiles
from sparkgate.runtime import engine_entrypoint, engine_run
from sparkgate.sentinel.service import Sentinel, SentinelConfig
from sparkgate.sentinel.state import CLOSED
from sparkgate.sglang import conformance as C
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
    (["INFO my-fork: starting", "loading shards 1/40", "boom"], 1, "no SGLang startup line in the log"),
    ([], 2, "unknown"),
])
def test_each_likely_cause_is_read_from_the_log(lines, code, cause):
    observed = _health(startup.judge_start(_want(), EngineLog("test log", "\n".join(lines)), exit_code=code))
    assert observed["likely_cause"] == cause


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=st.text(max_size=3000), code=st.none() | st.integers(-300, 600))
def test_hostile_log_text_is_judged_never_raises(text, code):
    checks = startup.judge_start(_want(), EngineLog("hostile", text), exit_code=code)
    observed = _health(checks)
    assert set(observed["phases_reached"]) | set(observed["never_reached"]) == set(PHASES)
    assert "\n" not in checks[0].hint.split("likely cause:")[0]


# -- the engine entrypoint's records ---------------------------------------------------------------------------------

def _run_dying_engine(monkeypatch, logs: Path, admin: Path, lines: list[str], code: int) -> int:
    monkeypatch.delenv("SGLANG_ENABLE_FP8_LM_HEAD", raising=False)
    script = f"import sys\nfor line in {lines!r}: print(line)\nsys.exit({code})"
    monkeypatch.setitem(engine_entrypoint.LAUNCHERS, "sim", ["-c", script])
    return engine_entrypoint.run("sim", logs / "engine.log", ["--model-path", "/m"], admin_dir=admin,
                                 mountinfo=f"1 0 0:1 / {admin} rw - tmpfs tmpfs rw\n")


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
    sentinel = Sentinel(SentinelConfig("http://127.0.0.1:9", bundle, str(logs / "engine.log"), tmp_path, period_s=0.5,
                                       meminfo_path=str(meminfo), captures_dir=str(tmp_path / "captures")))
    return sentinel, bundle, logs


def test_the_sentinel_captures_a_start_that_died_and_it_replays_to_the_refusal(deployed, monkeypatch, tmp_path,
                                                                             capsys):
    sentinel, bundle, logs = deployed
    sentinel.step()  # the engine is still loading: no exit record, nothing captured
    assert sentinel.state.captures is None
    _run_dying_engine(monkeypatch, logs, tmp_path / "admin", DIED_LOADING, 2)
    sentinel.step()
    assert sentinel.state.state == CLOSED and sentinel.state.reason.startswith("engine exited (code 2)")
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


def test_an_earlier_deploys_exit_record_is_not_taken_for_this_start(deployed):
    sentinel, _, logs = deployed
    earlier = engine_run.EngineRun(container="0123456789ab", started="2020-01-01T00:00:00+00:00",
                                   argv_sha256="0" * 64, exit_code=1, exited="2020-01-01T00:01:00+00:00")
    engine_run.write(logs / engine_run.EXIT_FILE, earlier)
    sentinel.step()
    assert sentinel.state.captures is None and not sentinel.state.reason.startswith("engine exited")
    assert sentinel.deploy_of().deploy is None  # nor its start record for this deploy's engine


# -- invoke capture: whose deploy ------------------------------------------------------------------------------------

def test_invoke_capture_says_when_a_file_is_another_deploys(deployed, monkeypatch, tmp_path):
    sentinel, bundle, logs = deployed
    _run_dying_engine(monkeypatch, logs, tmp_path / "admin", DIED_LOADING, 2)
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
    sentinel, _, logs = deployed
    _run_dying_engine(monkeypatch, logs, tmp_path / "admin", DIED_LOADING, 2)
    sentinel.step()
    captured = capture.read(sentinel.state.captures["last"])
    lying = captured.model_copy(update={"context": captured.context.model_copy(update={"start": None})})
    path = capture.write(lying, tmp_path / "lying.capture.tar.gz")
    with pytest.raises(capture.CaptureRefused, match="judged 'start'"):
        capture.read(path)
