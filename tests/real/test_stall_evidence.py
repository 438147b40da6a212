"""engine.stalled against a real SGLang server: the counter and gauges it reads are SGLang's own, a long healthy
stream never trips it, the gauges return to idle when the stream ends (so an idle engine never reads as stalled),
and a scheduler frozen mid-decode (SIGSTOP: a hang as the host sees one) is caught within the documented time."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest

from sparkgate.evidence import activity, stall
from sparkgate.evidence import metrics as metrics_mod
from sparkgate.evidence.client import EngineClient, EngineUnreachable
from sparkgate.evidence.recheck import RecheckContext
from tests.real.engine import tree_pids

pytestmark = pytest.mark.real

PERIOD_S = 0.5
AFTER_S = 5.0  # engine seconds; the real engine runs at scale 1


def watch(url: str) -> RecheckContext:
    ctx = RecheckContext("stall", EngineClient(url, timeout=3.0), PERIOD_S, {"time_scale": 1.0, "stall": {"after_s": AFTER_S}})
    stall.start_rechecks(ctx)
    return ctx


def reading(url: str) -> activity.Activity:
    return activity.read(metrics_mod.parse(EngineClient(url, timeout=3.0).get_text("/metrics")))


def stream_in_background(url: str, tokens: int) -> tuple[threading.Thread, dict]:
    """A greedy streaming request of `tokens` tokens (ignore_eos) on a thread; `outcome` gets chunks and errors."""
    outcome: dict = {"chunks": 0, "error": None}
    body = {"text": "Count slowly:", "sampling_params": {"temperature": 0, "max_new_tokens": tokens, "ignore_eos": True}}

    def run():
        try:
            for _arrived, _chunk in EngineClient(url, timeout=120.0).stream_generate(body, timeout=120.0):
                outcome["chunks"] += 1
        except EngineUnreachable as exc:
            outcome["error"] = str(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, outcome


def wait_for(predicate, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"{what} within {timeout_s:.0f} s")


def scheduler_pid(engine) -> int:
    """SGLang names its scheduler process `sglang::scheduler...` (managers/scheduler.py setproctitle)."""
    for pid in tree_pids(engine.proc.pid, engine.proc.pid):
        try:
            if Path(f"/proc/{pid}/cmdline").read_bytes().startswith(b"sglang::scheduler"):
                return pid
        except OSError:
            continue
    raise AssertionError("no sglang::scheduler process in the server's tree")


def test_a_long_real_stream_never_trips_the_watch_and_the_gauges_return_to_idle(dense_engine):
    ctx = watch(dense_engine.url)
    before = reading(dense_engine.url)
    thread, outcome = stream_in_background(dense_engine.url, 240)
    results, running_seen = [], 0.0
    while thread.is_alive():
        [result] = stall.rechecks(ctx)
        results.append(result)
        running_seen = max(running_seen, result.observed["requests_running"])
        # Sampled well inside a period: an idle host decodes the tiny model's 240 tokens in well under a second, and
        # the gauge reads 1 only between its first decode-log interval and the end (a slower host widens that).
        time.sleep(PERIOD_S / 10)
    assert outcome["error"] is None and outcome["chunks"] > 1
    assert results and all(r.passed for r in results), [r.observed for r in results if not r.passed]
    assert running_seen >= 1  # SGLang published the stream as running (after its first decode-log interval)
    after = reading(dense_engine.url)
    assert after.progress_tokens - before.progress_tokens >= 240  # every decoded token counted as it was made
    # The scheduler publishes the idle gauges once it has nothing to run: an idle engine is not "running".
    idle = wait_for(lambda: (r := reading(dense_engine.url)) and not r.busy and r, 30, "the gauges back to 0")
    assert idle.running == 0 and idle.queued == 0
    for _ in range(int(2 * AFTER_S / PERIOD_S)):  # twice the threshold with a flat counter, idle
        [result] = stall.rechecks(ctx)
        assert result.passed, result.observed
        time.sleep(PERIOD_S)


def test_the_health_endpoints_generation_leaves_the_idleness_reading_idle(dense_engine):
    """SGLang's GET /health generates one token on an idle engine (http_server.py health_generate), and the sentinel
    and Docker's healthcheck call it every few seconds: the idleness every after-admission probe waits for
    (activity.idle: no work published, sglang:realtime_tokens_total unmoved) must still be read as idle, or a
    probe would never find the engine idle. SGLang leaves health-check batches out of its step counters."""
    url = dense_engine.url
    client = EngineClient(url, timeout=30.0)
    client.post_json("/generate", {"text": "warm", "sampling_params": {"max_new_tokens": 2}}, timeout=60)
    time.sleep(1.0)
    before = reading(url)
    for _ in range(3):
        assert client.status("/health") == 200
    after = reading(url)
    assert activity.idle(before, after), (before, after)


def test_a_frozen_real_scheduler_is_caught_as_stalled_with_its_counters(dense_engine):
    thread, outcome = stream_in_background(dense_engine.url, 600)
    # Running as SGLang publishes it: after the first decode-log interval (40 decode passes by default).
    wait_for(lambda: reading(dense_engine.url).running >= 1, 60, "the stream published as running")
    pid = scheduler_pid(dense_engine)
    ctx = watch(dense_engine.url)
    os.kill(pid, signal.SIGSTOP)
    try:
        started, results = time.monotonic(), []
        while time.monotonic() - started < AFTER_S + 6 * PERIOD_S:
            [result] = stall.rechecks(ctx)
            results.append(result)
            if not result.passed:
                break
            time.sleep(PERIOD_S)
    finally:
        os.kill(pid, signal.SIGCONT)
    failed = results[-1]
    assert not failed.passed, [r.observed for r in results]
    assert failed.observed["requests_running"] >= 1 and failed.observed["seconds_without_a_token"] >= AFTER_S
    assert time.monotonic() - started < AFTER_S + 6 * PERIOD_S  # within the documented time, plus periods
    assert all(r.passed for r in results[:-1])
    # Thawed, it makes tokens again and the watch passes (the stream is then cut: the client goes away).
    wait_for(lambda: [r for r in stall.rechecks(ctx) if r.passed], 30, "the watch passing after SIGCONT")
    thread.join(timeout=120)
    assert outcome["error"] is None
    wait_for(lambda: not reading(dense_engine.url).busy, 60, "the engine idle again")
