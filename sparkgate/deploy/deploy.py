"""Deploy a profile: preflight, render, compose up, follow the engine's startup, wait for the sentinel's
verdict, smoke-test through the gateway, and write a deploy record. Exit 0 only when traffic is admitted."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from sparkgate import atomic, paths, suites
from sparkgate.bundle import render
from sparkgate.bundle.monitoring import DEFAULT_PROMETHEUS_PORT, DEFAULT_SCRAPE_INTERVAL_S
from sparkgate.deploy import docker_cli, preflight
from sparkgate.errors import Refusal
from sparkgate.evidence import startup
from sparkgate.evidence.client import fetch_json
from sparkgate.evidence.logs import EngineLog
from sparkgate.images import load_lock
from sparkgate.paths import build_dir
from sparkgate.profile import loading as profiles
from sparkgate.runtime import engine_run
from sparkgate.sglang.phases import PHASES, current_phase, phases_reached

SPARK_START_BUDGET_S = 20 * 60  # cold start is ~8 min; graphs + JIT can add more on a first run
SIM_START_BUDGET_S = 5 * 60


@dataclass(frozen=True)
class DeployOptions:
    profile: str
    target: str = "sim"
    project: str | None = None
    out: Path | None = None
    port: int = render.DEFAULT_GATEWAY_PORT
    bind: str = "127.0.0.1"
    api_key_file: str | None = None
    sim_faults: tuple[str, ...] = ()
    sim_admin: bool = False
    sim_time_scale: float = render.DEFAULT_SIM_TIME_SCALE
    sim_startup_s: float | None = None
    sim_image: str | None = None
    recheck_period_s: float = 5.0
    # The `monitoring` compose profile (docs/monitoring.md): Prometheus on 127.0.0.1:prometheus_port.
    monitoring: bool = False
    prometheus_port: int = DEFAULT_PROMETHEUS_PORT
    scrape_interval_s: float = DEFAULT_SCRAPE_INTERVAL_S
    alert_for_s: float | None = None
    budget_s: float | None = None
    post_smoke: bool = True
    # Drills and tests only: leave a refused engine running (to read its counters). The sentinel keeps
    # re-verifying it, so the gate could open later without this deploy's post-admission smoke.
    keep_refused_engine: bool = False
    dry_run: bool = False


@dataclass
class DeployResult:
    admitted: bool
    project: str
    bundle: Path
    gateway_url: str
    reason: str
    verdict: dict | None = None
    timings: dict = field(default_factory=dict)
    record: Path | None = None
    # Engine-log checks failed by an engine that exited before it was ready (evidence/startup.py).
    startup_checks: list[dict] = field(default_factory=list)


class DeployRefused(Refusal):
    """Profile, preflight or render refusal: nothing was started and a running stack was not touched.
    (One exception: on a Spark, memory still short after the old stack stopped.)"""


def gateway_url(options: DeployOptions) -> str:
    host = "127.0.0.1" if options.bind in ("0.0.0.0", "127.0.0.1", "localhost") else options.bind
    return f"http://{host}:{options.port}"


def compose_env(options: DeployOptions) -> dict[str, str]:
    env = {"SPARKGATE_GATEWAY_PORT": str(options.port), "SPARKGATE_GATEWAY_BIND": options.bind,
           # Set either way, so a COMPOSE_PROFILES in the caller's environment cannot start or drop Prometheus.
           "COMPOSE_PROFILES": "monitoring" if options.monitoring else "",
           "SPARKGATE_PROMETHEUS_PORT": str(options.prometheus_port)}
    if options.api_key_file:
        env["SPARKGATE_API_KEY_FILE"] = str(Path(options.api_key_file).resolve())
    return env


def every_profile(project: docker_cli.Project) -> docker_cli.Project:
    """The project with every compose profile active: `down` leaves a profile's containers (Prometheus) running
    unless that profile is active, whatever the last deploy enabled."""
    return replace(project, env={**project.env, "COMPOSE_PROFILES": "*"})


def prometheus_url(options: DeployOptions) -> str:
    return f"http://127.0.0.1:{options.prometheus_port}"


def run_smoke(url: str, model: str, api_key_file: str | None) -> subprocess.CompletedProcess:
    extra = {"SPARKGATE_SMOKE_URL": url, "SPARKGATE_SMOKE_MODEL": model}
    if api_key_file:
        extra["SPARKGATE_SMOKE_API_KEY_FILE"] = str(api_key_file)
    return subprocess.run(suites.argv("smoke", "smoke"), capture_output=True, text=True,
                          env=suites.environment(extra), cwd=suites.SUITES, timeout=300)


def deploy(options: DeployOptions, say: Callable[[str], None] = print) -> DeployResult:
    started = time.monotonic()
    timings: dict[str, float] = {}

    def mark(name: str) -> None:
        timings[name] = round(time.monotonic() - started, 2)

    loaded = profiles.load(options.profile)  # ProfileError propagates: one line, nothing started
    name = loaded.profile.name
    project = docker_cli.Project(options.project or f"sparkgate-{name}",
                                 (options.out or build_dir() / name) / "compose.yaml", compose_env(options))
    bundle = project.compose_file.parent
    render_options = render.RenderOptions(
        target=options.target, sim_time_scale=options.sim_time_scale, recheck_period_s=options.recheck_period_s,
        sim_faults=options.sim_faults, sim_admin=options.sim_admin, sim_startup_s=options.sim_startup_s,
        sim_image=options.sim_image, scrape_interval_s=options.scrape_interval_s, alert_for_s=options.alert_for_s,
    )
    lock = load_lock()
    images = [lock.local_images["sentinel"], lock.local_images["gateway"]]
    if options.monitoring:
        images.append(lock.local_images["prometheus"])
    images.append(lock.local_images["sim"] if options.target == "sim" else lock.engine_ref(loaded.profile.image))
    url = gateway_url(options)

    # Nothing that runs is touched until the profile, the preflight and the render have all succeeded:
    # a refused redeploy leaves the admitted stack serving.
    say(f"[1/6] preflight ({options.target})")
    findings = [preflight.docker_reachable()]
    running = bool(findings[0].ok and project.containers())
    if running:
        say(f"      {project.name} has a stack deployed; it keeps serving until this deploy has passed preflight "
            "and render")
    if options.target == "spark":
        # Host facts first: on the wrong host nothing else matters.
        model_dir = preflight.model_dir(loaded.profile.model.path)
        cache_dir = paths.CACHE_DIR.host()
        mem_min_gib, mem_why = preflight.memory_floor(loaded.profile)
        host = preflight.spark_host(model_dir, cache_dir, mem_min_gib, memory_held_by_own_engine=running,
                                    mem_why=mem_why)
        findings += host
        if any(f.check == "model" and f.ok for f in host):
            # The checkpoint the host finding found, proven before anything starts (its absence is that finding's).
            findings += preflight.model_checkpoint(loaded.profile, options.profile, model_dir,
                                                   say=lambda line: say(f"      {line}"))
        findings += preflight.dspark_drafter(loaded.profile, say=lambda line: say(f"      {line}"))
    if findings[0].ok:
        findings.append(preflight.images_present(sorted(set(images))))
    findings.append(preflight.gateway_port(options.bind, options.port, project if findings[0].ok else None))
    findings.append(preflight.api_key(options.bind, options.api_key_file))
    if options.monitoring:
        findings.append(preflight.prometheus_port(options.prometheus_port, project if findings[0].ok else None))
    for finding in findings:
        say(f"      {finding}")
    failed = [f for f in findings if not f.ok]
    if failed:
        more = f" (and {len(failed) - 1} more above)" if len(failed) > 1 else ""
        untouched = f"; the running stack {project.name} was not touched" if running else ""
        raise DeployRefused(f"preflight failed: {failed[0].check}: {failed[0].detail}{more}{untouched}")
    mark("preflight")

    say(f"[2/6] render {loaded.source} -> {bundle}")
    if options.dry_run:
        for file_name in render.render_files(loaded, render_options):
            say(f"      would write {bundle / file_name}")
        if running:
            say(f"      would stop the running stack: docker compose -p {project.name} down")
        say(f"      would run: docker compose -p {project.name} -f {project.compose_file} up -d")
        return DeployResult(False, project.name, bundle, url, "dry run: nothing started")
    try:
        # The running stack keeps serving: its containers hold copies of their configs, not the bundle directory.
        render.render(loaded, render_options, bundle)
    except (OSError, ValueError) as exc:
        untouched = f"; the running stack {project.name} was not touched" if running else ""
        raise DeployRefused(f"render into {bundle} failed: {exc}{untouched}") from None
    mark("render")

    say(f"[3/6] compose up (project {project.name}); the gateway starts closed")
    if running:
        say(f"      replacing the running stack {project.name}: compose down")
    # Also clears containers a refused deploy left stopped, and a previous deploy's Prometheus.
    every_profile(project).compose("down", "--remove-orphans", "-t", "10", check=False)
    if running and options.target == "spark":
        # The old engine's unified memory is released over tens of seconds after it stops.
        memory = _wait_for_memory(say, *preflight.memory_floor(loaded.profile))
        if not memory.ok:
            raise DeployRefused(f"preflight failed after stopping the old stack: {memory.check}: {memory.detail}. "
                                f"The old stack {project.name} was stopped to free its memory; deploy again once "
                                "memory is available")
    project.compose("up", "-d", "--no-build")
    mark("up")
    result = _wait_and_prove(options, project, loaded, url, started, timings, say)
    result.record = _write_record(options, project, bundle, images, result)
    return result


def _wait_for_memory(say, mem_min_gib: float, why: str, timeout_s: float = 180.0) -> preflight.PreflightFinding:
    """A stopped engine releases unified memory over tens of seconds; give it that time."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and not preflight.memory(mem_min_gib, why).ok:
        time.sleep(5)
    finding = preflight.memory(mem_min_gib, why)
    say(f"      {finding}")
    return finding


