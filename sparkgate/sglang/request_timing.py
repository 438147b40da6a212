"""A request's own timing as the engine reports it: the speed figures the gate and the bench judge.

SGLang 0.5.23 (observability/req_time_stats.py, `ReqTimeStats`) reports on `/generate`'s final chunk:
`e2e_latency` = finished - created; `first_token_latency` = first token - created; `decode_throughput` =
(completion_tokens - 1) / (finished - first token); the last two only with `--enable-metrics` (every sparkgate
launch has it). How the gate reads them, and engine time against a client's stopwatch: docs/checks/engine.md,
"Calibration" ("Per request, engine time", "Which is which").
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from sparkgate.sglang import conformance as C

E2E_LATENCY = C.string_("meta_e2e_latency")
FIRST_TOKEN_LATENCY = C.string_("meta_first_token_latency")
DECODE_THROUGHPUT = C.string_("meta_decode_throughput")

# A request's engine time is refused as evidence beyond this (one hour): a value like 1e300 is not a timing.
MAX_SECONDS = 3600.0


@dataclass(frozen=True)
class EngineTiming:
    """One finished request, in the engine's seconds."""

    ttft_s: float
    e2e_s: float
    completion_tokens: int

    @property
    def decode_s(self) -> float:
        return self.e2e_s - self.ttft_s

    def decode_tok_s(self) -> float | None:
        """SGLang's decode_throughput: tokens after the first over the decode time (None for one token)."""
        if self.completion_tokens < 2 or self.decode_s <= 0:
            return None
        return (self.completion_tokens - 1) / self.decode_s


class TimingMissing(ValueError):
    """The final meta_info does not carry the engine's timing of the request (said in one line)."""


def _seconds(meta: dict[str, Any], key: str) -> float:
    value = meta.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float):
        if value is None:
            raise TimingMissing(
                f"meta_info has no {key}: the engine did not report its own timing of the request "
                "(SGLang reports first_token_latency only with --enable-metrics)")
        raise TimingMissing(f"meta_info {key} is {type(value).__name__}, not a number of seconds")
    seconds = float(value)
    if not math.isfinite(seconds) or seconds < 0 or seconds > MAX_SECONDS:
        raise TimingMissing(f"meta_info {key}={value!r} is not a duration in seconds (0 to {MAX_SECONDS:g})")
    return seconds


def from_meta(meta: dict[str, Any], completion_tokens: int) -> EngineTiming:
    """The engine's timing from a final chunk's meta_info; TimingMissing when it is absent or malformed."""
    ttft = _seconds(meta, FIRST_TOKEN_LATENCY)
    e2e = _seconds(meta, E2E_LATENCY)
    if e2e < ttft:
        raise TimingMissing(f"meta_info {E2E_LATENCY}={e2e:g} s is shorter than {FIRST_TOKEN_LATENCY}={ttft:g} s")
    return EngineTiming(ttft_s=ttft, e2e_s=e2e, completion_tokens=completion_tokens)


def count(meta: dict[str, Any], key: str) -> int | None:
    """A non-negative integer field of meta_info (a token or step count), or None: absent, a bool, a string, a
    float or negative is no count."""
    value = meta.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None
