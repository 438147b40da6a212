"""Capture files (sparkgate/evidence/capture.py): the corpus replays to its recorded verdicts, a capture round-trips,
no secret reaches one, and a hostile or damaged capture is refused in one line, never judged and never a traceback."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import tarfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sparkgate import cli
from sparkgate.evidence import capture
from sparkgate.evidence.recording import Recording, replay
from sparkgate.sentinel.captures import CaptureStore
from tests import capture_corpus

CORPUS = sorted(capture_corpus.CORPUS.glob("*" + capture.SUFFIX))
HEALTHY = capture_corpus.CORPUS / capture_corpus.file_name("sim", "all-three", "")
REFUSED = capture_corpus.CORPUS / capture_corpus.file_name("sim", "all-three", "humming-fallback")


def outcomes(verdict: dict) -> dict[str, bool]:
    return {c["name"]: c["passed"] for c in verdict["checks"]}


def members(path: Path) -> dict[str, bytes]:
    with tarfile.open(path, "r:gz") as tar:
        return {m.name: tar.extractfile(m).read() for m in tar}


def write_members(path: Path, files: dict[str, bytes], kinds: dict[str, bytes] | None = None) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def rehashed(files: dict[str, bytes]) -> dict[str, bytes]:
    """`files` with the manifest's digests made to match (an altered member that still hashes right)."""
    manifest = json.loads(files["manifest.json"])
    for name in ("recording.json", "context.json"):
        manifest["members"][name] = {"sha256": hashlib.sha256(files[name]).hexdigest(), "size": len(files[name])}
    return {**files, "manifest.json": json.dumps(manifest).encode()}


# -- the corpus ------------------------------------------------------------------------------------------------------

def test_the_corpus_holds_real_engine_and_simulator_captures():
    sources = {path.name.split("--")[0] for path in CORPUS}
    assert {"sim", "real"} <= sources, "re-record with `invoke test.captures` (tests/capture_corpus.py)"
    assert any(capture.read(p).manifest.passed for p in CORPUS) and not all(capture.read(p).manifest.passed
                                                                              for p in CORPUS)


@pytest.mark.parametrize("path", CORPUS, ids=lambda p: p.name.removesuffix(capture.SUFFIX))
def test_each_captured_verdict_replays_unchanged_with_the_current_code(path):
    captured = capture.read(path)
    again = replay(captured.recording).as_dict()
    assert outcomes(again) == outcomes(captured.recording.verdict)
    assert capture.changes(captured.recording.verdict, again) == []
    assert captured.manifest.failing == [n for n, ok in outcomes(captured.recording.verdict).items() if not ok]


def test_a_changed_check_is_named_with_both_readings():
    recorded = capture.read(REFUSED).recording.verdict
    now = json.loads(json.dumps(recorded))
    now["checks"][0]["passed"] = not now["checks"][0]["passed"]
    now["checks"][1]["observed"] = "something else"
    gone = now["checks"].pop()
    found = {c["check"]: c for c in capture.changes(recorded, now)}
    assert found[recorded["checks"][0]["name"]]["change"] == "outcome"
    assert found[recorded["checks"][1]["name"]] == {"check": recorded["checks"][1]["name"], "change": "observed",
                                                     "recorded": recorded["checks"][1]["observed"],
                                                     "now": "something else"}
    assert found[gone["name"]]["change"] == "gone"


def test_the_committed_capture_schema_is_current():
    committed = json.loads((Path(__file__).resolve().parents[3] / "schema" / "capture.schema.json").read_text())
    assert committed == capture.json_schema(), "stale: run `invoke schema`"


# -- writing ---------------------------------------------------------------------------------------------------------

def remade(tmp_path: Path, **changes) -> Path:
    captured = capture.read(HEALTHY)
    made = capture.make(captured.recording, profile=captured.manifest.profile, argv=changes.get("argv", ["x"]),
                        engine_env=changes.get("env", {}), image=captured.context.image,
                        hosts=captured.context.hosts, suites=changes.get("suites"),
                        secrets=changes.get("secrets", ()))
    return capture.write(made, tmp_path / "again.capture.tar.gz", changes.get("secrets", ()))