def _wait_and_prove(options, project, loaded, url, started, timings, say) -> DeployResult:
    budget = options.budget_s or (SIM_START_BUDGET_S if options.target == "sim" else SPARK_START_BUDGET_S)
    api_key = Path(options.api_key_file).read_text().strip() if options.api_key_file else None
    say(f"[4/6] waiting for the engine (budget {budget:.0f}s)")
    last_phase = last_gate = None
    deadline = time.monotonic() + budget
    verdict = None
    while time.monotonic() < deadline:
        elapsed = time.monotonic() - started
        engine_state = project.state("engine")
        phase = current_phase(project.logs("engine"))
        if phase != last_phase:
            say(f"      {elapsed:6.1f}s engine: {phase}")
            last_phase = phase
        if engine_state is None or engine_state.get("Status") in ("exited", "dead"):
            code = (engine_state or {}).get("ExitCode")
            return _refused_exited(options, project, url, timings, say, f"engine.health: engine exited (code {code}) "
                                   "during startup (needs an engine that reaches ready)",
                                   verdict, code if isinstance(code, int) else None,
                                   this_start=(project.container("engine"), (engine_state or {}).get("StartedAt")))
        health = (engine_state.get("Health") or {}).get("Status")
        if health == "healthy" and "engine_healthy" not in timings:
            timings["engine_healthy"] = round(elapsed, 2)
        status, verdict = fetch_json(f"{url}/sparkgate/verdict", api_key)
        gate = (verdict or {}).get("state")
        if gate != last_gate and gate is not None:
            say(f"      {elapsed:6.1f}s gate: {gate} ({(verdict or {}).get('reason')})")
            last_gate = gate
        if gate == "open":
            timings["gate_open"] = round(elapsed, 2)
            break
        if gate == "closed" and (verdict or {}).get("full_runs", 0) >= 1:
            return _refused(options, project, url, timings, say, "the sentinel refused the engine", verdict)
        time.sleep(1.0)
    else:
        return _refused(options, project, url, timings, say, f"no verdict within {budget:.0f}s", verdict)

    say("[5/6] sentinel verdict: PASS (verification + testinfra + smoke against the engine)")
    print_verdict(verdict, say)
    # The gateway follows the verdict within its poll and health-check interval (about a second).
    follow_deadline = time.monotonic() + 15
    while fetch_json(f"{url}/v1/models", api_key)[0] != 200:
        if time.monotonic() > follow_deadline:
            return _refused(options, project, url, timings, say, "the gateway did not follow the open verdict", verdict)
        time.sleep(0.25)
    if options.post_smoke:
        say(f"[6/6] post-admission smoke through the gateway {url}")
        smoke = run_smoke(url, loaded.profile.model.served_name, options.api_key_file)
        timings["post_smoke"] = round(time.monotonic() - started, 2)
        if smoke.returncode != 0:
            say(smoke.stdout[-2000:])
            said = (smoke.stderr.strip().splitlines() or smoke.stdout.strip().splitlines() or ["no output"])[-1]
            return _refused(options, project, url, timings, say,
                            f"post-admission smoke through the gateway failed (pytest exit {smoke.returncode}: "
                            f"{said[:200]})", verdict)
        say("      " + (smoke.stdout.strip().splitlines() or ["passed"])[-1])
    say(f"admitted: {url} serves {loaded.profile.model.served_name} ({loaded.profile.name}, {options.target})")
    if options.monitoring:
        say(f"monitoring: Prometheus on {prometheus_url(options)} (docs/monitoring.md)")
    return DeployResult(True, project.name, project.compose_file.parent, url, "admitted", verdict, timings)


