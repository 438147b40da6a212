"""The `monitoring` profile end to end: a simulated stack deployed with Prometheus (2 s scrapes, 2 s `for`), asked
only through its HTTP API on 127.0.0.1: both targets up, the open gate and the engine's sglang:* series scraped on
the internal network; then the simulator's runtime `memory-pressure` fault closes the gate by re-check, and
Prometheus sees sparkgate_gate_open go to 0 and fires SparkgateGateClosed and SparkgateLowMemory, while the gate's
host.memory_headroom says how much is left (read from the simulated Spark's meminfo) and the gateway refuses
clients; relieved, the gate reopens only after a fresh passing verdict. On the way, the host-side testinfra suite
passes on the stack with its second (loopback) port."""

from __future__ import annotations

import json
import os
import subprocess
import urllib.parse
import urllib.request

import pytest

from sparkgate import suites
from sparkgate.deploy import docker_cli
from sparkgate.images import load_lock
from tests.e2e.conftest import E2E_PERIOD_S, free_port
from tests.e2e.test_deploy import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.docker]

SCRAPE_S = 2.0
ALERT_FOR_S = 2.0


@pytest.fixture(scope="module", autouse=True)
def prometheus_image():
    tag = load_lock().local_images["prometheus"]
    if docker_cli.image_id(tag) is None:
        pytest.fail(f"{tag} is missing: run `invoke images.prometheus` (python -m sparkgate.tasks.images prometheus)")


class Prometheus:
    def __init__(self, port: int):
        self.url = f"http://127.0.0.1:{port}"

    def api(self, path: str, **params) -> dict:
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        try:
            with urllib.request.urlopen(f"{self.url}/api/v1/{path}{query}", timeout=10) as response:
                body = json.loads(response.read())
        except OSError:
            return {}
        return body.get("data") or {} if body.get("status") == "success" else {}

    def targets(self) -> dict[str, str]:
        return {t["labels"]["job"]: t["health"] for t in self.api("targets").get("activeTargets", [])}

    def value(self, query: str) -> float | None:
        result = self.api("query", query=query).get("result") or []
        return float(result[0]["value"][1]) if len(result) == 1 else None

    def firing(self) -> set[tuple[str, str]]:
        return {(a["labels"]["alertname"], a["labels"]["severity"])
                for a in self.api("alerts").get("alerts", []) if a["state"] == "firing"}


def published(container: str) -> list[dict]:
    inspect = subprocess.run(["docker", "inspect", container], capture_output=True, text=True, check=True, timeout=30)
    ports = json.loads(inspect.stdout)[0]["NetworkSettings"]["Ports"] or {}
    return [{"container": name, **binding} for name, bindings in ports.items() for binding in (bindings or [])]


