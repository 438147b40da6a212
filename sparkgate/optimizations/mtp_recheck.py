"""Re-checking MTP acceptance after admission without ever closing the gate on a healthy engine.

Two signals: the sentinel's own greedy probe, judged against the floor while the engine is idle
(evidence/activity.py), and a collapse statistic on client traffic that only triggers the probe; both fail closed.
The sentinel calls `start` after each full verification and `rechecks` every period (MTP profiles only). Why and
when: docs/checks/mtp.md, "After admission: the sentinel's acceptance re-check".
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

from sparkgate.evidence import activity as activity_mod
from sparkgate.evidence import metrics as metrics_mod
from sparkgate.evidence.calibration import COMPLETION_TOKENS, PROMPTS, SPEC_VERIFY_CT
from sparkgate.evidence.client import EngineClient, EngineUnreachable
from sparkgate.evidence.recheck import RecheckContext, scrape
from sparkgate.evidence.results import CheckResult, checked
from sparkgate.evidence.stages import Stage
from sparkgate.sglang import conformance as C
from sparkgate.sglang import request_timing

COLLAPSE_ACCEPT_LENGTH = 1.05
MIN_VERIFY_CALLS = 50
PROBE_TOKENS = 48
PROBE_EVERY_PERIODS = 12  # an idle engine with no traffic is probed once a minute at the 5 s default

# Re-check-only checks (named sentinel.* because only the sentinel emits them).
CHECKS = {
    "sentinel.accept_counters": Stage.RECHECK_ONLY,
    "sentinel.accept_probe": Stage.RECHECK_ONLY,
    "sentinel.accept_window": Stage.RECHECK_ONLY,
}
# The SGLang facts each check reads: "section.key" (conformance fixture) or "probe.<field>" (the probe report).
# evidence/catalog.py validates them; tests/unit/test_declared_reads.py proves them on the recorded captures.
READS = {
    'sentinel.accept_counters': (
        'metrics.generation_tokens', 'metrics.num_queue_reqs', 'metrics.num_running_reqs', 'metrics.realtime_tokens',
        'metrics.spec_verify_calls', 'strings.realtime_mode_decode',
    ),
    'sentinel.accept_probe': (
        'metrics.generation_tokens', 'metrics.num_queue_reqs', 'metrics.num_running_reqs', 'metrics.realtime_tokens',
        'metrics.spec_verify_calls', 'strings.meta_completion_tokens', 'strings.meta_e2e_latency',
        'strings.meta_first_token_latency', 'strings.meta_spec_verify_ct', 'strings.realtime_mode_decode',
    ),
    'sentinel.accept_window': (
        'metrics.generation_tokens', 'metrics.num_queue_reqs', 'metrics.num_running_reqs', 'metrics.realtime_tokens',
        'metrics.spec_verify_calls', 'strings.realtime_mode_decode',
    ),
}

GENERATION_TOKENS = C.metric("generation_tokens")
VERIFY_CALLS = C.metric("spec_verify_calls")


@dataclass(frozen=True)
class Counters:
    tokens: float
    verifies: float


def read_counters(text: str) -> Counters | None:
    return counters_of(metrics_mod.parse(text))


def counters_of(samples: list) -> Counters | None:
    tokens = metrics_mod.total(samples, GENERATION_TOKENS)
    verifies = metrics_mod.total(samples, VERIFY_CALLS)
    if tokens is None or verifies is None:
        return None
    if not all(math.isfinite(v) and v >= 0 for v in (tokens, verifies)):
        return None  # NaN, infinite or negative counters are no counters: acceptance cannot be judged from them
    return Counters(tokens, verifies)


def window_accept(before: Counters, now: Counters) -> tuple[float | None, float]:
    """(accept length over the window or None, verify calls in it)."""
    calls = now.verifies - before.verifies
    if calls <= 0:
        return None, max(calls, 0.0)
    return (now.tokens - before.tokens) / calls, calls


def looks_collapsed(before: Counters, now: Counters) -> bool:
    accept, calls = window_accept(before, now)
    return accept is not None and calls >= MIN_VERIFY_CALLS and accept <= COLLAPSE_ACCEPT_LENGTH


@dataclass(frozen=True)
class ProbeResult:
    accept_length: float | None
    completion_tokens: int
    verify_calls: int | None
    error: str | None = None
    decode_tok_s: float | None = None  # the engine's own figure (meta_info timing), for the record


def run_probe(client: EngineClient, timeout_s: float) -> ProbeResult:
    """One fixed greedy request; the accept length as SGLang counts it (tokens over verify calls), and its decode
    speed in the engine's own time (plotted on the status page, never judged)."""
    body = {"text": PROMPTS[0], "sampling_params": {"temperature": 0, "max_new_tokens": PROBE_TOKENS, "ignore_eos": True}}
    final: dict = {}
    started = time.monotonic()
    try:
        for _arrived, chunk in client.stream_generate(body, timeout=timeout_s):
            final = chunk
            if time.monotonic() - started > timeout_s:
                return ProbeResult(None, 0, None, f"probe took longer than {timeout_s:.1f}s")
    except EngineUnreachable as exc:
        return ProbeResult(None, 0, None, str(exc))
    meta = final.get("meta_info") or {}
    tokens = request_timing.count(meta, COMPLETION_TOKENS) or 0
    verifies = request_timing.count(meta, SPEC_VERIFY_CT)
    if not tokens or not verifies:
        return ProbeResult(None, tokens, verifies, "the probe's meta_info has no speculative verify count")
    try:
        speed = request_timing.from_meta(meta, tokens).decode_tok_s()
    except request_timing.TimingMissing:
        speed = None  # the accept length is still judged; the plot simply has no point for this probe
    return ProbeResult(tokens / verifies, tokens, verifies,
                       decode_tok_s=None if speed is None else round(speed, 2))