def test_a_capture_round_trips_and_is_written_whole(tmp_path):
    path = remade(tmp_path)
    assert capture.read(path).recording == capture.read(HEALTHY).recording
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # no temp file left beside it


def test_no_secret_reaches_a_capture(tmp_path):
    api, admin, hf = "sk-live-8f2b1c9d", "ADMIN-3e7a55d0c1", "hf_qWeRtYuIoPaSdFgHjKl"
    path = remade(tmp_path, argv=["--api-key", api, "--admin-api-key=" + admin, "--model-path", "/m"],
                  env={"HF_TOKEN": hf, "MY_SERVICE_API_KEY": "whatever-secret", "SGLANG_ENABLE_FP8_LM_HEAD": "1"},
                  suites={"smoke": {"stdout": f"Authorization: Bearer {api} token={hf}"}},
                  secrets=(api, admin, hf))
    raw = b"".join(members(path).values())
    for secret in (api, admin, hf, "whatever-secret"):
        assert secret.encode() not in raw, secret
    context = capture.read(path).context
    assert context.argv[:2] == ["--api-key", "<redacted>"] and context.engine_env["SGLANG_ENABLE_FP8_LM_HEAD"] == "1"


def test_a_long_engine_log_keeps_its_head_and_tail_and_says_so():
    text = "HEAD\n" + "x" * (capture.LOG_KEEP_BYTES * 2) + "\nTAIL"
    kept, left_out = capture.cut_log(text)
    assert kept.startswith("HEAD") and kept.endswith("TAIL") and left_out > capture.LOG_KEEP_BYTES
    assert len(kept.encode()) < capture.LOG_KEEP_BYTES + 200
    assert capture.cut_log("short") == ("short", 0)


# -- reading hostile files -------------------------------------------------------------------------------------------

def refusal_of(path: Path) -> str:
    with pytest.raises(capture.CaptureRefused) as raised:
        capture.read(path)
    line = str(raised.value)
    assert "\n" not in line and str(path) in line
    return line


def test_damaged_and_hostile_captures_are_refused_in_one_line(tmp_path):
    good = members(HEALTHY)
    cases = {
        "missing": (None, "cannot read"),
        "truncated": (HEALTHY.read_bytes()[:4000], "not a readable"),
        "not gzip": (b"PK\x03\x04 a zip", "not a readable"),
        "extra member": (write_members(tmp_path / "x", {**good, "../../etc/passwd": b"x"}).read_bytes(),
                         "unexpected member"),
        "missing member": (write_members(tmp_path / "y", {k: v for k, v in good.items() if k != "context.json"})
                           .read_bytes(), "missing context.json"),
        "altered": (write_members(tmp_path / "z", {**good, "recording.json": good["recording.json"].replace(
            b'"passed":true', b'"passed":false', 1)}).read_bytes(), "does not match its manifest digest"),
        "joined": (HEALTHY.read_bytes() * 2, "bytes after the end"),
        "not json": (write_members(tmp_path / "w", rehashed({**good, "context.json": b"{nope"})).read_bytes(),
                     "context.json is not JSON"),
        "extra field": (write_members(tmp_path / "v", rehashed({**good, "context.json": json.dumps(
            {**json.loads(good["context.json"]), "injected": 1}).encode()})).read_bytes(), "field injected"),
        "newer version": (write_members(tmp_path / "u", {**good, "manifest.json": json.dumps(
            {**json.loads(good["manifest.json"]), "capture_version": 2}).encode()}).read_bytes(),
                          "capture_version 2"),
        "deep": (write_members(tmp_path / "t", rehashed({**good, "context.json": b"[" * 100000 + b"]" * 100000}))
                 .read_bytes(), "context.json"),
    }
    for name, (data, expected) in cases.items():
        path = tmp_path / f"{name.replace(' ', '-')}{capture.SUFFIX}"
        if data is not None:
            path.write_bytes(data)
        assert expected in refusal_of(path), name


