"""Secrets in a deployed stack: the engine's admin key is held by the engine and the sentinel only and
enforced by the engine; neither it nor the gateway's API key appears in the bundle, the deploy record,
any container's logs or `docker inspect`, the engine log file, or the sentinel's verdict."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import tarfile
import urllib.error
import urllib.request

import pytest

from sparkgate.deploy import deploy as deploy_mod
from sparkgate.deploy import docker_cli, field_capture
from sparkgate.evidence import capture
from sparkgate.evidence.admin_probe import PROBE_ROUTE
from sparkgate.runtime import admin_key
from tests.e2e.conftest import E2E_PERIOD_S, E2E_SCALE, E2E_STARTUP_S, free_port

pytestmark = [pytest.mark.e2e, pytest.mark.docker]

SERVICES = ("engine", "sentinel", "gateway")
BUNDLE_FILES = ("argv.json", "compose.yaml", "engine-env.json", "expectations.json", "manifest.json")
KEY_FILE = admin_key.ADMIN_DIR / admin_key.KEY_FILE_NAME


def docker(*argv: str) -> str:
    done = subprocess.run(["docker", *argv], capture_output=True, text=True, timeout=60, check=True)
    return done.stdout + done.stderr


def engine_status_from_sentinel(containers: dict, path: str, key: str | None) -> int:
    """HTTP status of GET http://engine:<port><path> asked from inside the sentinel container."""
    code = ("import sys, urllib.error, urllib.request;"
            "key = sys.stdin.read().strip();"
            f"r = urllib.request.Request('http://engine:30000{path}', headers={{'Authorization': 'Bearer ' + key}} if key else {{}});"
            "\ntry:\n    print(urllib.request.urlopen(r, timeout=10).status)"
            "\nexcept urllib.error.HTTPError as exc:\n    print(exc.code)")
    argv = ["docker", "exec", "-i", containers["sentinel"], "python3", "-c", code]
    done = subprocess.run(argv, input=key or "", capture_output=True, text=True, timeout=30, check=True)
    return int(done.stdout.strip())


@pytest.fixture
def keyed_stack(tmp_path):
    """An all-three sim stack on 127.0.0.1 with a gateway API key file; removed at teardown."""
    api_key = "gw-" + secrets.token_urlsafe(24)
    key_path = tmp_path / "api-key"
    key_path.write_text(api_key + "\n")
    key_path.chmod(0o600)
    name = f"sparkgate-adminkey-{os.getpid()}"
    options = deploy_mod.DeployOptions(
        profile="all-three", target="sim", project=name, out=tmp_path / name, port=free_port(), bind="127.0.0.1",
        api_key_file=str(key_path), sim_admin=True, sim_time_scale=E2E_SCALE, sim_startup_s=E2E_STARTUP_S,
        recheck_period_s=E2E_PERIOD_S, budget_s=180,
    )
    lines: list[str] = []
    project = docker_cli.Project(name, options.out / "compose.yaml", deploy_mod.compose_env(options))
    try:
        result = deploy_mod.deploy(options, say=lines.append)
        print("\n".join(lines))
        assert result.admitted, result.reason
        stack = {service: project.container(service) for service in SERVICES}
        assert all(stack.values()), stack
        yield {"options": options, "result": result, "api_key": api_key, "containers": stack}
    finally:
        project.compose("down", "--remove-orphans", "--volumes", "-t", "3", check=False)


