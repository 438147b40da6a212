"""Fault injection: which real-world failure the simulated engine reproduces.

Faults come from `SPARKGATE_SIM_FAULTS` (comma-separated, e.g. `humming-fallback,degrade-after:5`) and
can be replaced at runtime through the admin endpoint. Fault names are only ever shown by the admin
endpoint: every other surface must look like the real failure, with nothing that gives it away.

Load-time faults describe what happened while the engine loaded (which kernels it picked, whether the
draft loaded...). A running engine cannot change those, so they are latched when startup runs and a
runtime change takes effect at the next (simulated) restart. Runtime faults apply immediately.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

FP8_ENV_IGNORED = "fp8-env-ignored"
DRAFT_LM_HEAD_UNSHARED = "draft-lm-head-unshared"
HUMMING_FALLBACK = "humming-fallback"
MTP_DRAFT_MISSING = "mtp-draft-missing"
CUDA_GRAPH_OFF = "cuda-graph-off"
CRASH_AT_LOAD = "crash-at-load"
HANG_AT_LOAD = "hang-at-load"
SLOW_START = "slow-start"
CRASH_AFTER_READY = "crash-after-ready"
DEGRADE_AFTER = "degrade-after"
PROBE_MISSING = "probe-missing"
# DSpark only (no effect on another algorithm): the drafter's degraded modes and an empty drafter directory.
DSPARK_DRAFT_GRAPH_DISABLED = "dspark-draft-graph-disabled"
DSPARK_PROPOSAL_EAGER = "dspark-proposal-eager"
DSPARK_DRAFTER_MISSING = "dspark-drafter-missing"
# Wrong answers at full speed (answers.py writes the plausible wrong answer): every answered question
# (runtime), or only the first generation request after ready (load time: a cold-path kernel).
ANSWERS_GARBLED = "answers-garbled"
COLD_PREFILL_GARBLE = "cold-prefill-garble"
# The FP8 LM head applied with a weight scale 4x too small (load time, only with the FP8 head engaged): greedy
# text and every answer unchanged, every log-probability flattened (logits.py).
FP8_HEAD_SCALE_OFF = "fp8-head-scale-off"
# Something else on the host takes the unified memory (another model, a build): only the host meminfo file
# (SPARKGATE_SIM_HOST_MEMINFO, host_memory.py) shows it; the engine serves on unchanged.
MEMORY_PRESSURE = "memory-pressure"
# A CUDA hang as Spark users report it: a decoding request stops making tokens (after its first decode-log
# report) while /health and /metrics keep answering; clearing the fault lets it finish (engine.py).
DECODE_STALL = "decode-stall"
# A chat template that ignores `enable_thinking: false` (load time: the template loads with the model): every chat
# reply opens a think block of N reasoning words (default 48, about what a thinking model spends on a short
# question) before its answer. With answers-garbled too, the answer after the reasoning is the wrong one.
THINKS_ANYWAY = "thinks-anyway"
# MTP acceptance that decays with context length, as users report it (sglang#30763): healthy up to N tokens of
# context, below the break-even accept length past it (timing.DECAYED_ACCEPT_LENGTH). Speculation only.
ACCEPT_DECAY = "accept-decay"

LOAD_TIME = frozenset({FP8_ENV_IGNORED, DRAFT_LM_HEAD_UNSHARED, HUMMING_FALLBACK, MTP_DRAFT_MISSING, CUDA_GRAPH_OFF,
                       CRASH_AT_LOAD, HANG_AT_LOAD, SLOW_START, DSPARK_DRAFT_GRAPH_DISABLED, DSPARK_PROPOSAL_EAGER,
                       DSPARK_DRAFTER_MISSING, COLD_PREFILL_GARBLE, FP8_HEAD_SCALE_OFF, THINKS_ANYWAY})
RUNTIME = frozenset({CRASH_AFTER_READY, DEGRADE_AFTER, PROBE_MISSING, ANSWERS_GARBLED, MEMORY_PRESSURE, DECODE_STALL,
                     ACCEPT_DECAY})
ALL = LOAD_TIME | RUNTIME

# Faults that take a `:N` parameter, and their value when it is omitted.
# crash-after-ready alone: 60 simulated seconds after ready, whatever the traffic.
# accept-decay alone: past 4096 tokens of context.
DEFAULT_PARAMS = {CRASH_AFTER_READY: "60s", DEGRADE_AFTER: "3", THINKS_ANYWAY: "48", ACCEPT_DECAY: "4096"}


class FaultSpecError(ValueError):
    pass


@dataclass(frozen=True)
class Fault:
    name: str
    param: str | None = None

    def __str__(self) -> str:
        return f"{self.name}:{self.param}" if self.param is not None else self.name

    def count(self) -> int:
        """The `:N` of crash-after-ready / degrade-after (requests), thinks-anyway (reasoning words) or accept-decay
        (tokens of context)."""
        return int(self._value().rstrip("s"))

    @property
    def in_seconds(self) -> bool:
        """crash-after-ready:30s means 30 simulated seconds after ready, not 30 requests."""
        return self._value().endswith("s")

    def _value(self) -> str:
        return self.param if self.param is not None else DEFAULT_PARAMS.get(self.name, "0")


def parse_fault(text: str) -> Fault:
    name, sep, param = text.strip().partition(":")
    if name not in ALL:
        raise FaultSpecError(f"unknown fault {name!r}; known: {', '.join(sorted(ALL))}")
    if not sep:
        return Fault(name)
    if name not in DEFAULT_PARAMS:
        raise FaultSpecError(f"fault {name!r} takes no parameter")
    digits = param[:-1] if (name == CRASH_AFTER_READY and param.endswith("s")) else param
    if not digits.isdigit():
        raise FaultSpecError(f"fault {name!r}: parameter must be a count (or seconds like 30s), got {param!r}")
    return Fault(name, param)


def parse_faults(spec: str | list[str] | None) -> tuple[Fault, ...]:
    if not spec:
        return ()
    items = spec.split(",") if isinstance(spec, str) else list(spec)
    parsed = (parse_fault(item) for item in items if item.strip())
    return tuple({fault.name: fault for fault in parsed}.values())  # the last spelling of a fault wins


class FaultBoard:
    """The live set of faults, switchable at runtime, with the load-time part latched per start."""

    def __init__(self, faults: tuple[Fault, ...]):
        self._lock = threading.Lock()
        self._active = {f.name: f for f in faults}
        self._latched: dict[str, Fault] = {}

    def replace(self, faults: tuple[Fault, ...]) -> None:
        with self._lock:
            self._active = {f.name: f for f in faults}

    def latch_load_time(self) -> None:
        """Called when a (re)start begins: load-time faults are fixed for this engine lifetime."""
        with self._lock:
            self._latched = {n: f for n, f in self._active.items() if n in LOAD_TIME}

    def loaded_with(self, name: str) -> bool:
        with self._lock:
            return name in self._latched

    def latched(self, name: str) -> Fault | None:
        """The load-time fault (with its parameter) this engine start runs with, or None."""
        with self._lock:
            return self._latched.get(name)

    def runtime(self, name: str) -> Fault | None:
        with self._lock:
            return self._active.get(name) if name in RUNTIME else None

    def describe(self) -> dict:
        with self._lock:
            active = sorted(str(f) for f in self._active.values())
            latched = sorted(str(f) for f in self._latched.values())
            pending = sorted(
                str(f) for n, f in self._active.items() if n in LOAD_TIME and self._latched.get(n) != f
            )
            dropped = sorted(str(f) for n, f in self._latched.items() if n not in self._active)
        return {
            "active": active,
            "in_effect_since_start": latched,
            "pending_restart": pending,
            "cleared_at_restart": dropped,
            "known": sorted(ALL),
        }