def test_a_member_that_is_a_link_is_refused(tmp_path):
    path = tmp_path / "link.capture.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        info = tarfile.TarInfo("recording.json")
        info.type, info.linkname = tarfile.SYMTYPE, "/etc/shadow"
        tar.addfile(info)
    assert "unexpected member 'recording.json'" in refusal_of(path)


def test_a_profile_that_differs_from_the_recorded_expectations_is_refused(tmp_path):
    good = members(HEALTHY)
    manifest = {**json.loads(good["manifest.json"]), "profile": "baseline"}
    path = write_members(tmp_path / "p.capture.tar.gz", {**good, "manifest.json": json.dumps(manifest).encode()})
    assert "is not the recorded expectations'" in refusal_of(path)


def test_an_oversized_capture_is_refused_before_it_is_read(tmp_path, monkeypatch):
    monkeypatch.setattr(capture, "MAX_FILE_BYTES", 1000)
    assert "over the 1000" in refusal_of(HEALTHY)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(position=st.integers(min_value=0), value=st.integers(min_value=0, max_value=255))
def test_any_single_byte_change_is_refused_or_reads_the_same(tmp_path, position, value):
    data = bytearray(HEALTHY.read_bytes())
    data[position % len(data)] = value
    path = tmp_path / "mutated.capture.tar.gz"
    path.write_bytes(bytes(data))
    try:
        again = capture.read(path)
    except capture.CaptureRefused:
        return
    assert again == capture.read(HEALTHY)  # a byte gzip does not check (its header's time or OS) changes nothing


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(payload=st.binary(max_size=2000))
def test_arbitrary_bytes_are_refused(tmp_path, payload):
    path = tmp_path / "junk.capture.tar.gz"
    path.write_bytes(gzip.compress(payload) if payload[:1] == b"\x00" else payload)
    refusal_of(path)


# -- sparkgate verify --replay ---------------------------------------------------------------------------------------

