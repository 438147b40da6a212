"""Host memory end to end: the sim target's sentinel reads the simulated Spark's meminfo; memory pressure after
admission closes the gate by host.memory_headroom (and the swap it causes by host.swap_growth) within a period
or two, with what is left shown; relieved, the gate reopens only after a fresh passing verdict."""

from __future__ import annotations

import pytest

from tests.e2e.conftest import E2E_PERIOD_S
from tests.e2e.test_deploy import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.docker]


def test_memory_pressure_after_admission_closes_the_gate_then_it_reopens(deploy_stack):
    stack = deploy_stack("baseline")
    assert stack.result.admitted, stack.result.reason
    admitted = stack.verdict()
    checks = {c["name"]: c for c in admitted["full"]["verification"]["checks"]}
    assert checks["host.memory_headroom"]["passed"]
    assert checks["host.memory_headroom"]["observed"]["mem_total_gib"] == pytest.approx(121.7, abs=0.1)  # the Spark's
    runs_before = admitted["full_runs"]

    stack.engine_admin("/admin/faults", {"faults": ["memory-pressure"]})
    closed = wait_for(lambda: stack.verdict()["state"] != "open", timeout=E2E_PERIOD_S * 3 + 3, interval=0.5)
    assert closed, "memory pressure did not close the gate"
    recheck = {c["name"]: c for c in stack.verdict()["recheck"]["checks"]}
    headroom = recheck["host.memory_headroom"]
    assert not headroom["passed"] and headroom["observed"]["mem_available_gib"] < 2.0
    assert "GiB left" in headroom["hint"]
    assert wait_for(lambda: stack.get("/v1/models", timeout=5)[0] == 503, timeout=3), "gateway still admits"

    stack.engine_admin("/admin/faults", {"faults": []})
    reopened = wait_for(lambda: stack.verdict()["state"] == "open", timeout=120, interval=1)
    assert reopened, stack.verdict()["reason"]
    assert stack.verdict()["full_runs"] > runs_before, "reopened without a fresh full verification"