def probe_check(result: ProbeResult, floor: float, trigger: str) -> CheckResult:
    observed = {"accept_length": None if result.accept_length is None else round(result.accept_length, 3),
                "completion_tokens": result.completion_tokens, "verify_calls": result.verify_calls,
                "decode_tok_s": result.decode_tok_s, "trigger": trigger, "error": result.error}
    return checked(
        "sentinel.accept_probe", result.accept_length is not None and result.accept_length >= floor, observed,
        f">= {floor} (greedy, fixed prompt, {PROBE_TOKENS} tokens)",
        "POST /generate meta_info completion_tokens / spec_verify_ct (sentinel probe)",
        "the draft accepts fewer tokens than the floor on the same greedy prompt that admitted it: the draft "
        "degraded or broke after admission (LM-head sharing, weights); the gate stays closed until a fresh "
        "full verification passes",
    )


def counters_missing(floor: float) -> CheckResult:
    return checked(
        "sentinel.accept_counters", False, "counters unavailable", f"{GENERATION_TOKENS} and {VERIFY_CALLS}",
        "GET /metrics", "the engine's /metrics lost the speculative counters (restart, or --enable-metrics "
        "missing): acceptance can no longer be judged, so the gate closes",
    )


def counters_read(now: Counters) -> CheckResult:
    """The counters acceptance is judged from are there (the failing twin: counters_missing)."""
    return checked(
        "sentinel.accept_counters", True, {"generation_tokens": now.tokens, "verify_calls": now.verifies},
        f"{GENERATION_TOKENS} and {VERIFY_CALLS}", "GET /metrics",
        "the engine's /metrics lost the speculative counters (restart, or --enable-metrics missing)",
    )


def read_engine_counters(client: EngineClient) -> Counters | None:
    try:
        return read_counters(client.get_text("/metrics"))
    except EngineUnreachable:
        return None


def start(ctx: RecheckContext) -> None:
    """Right after a full verification: its calibration just measured acceptance, so a window starts now."""
    counters = read_engine_counters(ctx.client)
    ctx.state.update(window_start=counters, last_probe_counters=counters, previous_activity=activity_mod.fresh(ctx.client),
                     last_probe_at=time.monotonic())


