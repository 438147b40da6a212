"""The sentinel loop: wait for a healthy engine, prove it (verification + testinfra + smoke, all against
the engine directly), open the gate, then keep re-checking on a period.

Cheap re-checks run every period: health, restart and weight-change detection, every check whose stage
evidence/stages.py marks re-checked (configuration, environment, probe report), and each requested
optimization's own `rechecks` (MTP: acceptance, see optimizations/mtp_recheck.py), one question of the
answer set when the engine is idle (evidence/answers.py), and on speculative profiles the accept length per
context band of client traffic (evidence/context_bands.py, informational). A full verification with
calibration runs again only when something changed: first start, an engine restart, or a failed
re-check. The gate stays closed until a fresh full verdict passes.

Secrets: the sentinel reads the engine's admin key (sparkgate.runtime.admin_key) from its read-only tmpfs mount
each time it probes enforcement, and keeps nothing that holds it or the API key: every verdict, re-check
and reason passes through `_redact` before it is stored (SGLang's /server_info carries `admin_api_key`
and a launch_command with the key in plain text).
"""

from __future__ import annotations

import collections
import functools
import json
import logging
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

from sparkgate import optimizations
from sparkgate.evidence import answers, calibration, capture, context_bands, host_memory, logs, stall, startup
from sparkgate.evidence.client import EngineClient, EngineUnreachable
from sparkgate.evidence.gather import gather
from sparkgate.evidence.recheck import OwnTraffic, PeriodScrape, RecheckContext
from sparkgate.evidence.recording import Recording, RecordingClient
from sparkgate.evidence.results import CheckResult, Verdict, checked, failed
from sparkgate.evidence.verify import rechecked, run_checks, verify
from sparkgate.optimizations import REGISTRY
from sparkgate.runtime import admin_key, engine_run
from sparkgate.sentinel import suites
from sparkgate.sentinel.captures import CaptureStore
from sparkgate.sentinel.http import serve
from sparkgate.sentinel.state import CLOSED, OPEN, VERIFYING, WAITING, GateState
from sparkgate.sglang.phases import current_phase

log = logging.getLogger("sparkgate.sentinel")
COLD_CHECK = "answers.cold_prefill"
# A refused engine is verified again after 1, 2, 4, then every 6 periods (30 s at the default 5 s), at once when it
# restarts: each full verification costs the engine a calibration and the host two pytest suites.
MAX_BACKOFF_PERIODS = 6
START_MEMORY_SAMPLES = 512


def _failing_names(checks: list[dict], fallback: str) -> str:
    """The failing checks of a stored verdict, as a reason names them (at most 8), or `fallback` when none did."""
    failing = [str(c.get("name")) for c in checks if not c.get("passed")]
    return ", ".join(failing[:8]) or fallback


