"""A verification recorded against the simulator replays, with no engine, to the same verdict; a recording that does
not hold what the code asks for is refused, never judged on made-up evidence."""

from __future__ import annotations

import contextlib
import json

import pytest

from sparkgate.bundle import expectations as expectations_mod
from sparkgate.evidence import logs
from sparkgate.evidence.recording import Recording, RecordingClient, ReplayMismatch, replay
from sparkgate.evidence.verify import verify
from sparkgate.profile import loading as profiles

SCALE = 0.05


def outcomes(verdict: dict) -> dict[str, bool]:
    return {check["name"]: check["passed"] for check in verdict["checks"]}


def recorded(sim, profile: str) -> Recording:
    expectations = expectations_mod.build(profiles.load(profile), "sim", sim.scale)
    log = logs.from_file(str(sim.log_dir / f"sim-{sim.port}.out"))
    client = RecordingClient(sim.base_url)
    verdict = verify(sim.base_url, expectations, log, client=client)
    return Recording.model_validate_json(Recording.of(client, expectations, log, verdict).model_dump_json())


@pytest.fixture(scope="module")
def healthy_and_refused(tmp_path_factory):
    """all-three healthy, and with CUDA graphs off: one recording each (started once for the module)."""
    from tests.plugins.simproc import Sim, profile_launch

    made = {}
    for name, faults in (("healthy", ""), ("graphs-off", "cuda-graph-off")):
        argv, env = profile_launch("all-three")
        sim = Sim(argv, {**env, "SPARKGATE_SIM_FAULTS": faults} if faults else env,
                  tmp_path_factory.mktemp(name), scale=SCALE).start().wait_ready()
        try:
            made[name] = recorded(sim, "all-three")
        finally:
            sim.stop()
    return made


@pytest.mark.parametrize("name", ["healthy", "graphs-off"])
def test_a_recording_replays_to_its_verdict_without_an_engine(healthy_and_refused, name):
    recording = healthy_and_refused[name]
    again = replay(recording).as_dict()
    assert outcomes(again) == outcomes(recording.verdict)
    assert again["passed"] is recording.verdict["passed"] is (name == "healthy")
    observed = {c["name"]: c["observed"] for c in recording.verdict["checks"]}
    assert {c["name"]: c["observed"] for c in again["checks"]}["engine.cuda_graph_passes"] == \
        observed["engine.cuda_graph_passes"]


def test_the_replayed_calibration_reads_the_recorded_engine_time(healthy_and_refused):
    recording = healthy_and_refused["healthy"]
    again = replay(recording).as_dict()
    assert again["calibration"]["decode_tok_s"] == recording.verdict["calibration"]["decode_tok_s"] > 0


def test_a_recording_missing_an_answer_is_refused(healthy_and_refused):
    recording = healthy_and_refused["healthy"]
    cut = recording.model_copy(update={"exchanges": recording.exchanges[:-1]})
    with pytest.raises(ReplayMismatch, match="beyond the"):
        replay(cut)


def test_a_recording_of_other_calls_is_refused(healthy_and_refused):
    recording = healthy_and_refused["healthy"]
    swapped = [recording.exchanges[1], recording.exchanges[0], *recording.exchanges[2:]]
    with pytest.raises(ReplayMismatch, match="call 1"):
        replay(recording.model_copy(update={"exchanges": swapped}))


def test_a_recording_with_extra_calls_is_refused(healthy_and_refused):
    recording = healthy_and_refused["healthy"]
    longer = [*recording.exchanges, recording.exchanges[0]]
    with pytest.raises(ReplayMismatch, match="never asked for"):
        replay(recording.model_copy(update={"exchanges": longer}))


def test_a_recording_with_unknown_fields_does_not_load(healthy_and_refused):
    document = json.loads(healthy_and_refused["healthy"].model_dump_json())
    document["exchanges"][0]["injected"] = True
    with pytest.raises(ValueError, match="injected"):
        Recording.model_validate(document)