def _leave_out_own_traffic(ctx: RecheckContext) -> None:
    """The sentinel's own answer probe moved the speculative counters too: its tokens and verify calls (the counters
    right after it minus right before it) are added to the window's start and to the "served since the last probe"
    mark, so they neither trigger a probe of their own ("idle after client traffic") nor enter the window judged for
    collapse. Client traffic on either side of it still counts: only the probe's own difference is taken out."""
    own, state = ctx.own_traffic, ctx.state
    if own is None or own.seq == state.get("own_traffic_seen", 0):
        return
    state["own_traffic_seen"] = own.seq
    before = counters_of(own.before) if own.before is not None else None
    after = counters_of(own.after) if own.after is not None else None
    if before is None or after is None or after.tokens < before.tokens or after.verifies < before.verifies:
        return
    for key in ("window_start", "last_probe_counters"):
        mark = state.get(key)
        if mark is not None:
            state[key] = Counters(mark.tokens + after.tokens - before.tokens, mark.verifies + after.verifies - before.verifies)


def rechecks(ctx: RecheckContext) -> list[CheckResult]:
    """MTP acceptance after admission, without judging client traffic against the greedy floor."""
    state = ctx.state
    floor = ctx.want["min_accept_length"]
    try:
        samples = ctx.metrics()
        now, now_activity = counters_of(samples), activity_mod.read(samples)
    except (EngineUnreachable, activity_mod.ActivityUnreadable):
        now = now_activity = None
    if now is None or now_activity is None:
        return [counters_missing(floor)]
    results: list[CheckResult] = [counters_read(now)]
    _leave_out_own_traffic(ctx)
    start_counters = state.get("window_start") or now
    accept, calls = window_accept(start_counters, now)
    collapsed = looks_collapsed(start_counters, now)
    if calls >= MIN_VERIFY_CALLS or now.verifies < start_counters.verifies:
        state["window_start"] = now  # judged (or the counters went backwards): start a fresh window
    previous, state["previous_activity"] = state.get("previous_activity"), now_activity
    idle = activity_mod.idle(previous, now_activity)  # nothing running, queued or made for a whole period
    last_probe = state.get("last_probe_counters")
    served = last_probe is None or now.verifies > last_probe.verifies
    due = time.monotonic() - state.get("last_probe_at", 0.0) >= PROBE_EVERY_PERIODS * ctx.period_s
    if collapsed:
        trigger = "collapse on client traffic"  # probe now, even if a client has to wait for it
    elif not idle or not (served or due):
        trigger = None  # never make a client queue behind a routine probe
    else:
        trigger = "idle after client traffic" if served else "idle, periodic"
    if trigger:
        before_probe = scrape(ctx.client) if ctx.own_traffic is not None else None
        probe = run_probe(ctx.client, timeout_s=max(1.0, ctx.period_s))
        results.append(probe_check(probe, floor, trigger))
        if ctx.own_traffic is not None:
            # The probe is the sentinel's, not a client's: the per-band read (context_bands.py) leaves its period
            # out. Its own counters start the new window below, so this re-check does not take them out again.
            ctx.own_traffic.record(before_probe, scrape(ctx.client))
            state["own_traffic_seen"] = ctx.own_traffic.seq
        state["last_probe_at"] = time.monotonic()
        state["last_probe_counters"] = read_engine_counters(ctx.client)
        state["window_start"] = state["last_probe_counters"] or now
        state["previous_activity"] = activity_mod.fresh(ctx.client)
    results.append(checked(
        "sentinel.accept_window", True, {"accept_length": None if accept is None else round(accept, 3),
                                         "verify_calls": calls, "collapsed": collapsed},
        f"informational: <= {COLLAPSE_ACCEPT_LENGTH} over >= {MIN_VERIFY_CALLS} verify "
        "calls triggers the probe", "GET /metrics generation_tokens_total / spec_verify_calls_total",
        "client traffic is sampled prose: its acceptance is reported, never judged against the greedy floor",
    ))
    return results
