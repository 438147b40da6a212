"""Re-checks after admission: acceptance judged so that a healthy engine serving sampled traffic never
closes the gate while a collapsed draft does, counters that vanish fail closed, and a weight change
closes the gate."""

from __future__ import annotations

import json

import pytest

from sparkgate.evidence import metrics as metrics_mod
from sparkgate.evidence.client import EngineUnreachable
from sparkgate.evidence.gather import Evidence
from sparkgate.optimizations import mtp_recheck as acceptance
from sparkgate.sentinel import service
from sparkgate.sentinel.service import Sentinel, SentinelConfig

FLOOR = 2.0


def metrics_text(tokens: float, verifies: float, running: int = 0) -> str:
    # SGLang's names: finish-time counters, the per-forward-pass progress counter, the request gauges.
    return (f"sglang:generation_tokens_total{{model_name=\"m\"}} {tokens}\n"
            f"sglang:spec_verify_calls_total{{model_name=\"m\"}} {verifies}\n"
            f"sglang:realtime_tokens_total{{model_name=\"m\",mode=\"decode\"}} {tokens}\n"
            f"sglang:num_running_reqs{{model_name=\"m\"}} {running}\n"
            f"sglang:num_queue_reqs{{model_name=\"m\"}} 0\n")


class FakeEngine:
    """/metrics counters that client traffic moves, and a /generate the probe reads."""

    def __init__(self, probe_accept: float | None = 2.7):
        self.tokens = self.verifies = 0.0
        self.probe_accept = probe_accept
        self.probes = 0
        self.metrics_up = True
        self.model_info = {"weight_version": "default", "model_path": "/models/Ling-3.0-flash-fp4"}

    def serve(self, tokens: int, accept: float) -> None:
        self.tokens += tokens
        self.verifies += tokens / accept

    # EngineClient surface used by the sentinel
    def get_text(self, path: str) -> str:
        assert path == "/metrics"
        if not self.metrics_up:
            raise EngineUnreachable("GET /metrics: HTTP 404")
        return metrics_text(self.tokens, self.verifies)

    def get_json(self, path: str) -> dict:
        assert path == "/model_info"
        return dict(self.model_info)

    def status(self, path: str) -> int:
        return 200

    def stream_generate(self, body: dict, timeout: float):
        self.probes += 1
        assert body["sampling_params"]["temperature"] == 0 and timeout <= 5.0
        tokens = body["sampling_params"]["max_new_tokens"]
        meta = {"completion_tokens": tokens, "finish_reason": {"type": "length"}}
        if self.probe_accept is not None:
            meta["spec_verify_ct"] = round(tokens / self.probe_accept)
        self.serve(tokens, self.probe_accept or 1.0)
        yield 0.0, {"text": "...", "meta_info": meta}


@pytest.fixture
def make_sentinel(tmp_path):
    def make(engine: FakeEngine) -> Sentinel:
        bundle = tmp_path / "bundle"
        bundle.mkdir(exist_ok=True)
        (bundle / "expectations.json").write_text(json.dumps({
            "profile": "all-three", "requested": ["mtp"], "optimizations": {"mtp": {"min_accept_length": FLOOR}},
        }))
        meminfo = tmp_path / "meminfo"  # a healthy simulated host, not this machine's /proc/meminfo
        meminfo.write_text("MemTotal: 127604736 kB\nMemAvailable: 20971520 kB\nSwapTotal: 0 kB\nSwapFree: 0 kB\n")
        sentinel = Sentinel(SentinelConfig("http://engine:30000", bundle, "/nonexistent.log", period_s=5.0,
                                           meminfo_path=str(meminfo)))
        sentinel.client = sentinel.quick_client = engine
        sentinel.start_module_rechecks()  # as right after a full verification
        sentinel.weights = sentinel._weights()
        sentinel.module_contexts["mtp"].state["last_probe_at"] = 0.0
        return sentinel
    return make


def failing(results) -> set[str]:
    return {c.name for c in results if not c.passed}


