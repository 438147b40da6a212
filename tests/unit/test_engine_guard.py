"""The container entrypoint refuses the FP8 head env together with the fp32 flag, however written."""

from __future__ import annotations

import sys

import pytest

from sparkgate import engine_entrypoint


@pytest.mark.parametrize(
    ("argv", "environ", "refused"),
    [
        (["--enable-fp32-lm-head"], {"SGLANG_ENABLE_FP8_LM_HEAD": "1"}, True),
        (["--enable-fp32-lm"], {"SGLANG_ENABLE_FP8_LM_HEAD": "true"}, True),
        (["--enable-fp32-lm-head=1"], {"SGL_ENABLE_FP8_LM_HEAD": "yes"}, True),
        (["--enable-fp32-lm-head"], {"SGLANG_ENABLE_FP8_LM_HEAD": "0"}, False),
        (["--port", "30000"], {"SGLANG_ENABLE_FP8_LM_HEAD": "1"}, False),
        (["--enable-fp32-lm-head"], {}, False),
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
    assert code == engine_entrypoint.EXIT_REFUSED
    assert launched == []
    assert "refusing to start" in capsys.readouterr().err
    assert not (tmp_path / "engine.log").exists()


def test_run_supervises_and_copies_log(monkeypatch, tmp_path):
    monkeypatch.delenv("SGLANG_ENABLE_FP8_LM_HEAD", raising=False)
    monkeypatch.setitem(engine_entrypoint.LAUNCHERS, "sim", ["-c", "import sys; print('fired up'); sys.exit(3)"])
    log = tmp_path / "logs" / "engine.log"
    log.parent.mkdir()
    log.write_text("previous run\n")
    code = engine_entrypoint.run("sim", log, [])
    assert code == 3
    assert log.read_text() == "fired up\n"
    assert (log.parent / "engine.log.1").read_text() == "previous run\n"
    assert sys.executable
