"""Docker and Compose v2 through their CLIs, always as argv lists."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from sparkgate.errors import Refusal


class DockerError(Refusal, RuntimeError):
    pass


def docker_binary() -> str:
    path = shutil.which("docker")
    if path is None:
        raise DockerError("docker CLI not found on PATH. Fix: install Docker (docker.io) and retry")
    return path


def run(argv: list[str], *, check: bool = True, timeout: float = 600,
        env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    completed = subprocess.run([docker_binary(), *argv], capture_output=True, text=True, timeout=timeout,
                               env={**os.environ, **env} if env else None)
    if check and completed.returncode != 0:
        raise DockerError(f"docker {' '.join(argv[:3])} failed: {(completed.stderr or completed.stdout).strip()[-400:]}")
    return completed


@dataclass(frozen=True)
class Project:
    name: str
    compose_file: Path
    # Values for the compose file's ${SPARKGATE_*} interpolation (gateway port, bind, API key file).
    env: dict[str, str] = field(default_factory=dict)

    def compose(self, *args: str, check: bool = True, timeout: float = 600) -> subprocess.CompletedProcess:
        argv = ["compose", "-p", self.name, "-f", str(self.compose_file), *args]
        return run(argv, check=check, timeout=timeout, env=self.env)

    def containers(self) -> list[str]:
        """IDs of every container of this project, running or stopped."""
        return run(["ps", "-aq", "--filter", f"label=com.docker.compose.project={self.name}"], check=False).stdout.split()

    def container(self, service: str) -> str | None:
        out = run(["ps", "-aq", "--filter", f"label=com.docker.compose.project={self.name}",
                   "--filter", f"label=com.docker.compose.service={service}"], check=False).stdout.split()
        return out[0] if out else None

    def published_ports(self, service: str) -> set[int]:
        """Host ports the service's running container publishes now (empty when it is not running)."""
        container = self.container(service)
        if container is None:
            return set()
        result = run(["inspect", container], check=False)
        if result.returncode != 0:
            return set()
        ports = (json.loads(result.stdout)[0].get("NetworkSettings") or {}).get("Ports") or {}
        return {int(binding["HostPort"]) for bindings in ports.values() for binding in (bindings or [])
                if str(binding.get("HostPort", "")).isdigit()}

    def state(self, service: str) -> dict | None:
        container = self.container(service)
        if container is None:
            return None
        result = run(["inspect", container], check=False)
        if result.returncode != 0:
            return None
        return json.loads(result.stdout)[0]["State"]

    def logs(self, service: str, tail: int | None = None) -> str:
        container = self.container(service)
        if container is None:
            return ""
        argv = ["logs"] + (["--tail", str(tail)] if tail else []) + [container]
        result = run(argv, check=False)
        return result.stdout + result.stderr


def image_id(reference: str) -> str | None:
    result = run(["image", "inspect", "--format", "{{.Id}}", reference], check=False)
    return (result.stdout.strip() or None) if result.returncode == 0 else None


def containers_publishing(port: int) -> list[str]:
    """Names of running containers that publish host port `port` (Docker may hold it by iptables DNAT alone,
    with no listener to see when its userland proxy is off)."""
    try:
        result = run(["ps", "--filter", f"publish={port}", "--format", "{{.Names}}"], check=False, timeout=20)
    except DockerError:
        return []
    return sorted(name for name in result.stdout.split() if name) if result.returncode == 0 else []
