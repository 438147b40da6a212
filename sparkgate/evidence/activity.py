"""What the engine is doing, from SGLang's own metrics: the one reading of "busy" and "idle" every re-check uses.

Progress (`sglang:realtime_tokens_total`, moved on every forward pass) and work (`sglang:num_running_reqs` +
`sglang:num_queue_reqs`): docs/checks/engine.md, "`engine.stalled`: a hang that `/health` does not see". Idle (a
probe may be sent without making a client queue behind it at batch 1): no work published and no token *decoded*
over the whole last period. Decoded, because SGLang's `GET /health` (http_server.py `health_generate`) prefills one
token per call on an idle engine (seen on the real 0.5.23, tests/real/test_stall_evidence.py) but never decodes,
and the sentinel and Docker's healthcheck call it every few seconds; any client request of more than one token
decodes.
"""

from __future__ import annotations

from dataclasses import dataclass

from sparkgate.evidence import metrics as metrics_mod
from sparkgate.evidence.client import EngineClient, EngineUnreachable
from sparkgate.sglang import conformance as C

PROGRESS = C.metric("realtime_tokens")
DECODE_MODE = C.string_("realtime_mode_decode")  # the `mode` label value of decode passes
RUNNING = C.metric("num_running_reqs")
QUEUED = C.metric("num_queue_reqs")


@dataclass(frozen=True)
class Activity:
    """What one /metrics read says about the engine's work."""

    progress_tokens: float  # sglang:realtime_tokens_total over every mode
    running: float
    queued: float
    decode_tokens: float = 0.0  # its mode="decode" child (absent until the first decode pass: 0)

    @property
    def busy(self) -> bool:
        return self.running + self.queued > 0


class ActivityUnreadable(Exception):
    pass


def read(samples: list) -> Activity:
    """The activity in parsed /metrics samples; a missing series is an error (fail closed)."""
    values = {name: metrics_mod.total(samples, name) for name in (PROGRESS, RUNNING, QUEUED)}
    missing = [name for name, value in values.items() if value is None]
    if missing:
        raise ActivityUnreadable(f"no {', '.join(missing)} in /metrics")
    decoded = metrics_mod.total(samples, PROGRESS, mode=DECODE_MODE)
    return Activity(values[PROGRESS], values[RUNNING], values[QUEUED], decoded or 0.0)


def fresh(client: EngineClient) -> Activity | None:
    """A reading of its own, outside the period's shared one (after a probe, that one is out of date); None when
    it cannot be read."""
    try:
        return read(metrics_mod.parse(client.get_text("/metrics")))
    except (EngineUnreachable, ActivityUnreadable):
        return None


def of(samples: list | None) -> Activity | None:
    """The activity in samples already read (None, or a missing series: None)."""
    try:
        return read(samples) if samples is not None else None
    except ActivityUnreadable:
        return None


def idle(previous: Activity | None, now: Activity) -> bool:
    """Idle over the period between two readings: nothing published as running or queued, no token decoded (the
    one-token prefills of GET /health do not count)."""
    return previous is not None and not now.busy and now.decode_tokens == previous.decode_tokens
