"""The fleet lab: N local test hosts that Ansible reaches over SSH on 127.0.0.1, so a rollout can be
rehearsed (and CI can test one) on a single machine.

A lab host is a container of the fleet-host image (docker/build-base.sh --fleet-host) on the host network:
its sshd listens on 127.0.0.1:<its own port> with key auth only (a key made into the lab directory).
It drives this machine's Docker engine through the mounted socket with this machine's docker CLI and
Compose plugin, so its stack runs as sibling containers. Its state directory is mounted at the *same
absolute path* inside, so the bundle bind mounts Compose resolves there also exist for the daemon.
Each host gets its own gateway port and compose project (`sparkgate-<lab>-<host>`).
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

from devtasks.ports import free_port
from sparkgate import atomic
from sparkgate.deploy import docker_cli
from sparkgate.errors import Refusal
from sparkgate.paths import build_dir, repo_root
from sparkgate.tasks.common import require, sparkgate_task

HOST_IMAGE = "sparkgate/fleet-host:bookworm"
LAB_LABEL = "io.sparkgate.fleet-lab"
DOCKER_SOCKET = Path("/var/run/docker.sock")
COMPOSE_PLUGIN_DIRS = ("~/.docker/cli-plugins", "/usr/local/lib/docker/cli-plugins",
                       "/usr/libexec/docker/cli-plugins", "/usr/lib/docker/cli-plugins")
GROUP = "sparks"
# The simulator's speed of the e2e tests (tests/e2e/conftest.py, which says why 10x): a stack admits in ~20-40 s
# here. Re-checks at the role's default period: the lab's stacks stay up for the whole fleet lane, and no fleet test
# is about re-checks.
LAB_SIM_VARS = {"sparkgate_sim_time_scale": 0.1, "sparkgate_sim_startup_s": 20.0, "sparkgate_recheck_period_s": 5.0}
SSH_READY_TIMEOUT_S = 30


class LabError(Refusal):
    """The lab cannot be started or removed here."""


@dataclass(frozen=True)
class LabHost:
    name: str
    ssh_port: int
    gateway_port: int
    root: Path  # the host's state directory (same path inside its container)
    container: str
    project: str


def default_dir() -> Path:
    return build_dir() / "fleet-lab"


def _compose_plugin() -> Path:
    for directory in COMPOSE_PLUGIN_DIRS:
        candidate = Path(directory).expanduser() / "docker-compose"
        if candidate.is_file():
            return candidate.resolve()
    raise LabError("compose plugin: not found in " + ", ".join(COMPOSE_PLUGIN_DIRS)
                   + ". Fix: run `bash scripts/bootstrap` (it installs Compose v2)")


def ensure_host_image(say=print) -> None:
    if docker_cli.image_id(HOST_IMAGE):
        return
    say(f"building {HOST_IMAGE} (mmdebstrap, about a minute)")
    code = subprocess.call(["bash", str(repo_root() / "docker" / "build-base.sh"), "--fleet-host", HOST_IMAGE])
    if code:
        raise LabError(f"image {HOST_IMAGE}: build exited {code}. Fix: read the output above (mmdebstrap needs root "
                       "and a Debian mirror)")


def _keypair(lab_dir: Path) -> Path:
    key = lab_dir / "id_ed25519"
    if not key.exists():
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "sparkgate-fleet-lab", "-f", str(key)],
                       check=True, capture_output=True)
    return key


def _run_argv(host: LabHost, lab: str, key: Path) -> list[str]:
    docker = Path(docker_cli.docker_binary()).resolve()
    # sshd as the container's main process; host keys made at start (none are baked into the image).
    start = ("mkdir -p /run/sshd && ssh-keygen -A >/dev/null && exec /usr/sbin/sshd -D -e -p \"$1\" "
             "-o ListenAddress=127.0.0.1 -o PasswordAuthentication=no -o KbdInteractiveAuthentication=no "
             "-o PermitRootLogin=prohibit-password -o AuthorizedKeysFile=/etc/ssh/lab_authorized_keys")
    return [
        "run", "-d", "--name", host.container, "--hostname", host.name, "--network", "host",
        "--label", f"{LAB_LABEL}={lab}", "--restart", "no",
        "-v", f"{DOCKER_SOCKET}:{DOCKER_SOCKET}",
        "-v", f"{docker}:/usr/local/bin/docker:ro",
        "-v", f"{_compose_plugin()}:/usr/local/lib/docker/cli-plugins/docker-compose:ro",
        "-v", f"{host.root}:{host.root}",
        "-v", f"{key}.pub:/etc/ssh/lab_authorized_keys:ro",
        HOST_IMAGE, "bash", "-c", start, "lab-sshd", str(host.ssh_port),
    ]


def inventory(hosts: list[LabHost], lab_dir: Path, key: Path) -> dict:
    known_hosts = lab_dir / "known_hosts"
    return {"all": {"children": {GROUP: {
        "hosts": {
            h.name: {"ansible_host": "127.0.0.1", "ansible_port": h.ssh_port, "sparkgate_gateway_port": h.gateway_port,
                     "sparkgate_root": str(h.root), "sparkgate_project": h.project}
            for h in hosts
        },
        "vars": {
            "ansible_user": "root",
            "ansible_ssh_private_key_file": str(key),
            "ansible_ssh_common_args": f"-o StrictHostKeyChecking=accept-new -o UserKnownHostsFile={known_hosts}",
            "ansible_python_interpreter": "/usr/bin/python3",
            "sparkgate_target": "sim",
            **LAB_SIM_VARS,
        },
    }}}}


def up(count: int, lab_dir: Path | None = None, name: str = "lab", say=print) -> Path:
    """Start `count` lab hosts (host1..hostN) and write <lab_dir>/inventory.yaml; returns its path."""
    if count < 1:
        raise LabError(f"--hosts: observed {count}, need at least 1. Fix: e.g. `invoke fleet.lab --hosts 3`")
    if not DOCKER_SOCKET.is_socket():
        raise LabError(f"docker socket: {DOCKER_SOCKET} missing. Fix: start the Docker engine (docs/images.md)")
    lab_dir = (lab_dir or default_dir()).resolve()
    if containers(name):
        raise LabError(f"lab {name!r}: already running ({', '.join(containers(name))}). "
                       f"Fix: `invoke fleet.lab --down` first, or use it as is ({lab_dir / 'inventory.yaml'})")
    ensure_host_image(say)
    lab_dir.mkdir(parents=True, exist_ok=True)
    (lab_dir / "host_vars").mkdir(exist_ok=True)
    key = _keypair(lab_dir)
    (lab_dir / "known_hosts").unlink(missing_ok=True)  # new host keys every start
    hosts = []
    for index in range(1, count + 1):
        host_name = f"host{index}"
        root = lab_dir / "hosts" / host_name
        root.mkdir(parents=True, exist_ok=True)
        hosts.append(LabHost(host_name, free_port(), free_port(), root, f"sparkgate-{name}-{host_name}-ssh",
                             f"sparkgate-{name}-{host_name}"))
    for host in hosts:
        docker_cli.run(_run_argv(host, name, key))
    for host in hosts:
        _wait_ssh(host)
    path = lab_dir / "inventory.yaml"
    text = "# written by `invoke fleet.lab`; host variables may also go in host_vars/<host>.yaml\n"
    atomic.write_text_atomically(path, text + yaml.safe_dump(inventory(hosts, lab_dir, key), sort_keys=False))
    atomic.write_text_atomically(lab_dir / "lab.json", json.dumps({"name": name, "hosts": [h.name for h in hosts]}) + "\n")
    for host in hosts:
        say(f"{host.name}: ssh root@127.0.0.1 -p {host.ssh_port}, gateway 127.0.0.1:{host.gateway_port}, "
            f"project {host.project}")
    say(f"inventory: {path}")
    return path


def _wait_ssh(host: LabHost) -> None:
    deadline = time.monotonic() + SSH_READY_TIMEOUT_S
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", host.ssh_port), timeout=2) as conn:
                if conn.recv(64).startswith(b"SSH-"):
                    return
        except OSError:
            pass
        time.sleep(0.3)
    logs = docker_cli.run(["logs", "--tail", "5", host.container], check=False)
    raise LabError(f"{host.name} sshd: no SSH banner on 127.0.0.1:{host.ssh_port} within {SSH_READY_TIMEOUT_S}s "
                   f"({(logs.stdout + logs.stderr).strip()[-200:]!r}). Fix: `docker logs {host.container}`")


def containers(name: str) -> list[str]:
    result = docker_cli.run(["ps", "-a", "-q", "--filter", f"label={LAB_LABEL}={name}"], check=False)
    return result.stdout.split()


def projects(name: str) -> list[str]:
    """Compose projects the lab's hosts started (sparkgate-<lab>-<host>)."""
    result = docker_cli.run(["ps", "-a", "--format", '{{.Label "com.docker.compose.project"}}',
                             "--filter", "label=com.docker.compose.project"], check=False)
    prefix = f"sparkgate-{name}-"
    return sorted({p for p in result.stdout.split() if p.startswith(prefix)})


