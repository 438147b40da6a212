"""The sentinel loop: wait for a healthy engine, prove it (verification + testinfra + smoke, all against
the engine directly), open the gate, then keep re-checking on a period.

Cheap re-checks run every period (health, restart and weight-change detection, configuration, probe
report, and MTP acceptance judged as sentinel/acceptance.py explains). A full verification with
calibration runs again only when something changed: first start, an engine restart, or a failed
re-check. The gate stays closed until a fresh full verdict passes.

Secrets: the sentinel reads the engine's admin key (sparkgate.admin_key) from its read-only tmpfs mount
each time it probes enforcement, and keeps nothing that holds it or the API key: every verdict, re-check
and reason passes through `_redact` before it is stored (SGLang's /server_info carries `admin_api_key`
and a launch_command with the key in plain text).
"""

from __future__ import annotations

import json
import logging
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

from sparkgate import admin_key
from sparkgate.evidence import logs
from sparkgate.evidence.client import EngineClient, EngineUnreachable
from sparkgate.evidence.gather import gather
from sparkgate.evidence.results import CheckResult, checked
from sparkgate.evidence.verify import STAGES, run_checks, stage_of, verify
from sparkgate.phases import current_phase
from sparkgate.sentinel import acceptance, suites
from sparkgate.sentinel.http import serve
from sparkgate.sentinel.state import CLOSED, OPEN, VERIFYING, WAITING, GateState

log = logging.getLogger("sparkgate.sentinel")
CALIBRATION_STAGE = len(STAGES) - 1
# The startup log signatures cannot change without a restart, which `sentinel.engine_unchanged` catches;
# re-reading a log that grows for days on every period would only cost I/O.
LOG_STAGE = next(i for i, (title, _) in enumerate(STAGES) if title == "engine log")


@dataclass(frozen=True)
class SentinelConfig:
    engine_url: str
    bundle_dir: Path
    log_file: str
    tests_dir: Path
    period_s: float = 5.0
    host: str = "0.0.0.0"
    port: int = 8081
    closed_port: int = 8082
    api_key_file: str | None = None
    # Always probed: a sentinel that cannot read the key fails engine.admin_key_enforced (fail closed).
    admin_key_file: str = str(admin_key.ADMIN_DIR / admin_key.KEY_FILE_NAME)
    suite_timeout_s: float = 300.0


