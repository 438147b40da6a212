"""Deploy and operate a stack: deploy, status, logs, smoke, infra, verify, down."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

from invoke import Collection, Exit

from sparkgate.paths import build_dir
from sparkgate.tasks.common import STACK_HELP, require, sparkgate_task

if TYPE_CHECKING:
    from sparkgate.deploy import docker_cli

# The modules each task needs are imported in the task: `invoke --list`, `--help` and a refused argument stay quick.


def _project(profile: str | None, project: str | None, out: str | None, task: str = "status") -> docker_cli.Project:
    from sparkgate.deploy import docker_cli
    from sparkgate.profile import loading as profiles

    require(profile, "profile", f"invoke {task} --profile all-three")
    name = profiles.load(profile).profile.name
    bundle = Path(out) if out else build_dir() / name
    return docker_cli.Project(project or f"sparkgate-{name}", bundle / "compose.yaml")


def _gateway_url(c, stack: docker_cli.Project, port) -> str:
    if port:
        return f"http://127.0.0.1:{int(port)}"
    return _record(stack).get("gateway_url") or f"http://127.0.0.1:{c.config.sparkgate.gateway_port}"


def _record(project: docker_cli.Project) -> dict:
    path = project.compose_file.parent / "deploy-record.json"
    return json.loads(path.read_text()) if path.is_file() else {}


@sparkgate_task(
    "deploy",
    # Long options only: with this many, invoke's automatic one-letter flags ran out (`--sim-startup` got `--=`).
    auto_shortflags=False,
    help={
        "profile": "profile name or YAML path",
        "target": "spark (default: the DGX Spark this runs on) or sim (the simulator, where no Spark is present)",
        "port": "gateway port on the bind address (default: sparkgate.gateway_port, 18000)",
        "bind": "gateway bind address (default: sparkgate.gateway_bind, 127.0.0.1; anything else needs --api-key-file)",
        "api_key_file": "file holding the gateway API key",
        "project": "compose project name (default sparkgate-<profile>)",
        "out": "bundle directory (default build/<profile>)",
        "sim_faults": "comma-separated simulator faults (sim target), e.g. draft-lm-head-unshared",
        "sim_admin": "enable the simulator's admin endpoint (fault switching; drills and tests)",
        "sim_time_scale": "simulator speed: engine seconds per wall second (default: sparkgate.sim_time_scale, 0.05 = 20x faster)",
        "sim_startup": "simulated startup length in engine seconds (default: Spark-like, about 8 minutes)",
        "period": "sentinel re-check period in seconds",
        "budget": "seconds to wait for the verdict (default: 1200 on spark, 300 on sim)",
        "monitoring": "also start the `monitoring` compose profile: Prometheus with sparkgate's alerts (docs/monitoring.md)",
        "monitoring_port": "Prometheus port on 127.0.0.1 with --monitoring (default: sparkgate.prometheus_port, 19090)",
        "scrape_interval": "Prometheus scrape and rule evaluation interval in seconds (default 15)",
        "dry_run": "preflight and show what would be written and started, start nothing",
    }
)
def deploy(c, profile=None, target="spark", port=None, bind=None, api_key_file=None, project=None, out=None,
           sim_faults="", sim_admin=False, sim_time_scale=None, sim_startup=None, period=None, budget=None,
           monitoring=False, monitoring_port=None, scrape_interval=None, dry_run=False):
    """Preflight, render, up, wait, prove, admit. Exit 0 only when the gateway admits traffic."""
    from sparkgate.deploy import deploy as deploy_mod

    require(profile, "profile", "invoke deploy --profile all-three --target sim")
    settings = c.config.sparkgate  # defaults (sparkgate.defaults), overridable through invoke's configuration
    port = port or settings.gateway_port
    bind = bind or settings.gateway_bind
    sim_time_scale = sim_time_scale or settings.sim_time_scale
    period = period or settings.recheck_period_s
    options = deploy_mod.DeployOptions(
        profile=profile, target=target, project=project, out=Path(out) if out else None, port=int(port), bind=bind,
        api_key_file=api_key_file, sim_faults=tuple(f for f in sim_faults.split(",") if f), sim_admin=sim_admin,
        sim_time_scale=float(sim_time_scale), sim_startup_s=float(sim_startup) if sim_startup else None,
        recheck_period_s=float(period), budget_s=float(budget) if budget else None, dry_run=dry_run,
        monitoring=monitoring, prometheus_port=int(monitoring_port or settings.prometheus_port),
        **({"scrape_interval_s": float(scrape_interval)} if scrape_interval else {}),
    )
    if target == "sim" and not dry_run:
        from sparkgate.bundle.image_build import ensure_runtime_image

        ensure_runtime_image()
    if monitoring and not dry_run:
        from sparkgate.bundle.image_build import build_prometheus

        build_prometheus()  # only when missing: its tag pins the Debian package version
    result = deploy_mod.deploy(options, say=lambda line: print(line, flush=True))
    if dry_run:
        return
    print(f"deploy record: {result.record}")
    if not result.admitted:
        raise Exit(f"sparkgate deploy: refused ({result.reason})", code=1)


@sparkgate_task("status", help={**STACK_HELP, "api_key_file": "gateway API key file (when the gateway requires one)"})
def status(c, profile=None, target=None, port=None, project=None, out=None, api_key_file=None):
    """Services, gate state and the last verdict of a deployed stack."""
    from sparkgate.deploy import deploy as deploy_mod
    from sparkgate.evidence.client import fetch_json
    from sparkgate.profile import loading as profiles

    stack = _project(profile, project, out, "status")
    for service in ("engine", "sentinel", "gateway", "prometheus"):
        state = stack.state(service) or {}
        if service == "prometheus" and not state:
            continue  # the monitoring profile was not deployed
        health = (state.get("Health") or {}).get("Status", "-")
        print(f"{service:9s} {state.get('Status', 'absent'):10s} health={health}")
    url = _gateway_url(c, stack, port)
    api_key = Path(api_key_file).read_text().strip() if api_key_file else None
    code, verdict = fetch_json(f"{url}/sparkgate/verdict", api_key)
    if verdict is None:
        print(f"gate: unknown (gateway {url} answered {code})")
        return
    print(f"gate: {verdict['state']} - {verdict['reason']} (full verifications {verdict['full_runs']}, "
          f"re-checks {verdict['rechecks']})")
    deploy_mod.print_verdict(verdict, print)
    deploy_mod.print_captures(verdict, profiles.load(profile).profile.name, print)


@sparkgate_task("logs", help={**STACK_HELP, "service": "engine, sentinel or gateway", "tail": "lines"})
def logs(c, profile=None, service="engine", tail=200, target=None, port=None, project=None, out=None):
    """Show a service's logs."""
    print(_project(profile, project, out, "logs").logs(service, tail=int(tail)))