def gateway_get(options, path: str, api_key: str) -> tuple[int, bytes]:
    request = urllib.request.Request(f"http://127.0.0.1:{options.port}{path}",
                                     headers={"Authorization": f"Bearer {api_key}"})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def test_admin_key_held_by_engine_and_sentinel_only_and_no_secret_leaks(keyed_stack, tmp_path):
    containers, api_key, options = keyed_stack["containers"], keyed_stack["api_key"], keyed_stack["options"]
    admin = docker("exec", containers["sentinel"], "cat", str(KEY_FILE)).strip()
    assert len(admin) >= 40
    # The sentinel's copy is the engine's, on tmpfs, 0600, read-only for the sentinel; the gateway has none.
    assert docker("exec", containers["engine"], "cat", str(KEY_FILE)).strip() == admin
    assert docker("exec", containers["sentinel"], "stat", "-c", "%a %U", str(KEY_FILE)).split() == ["600", "root"]
    mount = docker("exec", containers["sentinel"], "grep", f" {admin_key.ADMIN_DIR} ", "/proc/self/mountinfo")
    assert " - tmpfs " in mount and " ro," in mount, mount
    assert subprocess.run(["docker", "exec", containers["gateway"], "test", "-e", str(admin_key.ADMIN_DIR)],
                          timeout=30).returncode != 0

    # The engine enforces it: an admin route from inside the stack without the key is refused, with it served.
    assert engine_status_from_sentinel(containers, PROBE_ROUTE, None) == 401
    assert engine_status_from_sentinel(containers, PROBE_ROUTE, "not-the-key") == 401
    assert engine_status_from_sentinel(containers, PROBE_ROUTE, admin) == 200
    assert engine_status_from_sentinel(containers, "/v1/models", None) == 200  # normal routes open

    # The admitted verdict includes the check, passed.
    status, body = gateway_get(options, "/sparkgate/verdict", api_key)
    assert status == 200
    verdict = json.loads(body)
    checks = {c["name"]: c for c in verdict["full"]["verification"]["checks"]}
    assert checks["engine.admin_key_enforced"]["passed"] is True
    assert checks["engine.admin_key_enforced"]["observed"] == {"without_key": 401, "with_key": 200}
    # ... and its testinfra suite checked the key files (tmpfs, 0600) and the engine's argv and environment.
    infra = {t["name"].rpartition("::")[2]: t["outcome"] for t in verdict["full"]["infra"]["tests"]}
    assert infra["test_admin_key_files_are_root_only_on_tmpfs"] == "passed"
    assert infra["test_engine_processes_hold_the_key_in_neither_argv_nor_environment"] == "passed"
    assert infra["test_engine_argv_equals_bundle"] == "passed"

    places: dict[str, str] = {"/sparkgate/verdict": body.decode()}
    bundle = options.out
    for name in BUNDLE_FILES:
        places[f"bundle {name}"] = (bundle / name).read_text()
    record = keyed_stack["result"].record
    assert record is not None and record.is_file()
    places["deploy record"] = record.read_text()
    for service, container in containers.items():
        places[f"docker logs {service}"] = docker("logs", container)  # stdout and stderr
        inspected = json.loads(docker("inspect", container))[0]
        places[f"docker inspect {service}"] = json.dumps(
            {"Args": inspected["Args"], "Cmd": inspected["Config"]["Cmd"], "Env": inspected["Config"]["Env"],
             "Entrypoint": inspected["Config"]["Entrypoint"], "Path": inspected["Path"]})
    places["engine log file"] = docker("exec", containers["sentinel"], "cat", "/var/log/sparkgate/engine.log")
    # The capture files: the sentinel's own, and the one `invoke capture` hands out (docs/field-reports.md).
    kept = tmp_path / "sentinel-last.capture.tar.gz"
    docker("cp", f"{containers['sentinel']}:/var/lib/sparkgate/captures/last.capture.tar.gz", str(kept))
    handed = field_capture.collect(docker_cli.Project(options.project, options.out / "compose.yaml"), "all-three",
                                   tmp_path / "handed.capture.tar.gz", api_key_file=options.api_key_file,
                                   say=lambda _: None)
    for where, path in (("sentinel capture", kept), ("invoke capture", handed)):
        with tarfile.open(path, "r:gz") as tar:
            places[where] = "".join(tar.extractfile(m).read().decode() for m in tar)
        assert capture.read(path).manifest.passed  # an admitted stack's capture: judged again, it passes
    # SGLang prints the key at startup (server_args=...): the log must show it was there and was redacted.
    assert f"'admin_api_key': '{admin_key.REDACTED}'" in places["engine log file"]
    assert f"'admin_api_key': '{admin_key.REDACTED}'" in places["docker logs engine"]

    leaks = {where: [name for name, secret in (("admin key", admin), ("API key", api_key)) if secret in text]
             for where, text in places.items()}
    assert not {where: found for where, found in leaks.items() if found}
