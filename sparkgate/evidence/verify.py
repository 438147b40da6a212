"""`sparkgate verify`: gather evidence, run the checks the expectations call for, return the verdict."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable

from sparkgate.evidence import common
from sparkgate.evidence.client import EngineClient
from sparkgate.evidence.gather import Evidence, gather
from sparkgate.evidence.logs import EngineLog
from sparkgate.evidence.results import CheckResult, Verdict
from sparkgate.optimizations import REGISTRY

# Stages shown while verifying: (title, check-name prefixes in that stage).
STAGES = (
    ("health", ("engine.health",)),
    ("identity and configuration", ("engine.identity", "engine.architecture", "engine.batch1", ".config_echo")),
    ("engine environment", (".env_declared",)),
    ("probe report", ("engine.probe_report", ".moe_layers", ".target_head", ".draft_loaded", ".lm_head_module")),
    ("engine log", ("engine.log", ".log_", "engine.cuda_graph_capture_log")),
    ("calibration", ("engine.calibration", "engine.cuda_graph_passes", "engine.speed", ".accept_length")),
)


def stage_of(check: CheckResult) -> int:
    for index, (_, patterns) in enumerate(STAGES):
        if any(check.name.startswith(p) if not p.startswith(".") else p in check.name for p in patterns):
            return index
    return len(STAGES) - 1


def run_checks(ev: Evidence) -> list[CheckResult]:
    checks = common.run(ev)
    for key, module in REGISTRY.items():
        if ev.requested(key):
            checks.extend(module.checks(ev))
    return sorted(checks, key=stage_of)


def verify(
    engine_url: str,
    expectations: dict,
    log: EngineLog,
    *,
    api_key: str | None = None,
    calibrate: bool = True,
    progress: Callable[[str], None] = lambda _: None,
) -> Verdict:
    client = EngineClient(engine_url, api_key=api_key)
    progress(f"gathering evidence from {engine_url} (calibration: {'on' if calibrate else 'off'})")
    evidence = gather(client, expectations, log, calibrate=calibrate)
    verdict = Verdict(
        profile=expectations["profile"],
        engine_url=engine_url,
        time=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        checks=run_checks(evidence),
        engine={
            "version": (evidence.server_info or {}).get("version"),
            "model_path": (evidence.server_info or {}).get("model_path"),
            "startup_time": (evidence.server_info or {}).get("startup_time"),
            "log_source": log.source,
        },
        calibration=evidence.calibration.as_dict() if evidence.calibration else {},
    )
    return verdict
