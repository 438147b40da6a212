"""`sparkgate verify`: gather evidence, run the checks the expectations call for, return the verdict."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable

from sparkgate.evidence import answers, catalog, engine_checks, host_memory
from sparkgate.evidence.client import EngineClient
from sparkgate.evidence.gather import Evidence, gather
from sparkgate.evidence.logs import EngineLog
from sparkgate.evidence.results import CheckResult, Verdict, failed
from sparkgate.evidence.stages import Stage
from sparkgate.optimizations import REGISTRY

# Non-secret /server_info fields recorded with each verdict (bench runs read them from there); each
# optimization adds its own (CONFIG_KEYS in its module).
COMMON_CONFIG_KEYS = (
    "version", "model_path", "startup_time", "served_model_name", "attention_backend", "max_running_requests",
    "mem_fraction_static", "random_seed",
)


def verified_config_keys() -> tuple[str, ...]:
    return COMMON_CONFIG_KEYS + tuple(key for module in REGISTRY.values() for key in module.CONFIG_KEYS)


def stage_of(check: CheckResult) -> Stage | None:
    """The stage its module declares for the check; None for an undeclared check."""
    return catalog.stage_of(check.name)


def rechecked(check: CheckResult) -> bool:
    """Whether the sentinel's re-check runs this check again. An undeclared check is re-checked (and fails)."""
    stage = stage_of(check)
    return stage is None or stage.rechecked


def _sort_key(check: CheckResult) -> int:
    stage = stage_of(check)
    return len(Stage) if stage is None else stage


def _declared(check: CheckResult) -> CheckResult:
    """Fail closed on a check no module declares: nobody decided whether the sentinel re-checks it."""
    if stage_of(check) is not None:
        return check
    return failed(
        check.name, check.observed, check.expected, check.source,
        f"sparkgate bug: {check.name} declares no stage, so the sentinel cannot tell whether to re-check it; "
        f"declare it in CHECKS of the module that emits it (evidence/stages.py lists the stages). {check.hint}",
    )


def run_checks(ev: Evidence) -> list[CheckResult]:
    checks = engine_checks.run(ev) + answers.checks(ev.answers, ev.expectations)
    if ev.meminfo_path is not None:  # the sentinel, on the engine's host
        memory = ev.host_memory or host_memory.HostMemory(None, "not read")
        checks.append(host_memory.headroom_check(memory, ev.meminfo_path, ev.expectations))
    for key, module in REGISTRY.items():
        if ev.requested(key):
            checks.extend(module.checks(ev))
    return sorted((_declared(c) for c in checks), key=_sort_key)


def verify(engine_url: str, expectations: dict, log: EngineLog, *, api_key: str | None = None,
           admin_key_file: str | None = None, meminfo_path: str | None = None, calibrate: bool = True,
           progress: Callable[[str], None] = lambda _: None, client: EngineClient | None = None,
           repeat_room_first: bool = True) -> Verdict:
    """`client`: another EngineClient for `engine_url` (recording.py's recording or replaying one);
    `repeat_room_first`: answers.run's, for a replay of a recording asked the older way."""
    client = client if client is not None else EngineClient(engine_url, api_key=api_key)
    progress(f"gathering evidence from {engine_url} (calibration: {'on' if calibrate else 'off'})")
    evidence = gather(client, expectations, log, calibrate=calibrate, admin_key_file=admin_key_file,
                      meminfo_path=meminfo_path, repeat_room_first=repeat_room_first)
    return Verdict(
        profile=expectations["profile"], engine_url=engine_url,
        time=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"), checks=run_checks(evidence),
        # The verified configuration clients may see (/sparkgate/verdict): /server_info itself is not routed by the
        # gateway, and carries secrets (api keys, launch_command).
        engine={**{key: (evidence.server_info or {}).get(key) for key in verified_config_keys()},
                "log_source": log.source},
        calibration=evidence.calibration.as_dict() if evidence.calibration else {},
        answers=evidence.answers.as_dict() if evidence.answers else {},
    )