@dataclass(frozen=True)
class SentinelConfig:
    engine_url: str
    bundle_dir: Path
    log_file: str
    period_s: float = 5.0
    host: str = "0.0.0.0"
    port: int = 8081
    closed_port: int = 8082
    api_key_file: str | None = None
    # Always probed: a sentinel that cannot read the key fails engine.admin_key_enforced (fail closed).
    admin_key_file: str = str(admin_key.ADMIN_DIR / admin_key.KEY_FILE_NAME)
    suite_timeout_s: float = 300.0
    meminfo_path: str = host_memory.HOST_MEMINFO  # the host's memory (procfs shows the host's inside a container)
    captures_dir: str | None = None  # where each full verification's capture is kept (sentinel/captures.py)


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
        self.refused_in_a_row = 0
        self.next_full_at = 0.0  # monotonic time before which a refused engine is not verified again
        # One context per requested optimization: its own re-checks and their memory between periods.
        # What the sentinel's own answer probes send, so acceptance re-checks do not take it for client traffic.
        self.own_traffic = OwnTraffic()
        context = functools.partial(RecheckContext, client=self.quick_client, period_s=config.period_s,
                                    expectations=self.expectations)
        self.module_contexts = {key: context(key, own_traffic=self.own_traffic)
                                for key in REGISTRY if key in self.expectations.get("requested", [])}
        # Every profile: one question of the answer set at a time, when the engine is idle.
        self.answers_context = context("answers", own_traffic=self.own_traffic)
        self.host_context = context("host")
        # Speculative profiles: acceptance per context band of client traffic, from the engine log (informational).
        self.bands_context = context("context_bands", own_traffic=self.own_traffic)
        # Every profile: requests running while no token is made (evidence/stall.py).
        self.stall_context = context("stall")
        self.metrics_reads = 0  # the engine's /metrics read by re-checks (one per period, shared)
        self.weights: dict | None = None  # /model_info identity of the weights at the last full verdict
        self.cold_refusal: tuple[object, CheckResult] | None = None  # (startup_time, its failed cold check)
        self.captures = (CaptureStore(Path(config.captures_dir), config.bundle_dir, config.meminfo_path)
                         if config.captures_dir else None)
        # Which deploy this is (manifest `of` of every capture): the bundle, and the engine start it watches. A start
        # or exit record is this bundle's only when it carries the hash of this bundle's argv (see _this_deploys).
        self.bundle_id = engine_run.bundle_id_of(config.bundle_dir)
        self.argv_sha256 = engine_run.bundle_argv_sha256(config.bundle_dir)
        self.run_dir = Path(config.log_file).parent  # the entrypoint's start and exit records (runtime/engine_run.py)
        self.start_memory: collections.deque[capture.HostMemorySample] = collections.deque(maxlen=START_MEMORY_SAMPLES)
        self.start_refused: tuple[str, str] | None = None  # (container, started) of the dead start already captured

    # --- secrets ------------------------------------------------------------------------------
    def _known_secrets(self) -> tuple[str, ...]:
        try:
            current_admin_key = admin_key.read_key(Path(self.config.admin_key_file))
        except admin_key.AdminKeyError:
            current_admin_key = ""
        return tuple(k for k in (self.api_key, current_admin_key) if k)

    def _redact(self, value):
        """`value` without secret fields, secret flag values or any known key (see sparkgate.runtime.admin_key)."""
        return admin_key.redact(value, self._known_secrets())

    # --- one full verification -------------------------------------------------------------
    def full_verification(self) -> bool:
        self.state.set(*self._verification_start())
        log.info("full verification: starting")
        engine_log = logs.from_file(self.config.log_file)
        # Every answer this verification reads is kept, so its capture can be judged again without the engine.
        recorder = RecordingClient(self.config.engine_url, api_key=self.api_key)
        verdict = verify(self.config.engine_url, self.expectations, engine_log, api_key=self.api_key,
                         admin_key_file=self.config.admin_key_file, meminfo_path=self.config.meminfo_path,
                         client=recorder)
        recording = self._recording(recorder, engine_log, verdict)  # before the cold refusal may be carried in
        cold_kept = self._keep_cold_refusal(verdict)
        suite_env = {
            "SPARKGATE_BUNDLE": str(self.config.bundle_dir),
            "SPARKGATE_INFRA_CONTEXT": "sentinel",
            "SPARKGATE_SMOKE_URL": self.config.engine_url,
            "SPARKGATE_SMOKE_MODEL": self.expectations["engine"]["served_model_name"],
        }
        if self.config.api_key_file:
            suite_env["SPARKGATE_SMOKE_API_KEY_FILE"] = self.config.api_key_file
        infra = suites.run_suite("infra", "infra and not host_only", suite_env, self.config.suite_timeout_s)
        smoke = suites.run_suite("smoke", "smoke", suite_env, self.config.suite_timeout_s)
        passed = verdict.passed and infra.passed and smoke.passed
        if self.captures is not None and recording is not None:
            listing = self.captures.save(recording, self.expectations, {
                "infra": infra.as_dict(), "smoke": smoke.as_dict(),
                "gate": {"passed": passed, "cold_refusal_kept": cold_kept}}, self._known_secrets(), of=self.deploy_of())
            with self.state.lock:
                self.state.captures = listing
        info = self._server_info()
        self.weights = self._weights()
        with self.state.lock:
            self.state.full = self._redact({"passed": passed, "verification": verdict.as_dict(),
                                            "infra": infra.as_dict(), "smoke": smoke.as_dict()})
            self.state.full_runs += 1
            self.state.last_verdict_at = time.time()
            self.state.engine_startup_time = self._redact((info or {}).get("startup_time"))
            self.state.recheck = None
        self.state.record_admission()  # the status page's history restarts with this verdict (state.py)
        self.start_module_rechecks()
        if passed:
            self.ever_verified = True
            self._clear_refused_start(passed=True)
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

    def _recording(self, recorder: RecordingClient, engine_log, verdict: Verdict) -> Recording | None:
        if self.captures is None:
            return None
        try:
            return Recording.of(recorder, self.expectations, engine_log, verdict, secrets=self._known_secrets())
        except Exception as exc:  # noqa: BLE001 - a capture is evidence for people, never a reason to stop the gate
            log.error("verification not recorded: %s: %s", type(exc).__name__, exc)
            return None

    def _keep_cold_refusal(self, verdict: Verdict) -> bool:
        """A cold first request answered wrong stays a refusal for that engine start. A retry cannot ask it cold
        again (the engine is warm now and would pass), so it carries the first verdict's failure until the
        engine restarts (a known, different `startup_time`), when the cold request is asked afresh. Only an
        answer read wrong is kept: a cold request that got no answer (an unhealthy moment) proves nothing."""
        startup = verdict.engine.get("startup_time")
        if self.cold_refusal is not None:
            kept_startup, first = self.cold_refusal
            if kept_startup is None:  # the refused verdict could not read the start: this one is taken for it
                self.cold_refusal = kept_startup, first = startup, first
            if startup is None or startup == kept_startup:
                kept = failed(COLD_CHECK, first.observed, first.expected, first.source + " (this engine start's first)",
                              "this engine start's cold first request was answered wrong; a retry is warm and cannot "
                              "prove the cold path, so the refusal stands until the engine restarts. " + first.hint)
                verdict.checks = [kept if c.name == COLD_CHECK else c for c in verdict.checks]
                return True
            self.cold_refusal = None  # restarted: this verdict asked its cold request afresh
        cold = next((c for c in verdict.checks if c.name == COLD_CHECK), None)
        answered = (verdict.answers.get("cold") or {}).get("text") is not None
        if cold is not None and not cold.passed and answered:
            self.cold_refusal = (startup, cold)
        return False

    def cold_refusal_stands(self) -> bool:
        """Whether the engine is the start whose cold answer was refused (then a full verification is pointless)."""
        if self.cold_refusal is None or self.cold_refusal[0] is None:
            return False
        info = self._server_info()
        return info is not None and info.get("startup_time") == self.cold_refusal[0]

    def _verification_start(self) -> tuple[str, str]:
        """The state while a full verification runs. A retry after a refusal stays `closed`: the last verdict
        refused the engine and stays published in `full` until the retry's replaces it, so a client polling
        between attempts never reads the refusal as gone. The reason says a retry runs, and what refused."""
        with self.state.lock:
            last, recheck = self.state.full, self.state.recheck
        # A re-check that closed the gate is the latest refusal (a full verdict clears `recheck`): name it, as the
        # full verdict's refusal is named below, rather than reading as a first verification.
        if isinstance(recheck, dict) and recheck.get("passed") is not True:
            named = _failing_names(recheck.get("checks", []), "re-check")
            return CLOSED, f"verifying again; the last re-check refused the engine ({named}); the gate stays closed"
        if not last or last.get("passed"):
            return VERIFYING, "verifying the engine before admitting traffic"
        named = _failing_names((last.get("verification") or {}).get("checks", []), "infra or smoke suite")
        return CLOSED, f"verifying again; the last verdict refused the engine ({named}); the gate stays closed"

    # --- cheap re-check ---------------------------------------------------------------------
    def recheck(self) -> bool:
        # Fast path: a dead or restarting engine closes the gate now, without waiting on slower calls.
        status = self.quick_client.status("/health")
        if status != 200:
            self._store_recheck([checked("engine.health", False, status, 200, "GET /health",
                                         "the engine stopped answering after admission (crash or restart)")])
            self.state.set(CLOSED, f"re-check failed: engine.health (HTTP {status or 'no answer'})")
            log.warning("gate CLOSED by re-check: engine /health answered %s", status or "nothing")
            return False
        evidence = gather(self.quick_client, self.expectations, logs.missing(), calibrate=False,
                          admin_key_file=self.config.admin_key_file, meminfo_path=self.config.meminfo_path)
        results: list[CheckResult] = [c for c in run_checks(evidence) if rechecked(c)]
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
        results.extend(self.module_rechecks())
        passed = self._store_recheck(results)
        if not passed:
            failing = [c.name for c in results if not c.passed]
            self.state.set(CLOSED, "re-check failed: " + ", ".join(failing[:8]))
            log.warning("gate CLOSED by re-check: %s", ", ".join(failing))
        return passed

    def _store_recheck(self, results: list[CheckResult]) -> bool:
        """Publish a re-check's results (redacted) with its history sample (state.py); whether all passed."""
        passed = all(c.passed for c in results)
        with self.state.lock:
            self.state.recheck = self._redact({"time": time.time(), "passed": passed,
                                               "checks": [c.as_dict() for c in results]})
            self.state.rechecks += 1
            self.state.last_verdict_at = time.time()
        self.state.record_recheck()
        return passed

    def start_module_rechecks(self) -> None:
        """After a full verification: each requested optimization starts its re-check memory afresh."""
        for key, ctx in self.module_contexts.items():
            ctx.client = self.quick_client  # the client of this moment (tests swap in a fake engine)
            ctx.state = {}
            optimizations.part(REGISTRY[key], "start_rechecks")(ctx)
        self.answers_context.client, self.answers_context.state = self.quick_client, {}
        answers.start_rechecks(self.answers_context, ((self.state.full or {}).get("verification") or {}).get("answers"))
        self.host_context.state = {}
        host_memory.start_rechecks(self.host_context, self.config.meminfo_path)
        self.stall_context.client, self.stall_context.state = self.quick_client, {}
        stall.start_rechecks(self.stall_context)
        self.bands_context.state = {}
        if context_bands.speculative(self.expectations):
            admitted = ((self.state.full or {}).get("verification") or {}).get("calibration") or {}
            context_bands.start_rechecks(self.bands_context, self.config.log_file, calibration.break_even(),
                                         verify_step_s=admitted.get("verify_step_s"))

    def module_rechecks(self) -> list[CheckResult]:
        # One read of the engine's /metrics this period, shared by every re-check that needs it.
        scrape = PeriodScrape(self.quick_client)
        contexts = [*self.module_contexts.values(), self.answers_context, self.stall_context]
        for ctx in contexts:
            ctx.client, ctx.scrape = self.quick_client, scrape
        results: list[CheckResult] = []
        try:
            results.extend(stall.rechecks(self.stall_context))  # first: before any probe adds tokens
            for key, ctx in self.module_contexts.items():
                results.extend(optimizations.part(REGISTRY[key], "rechecks")(ctx))
            results.extend(answers.rechecks(self.answers_context))
            self.state.answers_checked = answers.last_checked(self.answers_context)
            results.extend(host_memory.rechecks(self.host_context))
            results.extend(context_bands.rechecks(self.bands_context))  # last: a probe above is left out of it
        finally:
            for ctx in contexts:
                ctx.scrape = None  # a start after the next full verification reads afresh
            self.metrics_reads += scrape.reads
        return results

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

    # --- the engine start ----------------------------------------------------------------------
    def _this_deploys(self, name: str) -> engine_run.EngineRun | None:
        """The entrypoint's record `name` when it is of an engine started with this bundle's argv, else None.

        No clock decides: a sentinel that starts late (a slow import, a restart by hand) still finds the start that
        died before it. An exit record is taken only with the start record it ended (the entrypoint removes a
        previous start's exit record before it writes its start record). What is left: an earlier start of this same
        bundle (the engine-logs volume outlives a stack), read before this deploy's engine has started, is read as
        that start, under its own container and start time; a capture of it names them (`invoke capture` says
        "of ANOTHER deploy" when the engine container is not this one), and the engine's next start record replaces
        it (refused_start clears the refusal)."""
        record = engine_run.read(self.run_dir / name)
        if record is None or self.argv_sha256 is None or record.argv_sha256 != self.argv_sha256:
            return None
        if name == engine_run.EXIT_FILE:
            start = engine_run.read(self.run_dir / engine_run.START_FILE)
            if start is not None and (start.container, start.started) != (record.container, record.started):
                return None  # an exit record of an earlier start than the one recorded now
        return record

    def deploy_of(self) -> capture.DeployOf | None:
        if self.bundle_id is None:
            return None
        start = self._this_deploys(engine_run.START_FILE)
        return capture.DeployOf(bundle=self.bundle_id, deploy=start.container if start else None,
                                started=start.started if start else None)

    def _sample_start_memory(self) -> None:
        try:
            info = host_memory.read(self.config.meminfo_path)
        except host_memory.MemInfoUnreadable:
            return
        self.start_memory.append(capture.HostMemorySample(
            at=engine_run.now(), available_kib=info.available_kib, total_kib=info.total_kib))

    def refused_start(self) -> bool:
        """Whether the engine of this deploy died before it was ready (its exit record says so). The first time, the
        start is judged (evidence/startup.py) and captured; the gate stays closed with the refusal as its reason."""
        self._clear_refused_start()
        record = self._this_deploys(engine_run.EXIT_FILE)
        if record is None or record.exit_code is None or "ready" in record.phases:
            return False  # still starting, or died after it was ready (a re-check's engine.health names that)
        if self.start_refused != (record.container, record.started):
            self.start_refused = (record.container, record.started)
            engine_log = logs.from_file(self.config.log_file)
            verdict = startup.start_verdict(self.expectations, engine_log, self.config.engine_url, record)
            health = verdict.checks[0]
            # One line: the check, what it saw, what it needs, the likely cause and its fix (health.hint).
            reason = self._redact(f"{health.name} failed: observed exit code {record.exit_code}, needs "
                                  f"{health.expected}: {health.hint}")
            with self.state.lock:
                self.state.refused_start = self._redact({"container": record.container, "started": record.started,
                                                         "checks": [c.as_dict() for c in verdict.checks]})
            self.state.set(CLOSED, reason)
            log.warning("gate CLOSED: %s", reason)
            self._capture_start(record, engine_log, verdict, reason)
        return True

    def _clear_refused_start(self, passed: bool = False) -> None:
        """The published refused start is dropped once it is no longer the engine's: a verification passed, or a
        start record of another start (an engine restarted by hand) has appeared."""
        with self.state.lock:
            refused = self.state.refused_start
        if refused is None:
            return
        start = None if passed else self._this_deploys(engine_run.START_FILE)
        if passed or (start is not None and (start.container, start.started) != (refused.get("container"),
                                                                                    refused.get("started"))):
            with self.state.lock:
                self.state.refused_start = None

    def _capture_start(self, record: engine_run.EngineRun, engine_log, verdict: Verdict, reason: str) -> None:
        if self.captures is None:
            return
        try:
            recorder = RecordingClient(self.config.engine_url, api_key=self.api_key)  # asked nothing: no exchanges
            recording = Recording.of(recorder, self.expectations, engine_log, verdict, calibrate=False,
                                     secrets=self._known_secrets())
            started = record.started_at() or 0.0
            observed = verdict.checks[0].observed
            start = capture.StartFacts(
                exit=record, exit_code=record.exit_code, phases_reached=observed["phases_reached"],
                never_reached=observed["never_reached"], refusal=reason[:4000],
                host_memory=[m for m in self.start_memory
                             if (engine_run.epoch(m.at) or 0.0) >= started - self.config.period_s])
        except Exception as exc:  # noqa: BLE001 - a capture is evidence for people, never a reason to stop the gate
            log.error("refused start not recorded: %s: %s", type(exc).__name__, exc)
            return
        listing = self.captures.save(recording, self.expectations, {"gate": {"passed": False}},
                                     self._known_secrets(), of=self.deploy_of(), start=start)
        with self.state.lock:
            self.state.captures = listing

    # --- loop ---------------------------------------------------------------------------------
    def step(self) -> None:
        if self.need_full:
            # The startup phase matters (and the log is short) only until the engine is verified.
            self.state.engine_phase = current_phase(logs.from_file(self.config.log_file).text)
            self._sample_start_memory()
            # Before /health: the name of a stopped engine container can take the whole client timeout to fail.
            if self.refused_start():
                return
            if self.client.status("/health") != 200:
                state = CLOSED if self.ever_verified else WAITING
                self.state.set(state, f"engine not healthy (phase: {self.state.engine_phase})")
                return
            if self.cold_refusal_stands():
                self.state.set(CLOSED, f"{COLD_CHECK} refused this engine start (its cold first request was answered "
                                       "wrong); no retry can ask it cold again: restart the engine to verify afresh")
                return
            if self.backing_off():
                return
            self.need_full = not self.full_verification()
            self._schedule_retry(passed=not self.need_full)
            return
        if not self.recheck():
            self.need_full = True

    def _schedule_retry(self, passed: bool) -> None:
        if passed:
            self.refused_in_a_row, self.next_full_at = 0, 0.0
            return
        self.refused_in_a_row += 1
        periods = min(2 ** (self.refused_in_a_row - 1), MAX_BACKOFF_PERIODS)
        self.next_full_at = time.monotonic() + periods * self.config.period_s

    def backing_off(self) -> bool:
        """Whether a refused engine waits before its next full verification (an engine restart ends the wait)."""
        wait = self.next_full_at - time.monotonic()
        if wait <= 0:
            return False
        startup = (self._server_info() or {}).get("startup_time")
        if startup is not None and self._redact(startup) != self.state.engine_startup_time:
            return False  # restarted since the refusal: verify the new start at once
        with self.state.lock:
            last = self.state.full or {}
        named = _failing_names((last.get("verification") or {}).get("checks", []), "infra or smoke suite")
        self.state.set(CLOSED, f"the last verdict refused the engine ({named}); verifying again in {wait:.0f} s "
                               f"({self.refused_in_a_row} refusal(s) in a row; at once if the engine restarts)")
        return True

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