def test_healthy_engine_on_sampled_traffic_never_closes(make_sentinel):
    """Sampled prose accepts 1.2-1.6 (below the greedy floor of 2.0): reported, never judged."""
    engine = FakeEngine(probe_accept=2.65)
    sentinel = make_sentinel(engine)
    for accept in (1.2, 1.35, 1.6, 1.25, 1.5, 1.3, 1.2, 1.45):
        engine.serve(400, accept)
        assert not failing(sentinel.module_rechecks())  # busy: no probe, and the low window is not a failure
        results = sentinel.module_rechecks()  # a quiet period after traffic: the sentinel's greedy probe judges
        assert not failing(results), [c.as_dict() for c in results]
        assert any(c.name == "sentinel.accept_probe" for c in results)
    window = next(c for c in results if c.name == "sentinel.accept_window")
    assert window.passed


def test_collapsed_draft_closes_even_while_busy(make_sentinel):
    engine = FakeEngine(probe_accept=1.0)
    sentinel = make_sentinel(engine)
    engine.serve(200, 1.0)  # 200 verify calls at 1.00 in this period: a draft that accepts nothing
    results = sentinel.module_rechecks()
    assert "sentinel.accept_probe" in failing(results)
    probe = next(c for c in results if c.name == "sentinel.accept_probe")
    assert probe.observed["trigger"] == "collapse on client traffic" and probe.observed["accept_length"] == 1.0


def test_degraded_draft_closes_at_the_next_idle_recheck(make_sentinel):
    engine = FakeEngine(probe_accept=1.2)  # degraded, not collapsed: only the greedy probe sees it
    sentinel = make_sentinel(engine)
    engine.serve(64, 1.2)
    assert not failing(sentinel.module_rechecks())  # still serving during this period: no probe yet
    assert "sentinel.accept_probe" in failing(sentinel.module_rechecks())


def test_busy_engine_without_collapse_is_never_probed(make_sentinel):
    engine = FakeEngine()
    sentinel = make_sentinel(engine)
    for _ in range(5):
        engine.serve(300, 1.4)
        assert not failing(sentinel.module_rechecks())
    assert engine.probes == 0


def test_idle_engine_is_probed_only_when_due(make_sentinel, monkeypatch):
    engine = FakeEngine()
    sentinel = make_sentinel(engine)
    clock = [1000.0]
    monkeypatch.setattr(acceptance.time, "monotonic", lambda: clock[0])
    sentinel.module_contexts["mtp"].state["last_probe_at"] = clock[0]
    sentinel.module_rechecks()
    assert engine.probes == 0  # no traffic, not due
    clock[0] += acceptance.PROBE_EVERY_PERIODS * 5.0
    sentinel.module_rechecks()
    assert engine.probes == 1


def test_the_sentinels_own_answer_probe_is_not_client_traffic(make_sentinel, monkeypatch):
    """The answer probe's short reply moves the speculative counters too: noted as the sentinel's own, it triggers
    no acceptance probe of its own; the same tokens from a client do (the control)."""
    engine = FakeEngine()
    sentinel = make_sentinel(engine)
    clock = [1000.0]
    monkeypatch.setattr(acceptance.time, "monotonic", lambda: clock[0])
    sentinel.module_contexts["mtp"].state["last_probe_at"] = clock[0]
    sentinel.module_rechecks()
    before = metrics_mod.parse(engine.get_text("/metrics"))
    engine.serve(6, 2.0)
    sentinel.own_traffic.note(engine, before)  # what answers.rechecks does around its question
    for _ in range(3):
        sentinel.module_rechecks()
    assert engine.probes == 0
    engine.serve(6, 2.0)  # a client's request
    for _ in range(2):
        sentinel.module_rechecks()
    assert engine.probes == 1


@pytest.mark.parametrize("break_it", ["metrics_gone", "probe_without_spec_fields"])
def test_missing_evidence_fails_closed(make_sentinel, break_it):
    engine = FakeEngine()
    sentinel = make_sentinel(engine)
    engine.serve(64, 2.7)
    sentinel.module_rechecks()
    if break_it == "metrics_gone":
        engine.metrics_up = False
        # Every re-check that reads the counters fails: acceptance, the idleness the answer probe waits for, the stall watch.
        assert failing(sentinel.module_rechecks()) == {"sentinel.accept_counters", "sentinel.answer_probe",
                                                       "engine.stalled"}
    else:
        engine.probe_accept = None
        assert failing(sentinel.module_rechecks()) == {"sentinel.accept_probe"}


