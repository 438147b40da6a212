"""End-to-end fixtures: deploy whole stacks (engine simulator + sentinel + gateway) on the local Docker
engine, talk to them only through 127.0.0.1 and `docker exec`, and always remove them afterwards
(SPARKGATE_KEEP_FAILED=1 keeps a failed test's stack for inspection)."""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass

import pytest

from sparkgate.deploy import deploy as deploy_mod
from sparkgate.deploy import docker_cli, preflight
from sparkgate.images import load_lock
from tests.e2e.browser import chromium  # noqa: F401 - the headless-Chromium fixture of the page tests
from tests.plugins.simproc import free_port  # noqa: F401 - e2e tests import it from here

# Fast simulated engine: 10x real time, a 20 s (simulated) startup, re-checks every 2 s. Every speed the gate and the
# bench judge is the engine's own meta_info timing, which the simulator computes, so the scale changes how long a
# test waits, never a verdict (a loaded host delays the stream's delivery, not the engine's accounting).
E2E_SCALE = 0.1
E2E_STARTUP_S = 20.0
E2E_PERIOD_S = 2.0


@pytest.fixture(scope="session", autouse=True)
def docker_ready():
    finding = preflight.docker_reachable()
    if not finding.ok:
        pytest.fail(f"end-to-end tests need Docker: {finding.detail}")
    lock = load_lock()
    images = preflight.images_present(sorted({lock.local_images[k] for k in ("sim", "sentinel", "gateway")}))
    if not images.ok:
        pytest.fail(images.detail)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.when == "call" and report.failed:
        item.sparkgate_failed = True


@dataclass
class Stack:
    result: deploy_mod.DeployResult
    project: docker_cli.Project
    port: int

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def get(self, path: str, body: dict | None = None, timeout: float = 30) -> tuple[int, dict | None]:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.url + path, data=data, headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                return response.status, json.loads(response.read() or b"null")
        except urllib.error.HTTPError as exc:
            raw = exc.read()
            try:
                return exc.code, json.loads(raw)
            except json.JSONDecodeError:
                return exc.code, {"raw": raw.decode("utf-8", "replace")}
        except (urllib.error.URLError, ConnectionError, http.client.HTTPException) as exc:
            return 0, {"connection_error": str(exc)}  # nothing answered: certainly not admitted

    def verdict(self) -> dict:
        status, body = self.get("/sparkgate/verdict")
        assert status == 200, body
        return body

    def engine_stats(self) -> dict:
        """The simulator's own request counters, read inside the engine container (docker exec)."""
        return self._engine_http("GET", "/admin/stats")

    def engine_admin(self, path: str, body: dict | None = None) -> dict:
        return self._engine_http("POST", path, body)

    def engine_health(self) -> int:
        """The engine's own GET /health status, asked inside its container (0: no answer)."""
        code = ("import sys, urllib.request, urllib.error\n"
                "try:\n    print(urllib.request.urlopen('http://127.0.0.1:30000/health', timeout=10).status)\n"
                "except urllib.error.HTTPError as e:\n    print(e.code)\n"
                "except OSError:\n    print(0)\n")
        argv = ["docker", "exec", self.project.container("engine"), "python3", "-c", code]
        return int(subprocess.run(argv, capture_output=True, text=True, timeout=30, check=True).stdout.strip())

    def _engine_http(self, method: str, path: str, body: dict | None = None) -> dict:
        """One request to the unpublished engine, made from inside its own container."""
        payload = json.dumps(body).encode() if body is not None else None
        code = ("import sys, urllib.request;"
                f"r = urllib.request.Request('http://127.0.0.1:30000{path}', data={payload!r}, method={method!r},"
                " headers={'Content-Type': 'application/json'});"
                "sys.stdout.write(urllib.request.urlopen(r).read().decode())")
        argv = ["docker", "exec", self.project.container("engine"), "python3", "-c", code]
        return json.loads(subprocess.run(argv, capture_output=True, text=True, timeout=30, check=True).stdout)


