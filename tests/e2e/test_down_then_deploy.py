"""`invoke down` then `invoke deploy` of another profile, at once, on the same gateway port: the port a stack
just released (TIME_WAIT sockets included) and the names it used stand in the way of nothing."""

from __future__ import annotations

import pytest

from sparkgate.deploy import deploy as deploy_mod
from sparkgate.deploy import docker_cli
from tests.e2e.conftest import E2E_PERIOD_S, E2E_SCALE, E2E_STARTUP_S

pytestmark = [pytest.mark.e2e, pytest.mark.docker]


def test_down_then_deploy_of_another_profile_is_admitted_at_once(deploy_stack, tmp_path):
    first = deploy_stack("baseline")
    assert first.result.admitted, first.result.reason
    assert first.get("/v1/models")[0] == 200

    deploy_mod.down(first.project, volumes=True)  # what `invoke down` does
    assert first.project.containers() == [], "down left containers behind"

    name = f"{first.project.name}-next"
    options = deploy_mod.DeployOptions(
        # all-three, not humming alone: Humming's simulated gain over the baseline is 3 %, which a loaded CI host
        # can eat (engine.speed_vs_baseline refused it once); this test is about ports and names, not speed.
        profile="all-three", target="sim", project=name, out=tmp_path / name, port=first.port, sim_admin=True,
        sim_time_scale=E2E_SCALE, sim_startup_s=E2E_STARTUP_S, recheck_period_s=E2E_PERIOD_S, budget_s=180,
    )
    lines: list[str] = []
    try:
        second = deploy_mod.deploy(options, say=lines.append)
        assert second.admitted, "\n".join(lines)
        assert second.gateway_url == first.url
        verdict = second.verdict or {}
        assert verdict.get("state") == "open" and verdict.get("profile") == "all-three", verdict
        assert first.get("/sparkgate/ready")[0] == 200, "the same port now serves the second stack"
    finally:
        project = docker_cli.Project(name, options.out / "compose.yaml", deploy_mod.compose_env(options))
        project.compose("down", "--remove-orphans", "--volumes", "-t", "3", check=False)
