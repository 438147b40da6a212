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
    ("identity and configuration", ("engine.identity", "engine.architecture", "engine.batch1", ".config_echo",
                                    "engine.admin_key_enforced")),
    ("engine environment", (".env_declared",)),
    ("probe report", ("engine.probe_report", ".moe_layers", ".target_head", ".draft_loaded", ".lm_head_module")),
    ("engine log", ("engine.log", ".log_", "engine.cuda_graph_capture_log")),
    ("calibration", ("engine.calibration", "engine.cuda_graph_passes", "engine.speed", ".accept_length")),
)


# Non-secret /server_info fields recorded with each verdict (bench runs read them from there).
VERIFIED_CONFIG_KEYS = (
    "version", "model_path", "startup_time", "served_model_name", "moe_runner_backend", "speculative_algorithm",
    "speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens", "enable_fp32_lm_head",
    "attention_backend", "max_running_requests", "mem_fraction_static", "random_seed",
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
    admin_key_file: str | None = None,
    calibrate: bool = True,
    progress: Callable[[str], None] = lambda _: None,
) -> Verdict:
    client = EngineClient(engine_url, api_key=api_key)
    progress(f"gathering evidence from {engine_url} (calibration: {'on' if calibrate else 'off'})")
    evidence = gather(client, expectations, log, calibrate=calibrate, admin_key_file=admin_key_file)
    verdict = Verdict(
        profile=expectations["profile"],
        engine_url=engine_url,
        time=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        checks=run_checks(evidence),
        engine={
            # The verified configuration clients may see (/sparkgate/verdict): /server_info itself is not routed
            # by the gateway, and carries secrets (api keys, launch_command).
            **{key: (evidence.server_info or {}).get(key) for key in VERIFIED_CONFIG_KEYS},
            "log_source": log.source,
        },
        calibration=evidence.calibration.as_dict() if evidence.calibration else {},
    )
    return verdict