def print_verdict(verdict: dict | None, say) -> None:
    full = (verdict or {}).get("full") or {}
    checks = (full.get("verification") or {}).get("checks", [])
    for check in checks:
        say(f"      {'pass' if check['passed'] else 'FAIL'}  {check['name']}: observed {json.dumps(check['observed'], default=str)[:90]}")
    for suite in ("infra", "smoke"):
        result = full.get(suite)
        if result:
            failing = [t["name"] for t in result["tests"] if t["outcome"] != "passed"]
            say(f"      {'pass' if result['passed'] else 'FAIL'}  suite {suite}: {len(result['tests'])} tests"
                + (f", failing {failing}" if failing else ""))


def print_captures(verdict: dict | None, profile: str, say) -> None:
    """Where the sentinel keeps the captures of its full verifications, and how to copy one out."""
    captures = (verdict or {}).get("captures")
    if not isinstance(captures, dict):
        return
    if captures.get("error"):
        say(f"capture: {captures['error']}")
    refused = captures.get("refused") or []
    if captures.get("last"):
        say(f"capture of the last full verification: {captures['last']} in the sentinel"
            + (f" ({len(refused)} refused kept, latest {refused[-1]})" if refused else "")
            + f"; copy it out: invoke capture --profile {profile}" + (" --refused" if refused else ""))


