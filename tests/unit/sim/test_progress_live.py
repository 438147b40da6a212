"""SGLang's progress counter and running/queue gauges, at SGLang's cadence, and the `decode-stall` runtime fault.

SGLang 0.5.23 (scheduler_components/metrics_reporter.py, observability/metrics_collector.py):
`sglang:realtime_tokens_total{mode}` moves at every prefill report (`prefill_compute`) and every decode iteration
(`decode`); `sglang:num_running_reqs` and `sglang:num_queue_reqs` are published at each prefill report (the running
batch before the new request joins it), every `--decode-log-interval` decode iterations (the batch) and when the
scheduler goes idle with a stale running gauge (or 30 s after the last publish)."""

from __future__ import annotations

import threading
import time

import pytest
from prometheus_client.parser import text_string_to_metric_families

from sparkgate_sim import faults
from tests.plugins.simproc import metric_total, profile_launch

PROMPT = "Tell me a long story about a lighthouse keeper and the sea."  # no question: decodes the whole budget
TOKENS = 400
INTERVAL = 40  # SGLang's default --decode-log-interval, which the profiles keep
WARMUP_PREFILL, WARMUP_DECODE = 8, 7  # the startup's warmup /generate: 8 prompt tokens, max_new_tokens 8
REALTIME = "sglang:realtime_tokens_total"
RUNNING, QUEUED = "sglang:num_running_reqs", "sglang:num_queue_reqs"
SCHEDULER_LABELS = {"model_name", "engine_type", "tp_rank", "pp_rank", "moe_ep_rank"}
QUICK_START = {"SPARKGATE_SIM_STARTUP_S": "2"}  # the slower time scales below would stretch the default 20 s start


def read(sim) -> dict:
    """One /metrics read: the progress counter by mode, the two gauges and the finished-request counter."""
    text = sim.metrics()
    return {
        "decode": metric_total(text, REALTIME, mode="decode"),
        "prefill": metric_total(text, REALTIME, mode="prefill_compute"),
        "running": metric_total(text, RUNNING),
        "queued": metric_total(text, QUEUED),
        "generated": metric_total(text, "sglang:generation_tokens_total"),
    }


class Stream(threading.Thread):
    """A streamed /generate in the background; `events` holds (arrival time, event) once it ended."""

    def __init__(self, sim, max_new_tokens: int = TOKENS, text: str = PROMPT):
        super().__init__(daemon=True)
        self.sim, self.body = sim, {"text": text, "sampling_params": {"max_new_tokens": max_new_tokens}}
        self.events: list = []

    def run(self) -> None:
        self.events = self.sim.stream("/generate", self.body)

    def chunks(self) -> list[tuple[float, dict]]:
        return [(t, e) for t, e in self.events if e != "[DONE]"]

    def final_meta(self) -> dict:
        return self.chunks()[-1][1]["meta_info"]


def watch(sim, stream: Stream, pause: float = 0.01) -> list[dict]:
    """Read /metrics over and over while `stream` runs."""
    readings = []
    while stream.is_alive():
        readings.append(read(sim))
        time.sleep(pause)
    return readings


def wait_for(sim, condition, timeout: float = 20.0) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        reading = read(sim)
        if condition(reading):
            return reading
        time.sleep(0.01)
    raise AssertionError(f"not reached within {timeout} s; last reading {reading}")


def wait_stalled(sim, sim_seconds: float, timeout: float = 60.0) -> float:
    """Until the simulator's decode has hung `sim_seconds` of its own (simulated) time; returns how long it had."""
    deadline = time.monotonic() + timeout
    while (stalled := sim.get("/admin/stats").json()["decode_stalled_s"]) < sim_seconds:
        assert time.monotonic() < deadline, f"the decode hung only {stalled} simulated s in {timeout} s"
        time.sleep(0.01)
    return stalled