@sparkgate_task("smoke", help={**STACK_HELP, "url": "base URL (default: the deployed gateway)",
                               "api_key_file": "gateway API key file"})
def smoke(c, profile=None, url=None, api_key_file=None, target=None, port=None, project=None, out=None):
    """Run the smoke suite against the gateway (or any base URL)."""
    from sparkgate.deploy import deploy as deploy_mod
    from sparkgate.profile import loading as profiles

    stack = _project(profile, project, out, "smoke")
    loaded = profiles.load(profile)
    url = url or _gateway_url(c, stack, port)
    result = deploy_mod.run_smoke(url, loaded.profile.model.served_name, api_key_file)
    print(result.stdout)
    if result.returncode:
        raise Exit(f"sparkgate smoke: failed against {url} (pytest exit {result.returncode})", code=1)


@sparkgate_task("infra", help=STACK_HELP)
def infra(c, profile=None, target=None, port=None, project=None, out=None):
    """Run the testinfra suite from the host (docker:// backend) against a deployed stack."""
    from sparkgate import suites

    stack = _project(profile, project, out, "infra")
    record = _record(stack)
    env = {"SPARKGATE_BUNDLE": str(stack.compose_file.parent), "SPARKGATE_PROJECT": stack.name}
    # The listener check compares against what was deployed (bind and port from the deploy record).
    if record.get("gateway_bind"):
        env["SPARKGATE_GATEWAY_BIND"] = record["gateway_bind"]
    if port or record.get("gateway_port"):
        env["SPARKGATE_GATEWAY_PORT"] = str(port or record["gateway_port"])
    code = subprocess.call(suites.argv("infra", "infra"), env=suites.environment(env), cwd=suites.SUITES)
    if code:
        raise Exit(f"sparkgate infra: checks failed (pytest exit {code})", code=1)


@sparkgate_task("down", help={**STACK_HELP, "volumes": "also remove named volumes (logs, HF cache)",
                              "dry_run": "show the command only"})
def down(c, profile=None, target=None, port=None, project=None, out=None, volumes=False, dry_run=False):
    """Stop and remove a deployed stack (kernel caches on the host are kept)."""
    from sparkgate.deploy import deploy as deploy_mod

    stack = _project(profile, project, out, "down")
    if dry_run:
        print(f"docker compose -p {stack.name} -f {stack.compose_file} down --remove-orphans" + (" --volumes" if volumes else ""))
        return
    if not stack.compose_file.is_file():
        raise Exit(f"sparkgate down: {stack.compose_file} not found: nothing deployed for {profile} (or pass --out)",
                   code=1)
    deploy_mod.down(stack, volumes=volumes)
    print(f"removed {stack.name}")


@sparkgate_task("capture", help={
    "profile": "profile name or YAML path", "project": "compose project name (default sparkgate-<profile>)",
    "bundle": "bundle directory (default build/<profile>)",
    "out": "the capture file to write (default build/<profile>/captures/<time>-<outcome>.capture.tar.gz)",
    "refused": "the latest refused verification instead of the last one",
    "api_key_file": "the gateway API key file, so the key is scrubbed from the capture too"})
def capture(c, profile=None, project=None, bundle=None, out=None, refused=False, api_key_file=None):
    """Write one file holding everything the last full verification read (docs/field-reports.md)."""
    from sparkgate.deploy import field_capture
    from sparkgate.profile import loading as profiles

    stack = _project(profile, project, bundle, "capture")
    field_capture.collect(stack, profiles.load(profile).profile.name, Path(out) if out else None, refused=refused,
                          api_key_file=api_key_file or _record(stack).get("api_key_file"),
                          say=lambda line: print(line, flush=True))


ns = Collection(deploy, status, logs, smoke, infra, down, capture)
