"""Decode stalls after admission: requests running while the engine produces no token (`engine.stalled`).

The evidence (evidence/activity.py: the progress counter and the running and queued gauges), the threshold and the
limit at SGLang's decode-log cadence: docs/checks/engine.md, "`engine.stalled`: a hang that `/health` does not see".
"""

from __future__ import annotations

import time

from sparkgate.evidence import activity as activity_mod
from sparkgate.evidence.activity import PROGRESS, QUEUED, RUNNING, ActivityUnreadable
from sparkgate.evidence.client import EngineUnreachable
from sparkgate.evidence.recheck import RecheckContext
from sparkgate.evidence.results import CheckResult, checked, failed
from sparkgate.evidence.stages import Stage

DOCS = "engine.md"
CHECKS = {"engine.stalled": Stage.RECHECK_ONLY}
# The SGLang facts each check reads: "section.key" (conformance fixture) or "probe.<field>" (the probe report).
# evidence/catalog.py validates them; tests/unit/test_declared_reads.py proves them on the recorded captures.
READS = {
    'engine.stalled': (
        'metrics.num_queue_reqs', 'metrics.num_running_reqs', 'metrics.realtime_tokens', 'strings.realtime_mode_decode',
    ),
}
STALL_AFTER_S = 60.0  # engine seconds with work pending and no token; a profile may only lower it
MIN_STALL_AFTER_S = 5.0  # below this a busy sentinel period alone could read as a stall


def stall_after_s(expectations: dict) -> float:
    after = (expectations.get("stall") or {}).get("after_s")
    return STALL_AFTER_S if after is None else float(after)


def start_rechecks(ctx: RecheckContext, clock=time.monotonic) -> None:
    """At admission: no reading yet; the first period's read starts the watch."""
    ctx.state.update(clock=clock, last_progress=None, progress_since=None, busy_since=None)


def rechecks(ctx: RecheckContext) -> list[CheckResult]:
    threshold = stall_after_s(ctx.expectations)
    scale = float(ctx.expectations.get("time_scale") or 1.0)
    expected = f"< {threshold:g} s with requests running and no token generated"
    source = f"GET /metrics {PROGRESS}, {RUNNING}, {QUEUED}"
    clock = ctx.state.get("clock") or time.monotonic
    try:
        now_activity = activity_mod.read(ctx.metrics())
    except (EngineUnreachable, ActivityUnreadable) as exc:
        return [failed("engine.stalled", str(exc), expected, source,
                       "the engine's progress counters cannot be read, so a hang cannot be seen: the gate closes "
                       "(the engine restarted, or was launched without --enable-metrics)")]
    now = clock()
    if ctx.state.get("last_progress") != now_activity.progress_tokens:
        ctx.state["last_progress"], ctx.state["progress_since"] = now_activity.progress_tokens, now
    if not now_activity.busy:
        ctx.state["busy_since"] = None
    elif ctx.state.get("busy_since") is None:
        ctx.state["busy_since"] = now
    # Engine seconds: the simulator runs faster than real time by 1/scale (a Spark reads scale 1).
    quiet_s = (now - max(ctx.state["progress_since"], ctx.state["busy_since"] or now)) / scale
    stalled = now_activity.busy and quiet_s >= threshold
    observed = {"requests_running": now_activity.running, "requests_queued": now_activity.queued,
                "progress_tokens": now_activity.progress_tokens,
                "seconds_without_a_token": round(quiet_s, 1) if now_activity.busy else 0.0}
    return [checked(
        "engine.stalled", not stalled, observed, expected, source,
        f"requests have been running for {quiet_s:.0f} s without a single token (SGLang's {PROGRESS} stood still) "
        "while /health may still answer: the engine is hung (on GB10 most often a CUDA hang or a wedged "
        "unified-memory allocation). Restart the engine (`docker compose restart engine` in the bundle directory, "
        "or `invoke deploy` again); the gate re-verifies it before admitting traffic. If it recurs, look at `invoke logs` around the stall "
        "and the host's memory (host.memory_headroom)",
    )]
