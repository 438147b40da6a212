"""The simulator's own settings, all from `SPARKGATE_SIM_*` environment variables.

None of these exist on a real engine; they are read once at process start (faults can also be changed
later through the admin endpoint).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from sparkgate_sim import faults as faults_mod

IMAGE_ENV = "SPARKGATE_SIM_IMAGE"
TIME_SCALE_ENV = "SPARKGATE_SIM_TIME_SCALE"
STARTUP_TOTAL_ENV = "SPARKGATE_SIM_STARTUP_S"
PHASES_ENV = "SPARKGATE_SIM_PHASES"
ADMIN_ENV = "SPARKGATE_SIM_ADMIN"
FAULTS_ENV = "SPARKGATE_SIM_FAULTS"
HOST_MEMINFO_ENV = "SPARKGATE_SIM_HOST_MEMINFO"

IMAGES = ("fork", "stock")

# Simulated seconds per startup phase, close to a real Spark cold start of Ling-3.0-flash: the weights
# take ~342 s and "fired up" follows about 3 min after "Load weight end" (the Ling notebook's Spark recipe), ~8.5 min
# in all with MTP. Phases marked MTP-only are skipped when no draft model loads.
DEFAULT_PHASES: dict[str, float] = {
    "init": 8.0,  # process start, tokenizer, server_args resolution
    "load_weights": 342.0,  # target checkpoint (60+ GB from disk)
    "load_draft_weights": 14.0,  # MTP only: the NEXTN layer from the same checkpoint
    "kv_cache": 10.0,  # memory pools (KV + mamba state)
    "capture_target": 62.0,  # decode / verify CUDA graphs of the target
    "capture_draft": 40.0,  # MTP only: draft decode + draft extend CUDA graphs
    "warmup": 36.0,  # warmup generate (first Humming MoE forward JIT-compiles kernels)
}
MTP_ONLY_PHASES = ("load_draft_weights", "capture_draft")
SLOW_START_FACTOR = 10.0


class KnobError(ValueError):
    pass


@dataclass(frozen=True)
class Knobs:
    image: str = "fork"
    time_scale: float = 1.0  # wall seconds per simulated second: 0.01 runs 100x faster than a Spark
    startup_total_s: float | None = None  # scale every phase so a start takes this many simulated s
    phase_overrides: Mapping[str, float] = field(default_factory=dict)
    admin: bool = False
    faults: tuple[faults_mod.Fault, ...] = ()
    host_meminfo: str | None = None  # where to write the simulated Spark's /proc/meminfo (host_memory.py)

    def phase_seconds(self, *, with_draft: bool, slow: bool) -> dict[str, float]:
        """Simulated duration of each startup phase that runs in this configuration."""
        phases = {**DEFAULT_PHASES, **self.phase_overrides}
        if not with_draft:
            phases = {k: v for k, v in phases.items() if k not in MTP_ONLY_PHASES}
        if self.startup_total_s is not None:
            total = sum(phases.values()) or 1.0
            phases = {k: v * self.startup_total_s / total for k, v in phases.items()}
        if slow:
            phases = {k: v * SLOW_START_FACTOR for k, v in phases.items()}
        return phases


def _float(env: Mapping[str, str], name: str, default: float | None, *, positive: bool) -> float | None:
    raw = env.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise KnobError(f"{name}={raw!r} is not a number") from None
    if value < 0 or (positive and value == 0):
        raise KnobError(f"{name}={raw!r} must be {'> 0' if positive else '>= 0'}")
    return value


def _phases(raw: str | None) -> dict[str, float]:
    overrides: dict[str, float] = {}
    for item in (raw or "").split(","):
        if not item.strip():
            continue
        name, _, value = item.partition("=")
        name = name.strip()
        if name not in DEFAULT_PHASES:
            raise KnobError(f"{PHASES_ENV}: unknown phase {name!r}; known: {', '.join(DEFAULT_PHASES)}")
        try:
            overrides[name] = float(value)
        except ValueError:
            raise KnobError(f"{PHASES_ENV}: phase {name!r} needs a number of seconds, got {value!r}") from None
    return overrides


def from_env(env: Mapping[str, str]) -> Knobs:
    image = env.get(IMAGE_ENV, "fork").strip() or "fork"
    if image not in IMAGES:
        raise KnobError(f"{IMAGE_ENV}={image!r}: choose from {', '.join(IMAGES)}")
    try:
        faults = faults_mod.parse_faults(env.get(FAULTS_ENV))
    except faults_mod.FaultSpecError as exc:
        raise KnobError(f"{FAULTS_ENV}: {exc}") from None
    return Knobs(
        image=image,
        time_scale=_float(env, TIME_SCALE_ENV, 1.0, positive=True),
        startup_total_s=_float(env, STARTUP_TOTAL_ENV, None, positive=False),
        phase_overrides=_phases(env.get(PHASES_ENV)),
        admin=env.get(ADMIN_ENV, "").strip() == "1",
        faults=faults,
        host_meminfo=env.get(HOST_MEMINFO_ENV, "").strip() or None,
    )
