"""The container entrypoint refuses the FP8 head env together with the fp32 flag, however written."""

from __future__ import annotations

import pytest

from sparkgate.runtime import engine_entrypoint, engine_run
from sparkgate.sglang import flags as F


@pytest.mark.parametrize(
    ("argv", "environ", "refused"),
    [
        (["--enable-fp32-lm-head"], {"SGLANG_ENABLE_FP8_LM_HEAD": "1"}, True),
        (["--enable-fp32-lm"], {"SGLANG_ENABLE_FP8_LM_HEAD": "true"}, True),
        (["--enable-fp32-lm-head=1"], {"SGL_ENABLE_FP8_LM_HEAD": "yes"}, True),
        (["--enable-fp32-lm-head"], {"SGLANG_ENABLE_FP8_LM_HEAD": "0"}, False),
        (["--port", "30000"], {"SGLANG_ENABLE_FP8_LM_HEAD": "1"}, False),
        (["--enable-fp32-lm-head"], {}, False),
        # SGLang's EnvBool: only true/1/yes/y (any case) are true; `on` is invalid and keeps the False default.
        (["--enable-fp32-lm-head"], {"SGLANG_ENABLE_FP8_LM_HEAD": "TRUE"}, True),
        (["--enable-fp32-lm-head"], {"SGLANG_ENABLE_FP8_LM_HEAD": "Y"}, True),
        (["--enable-fp32-lm-head"], {"SGLANG_ENABLE_FP8_LM_HEAD": "on"}, False),
        (["--enable-fp32-lm-head"], {"SGLANG_ENABLE_FP8_LM_HEAD": " 1"}, False),
        (["--enable-fp32-lm-head"], {"SGLANG_ENABLE_FP8_LM_HEAD": ""}, False),
        # The SGL_ -> SGLANG_ rewrite at import overwrites the canonical name: the legacy value wins.
        (["--enable-fp32-lm-head"], {"SGLANG_ENABLE_FP8_LM_HEAD": "1", "SGL_ENABLE_FP8_LM_HEAD": "0"}, False),
        (["--enable-fp32-lm-head"], {"SGL_ENABLE_FP8_LM_HEAD": "0", "SGLANG_ENABLE_FP8_LM_HEAD": "1"}, False),
        (["--enable-fp32-lm-head"], {"SGLANG_ENABLE_FP8_LM_HEAD": "0", "SGL_ENABLE_FP8_LM_HEAD": "y"}, True),
        (["--enable-fp32-lm-head"], {"SGLANG_ENABLE_FP8_LM_HEAD": "1", "SGL_ENABLE_FP8_LM_HEAD": "on"}, False),
    ],
)
def test_conflict_detection(argv, environ, refused):
    message = engine_entrypoint.conflicting_lm_head(argv, environ)
    assert (message is not None) == refused
    if refused:
        assert "mutually exclusive" in message and "Fix:" in message