def _refused(options, project, url, timings, say, reason, verdict, startup_checks: list[dict] | None = None
             ) -> DeployResult:
    # Stop the engine so the gate cannot open later on its own (a refused deploy stays refused) and, on a
    # Spark, its unified memory is released. Sentinel, gateway and logs stay up for inspection.
    if options.keep_refused_engine:
        say(f"REFUSED: {reason}. Nothing was admitted; the engine is left running for inspection (drill mode).")
    else:
        project.compose("stop", "-t", "10", "engine", check=False)
        say(f"REFUSED: {reason}. The engine was stopped and the gate stays closed; nothing was admitted.")
    print_verdict(verdict, say)
    print_captures(verdict, options.profile, say)
    full = (verdict or {}).get("full") or {}
    failing: list[str] = []
    for check in [*(full.get("verification") or {}).get("checks", []), *(startup_checks or [])]:
        if not check["passed"]:
            failing.append(check["name"])
            # Whole enough to show e.g. every wrongly answered question with its expected and received answer.
            say(f"  - {check['name']}: observed {json.dumps(check['observed'], default=str)[:1500]}, expected "
                f"{json.dumps(check['expected'], default=str)[:120]}. Hint: {check['hint']}")
    say("engine log (last 25 lines):")
    for line in project.logs("engine", tail=25).splitlines():
        say(f"  | {line}")
    # Repeated below the log tail, so the refusal is the last thing a terminal (or a CI excerpt) shows.
    failing += [f"suite.{suite}" for suite in ("infra", "smoke") if (full.get(suite) or {}).get("passed") is False]
    say(f"refused: {reason}" + (f" (failing: {', '.join(failing[:12])})" if failing else ""))
    say(f"inspect: invoke status --profile {options.profile}; remove: invoke down --profile {options.profile}")
    return DeployResult(False, project.name, project.compose_file.parent, url, reason, verdict, timings,
                        startup_checks=startup_checks or [])