def test_no_secret_reaches_a_recording(tmp_path):
    """The API key the client sends, the admin key, and both as SGLang echoes them (server_info fields, the
    launch command, the server_args log line) are replaced by a marker; the verdict still replays."""
    from tests.plugins.simproc import Sim, profile_launch

    api_key, admin_key = "LIVEKEY-5f1e9a", "ADMINKEY-77c0d2"
    argv, env = profile_launch("baseline")
    sim = Sim([*argv, "--api-key", api_key, "--admin-api-key", admin_key], env, tmp_path, scale=SCALE).start()
    try:
        sim.wait_ready()
        expectations = expectations_mod.build(profiles.load("baseline"), "sim", sim.scale)
        log = logs.from_file(str(sim.log_dir / f"sim-{sim.port}.out"))
        assert api_key in (log.text or "")  # the engine's own log carries it: the recording must not
        client = RecordingClient(sim.base_url, api_key=api_key)
        verdict = verify(sim.base_url, expectations, log, client=client)
        recording = Recording.of(client, expectations, log, verdict, secrets=(admin_key,))
    finally:
        sim.stop()
    text = recording.model_dump_json()
    assert api_key not in text and admin_key not in text
    assert "<redacted>" in text
    assert outcomes(replay(recording).as_dict()) == outcomes(recording.verdict)


def test_the_admin_key_probe_and_host_memory_are_recorded_and_replayed_without_their_files(tmp_path):
    """The sentinel's verification also reads the admin key file (to probe enforcement) and the host's meminfo:
    both readings travel in the recording, so a replay elsewhere judges them the same, without the files."""
    from tests.plugins.simproc import Sim, profile_launch

    admin_key = "ADMINKEY-31b7e0"
    key_file, meminfo = tmp_path / "admin_api_key", tmp_path / "meminfo"
    key_file.write_text(admin_key + "\n")
    meminfo.write_text("MemTotal: 131072000 kB\nMemAvailable: 2097152 kB\nSwapTotal: 0 kB\nSwapFree: 0 kB\n")
    argv, env = profile_launch("baseline")
    sim = Sim([*argv, "--admin-api-key", admin_key], env, tmp_path, scale=SCALE).start()
    try:
        sim.wait_ready()
        expectations = expectations_mod.build(profiles.load("baseline"), "sim", sim.scale)
        log = logs.from_file(str(sim.log_dir / f"sim-{sim.port}.out"))
        client = RecordingClient(sim.base_url)
        verdict = verify(sim.base_url, expectations, log, client=client, admin_key_file=str(key_file),
                         meminfo_path=str(meminfo), calibrate=False)
        recording = Recording.model_validate_json(
            Recording.of(client, expectations, log, verdict, calibrate=False, secrets=(admin_key,)).model_dump_json())
    finally:
        sim.stop()
    key_file.unlink()
    meminfo.unlink()
    assert admin_key not in recording.model_dump_json()
    checks = {c["name"]: c for c in recording.verdict["checks"]}
    assert checks["engine.admin_key_enforced"]["passed"], checks["engine.admin_key_enforced"]
    assert not checks["host.memory_headroom"]["passed"]  # 2 GiB left: under the 4 GiB floor
    again = {c["name"]: c for c in replay(recording).as_dict()["checks"]}
    for name in ("engine.admin_key_enforced", "host.memory_headroom"):
        assert (again[name]["passed"], again[name]["observed"]) == (checks[name]["passed"], checks[name]["observed"])


@pytest.mark.parametrize("reading", [{"key_file": "k", "with_key": "200; rm -rf /"}, {"key_file": "k", "extra": 1},
                                     {"meminfo": {"total_kib": 1}, "error": None, "holders": []}])
def test_a_malformed_reading_does_not_load(reading):
    call = "host_memory" if "meminfo" in reading else "admin_key_probe"
    with pytest.raises(ValueError):
        Recording.model_validate({"engine_url": "http://127.0.0.1:1", "expectations": {}, "log_source": "x",
                                  "log_text": "", "verdict": {},
                                  "exchanges": [{"call": call, "path": "k", "reading": reading}]})