def test_replay_of_a_healthy_capture_exits_zero_and_says_unchanged(capsys, tmp_path):
    out = tmp_path / "verdict.json"
    assert cli.main(["verify", "--replay", str(HEALTHY), "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "unchanged" in printed and "profile all-three" in printed
    written = json.loads(out.read_text())
    assert written["passed"] is True and written["changes"] == []


def test_replay_of_a_refusal_exits_one_naming_the_failing_checks(capsys):
    assert cli.main(["verify", "--replay", str(REFUSED)]) == 1
    err = capsys.readouterr().err
    assert "humming.moe_layers_target" in err and len(err.strip().splitlines()) == 1


def test_replay_of_a_hostile_capture_exits_one_with_one_line(capsys, tmp_path):
    path = tmp_path / "bad.capture.tar.gz"
    path.write_bytes(b"\x1f\x8b garbage")
    assert cli.main(["verify", "--replay", str(path)]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err and str(path) in err


def test_replay_with_live_flags_is_a_usage_error(capsys):
    assert cli.main(["verify", "--replay", str(HEALTHY), "--engine-url", "http://127.0.0.1:1"]) == 2
    assert "--engine-url" in capsys.readouterr().err


def test_a_capture_asking_its_repeated_question_the_older_way_is_refused(tmp_path):
    """Only the GPU lane's own records (read as recordings, never as captures) were asked the older way."""
    captured = capture.read(HEALTHY)
    older = captured.recording.model_copy(update={"repeat_room": "own"})
    made = capture.make(older, profile="all-three", argv=[], engine_env={}, image=captured.context.image, hosts=[])
    path = capture.write(made, tmp_path / "older.capture.tar.gz")
    with pytest.raises(capture.CaptureRefused, match="repeat_room 'own'"):
        capture.read(path)


def test_a_capture_the_code_cannot_rejudge_is_refused_not_judged(tmp_path, capsys):
    captured = capture.read(HEALTHY)
    cut = captured.recording.model_copy(update={"exchanges": captured.recording.exchanges[:3]})
    made = capture.make(cut, profile="all-three", argv=[], engine_env={}, image=captured.context.image, hosts=[])
    path = capture.write(made, tmp_path / "cut.capture.tar.gz")
    assert cli.main(["verify", "--replay", str(path)]) == 1
    assert "cannot be judged again" in capsys.readouterr().err


# -- the sentinel's store --------------------------------------------------------------------------------------------

def test_the_sentinel_keeps_the_last_capture_and_a_bounded_number_of_refused_ones(tmp_path):
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "argv.json").write_text(json.dumps(["--model-path", "/m", "--api-key", "k-12345678"]))
    (bundle / "engine-env.json").write_text(json.dumps({"HF_TOKEN": "hf_abcdefgh"}))
    store = CaptureStore(tmp_path / "captures", bundle, keep_refused=2)
    refused, healthy = capture.read(REFUSED), capture.read(HEALTHY)
    for _ in range(4):
        listing = store.save(refused.recording, refused.recording.expectations, {"gate": {"passed": False}}, ())
    assert len(listing["refused"]) == 2 and listing["last"]
    listing = store.save(healthy.recording, healthy.recording.expectations, {"gate": {"passed": True}}, ())
    assert len(listing["refused"]) == 2 and capture.read(listing["last"]).manifest.passed
    kept = capture.read(listing["refused"][-1])
    assert kept.context.argv[-1] == "<redacted>" and kept.context.engine_env["HF_TOKEN"] == "<redacted>"
    assert kept.context.hosts[0].source == "sentinel"


def test_a_capture_that_cannot_be_written_does_not_stop_the_sentinel(tmp_path):
    blocked = tmp_path / "file"
    blocked.write_text("not a directory")
    store = CaptureStore(blocked, tmp_path)
    healthy = capture.read(HEALTHY)
    listing = store.save(healthy.recording, healthy.recording.expectations, {}, ())
    assert "capture not written" in listing["error"] and listing["last"] is None


def test_recordings_in_the_corpus_are_valid_recordings():
    for path in CORPUS:
        assert isinstance(capture.read(path).recording, Recording)


# -- what the hostile review found -----------------------------------------------------------------------------------

def with_recording(tmp_path: Path, change) -> Path:
    """The healthy capture with its recording.json changed by `change(document)`, digests made to match."""
    files = members(HEALTHY)
    document = json.loads(files["recording.json"])
    change(document)
    files["recording.json"] = json.dumps(document).encode()
    return write_members(tmp_path / "changed.capture.tar.gz", rehashed(files))


@pytest.mark.parametrize("change", [
    lambda d: d["expectations"].pop("calibration"),
    lambda d: d["expectations"].update(time_scale="abc"),
    lambda d: d["expectations"].update(engine=None),
    lambda d: d["expectations"].update(requested=7),
    lambda d: d["verdict"].update(checks=7),
], ids=["no-calibration", "time-scale-text", "engine-null", "requested-int", "checks-int"])
def test_recorded_evidence_that_breaks_the_checks_is_refused_in_one_line(tmp_path, capsys, change):
    assert cli.main(["verify", "--replay", str(with_recording(tmp_path, change))]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert any(s in err for s in ("does not fit", "cannot be judged again", "recorded verdict is not one",
                                  "time_scale")), err


def test_a_gate_refusal_the_replay_cannot_rejudge_still_exits_one(tmp_path, capsys):
    captured = capture.read(HEALTHY)
    made = capture.make(captured.recording, profile="all-three", argv=[], engine_env={}, image=captured.context.image,
                        hosts=[], suites={"smoke": {"passed": False}, "gate": {"passed": False,
                                                                                "cold_refusal_kept": True}})
    assert made.manifest.passed and made.manifest.gate_passed is False and not made.admitted
    path = capture.write(made, tmp_path / "gate.capture.tar.gz")
    assert cli.main(["verify", "--replay", str(path)]) == 1
    err = capsys.readouterr().err
    assert "the gate refused this engine" in err and "smoke" in err and "answers.cold_prefill" in err


def test_capture_text_reaches_the_terminal_inert(tmp_path, capsys):
    path = with_recording(tmp_path, lambda d: d["verdict"]["checks"][0].update(observed="\x1b[2J\x1b]8;;x\x07fake"))
    cli.main(["verify", "--replay", str(path)])
    printed = capsys.readouterr().out
    assert "\x1b[2J" not in printed and "\x1b]8" not in printed and "\\u001b" in printed


def test_url_credentials_never_reach_a_recording():
    from sparkgate.evidence.logs import EngineLog
    from sparkgate.evidence.recording import RecordingClient
    from sparkgate.evidence.results import Verdict

    url = "http://gate:pa/ss-w0rd@127.0.0.1:9"
    recording = Recording.of(RecordingClient(url), {"profile": "x"}, EngineLog("x", ""),
                             Verdict(profile="x", engine_url=url, time="t"))
    assert "pa/ss-w0rd" not in recording.model_dump_json()
    assert recording.engine_url == recording.verdict["engine_url"] == "http://127.0.0.1:9"


def test_environment_secrets_are_found_by_name_segment():
    env = {"HF_TOKEN": "a", "OPENAI_KEY": "b", "DB_PASSWORD": "c", "AWS_CREDENTIALS": "d", "SGLANG_API_KEY": "e",
           "SGLANG_MAX_NEW_TOKENS_LIMIT": "4096", "SGLANG_ENABLE_FP8_LM_HEAD": "1", "KEYBOARD": "us"}
    scrubbed = capture.scrub_env(env, ())
    assert {k for k, v in scrubbed.items() if v == "<redacted>"} == {"HF_TOKEN", "OPENAI_KEY", "DB_PASSWORD",
                                                                     "AWS_CREDENTIALS", "SGLANG_API_KEY"}


def test_a_log_longer_than_a_capture_keeps_is_refused(tmp_path):
    path = with_recording(tmp_path, lambda d: d.update(log_text="x" * (capture.LOG_KEEP_BYTES + 1000)))
    assert "log_text" in refusal_of(path)


@pytest.mark.parametrize("chunks", [[[-1.0, {}]], [[2.0, {}], [1.0, {}]], [[float("nan"), {}]], [[1e12, {}]]],
                         ids=["negative", "out-of-order", "nan", "huge"])
def test_stream_chunk_offsets_must_be_real_arrival_times(chunks):
    with pytest.raises(ValueError, match="chunk arrival offsets"):
        Recording.model_validate({"engine_url": "http://127.0.0.1:1", "expectations": {}, "log_source": "x",
                                  "log_text": "", "verdict": {"passed": True, "checks": []},
                                  "exchanges": [{"call": "stream", "path": "/generate", "chunks": chunks}]})


def test_a_refusal_quoting_capture_text_reaches_the_terminal_inert(tmp_path, capsys):
    def plant(document):
        document["exchanges"][0]["path"] = "/health\x1b]0;PWNED\x07\u202e"
    assert cli.main(["verify", "--replay", str(with_recording(tmp_path, plant))]) == 1
    err = capsys.readouterr().err
    assert "\x1b" not in err and "\u202e" not in err and "\\u001b" in err


def test_the_sentinel_cuts_a_log_that_escapes_past_a_capture_until_it_reads_back(tmp_path):
    healthy = capture.read(HEALTHY)
    quoted = healthy.recording.model_copy(update={"log_text": '"' * (capture.LOG_KEEP_BYTES + 10)})
    store = CaptureStore(tmp_path / "captures", tmp_path)
    listing = store.save(quoted, healthy.recording.expectations, {}, ())
    assert "error" not in listing
    kept = capture.read(listing["last"])
    assert kept.manifest.log_cut_bytes > 0 and len(kept.recording.log_text) < capture.LOG_KEEP_BYTES


def test_credentials_in_any_url_of_argv_or_env_are_removed():
    argv = capture.scrub_argv(["--model-path", "s3://AKIA:secretkey@bucket/m"], ())
    env = capture.scrub_env({"HTTPS_PROXY": "http://bob:hunter2pass@proxy:3128", "OPENAI_APIKEY": "x",
                             "S3_ACCESS_KEY_ID": "y"}, ())
    assert argv[1] == "s3://<redacted>@bucket/m" and env["HTTPS_PROXY"] == "http://<redacted>@proxy:3128"
    assert env["OPENAI_APIKEY"] == env["S3_ACCESS_KEY_ID"] == "<redacted>"