def _refused_exited(options, project, url, timings, say, reason, verdict, exit_code=None,
                    this_start: tuple[str | None, str | None] = (None, None)) -> DeployResult:
    """The engine died before it was ready: name the phases it never reached, the likely cause and the engine-log
    checks its final log fails (evidence/startup.py). The sentinel judges the start from the entrypoint's exit record
    and captures it: its checks are the deploy's when it has (wait briefly); the log's are the fallback."""
    expectations = json.loads((project.compose_file.parent / "expectations.json").read_text(encoding="utf-8"))
    log = EngineLog(f"docker logs ({project.name} engine, exited)", project.logs("engine"))
    reached = phases_reached(log.text)
    never = [phase for phase in PHASES if phase not in reached]
    cause = startup.likely_cause(log.text, reached, exit_code)
    reason += f", never reaching {', '.join(never)}" if never else ""
    reason += f"; likely cause: {cause.name}: {cause.hint}"
    failing = [c.as_dict() for c in startup.judge_exited_engine(expectations, log)]
    if failing:
        reason += "; the engine log fails " + ", ".join(c["name"] for c in failing)
    captured = _start_captured(options, url, *this_start)
    judged = ((captured or {}).get("refused_start") or {}).get("checks")
    return _refused(options, project, url, timings, say, reason, captured or verdict,
                    judged if isinstance(judged, list) and judged else failing)


def _start_captured(options, url: str, container: str | None, started_at: str | None) -> dict | None:
    """The sentinel's verdict once it has captured this dead start (it reads the entrypoint's exit record on its
    next period), so the refusal can name the capture; None if it has not within three periods (e.g. a container
    killed from outside, which leaves no exit record)."""
    api_key = Path(options.api_key_file).read_text().strip() if options.api_key_file else None
    deadline = time.monotonic() + 3 * options.recheck_period_s + 2
    while time.monotonic() < deadline:
        verdict = fetch_json(f"{url}/sparkgate/verdict", api_key)[1]
        if is_this_start((verdict or {}).get("refused_start"), container, started_at):
            return verdict
        time.sleep(0.5)
    return None


def is_this_start(refused: object, container: str | None, started_at: str | None) -> bool:
    """Whether the sentinel's published refused start is the start of this engine container: its id (Docker's
    hostname for it, which the entrypoint records) and a start no earlier than Docker's StartedAt for the container
    (a container started again keeps its id; its entrypoint's record comes after Docker starts it, on the same
    host clock). An earlier start's refusal is never named as this one's."""
    if not isinstance(refused, dict) or not container or not isinstance(refused.get("container"), str):
        return False
    if refused["container"][:12] != container[:12]:
        return False
    recorded, docker_started = engine_run.epoch(refused.get("started")), engine_run.epoch(started_at)
    # The record's time is cut to the millisecond (engine_run.now), Docker's is not.
    return recorded is not None and (docker_started is None or recorded + 0.001 >= docker_started)


def _write_record(options, project, bundle, images, result: DeployResult) -> Path:
    record = {
        "profile": options.profile,
        "target": options.target,
        "project": project.name,
        "gateway_url": result.gateway_url,
        "gateway_bind": options.bind,
        "gateway_port": options.port,
        "prometheus_url": prometheus_url(options) if options.monitoring else None,
        "admitted": result.admitted,
        "reason": result.reason,
        "images": {ref: docker_cli.image_id(ref) for ref in images},
        "timings_s": result.timings,
        "verdict": result.verdict,
        "startup_checks": result.startup_checks,
        "recorded_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    path = bundle / "deploy-record.json"
    atomic.write_text_atomically(path, json.dumps(record, indent=1, default=str) + "\n")
    return path


def down(project: docker_cli.Project, volumes: bool = False) -> None:
    argv = ["down", "--remove-orphans", "-t", "10"] + (["--volumes"] if volumes else [])
    every_profile(project).compose(*argv)