def test_collapse_statistic():
    start = acceptance.Counters(1000, 500)
    assert acceptance.looks_collapsed(start, acceptance.Counters(1100, 600))  # 1.00 over 100 calls
    assert not acceptance.looks_collapsed(start, acceptance.Counters(1030, 530))  # too few calls to judge
    assert not acceptance.looks_collapsed(start, acceptance.Counters(1150, 600))  # 1.5: healthy sampled prose
    assert acceptance.window_accept(start, start) == (None, 0.0)


def test_weight_change_closes_the_gate(make_sentinel, monkeypatch):
    engine = FakeEngine()
    sentinel = make_sentinel(engine)
    sentinel.state.engine_startup_time = {"t": 1}
    monkeypatch.setattr(service, "run_checks", lambda evidence: [])

    def gather(client, expectations, log, calibrate, admin_key_file=None, meminfo_path=None):
        return Evidence(expectations=expectations, health_status=200, server_info={"startup_time": {"t": 1}},
                        model_info=client.get_json("/model_info"))

    monkeypatch.setattr(service, "gather", gather)
    sentinel.state.set("open", "test")
    assert sentinel.recheck()
    engine.model_info["weight_version"] = "v2-swapped"
    assert not sentinel.recheck()
    check = next(c for c in sentinel.state.recheck["checks"] if c["name"] == "sentinel.weights_unchanged")
    assert check["passed"] is False and check["observed"]["weight_version"] == "v2-swapped"
    assert sentinel.state.state == "closed"
    # A path-only swap (no new version string) is a change too.
    engine.model_info.update(weight_version="default", model_path="/models/other")
    assert not sentinel.recheck()


def test_a_retry_after_a_refusal_stays_closed_and_names_what_refused(make_sentinel):
    sentinel = make_sentinel(FakeEngine())
    assert sentinel._verification_start() == ("verifying", "verifying the engine before admitting traffic")
    sentinel.state.full = {"passed": False, "verification": {"checks": [
        {"name": "engine.health", "passed": True}, {"name": "mtp.accept_length", "passed": False}]}}
    state, reason = sentinel._verification_start()
    assert state == "closed"  # a client polling between attempts still reads the refusal
    assert reason.startswith("verifying again; the last verdict refused the engine (mtp.accept_length)")
    assert "engine.health" not in reason
    sentinel.state.full = {"passed": False, "verification": {"checks": []}}  # refused by a suite, not a check
    assert sentinel._verification_start() == (
        "closed", "verifying again; the last verdict refused the engine (infra or smoke suite); the gate stays closed")
    sentinel.state.full = {"passed": True, "verification": {"checks": []}}  # re-verifying an admitted engine
    assert sentinel._verification_start()[0] == "verifying"
    # A re-check closed the gate after admission: the retry names it, it does not read as a first verification.
    sentinel.state.recheck = {"passed": False, "checks": [{"name": "host.memory_headroom", "passed": True},
                                                          {"name": "engine.stalled", "passed": False}]}
    state, reason = sentinel._verification_start()
    assert state == "closed" and "the last re-check refused the engine (engine.stalled)" in reason
    assert "host.memory_headroom" not in reason
    sentinel.state.recheck = {"passed": True, "checks": []}
    assert sentinel._verification_start()[0] == "verifying"


