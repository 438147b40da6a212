"""The engine phase read from its log says only what the log proves: a traceback SGLang recovered from (the start
goes on) is not a crash, and one that is the last thing logged is noted after the phase, never called a crash
(whether the engine died is its container's state)."""

from __future__ import annotations

from sparkgate.sglang import conformance as C
from sparkgate.sglang.phases import TRACEBACK_NOTE, current_phase

ARGS = "[2026-12-02 08:00:00] " + C.log_line("server_args", args="ServerArgs(model_path='/models/x')")
LOAD = "[2026-12-02 08:00:02] " + C.log_line("load_weight_begin", avail=120.5)
TRACEBACK = ("Traceback (most recent call last):\n  File \"/opt/x.py\", line 1, in <module>\n"
             "ModuleNotFoundError: No module named 'optional_kernels'")
READY = "[2026-12-02 08:06:00] " + C.log_line("ready")


def test_a_traceback_the_start_recovered_from_is_not_a_crash():
    assert current_phase("\n".join([ARGS, TRACEBACK, LOAD])) == "loading target weights"


def test_a_traceback_that_is_the_last_thing_logged_is_noted_after_its_phase():
    phase = current_phase("\n".join([ARGS, TRACEBACK]))
    assert phase == "starting (arguments resolved)" + TRACEBACK_NOTE and "crash" not in phase


def test_an_exception_line_alone_is_noted_the_same_way():
    assert current_phase("\n".join([ARGS, LOAD, "RuntimeError: CUDA error: out of memory"])) == (
        "loading target weights" + TRACEBACK_NOTE)


def test_the_phases_in_order_end_ready_and_a_plain_log_line_changes_nothing():
    assert current_phase(None) == "no log yet"
    assert current_phase("INFO: Started server process [7]") == "starting"
    assert current_phase("\n".join([ARGS, LOAD, READY, "INFO: 127.0.0.1 - \"GET /health HTTP/1.1\" 200"])) == "ready"