def down(lab_dir: Path | None = None, name: str | None = None, say=print) -> None:
    """Remove the lab's stacks and hosts; the lab directory's state goes too (the key stays)."""
    lab_dir = (lab_dir or default_dir()).resolve()
    if name is None:
        record = lab_dir / "lab.json"
        name = json.loads(record.read_text())["name"] if record.exists() else "lab"
    for project in projects(name):
        docker_cli.run(["compose", "-p", project, "down", "--remove-orphans", "--volumes", "-t", "3"], check=False)
        say(f"removed stack {project}")
    ids = containers(name)
    if ids:
        docker_cli.run(["rm", "-f", *ids], check=False)
        say(f"removed {len(ids)} lab host(s)")
    # Files the hosts wrote as root stay removable by root only; the controller runs as root here.
    shutil.rmtree(lab_dir / "hosts", ignore_errors=True)
    for stale in ("inventory.yaml", "lab.json", "known_hosts"):
        (lab_dir / stale).unlink(missing_ok=True)


_remove = down  # the task's --down flag shadows down()


@sparkgate_task("fleet.lab", help={
    "hosts": "how many lab hosts to start (host1..hostN)",
    "down": "remove the lab: its hosts, their stacks and state",
    "directory": "lab directory (default build/fleet-lab)",
    "name": "lab name: containers sparkgate-<name>-<host>-ssh, projects sparkgate-<name>-<host> (default lab)",
})
def lab(c, hosts=0, down=False, directory=None, name="lab"):
    """Start N local test hosts reachable by Ansible over SSH on 127.0.0.1, and write their inventory.

    Each host runs its simulator stack on its own gateway port. Per-host variables (e.g.
    `sparkgate_sim_faults: [draft-lm-head-unshared]`) go in <dir>/host_vars/<host>.yaml.
    """
    directory = Path(directory) if directory else None
    if down:
        _remove(directory, name=name if name != "lab" else None)
        return
    up(int(require(int(hosts) or None, "hosts", "invoke fleet.lab --hosts 3")), directory, name=name)
