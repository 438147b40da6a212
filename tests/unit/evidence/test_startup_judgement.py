"""An engine that exits before it is ready: the deploy names the engine-log checks its final log fails."""

from __future__ import annotations

from sparkgate.bundle import expectations
from sparkgate.evidence.logs import EngineLog
from sparkgate.evidence.startup import judge_exited_engine
from sparkgate.profile import loading as profiles
from sparkgate.sglang import conformance as C


def _want(profile: str) -> dict:
    return expectations.build(profiles.load(profile), "sim", 1.0)


def _log(*lines: str) -> EngineLog:
    return EngineLog("test log", "\n".join(lines) + "\n")


def _record(message: str) -> str:
    return f"[2026-12-01 12:00:00 TP0] {message}"


def test_an_engine_dead_during_load_fails_its_log_checks_by_name():
    want = _want("all-three")
    target_loaded = C.log_line("load_weight_end", elapsed=1.0, model_class=C.class_name("target_model"), quant="",
                               avail=10.0, usage=60.0)
    failing = judge_exited_engine(want, _log(_record(target_loaded), "Traceback (most recent call last):", "OSError: boom"))
    names = {c.name for c in failing}
    assert {"engine.log", "mtp.log_draft_loaded", "fp8_lm_head.log_signature"} <= names
    # Only what a log can prove: no health, configuration or calibration check is judged from it.
    assert all(name.split(".")[1] not in ("health", "identity", "accept_length", "calibration") for name in names)
    assert all(not c.passed and c.hint for c in failing)


def test_an_unreadable_log_fails_closed():
    failing = judge_exited_engine(_want("all-three"), EngineLog("test log", None, "no such file"))
    assert "engine.log" in {c.name for c in failing}
