"""testinfra fixtures for a deployed stack, in two contexts:

- inside the sentinel (SPARKGATE_INFRA_CONTEXT=sentinel): testinfra's local backend; the engine runs in
  the sentinel's PID namespace, so its processes and /proc entries are visible;
- from the host (default): the docker:// backend on the engine container, plus `docker inspect` for
  the host-only checks (published ports, privileges).

Required environment: SPARKGATE_BUNDLE (the rendered bundle directory); from the host also
SPARKGATE_PROJECT (the compose project name).
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
import testinfra

from sparkgate.runtime.engine_entrypoint import LAUNCHERS

# The modules `sparkgate engine` launches (sglang.launch_server, sparkgate_sim), as the entrypoint names them.
LAUNCH_MODULES = tuple(argv[argv.index("-m") + 1] for argv in LAUNCHERS.values())


def _require(name: str) -> str:
    value = os.environ.get(name)
    if not value:
        pytest.fail(f"{name} is not set: the infra suite needs it (see sparkgate/suites/infra/conftest.py)")
    return value


@pytest.fixture(scope="session")
def context() -> str:
    return os.environ.get("SPARKGATE_INFRA_CONTEXT", "host")


@pytest.fixture(scope="session")
def bundle() -> Path:
    path = Path(_require("SPARKGATE_BUNDLE"))
    if not (path / "argv.json").is_file():
        pytest.fail(f"{path} is not a rendered bundle (no argv.json)")
    return path


@pytest.fixture(scope="session")
def expectations(bundle) -> dict:
    return json.loads((bundle / "expectations.json").read_text())


@pytest.fixture(scope="session")
def bundle_env(bundle) -> dict[str, str]:
    return json.loads((bundle / "engine-env.json").read_text())


def compose_containers(project: str) -> dict[str, str]:
    """service name -> container id, selected by compose labels (never by name)."""
    out = subprocess.run(
        ["docker", "ps", "-a", "--filter", f"label=com.docker.compose.project={project}", "--format",
         '{{.ID}} {{.Label "com.docker.compose.service"}}'],
        capture_output=True, text=True, check=True,
    ).stdout
    return {service: cid for cid, service in (line.split() for line in out.splitlines() if line.strip())}


def inspect(container: str) -> dict:
    out = subprocess.run(["docker", "inspect", container], capture_output=True, text=True, check=True).stdout
    return json.loads(out)[0]


@pytest.fixture(scope="session")
def project_containers(context) -> dict[str, str]:
    if context == "sentinel":
        pytest.fail("host-only fixture used inside the sentinel; mark the test host_only")
    containers = compose_containers(_require("SPARKGATE_PROJECT"))
    if "engine" not in containers:
        pytest.fail(f"no engine container in project {os.environ['SPARKGATE_PROJECT']}")
    return containers


@pytest.fixture(scope="session")
def engine_host(context):
    if context == "sentinel":
        return testinfra.get_host("local://")
    containers = compose_containers(_require("SPARKGATE_PROJECT"))
    return testinfra.get_host(f"docker://{containers['engine']}")


@dataclass(frozen=True)
class EngineProcesses:
    supervisor: int  # `sparkgate engine ...`: the container's main process, holds the container env
    server: int  # python -m sglang.launch_server / sparkgate_sim
    server_argv: list[str]


def _cmdline(host, pid: int) -> list[str]:
    raw = host.file(f"/proc/{pid}/cmdline").content
    return [part.decode() for part in raw.split(b"\0") if part]


def _is_supervisor(argv: list[str]) -> bool:
    """`sparkgate engine ...` as the console script (`python3 /opt/venv/bin/sparkgate engine`), the bare
    script, or `python -m sparkgate engine`."""
    for index, arg in enumerate(argv[:3]):
        if (arg == "sparkgate" or arg.endswith("/sparkgate")) and argv[index + 1 : index + 2] == ["engine"]:
            return True
    return "-m" in argv[:2] and argv[argv.index("-m") + 1 : argv.index("-m") + 3] == ["sparkgate", "engine"]


@pytest.fixture(scope="session")
def engine_processes(engine_host) -> EngineProcesses:
    supervisor = server = None
    server_argv: list[str] = []
    for entry in engine_host.check_output("ls /proc").split():
        if not entry.isdigit():
            continue
        try:
            argv = _cmdline(engine_host, int(entry))
        except Exception:  # the process may have exited between ls and read
            continue
        if _is_supervisor(argv):
            supervisor = int(entry)
        for module in LAUNCH_MODULES:
            if "-m" in argv and argv[argv.index("-m") + 1 : argv.index("-m") + 2] == [module]:
                server, server_argv = int(entry), argv[argv.index("-m") + 2 :]
    if supervisor is None or server is None:
        pytest.fail(f"engine processes not found (supervisor={supervisor}, server={server})")
    return EngineProcesses(supervisor, server, server_argv)


def proc_environ(host, pid: int) -> dict[str, str]:
    raw = host.file(f"/proc/{pid}/environ").content
    pairs = {}
    for item in raw.split(b"\0"):
        if item:
            key, _, value = item.decode().partition("=")
            pairs[key] = value
    return pairs


def mounts(host, pid: int) -> dict[str, list[str]]:
    """mount point -> mount options, from /proc/<pid>/mountinfo."""
    table = {}
    for line in host.file(f"/proc/{pid}/mountinfo").content_string.splitlines():
        fields = line.split()
        table[fields[4]] = fields[5].split(",")
    return table