def test_run_refuses_before_launching(monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("SGLANG_ENABLE_FP8_LM_HEAD", "1")
    launched = []
    monkeypatch.setattr(engine_entrypoint.subprocess, "Popen", lambda *a, **k: launched.append(a))
    code = engine_entrypoint.run("sim", tmp_path / "engine.log", ["--enable-fp32-lm-head"])
    assert code == engine_run.EXIT_REFUSED
    assert launched == []
    assert "refusing to start" in capsys.readouterr().err


def test_a_guard_refusal_leaves_its_own_records_and_is_judged_as_the_entrypoints(monkeypatch, tmp_path):
    """Like the preflight's: the sentinel judges and captures this refused start, never an older one's."""
    from sparkgate.evidence import startup
    from sparkgate.runtime import engine_run

    monkeypatch.setenv("SGLANG_ENABLE_FP8_LM_HEAD", "1")
    (tmp_path / engine_run.EXIT_FILE).write_text("an earlier start's record")
    code = engine_entrypoint.run("sim", tmp_path / "engine.log", ["--enable-fp32-lm-head"])
    assert code == engine_run.EXIT_REFUSED
    record = engine_run.EngineRun.model_validate_json((tmp_path / engine_run.EXIT_FILE).read_text())
    assert record.exit_code == engine_run.EXIT_REFUSED and record.phases == []
    assert record.argv_sha256 == engine_run.argv_sha256(["--enable-fp32-lm-head"])
    text = (tmp_path / "engine.log").read_text()
    assert text.startswith(engine_entrypoint.REFUSED) and text.count("\n") == 1
    cause = startup.likely_cause(text, [], record.exit_code, record.signal)
    assert cause.name == "the engine's entrypoint refused the start" and "mutually exclusive" in cause.hint


def test_refusal_names_what_sglang_reads():
    message = engine_entrypoint.conflicting_lm_head(
        ["--enable-fp32-lm-head"], {"SGLANG_ENABLE_FP8_LM_HEAD": "0", "SGL_ENABLE_FP8_LM_HEAD": "yes"})
    assert "SGL_ENABLE_FP8_LM_HEAD=yes" in message and "SGLang reads as SGLANG_ENABLE_FP8_LM_HEAD=yes" in message
    assert "\n" not in message


@pytest.mark.parametrize(
    ("value", "expected"),
    [("1", True), ("true", True), ("TRUE", True), ("Yes", True), ("y", True), ("Y", True),
     ("0", False), ("false", False), ("No", False), ("n", False),
     ("on", None), ("off", None), ("", None), (" 1", None), ("1 ", None), ("2", None), ("enabled", None)],
)
def test_env_bool_matches_sglang(value, expected):
    assert F.env_bool(value) is expected
    assert F.env_is_true(value) is (expected is True)


@pytest.mark.sglang
def test_env_bool_agrees_with_sglangs_own_envbool(monkeypatch):
    """The installed SGLang's EnvBool, read through a real descriptor, decides the same for every value."""
    import warnings

    from sglang.srt.environ import EnvBool

    flag = EnvBool(False)
    flag.name = "SPARKGATE_TEST_FLAG"  # what __set_name__ does inside class Envs (closed after import)

    for value in ["1", "TRUE", "yes", "Y", "0", "False", "no", "N", "on", "off", "", " 1", "2"]:
        monkeypatch.setenv("SPARKGATE_TEST_FLAG", value)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            read = flag.get()
        ours = F.env_bool(value)
        assert read is (ours if ours is not None else False), value
        assert bool(caught) is (ours is None), f"SGLang warns exactly for invalid values ({value!r})"


@pytest.mark.sglang
def test_sglang_environ_models_the_import_time_rewrite(monkeypatch):
    """Same answer as SGLang's own _handle_deprecated_envs on a real os.environ."""
    import warnings

    from sglang.srt import environ as sglang_environ_module

    cases = [
        {"SGLANG_ENABLE_FP8_LM_HEAD": "1", "SGL_ENABLE_FP8_LM_HEAD": "0"},
        {"SGL_ENABLE_FP8_LM_HEAD": "true"},
        {"SGLANG_ENABLE_FP8_LM_HEAD": "y"},
    ]
    for case in cases:
        for name in ("SGLANG_ENABLE_FP8_LM_HEAD", "SGL_ENABLE_FP8_LM_HEAD"):
            monkeypatch.delenv(name, raising=False)
        for name, value in case.items():
            monkeypatch.setenv(name, value)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            sglang_environ_module._handle_deprecated_envs()
        assert F.sglang_environ(case)["SGLANG_ENABLE_FP8_LM_HEAD"] == sglang_environ_module.os.environ[
            "SGLANG_ENABLE_FP8_LM_HEAD"], case


def test_run_supervises_and_copies_log(monkeypatch, tmp_path, capfd):
    monkeypatch.delenv("SGLANG_ENABLE_FP8_LM_HEAD", raising=False)
    monkeypatch.setitem(engine_entrypoint.LAUNCHERS, "sim", ["-c", "import sys; print('fired up'); sys.exit(3)"])
    log = tmp_path / "logs" / "engine.log"
    log.parent.mkdir()
    log.write_text("previous run\n")
    admin = tmp_path / "admin"  # the admin key's directory, on a (pretend) tmpfs
    code = engine_entrypoint.run("sim", log, [], admin_dir=admin, mountinfo=f"1 0 0:1 / {admin} rw - tmpfs tmpfs rw\n")
    assert code == 3
    assert log.read_text() == "fired up\n"
    assert (log.parent / "engine.log.1").read_text() == "previous run\n"
    # The child's output is also forwarded to the container's stdout (what `docker logs` shows).
    assert capfd.readouterr().out == "fired up\n"