def test_a_verification_cut_short_by_its_wall_clock_replays_to_the_same_cut(tmp_path, monkeypatch):
    """A hung or slow engine spends the calibration's wall-clock allowance: the recorded verification stops early.
    Its replay runs on the recorded durations (the replay client's clock), so it stops at the same request and
    judges the same verdict, instead of asking for requests that were never sent."""
    from sparkgate.evidence import calibration
    from tests.plugins.simproc import Sim, profile_launch

    monkeypatch.setattr(calibration, "wall_cap_s", lambda budget, scale: 0.25)
    argv, env = profile_launch("baseline")
    sim = Sim(argv, env, tmp_path, scale=SCALE).start().wait_ready()
    try:
        recording = recorded(sim, "baseline")
    finally:
        sim.stop()
    sent = recording.verdict["calibration"]["requests"]
    prompts = recording.expectations["calibration"]["prompts"]
    assert recording.verdict["calibration"]["budget_exhausted"] and 0 < len(sent) < prompts
    assert all(e.seconds is not None for e in recording.exchanges)
    again = replay(recording).as_dict()
    assert len(again["calibration"]["requests"]) == len(sent) and again["calibration"]["budget_exhausted"]
    assert outcomes(again) == outcomes(recording.verdict)


def test_the_client_timing_replays_to_the_same_digits_whatever_the_clock(monkeypatch):
    """Chunks arriving on rounding boundaries of the shown figures, read by a clock far from zero: the live figures
    and the replayed ones are the same floats (a live sum of clock and offset once moved a digit, CI 2026-12-07)."""
    from sparkgate.evidence import calibration
    from sparkgate.evidence.client import EngineClient
    from sparkgate.evidence.recording import ReplayClient

    meta = {"completion_tokens": 4, "finish_reason": {"type": "length"}, "first_token_latency": 0.01,
            "e2e_latency": 0.04}
    offsets = (0.01235, 0.02345, 0.03455, 0.24215)
    ticks = iter(123456.789012345 + 0.3 * n for n in range(100))
    monkeypatch.setattr(EngineClient, "clock", lambda self: next(ticks))
    monkeypatch.setattr(EngineClient, "stream_generate", lambda self, body, timeout: iter(
        [(o, {"meta_info": meta if at == len(offsets) - 1 else {}}) for at, o in enumerate(offsets)]))
    live_client = RecordingClient("http://127.0.0.1:9")
    live = calibration.run(live_client, 1, 4, 10.0, 1.0)
    replayed = calibration.run(ReplayClient("http://127.0.0.1:9", exchanges=tuple(live_client.exchanges)), 1, 4, 10.0,
                               1.0)
    shown = [(r.client_ttft_wall_s, r.client_decode_wall_s) for r in live.completed]
    assert shown == [(r.client_ttft_wall_s, r.client_decode_wall_s) for r in replayed.completed] == [
        (round(0.01235, 4), round(0.24215 - 0.01235, 4))]
    assert live.as_dict() == replayed.as_dict()


def test_the_engine_client_yields_each_chunk_as_seconds_since_its_send(monkeypatch):
    """What the recording and the calibration read: offsets from the send, never readings of the monotonic clock."""
    from sparkgate.evidence import client as client_mod

    clock = iter([5000.25, 5000.5, 5001.0])  # the send, then each chunk's arrival
    monkeypatch.setattr(client_mod.time, "monotonic", lambda: next(clock))
    monkeypatch.setattr(client_mod.urllib.request, "urlopen", lambda request, timeout: contextlib.nullcontext())
    monkeypatch.setattr(client_mod, "_sse_lines", lambda response: [
        (client_mod.time.monotonic(), b'data: {"text": "a"}'), (client_mod.time.monotonic(), b"data: [DONE]")])
    chunks = list(client_mod.EngineClient("http://127.0.0.1:9").stream_generate({"text": "q"}, timeout=1.0))
    assert chunks == [(0.25, {"text": "a"})]