class Sentinel:
    def __init__(self, config: SentinelConfig):
        self.config = config
        self.expectations = json.loads((config.bundle_dir / "expectations.json").read_text())
        self.state = GateState(profile=self.expectations["profile"], redactor=self._redact)
        api_key = Path(config.api_key_file).read_text().strip() if config.api_key_file else None
        self.api_key = api_key or None
        self.client = EngineClient(config.engine_url, api_key=self.api_key)
        # Re-checks must finish well inside one period, whatever state the engine is in.
        self.quick_client = EngineClient(config.engine_url, api_key=self.api_key,
                                         timeout=max(0.5, min(3.0, config.period_s / 3)))
        self.need_full = True
        self.ever_verified = False
        self.window_start: acceptance.Counters | None = None  # client-traffic window for the collapse statistic
        self.last_probe_counters: acceptance.Counters | None = None  # counters right after the last probe
        self.last_probe_at = 0.0
        self.previous_counters: acceptance.Counters | None = None  # at the previous re-check (idle detection)
        self.weights: dict | None = None  # /model_info identity of the weights at the last full verdict

    # --- secrets ------------------------------------------------------------------------------
    def _known_secrets(self) -> tuple[str, ...]:
        try:
            current_admin_key = admin_key.read_key(Path(self.config.admin_key_file))
        except admin_key.AdminKeyError:
            current_admin_key = ""
        return tuple(k for k in (self.api_key, current_admin_key) if k)

    def _redact(self, value):
        """`value` without secret fields, secret flag values or any known key (see sparkgate.admin_key)."""
        return admin_key.redact(value, self._known_secrets())

    # --- one full verification -------------------------------------------------------------
    def full_verification(self) -> bool:
        self.state.set(VERIFYING, "verifying the engine before admitting traffic")
        log.info("full verification: starting")
        engine_log = logs.from_file(self.config.log_file)
        verdict = verify(self.config.engine_url, self.expectations, engine_log, api_key=self.api_key,
                         admin_key_file=self.config.admin_key_file)
        suite_env = {
            "SPARKGATE_BUNDLE": str(self.config.bundle_dir),
            "SPARKGATE_INFRA_CONTEXT": "sentinel",
            "SPARKGATE_SMOKE_URL": self.config.engine_url,
            "SPARKGATE_SMOKE_MODEL": self.expectations["engine"]["served_model_name"],
        }
        if self.config.api_key_file:
            suite_env["SPARKGATE_SMOKE_API_KEY_FILE"] = self.config.api_key_file
        infra = suites.run_suite("infra", self.config.tests_dir / "infra", "infra and not host_only", suite_env,
                                 self.config.suite_timeout_s)
        smoke = suites.run_suite("smoke", self.config.tests_dir / "smoke", "smoke", suite_env,
                                 self.config.suite_timeout_s)
        passed = verdict.passed and infra.passed and smoke.passed
        info = self._server_info()
        self.weights = self._weights()
        with self.state.lock:
            self.state.full = self._redact({
                "passed": passed,
                "verification": verdict.as_dict(),
                "infra": infra.as_dict(),
                "smoke": smoke.as_dict(),
            })
            self.state.full_runs += 1
            self.state.last_verdict_at = time.time()
            self.state.engine_startup_time = self._redact((info or {}).get("startup_time"))
            self.state.recheck = None
        self.window_start = self.last_probe_counters = self.previous_counters = self._counters()
        self.last_probe_at = time.monotonic()  # the calibration just measured acceptance
        if passed:
            self.ever_verified = True
            self.state.set(OPEN, "all checks, testinfra and smoke tests passed")
            log.info("gate OPEN: %d checks, %d infra tests, %d smoke tests passed",
                     len(verdict.checks), len(infra.tests), len(smoke.tests))
        else:
            failing = [c.name for c in verdict.failures()]
            failing += [f"infra:{t.name}" for t in infra.tests if t.outcome != "passed"] or ([] if infra.passed else ["infra suite"])
            failing += [f"smoke:{t.name}" for t in smoke.tests if t.outcome != "passed"] or ([] if smoke.passed else ["smoke suite"])
            self.state.set(CLOSED, "verification failed: " + ", ".join(failing[:8]))
            log.warning("gate CLOSED: %s", ", ".join(failing))
        return passed

    # --- cheap re-check ---------------------------------------------------------------------
    def recheck(self) -> bool:
        # Fast path: a dead or restarting engine closes the gate now, without waiting on slower calls.
        status = self.quick_client.status("/health")
        if status != 200:
            failure = checked("engine.health", False, status, 200, "GET /health",
                              "the engine stopped answering after admission (crash or restart)")
            with self.state.lock:
                self.state.recheck = self._redact({"time": time.time(), "passed": False, "checks": [failure.as_dict()]})
                self.state.rechecks += 1
                self.state.last_verdict_at = time.time()
            self.state.set(CLOSED, f"re-check failed: engine.health (HTTP {status or 'no answer'})")
            log.warning("gate CLOSED by re-check: engine /health answered %s", status or "nothing")
            return False
        evidence = gather(self.quick_client, self.expectations, logs.missing(), calibrate=False,
                          admin_key_file=self.config.admin_key_file)
        results: list[CheckResult] = [
            c for c in run_checks(evidence) if stage_of(c) < CALIBRATION_STAGE and stage_of(c) != LOG_STAGE
        ]
        startup = self._redact((evidence.server_info or {}).get("startup_time"))
        results.append(checked(
            "sentinel.engine_unchanged", startup == self.state.engine_startup_time, startup,
            self.state.engine_startup_time, "GET /server_info startup_time",
            "the engine restarted since it was verified: a full verification runs before traffic is admitted again",
        ))
        weights = self._weights_of(evidence.model_info)
        results.append(checked(
            "sentinel.weights_unchanged", weights is not None and weights == self.weights, weights, self.weights,
            "GET /model_info weight_version, model_path",
            "the engine's weights changed since the last full verdict (an /update_weights_from_disk or "
            "similar admin call inside the stack): a full verification runs before traffic is admitted again",
        ))
        results.extend(self._acceptance())
        passed = all(c.passed for c in results)
        with self.state.lock:
            self.state.recheck = self._redact({"time": time.time(), "passed": passed,
                                               "checks": [c.as_dict() for c in results]})
            self.state.rechecks += 1
            self.state.last_verdict_at = time.time()
        if not passed:
            failing = [c.name for c in results if not c.passed]
            self.state.set(CLOSED, "re-check failed: " + ", ".join(failing[:8]))
            log.warning("gate CLOSED by re-check: %s", ", ".join(failing))
        return passed

    def _acceptance(self) -> list[CheckResult]:
        """MTP acceptance after admission, without judging client traffic against the greedy floor."""
        if "mtp" not in self.expectations.get("requested", []):
            return []
        floor = self.expectations["optimizations"]["mtp"]["min_accept_length"]
        now = self._counters()
        if now is None:
            return [acceptance.counters_missing(floor)]
        results: list[CheckResult] = []
        start = self.window_start or now
        accept, calls = acceptance.window_accept(start, now)
        collapsed = acceptance.looks_collapsed(start, now)
        if calls >= acceptance.MIN_VERIFY_CALLS or now.verifies < start.verifies:
            self.window_start = now  # judged (or the counters went backwards): start a fresh window
        previous, self.previous_counters = self.previous_counters, now
        idle = previous is not None and now.tokens == previous.tokens  # nothing generated for a whole period
        served = self.last_probe_counters is None or now.verifies > self.last_probe_counters.verifies
        due = time.monotonic() - self.last_probe_at >= acceptance.PROBE_EVERY_PERIODS * self.config.period_s
        if collapsed:
            trigger = "collapse on client traffic"  # probe now, even if a client has to wait for it
        elif not idle or not (served or due):
            trigger = None  # never make a client queue behind a routine probe
        else:
            trigger = "idle after client traffic" if served else "idle, periodic"
        if trigger:
            probe = acceptance.run_probe(self.quick_client, timeout_s=max(1.0, self.config.period_s))
            results.append(acceptance.probe_check(probe, floor, trigger))
            self.last_probe_at = time.monotonic()
            self.last_probe_counters = self._counters()
            self.window_start = self.previous_counters = self.last_probe_counters or now
        results.append(checked(
            "sentinel.accept_window", True, {"accept_length": None if accept is None else round(accept, 3),
                                             "verify_calls": calls, "collapsed": collapsed},
            f"informational: <= {acceptance.COLLAPSE_ACCEPT_LENGTH} over >= {acceptance.MIN_VERIFY_CALLS} verify "
            "calls triggers the probe", "GET /metrics generation_tokens_total / spec_verify_calls_total",
            "client traffic is sampled prose: its acceptance is reported, never judged against the greedy floor",
        ))
        return results

    def _counters(self) -> acceptance.Counters | None:
        try:
            return acceptance.read_counters(self.quick_client.get_text("/metrics"))
        except EngineUnreachable:
            return None

    @staticmethod
    def _weights_of(model_info: dict | None) -> dict | None:
        if not isinstance(model_info, dict) or "weight_version" not in model_info:
            return None
        return {"weight_version": model_info.get("weight_version"), "model_path": model_info.get("model_path")}

    def _weights(self) -> dict | None:
        try:
            return self._weights_of(self.client.get_json("/model_info"))
        except EngineUnreachable:
            return None

    def _server_info(self) -> dict | None:
        try:
            return self.client.get_json("/server_info")
        except EngineUnreachable:
            return None

    # --- loop ---------------------------------------------------------------------------------
    def step(self) -> None:
        if self.need_full:
            # The startup phase matters (and the log is short) only until the engine is verified.
            self.state.engine_phase = current_phase(logs.from_file(self.config.log_file).text)
            if self.client.status("/health") != 200:
                state = CLOSED if self.ever_verified else WAITING
                self.state.set(state, f"engine not healthy (phase: {self.state.engine_phase})")
                return
            self.need_full = not self.full_verification()
            return
        if not self.recheck():
            self.need_full = True

    def run_forever(self) -> None:
        serve(self.state, self.config.host, self.config.port, self.config.closed_port)
        log.info("sentinel for %s watching %s every %.1fs", self.state.profile, self.config.engine_url,
                 self.config.period_s)
        while True:
            started = time.monotonic()
            try:
                self.step()
            except Exception as exc:  # a sentinel bug must close the gate, never leave it open
                log.error("sentinel step failed: %s", self._redact(traceback.format_exc()))
                self.need_full = True
                self.state.set(CLOSED, f"sentinel error: {type(exc).__name__}: {exc}")
            time.sleep(max(0.0, self.config.period_s - (time.monotonic() - started)))