def test_prometheus_scrapes_the_stack_and_alerts_when_memory_pressure_closes_the_gate(deploy_stack):
    port = free_port()
    stack = deploy_stack("baseline", monitoring=True, prometheus_port=port, scrape_interval_s=SCRAPE_S,
                         alert_for_s=ALERT_FOR_S)
    assert stack.result.admitted, stack.result.reason
    prometheus = Prometheus(port)
    admitted = stack.verdict()
    runs_before = admitted["full_runs"]
    headroom = next(c for c in admitted["full"]["verification"]["checks"] if c["name"] == "host.memory_headroom")
    assert headroom["passed"] and headroom["observed"]["mem_total_gib"] == pytest.approx(121.7, abs=0.1)  # the Spark's

    # Loopback only, and the only new port: the engine stays unpublished.
    assert [(p["container"], p["HostIp"], p["HostPort"]) for p in published(stack.project.container("prometheus"))] \
        == [("9090/tcp", "127.0.0.1", str(port))]
    assert published(stack.project.container("engine")) == []

    up = wait_for(lambda: prometheus.targets() == {"sparkgate-sentinel": "up", "sparkgate-engine": "up"},
                  timeout=SCRAPE_S * 5 + 10, interval=0.5)
    assert up, prometheus.targets()
    assert wait_for(lambda: prometheus.value("sparkgate_gate_open") == 1.0, timeout=SCRAPE_S * 3 + 5, interval=0.5)
    assert prometheus.value('sparkgate_gate_open{profile="baseline", job="sparkgate-sentinel"}') == 1.0
    # The engine's own SGLang metrics, scraped on the internal network (engine:30000 publishes nothing).
    assert prometheus.value('count({__name__=~"sglang:.+", job="sparkgate-engine"})') > 5
    assert prometheus.value('sum(sglang:generation_tokens_total{job="sparkgate-engine"})') > 0  # the smoke's tokens
    available = prometheus.value("sparkgate_host_mem_available_bytes")
    assert available is not None and available > 8 * 1024**3, available
    assert prometheus.firing() == set()
    # The host-side testinfra suite (`invoke infra`) accepts the profile's loopback-only port beside the gateway's.
    env = {**os.environ, "SPARKGATE_BUNDLE": str(stack.result.bundle), "SPARKGATE_PROJECT": stack.project.name,
           "SPARKGATE_GATEWAY_PORT": str(stack.port)}
    infra = subprocess.run(suites.argv("infra", "infra"), capture_output=True, text=True, env=env, timeout=300)
    assert infra.returncode == 0, infra.stdout[-3000:]

    stack.engine_admin("/admin/faults", {"add": ["memory-pressure"]})
    # Wait for both: the gate can close on a re-check that names something else first (an engine.health-only
    # re-check keeps the full verdict's passing memory check), so the memory check itself must be seen failing.
    closed = wait_for(lambda: prometheus.value("sparkgate_gate_open") == 0.0 and prometheus.value(
        'sparkgate_check_passed{check="host.memory_headroom"}') == 0.0,
        timeout=E2E_PERIOD_S * 4 + SCRAPE_S * 2 + 5, interval=0.5)
    assert closed, f"Prometheus did not see memory pressure close the gate: {stack.verdict()['reason']}"
    assert prometheus.value("sparkgate_host_mem_available_bytes") < 2 * 1024**3

    expected = {("SparkgateGateClosed", "critical"), ("SparkgateLowMemory", "warning"),
                ("SparkgateLowMemory", "critical")}
    fired = wait_for(lambda: expected <= prometheus.firing(), timeout=ALERT_FOR_S + SCRAPE_S * 4 + 10, interval=0.5)
    assert fired, prometheus.firing()
    assert ("SparkgateSentinelDown", "critical") not in prometheus.firing()

    # What the gate itself says (the sim target's sentinel reads the simulated Spark's meminfo): how much is left,
    # and the gateway refuses clients.
    verdict = stack.verdict()
    seen = [c for part in ((verdict.get("recheck") or {}).get("checks") or [],
                           ((verdict.get("full") or {}).get("verification") or {}).get("checks") or [])
            for c in part if c["name"] == "host.memory_headroom" and not c["passed"]]
    assert seen and seen[0]["observed"]["mem_available_gib"] < 2.0 and "GiB left" in seen[0]["hint"], verdict["reason"]
    assert wait_for(lambda: stack.get("/v1/models", timeout=5)[0] == 503, timeout=3), "gateway still admits"

    # Relieved: the gate reopens only after a fresh passing full verification, and Prometheus sees it open.
    stack.engine_admin("/admin/faults", {"remove": ["memory-pressure"]})
    assert wait_for(lambda: stack.verdict()["state"] == "open", timeout=120, interval=1), stack.verdict()["reason"]
    assert stack.verdict()["full_runs"] > runs_before, "reopened without a fresh full verification"
    assert wait_for(lambda: prometheus.value("sparkgate_gate_open") == 1.0, timeout=SCRAPE_S * 3 + 5, interval=0.5)
