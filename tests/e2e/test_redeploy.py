"""Redeploying over an admitted stack: a refused redeploy leaves it serving, untouched (same containers, same
bundle); an accepted one replaces it on the same port, which its own gateway held."""

from __future__ import annotations

import socket
import subprocess

import pytest

from sparkgate.deploy import deploy as deploy_mod
from tests.e2e.conftest import E2E_PERIOD_S, E2E_SCALE, E2E_STARTUP_S

pytestmark = [pytest.mark.e2e, pytest.mark.docker]

MODEL = "ling-v3-flash-fp4"


def redeploy_options(stack, **changes) -> deploy_mod.DeployOptions:
    """The options of the stack's own deploy (see tests/e2e/conftest.py), with `changes`."""
    base = {
        "profile": "baseline", "target": "sim", "project": stack.project.name, "out": stack.result.bundle,
        "port": stack.port, "sim_admin": True, "sim_time_scale": E2E_SCALE, "sim_startup_s": E2E_STARTUP_S,
        "recheck_period_s": E2E_PERIOD_S, "budget_s": 180,
    }
    return deploy_mod.DeployOptions(**{**base, **changes})


def containers(stack) -> dict[str, str]:
    """container id -> StartedAt, for every container of the project."""
    ids = stack.project.containers()
    out = subprocess.run(["docker", "inspect", "-f", "{{.Id}} {{.State.StartedAt}}", *ids], capture_output=True,
                         text=True, check=True).stdout
    return dict(line.split(" ", 1) for line in out.splitlines())


def bundle_bytes(stack) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in stack.result.bundle.iterdir()}


def assert_serving(stack) -> None:
    assert stack.get("/sparkgate/ready")[0] == 200
    status, body = stack.get("/v1/models")
    assert status == 200 and MODEL in [m["id"] for m in body["data"]], body


def test_refused_redeploy_leaves_the_admitted_stack_serving(deploy_stack):
    stack = deploy_stack("baseline")
    assert stack.result.admitted, stack.result.reason
    before, files = containers(stack), bundle_bytes(stack)
    assert len(before) == 3

    # 1. Exposed beyond 127.0.0.1 (127.0.0.2 counts) without an API key file: refused at preflight.
    lines: list[str] = []
    with pytest.raises(deploy_mod.DeployRefused) as refused:
        deploy_mod.deploy(redeploy_options(stack, bind="127.0.0.2"), say=lines.append)
    assert "api key" in str(refused.value) and "was not touched" in str(refused.value), refused.value
    assert not any("compose down" in line for line in lines), lines

    # 2. A port some other process holds: refused, even though this project's own gateway is also running.
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        with pytest.raises(deploy_mod.DeployRefused) as refused:
            deploy_mod.deploy(redeploy_options(stack, port=other.getsockname()[1]), say=lambda _: None)
    assert "is in use" in str(refused.value)

    assert containers(stack) == before, "a refused redeploy restarted or replaced containers"
    assert bundle_bytes(stack) == files, "a refused redeploy changed the running stack's bundle"
    assert_serving(stack)
    assert stack.verdict()["state"] == "open"


def test_accepted_redeploy_replaces_the_stack_on_its_own_port(deploy_stack):
    stack = deploy_stack("baseline")
    assert stack.result.admitted, stack.result.reason
    before = containers(stack)
    lines: list[str] = []
    result = deploy_mod.deploy(redeploy_options(stack), say=lines.append)
    print("\n".join(lines))
    assert result.admitted, result.reason
    port_line = next(line for line in lines if "gateway port" in line)
    assert "[ok]" in port_line and "own gateway" in port_line, port_line
    after = containers(stack)
    assert len(after) == 3 and not set(after) & set(before), "the old containers were not replaced"
    leftovers = [p.name for p in stack.result.bundle.parent.iterdir() if p.name.startswith(f".{stack.result.bundle.name}.")]
    assert leftovers == [], f"retired bundles left behind: {leftovers}"
    assert_serving(stack)