def _deploy(name: str, out_root, profile: str, faults: tuple[str, ...] = (), **extra) -> Stack:
    port = free_port()
    name = "".join(ch if ch.isalnum() or ch == "-" else "-" for ch in name.lower())
    defaults = dict(
        profile=profile, target="sim", project=name, out=out_root / name, port=port, sim_faults=tuple(faults),
        sim_admin=True, sim_time_scale=E2E_SCALE, sim_startup_s=E2E_STARTUP_S, recheck_period_s=E2E_PERIOD_S,
        budget_s=180,
        # The deploy's own post-admission smoke (pytest on the host) runs where a test asks for it: the shared
        # all-three stack and the baseline deploy prove that step; elsewhere it would only repeat it.
        post_smoke=False,
    )
    options = deploy_mod.DeployOptions(**{**defaults, **extra})
    lines: list[str] = []
    try:
        result = deploy_mod.deploy(options, say=lines.append)
    finally:
        print("\n".join(lines))  # shown by pytest on failure: the deploy's own progress and verdict
    return Stack(result, docker_cli.Project(name, options.out / "compose.yaml", deploy_mod.compose_env(options)), port)


def _remove(stack: Stack) -> None:
    stack.project.compose("down", "--remove-orphans", "--volumes", "-t", "3", check=False)
    # What the last compose file no longer declares (a project redeployed with another profile, e.g. a DSpark
    # volume after switching back to NEXTN) is found by the project's label.
    label = f"label=com.docker.compose.project={stack.project.name}"
    for kind in ("volume", "network"):
        listed = subprocess.run(["docker", kind, "ls", "-q", "--filter", label], capture_output=True, text=True)
        names = listed.stdout.split()
        if names:
            subprocess.run(["docker", kind, "rm", *names], capture_output=True, check=False)


@pytest.fixture
def deploy_stack(request, tmp_path):
    """deploy_stack(profile, faults=(), **options) -> Stack; removed at teardown."""
    stacks: list[Stack] = []

    def deploy(profile: str, faults: tuple[str, ...] = (), **extra) -> Stack:
        name = f"sparkgate-t-{request.node.name[:20]}-{os.getpid()}-{len(stacks)}"
        stack = _deploy(name, tmp_path, profile, faults, **extra)
        stacks.append(stack)
        return stack

    yield deploy
    keep = os.environ.get("SPARKGATE_KEEP_FAILED") and getattr(request.node, "sparkgate_failed", False)
    for stack in stacks:
        if keep:
            print(f"kept {stack.project.name} for inspection (invoke down --project {stack.project.name})")
            continue
        _remove(stack)


@pytest.fixture(scope="session")
def _shared_all_three(tmp_path_factory):
    """One admitted all-three stack per worker, shared by the tests that leave it admitted when they pass (they may
    fault it at run time through the simulator's admin API, and must heal it). Removed at the end of the session."""
    holder: dict[str, Stack] = {}
    yield holder
    if "stack" in holder:
        _remove(holder["stack"])


def _fresh_passing_recheck(stack: Stack, timeout_s: float) -> bool:
    """The gate open after a re-check that began after now (so nothing an earlier test left behind is pending)."""
    status, first = stack.get("/sparkgate/verdict", timeout=5)
    seen = first.get("rechecks", 0) if status == 200 and isinstance(first, dict) else None
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        status, verdict = stack.get("/sparkgate/verdict", timeout=5)
        if status == 200 and seen is not None and verdict.get("rechecks", 0) >= seen + 2 and verdict["state"] == "open":
            return True
        time.sleep(0.5)
    return False


@pytest.fixture
def healthy_all_three(_shared_all_three, tmp_path_factory) -> Stack:
    """The worker's shared all-three stack, admitted now: redeployed when an earlier test left it closed."""
    stack = _shared_all_three.get("stack")
    if stack is not None:
        # No fault left from an earlier test (an engine that is down cannot read open below either).
        with contextlib.suppress(subprocess.SubprocessError, OSError, ValueError):
            stack.engine_admin("/admin/faults", {"faults": []})
        if not _fresh_passing_recheck(stack, timeout_s=30):
            print(f"the shared stack {stack.project.name} is not admitted ({stack.verdict()['reason']}): redeploying")
            _remove(stack)
            stack = None
    if stack is None:
        count = _shared_all_three["deploys"] = _shared_all_three.get("deploys", 0) + 1
        stack = _deploy(f"sparkgate-t-shared-{os.getpid()}-{count}", tmp_path_factory.mktemp("shared"), "all-three",
                        post_smoke=True)
        assert stack.result.admitted, stack.result.reason
        _shared_all_three["stack"] = stack
    return stack