def test_the_progress_series_exist_at_ready_with_sglangs_labels(start_profile):
    sim = start_profile("baseline")
    idle_prefill = read(sim)["prefill"]  # the warmup's, and one per /health the start polled
    families = {f.name: f for f in text_string_to_metric_families(sim.metrics())}
    realtime = families[REALTIME.removesuffix("_total")]
    assert realtime.type == "counter"
    # The warmup request went through the scheduler: its prefill and its 7 decode tokens are counted. No prefix
    # cache is modelled, so `prefill_cache` (a zero delta adds no child) never shows.
    modes = {s.labels["mode"]: s.value for s in realtime.samples}
    assert set(modes) == {"prefill_compute", "decode"} and modes["decode"] == WARMUP_DECODE
    assert modes["prefill_compute"] == idle_prefill >= WARMUP_PREFILL
    assert all(set(s.labels) == SCHEDULER_LABELS | {"mode"} for s in realtime.samples)
    for name in (RUNNING, QUEUED):
        (sample,) = families[name].samples
        assert families[name].type == "gauge" and set(sample.labels) == SCHEDULER_LABELS and sample.value == 0


def test_a_long_stream_moves_the_counter_and_publishes_running_after_the_first_decode_log(start_profile):
    sim = start_profile("baseline", QUICK_START, scale=0.1)  # 400 tokens: about 1 s of wall time
    idle_prefill = read(sim)["prefill"]  # the warmup's, and one per /health the start polled
    before = read(sim)
    assert (before["decode"], before["running"], before["queued"], before["generated"]) == (WARMUP_DECODE, 0, 0, None)
    stream = Stream(sim)
    stream.start()
    readings = watch(sim, stream)
    stream.join()
    after = read(sim)
    meta = stream.final_meta()
    assert meta["completion_tokens"] == TOKENS and meta["finish_reason"]["type"] == "length"

    decode = [r["decode"] for r in readings]
    assert decode == sorted(decode)  # a counter
    during = [r for r in readings if r["decode"] < WARMUP_DECODE + TOKENS - 1]
    assert len({r["decode"] for r in during}) >= 5  # it moves while the request streams, not only at its end
    assert all(r["generated"] is None for r in during)  # unlike generation_tokens_total, which waits for the end
    # The running gauge reads 1 from the first decode-log report on (decode iteration 40 of this lifetime);
    # before it, what the prefill report published: the batch before this request joined it, 0.
    assert all(r["running"] == 1 for r in during if r["decode"] > WARMUP_DECODE + INTERVAL)
    assert any(r["running"] == 1 for r in during)
    assert all(r["running"] == 0 for r in readings if r["decode"] < WARMUP_DECODE + INTERVAL)
    assert all(r["queued"] == 0 for r in readings)

    # At the end: every token counted once, and the idle scheduler published the empty batch at once.
    assert after["decode"] == WARMUP_DECODE + TOKENS - 1  # the first token is the prefill's
    assert after["prefill"] == idle_prefill + meta["prompt_tokens"]
    assert (after["running"], after["queued"], after["generated"]) == (0, 0, TOKENS)
    assert metric_total(sim.metrics(), "sglang:gen_throughput") == 0  # the idle publish zeroes it too


def test_the_prefill_report_publishes_running_zero_on_an_idle_engine(start_sim):
    argv, env = profile_launch("baseline")
    sim = start_sim(argv + ["--decode-log-interval", "1000"], {**env, **QUICK_START}, scale=0.1)  # no decode-log report in the request
    idle_prefill = read(sim)["prefill"]  # the warmup's, and one per /health the start polled
    stream = Stream(sim, max_new_tokens=200)
    stream.start()
    # The prefill report counted the prompt; while the request decodes, the gauges hold what it published.
    reading = wait_for(sim, lambda r: r["prefill"] > idle_prefill and r["decode"] > WARMUP_DECODE)
    stream.join()
    prompt_tokens = stream.final_meta()["prompt_tokens"]
    assert reading["prefill"] == idle_prefill + prompt_tokens
    assert reading["decode"] < WARMUP_DECODE + 199  # read mid-stream
    assert (reading["running"], reading["queued"]) == (0, 0)
    text = sim.metrics()
    assert metric_total(text, "sglang:num_used_tokens") == prompt_tokens  # the same report's pool figure
    prefill_lines = [line for line in sim.log().splitlines() if "Prefill batch" in line]
    assert prefill_lines[-1].count("#running-req: 0,") == 1
    assert not [line for line in sim.log().splitlines() if "Decode batch" in line]