def test_a_cold_prefill_refusal_stands_for_that_engine_start_until_it_restarts(make_sentinel):
    """The retry is warm and would pass the cold question: the first verdict's cold failure is carried forward
    for the same engine start, and dropped once the engine restarted (its cold request is asked afresh)."""
    from sparkgate.evidence.results import CheckResult, Verdict

    def verdict(startup: str | None, cold_passed: bool, answered: bool = True) -> Verdict:
        cold = CheckResult("answers.cold_prefill", cold_passed, {"received": "1, 2, 31"}, "right", "chat", "hint")
        other = CheckResult("answers.correct", True, {}, "", "chat", "")
        return Verdict("all-three", "http://engine:30000", "now", [cold, other], engine={"startup_time": startup},
                       answers={"cold": {"text": "1, 2, 31" if answered else None}})

    sentinel = make_sentinel(FakeEngine())
    first = verdict("t1", cold_passed=False)
    sentinel._keep_cold_refusal(first)
    retry = verdict("t1", cold_passed=True)
    sentinel._keep_cold_refusal(retry)
    kept = {c.name: c for c in retry.checks}["answers.cold_prefill"]
    assert not retry.passed and kept.observed == {"received": "1, 2, 31"}
    assert "until the engine restarts" in kept.hint and kept.source.endswith("(this engine start's first)")
    restarted = verdict("t2", cold_passed=True)
    sentinel._keep_cold_refusal(restarted)
    assert restarted.passed and sentinel.cold_refusal is None


def test_a_cold_request_that_got_no_answer_is_not_kept_and_an_unreadable_start_keeps_the_refusal(make_sentinel):
    from sparkgate.evidence.results import CheckResult, Verdict

    def verdict(startup, cold_passed, answered=True):
        cold = CheckResult("answers.cold_prefill", cold_passed, {}, "right", "chat", "hint")
        return Verdict("all-three", "u", "now", [cold], engine={"startup_time": startup},
                       answers={"cold": {"text": "x" if answered else None}})

    sentinel = make_sentinel(FakeEngine())
    sentinel._keep_cold_refusal(verdict("t1", cold_passed=False, answered=False))  # e.g. /health blinked
    assert sentinel.cold_refusal is None
    sentinel._keep_cold_refusal(verdict("t1", cold_passed=False))
    unreadable = verdict(None, cold_passed=True)  # /server_info failed on the retry: not a restart
    sentinel._keep_cold_refusal(unreadable)
    assert not unreadable.passed and sentinel.cold_refusal[0] == "t1"


class _StreamingClient:
    """An engine client whose /generate stream ends with the given final meta_info, chunks arriving `gap` apart."""

    def __init__(self, meta: dict, chunks: int = 5, gap: float = 0.0):
        self.meta, self.chunks, self.gap = meta, chunks, gap

    def stream_generate(self, body, timeout):
        for index in range(self.chunks):
            final = index == self.chunks - 1
            yield float(index) * self.gap, {"meta_info": self.meta if final else {"completion_tokens": index + 1}}


def test_the_probe_records_its_decode_speed_in_engine_time_for_the_status_page():
    meta = {"completion_tokens": 48, "spec_verify_ct": 18, "first_token_latency": 0.2, "e2e_latency": 0.67}
    # The stream's own pace is irrelevant: all chunks at once (the page once plotted 7390 tok/s from a ~0 s gap).
    result = acceptance.run_probe(_StreamingClient(meta), timeout_s=5.0)
    assert result.decode_tok_s == 100.0  # 47 tokens after the first in 0.47 engine seconds
    check = acceptance.probe_check(result, FLOOR, "idle, periodic")
    assert check.observed["decode_tok_s"] == 100.0 and check.passed
    # Without the engine's timing the accept length is still judged; the plot gets no point.
    untimed = acceptance.run_probe(_StreamingClient({"completion_tokens": 48, "spec_verify_ct": 18}), timeout_s=5.0)
    assert untimed.decode_tok_s is None and acceptance.probe_check(untimed, FLOOR, "idle, periodic").passed


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -1.0])
def test_counters_that_are_not_counts_are_missing_evidence(bad):
    from sparkgate.optimizations import mtp_recheck

    samples = [("sglang:generation_tokens_total", {}, 100.0), ("sglang:spec_verify_calls_total", {}, bad)]
    assert mtp_recheck.counters_of(samples) is None
    assert mtp_recheck.counters_of([samples[0], ("sglang:spec_verify_calls_total", {}, 40.0)]).verifies == 40.0