def test_a_queued_request_shows_in_the_decode_log_gauges_then_its_prefill_publishes_the_empty_batch(start_profile):
    sim = start_profile("baseline", QUICK_START, scale=0.5)
    idle_prefill = read(sim)["prefill"]  # the warmup's, and one per /health the start polled
    first = Stream(sim, max_new_tokens=85)  # decode iterations 1-84: reports at 40 and 80
    first.start()
    started = wait_for(sim, lambda r: r["decode"] > WARMUP_DECODE + 5)
    second = Stream(sim, max_new_tokens=60, text=PROMPT + " Another one.")  # waits: batch 1
    second.start()
    # The report at iteration 40 publishes the running batch and the waiting queue.
    reading = wait_for(sim, lambda r: r["decode"] > WARMUP_DECODE + INTERVAL)
    assert reading["prefill"] == started["prefill"]  # still the first request
    assert (reading["running"], reading["queued"]) == (1, 1)
    # When the first ends the scheduler is not idle: the second's prefill report publishes running 0 (the batch
    # before it joined) and the empty queue, until its own first report at iteration 120.
    reading = wait_for(sim, lambda r: r["prefill"] > started["prefill"])
    assert reading["decode"] < WARMUP_DECODE + 3 * INTERVAL
    assert (reading["running"], reading["queued"]) == (0, 0)
    first.join()
    second.join()
    after = read(sim)
    assert (after["running"], after["queued"]) == (0, 0)
    assert after["prefill"] == idle_prefill + first.final_meta()["prompt_tokens"] + second.final_meta()["prompt_tokens"]


def test_decode_stall_stops_the_stream_and_the_counter_while_health_answers(start_profile):
    scale = 0.05
    sim = start_profile("baseline", {**QUICK_START, "SPARKGATE_SIM_FAULTS": faults.DECODE_STALL, "SPARKGATE_SIM_ADMIN": "1"},
                        scale=scale)
    stream = Stream(sim)
    stream.start()
    # The request decodes up to its first decode-log report (running 1 published), then hangs.
    stalled = wait_for(sim, lambda r: r["running"] == 1)
    assert stalled["decode"] == WARMUP_DECODE + INTERVAL
    wait_stalled(sim, 0.5)  # the next decode forward hangs
    began = time.monotonic()
    assert read(sim) == stalled
    waiting = Stream(sim, max_new_tokens=5, text=PROMPT + " Short.")  # queues behind the hung request
    waiting.start()
    for path in ("/health", "/health_generate"):
        resp = sim.get(path)
        assert (resp.status, resp.body) == (200, b""), path
    hung_s = wait_stalled(sim, 20.0)  # a healthy Spark makes ~750 tokens in 20 s
    later = read(sim)
    ended = time.monotonic()
    assert later == stalled  # no token counted, no request finished, the gauges as last published
    assert later["generated"] is None and later["queued"] == 0
    assert stream.is_alive() and waiting.is_alive()
    assert "Decode batch" in sim.log()  # the one report before the hang, and no line since
    assert len([line for line in sim.log().splitlines() if "Decode batch" in line]) == 1

    state = sim.post("/admin/faults", {"remove": [faults.DECODE_STALL]}).json()
    assert faults.DECODE_STALL not in state["active"]
    stream.join(timeout=30)
    waiting.join(timeout=30)
    assert not stream.is_alive() and not waiting.is_alive()

    chunks = stream.chunks()
    # Nothing streamed while hung, not even keep-alives: at most the reporting iteration's own chunk, on its way
    # when the forward hung (a loaded host delivers it late).
    while_hung = [e["meta_info"]["completion_tokens"] for t, e in chunks if began <= t <= ended]
    assert while_hung in ([], [1 + INTERVAL]), while_hung
    before_hang = [e["meta_info"]["completion_tokens"] for t, e in chunks if t <= ended]
    assert max(before_hang) == 1 + INTERVAL  # the prefill's token and 40 decode iterations
    meta = stream.final_meta()
    assert meta["completion_tokens"] == TOKENS and meta["finish_reason"]["type"] == "length"
    assert meta["e2e_latency"] > hung_s  # the hang is part of the request's latency
    assert waiting.final_meta()["completion_tokens"] == 5
    after = read(sim)
    assert after["decode"] == WARMUP_DECODE + TOKENS - 1 + 4
    assert (after["running"], after["queued"], after["generated"]) == (0, 0, TOKENS + 5)


def test_decode_stall_is_bounded_by_an_abort(start_profile):
    scale = 0.002  # the 600 simulated seconds of the bound take 1.2 s
    sim = start_profile("baseline", {"SPARKGATE_SIM_FAULTS": faults.DECODE_STALL}, scale=scale)
    stream = Stream(sim)
    stream.start()
    stream.join(timeout=60)
    assert not stream.is_alive()
    meta = stream.final_meta()
    assert meta["finish_reason"] == {"type": "abort", "message": "Aborted", "status_code": None, "err_type": None}
    assert meta["completion_tokens"] == 1 + INTERVAL and meta["e2e_latency"] >= 600
    assert stream.events[-1][1] == "[DONE]"
    after = read(sim)
    assert (after["decode"], after["running"], after["generated"]) == (WARMUP_DECODE + INTERVAL, 0, 1 + INTERVAL)
    assert sim.get("/health").status == 200


def test_decode_stall_set_through_the_admin_endpoint_stops_a_running_stream_at_its_next_step(start_profile):
    sim = start_profile("baseline", {**QUICK_START, "SPARKGATE_SIM_ADMIN": "1"}, scale=0.05)
    stream = Stream(sim)
    stream.start()
    wait_for(sim, lambda r: r["running"] == 1)  # past its first decode-log report
    state = sim.post("/admin/faults", {"add": [faults.DECODE_STALL]}).json()
    assert state["active"] == [faults.DECODE_STALL] and state["pending_restart"] == []  # runtime: at once
    wait_stalled(sim, 0.5)
    hung = read(sim)
    wait_stalled(sim, 10.0)
    assert read(sim) == hung and hung["running"] == 1
    assert WARMUP_DECODE + INTERVAL <= hung["decode"] < WARMUP_DECODE + TOKENS - 1
    sim.post("/admin/faults", {"remove": [faults.DECODE_STALL]})
    stream.join(timeout=30)
    assert stream.final_meta()["completion_tokens"] == TOKENS


def test_decode_stall_is_a_runtime_fault_without_a_parameter():
    assert faults.parse_faults("decode-stall") == (faults.Fault(faults.DECODE_STALL),)
    assert faults.DECODE_STALL in faults.RUNTIME and faults.DECODE_STALL not in faults.LOAD_TIME
    with pytest.raises(faults.FaultSpecError, match="takes no parameter"):
        faults.parse_fault("decode-stall:5")


def test_health_on_an_idle_engine_prefills_one_token_and_never_decodes(start_profile):
    """As SGLang 0.5.23's GET /health does (http_server.py health_generate: input [0], one new token; seen on the
    real engine in tests/real/test_stall_evidence.py): the prefill counter moves by one per call, decode never."""
    sim = start_profile("baseline")
    before = read(sim)
    for _ in range(3):
        assert sim.get("/health").status == 200
    after = read(sim)
    assert after["prefill"] == before["prefill"] + 3 and after["decode"] == before["decode"]
