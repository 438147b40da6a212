"""The sentinel's HTTP answers: /ready follows the state, the closed port explains, metrics list checks."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

from sparkgate.sentinel import http as sentinel_http
from sparkgate.sentinel.state import CLOSED, OPEN, GateState
from tests.plugins.simproc import free_port


def get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


@pytest.fixture
def served():
    state = GateState(profile="all-three")
    state.full = {"passed": False, "verification": {"checks": [
        {"name": "engine.health", "passed": True}, {"name": "mtp.accept_length", "passed": False}],
        "calibration": {"accept_length": 1.01}}, "infra": {"passed": True}, "smoke": {"passed": True}}
    state.recheck = {"checks": [{"name": "sentinel.accept_window", "passed": False}]}
    port, closed_port = free_port(), free_port()
    servers = sentinel_http.serve(state, "127.0.0.1", port, closed_port)
    yield state, port, closed_port
    for server in servers:
        server.shutdown()


def test_ready_follows_the_state(served):
    state, port, _ = served
    assert get(port, "/ready")[0] == 503  # starts waiting: closed
    state.set(OPEN, "all checks passed")
    status, body = get(port, "/ready")
    assert status == 200 and json.loads(body)["ready"] is True
    state.set(CLOSED, "re-check failed: engine.health")
    assert get(port, "/ready")[0] == 503
    assert [t["to"] for t in json.loads(get(port, "/verdict")[1])["transitions"]] == ["open", "closed"]


def test_closed_port_names_failing_checks(served):
    state, _, closed_port = served
    state.set(CLOSED, "re-check failed: sentinel.accept_window")
    status, body = get(closed_port, "/v1/chat/completions")
    answer = json.loads(body)
    assert status == 503
    assert answer["error"].startswith("sparkgate gate closed") and answer["failing_checks"] == ["sentinel.accept_window"]


def test_metrics_list_every_check(served):
    _, port, _ = served
    status, text = get(port, "/metrics")
    assert status == 200
    assert 'sparkgate_check_passed{check="mtp.accept_length"} 0' in text
    assert 'sparkgate_check_passed{check="sentinel.accept_window"} 0' in text
    assert 'sparkgate_check_passed{check="suite.infra"} 1' in text
    assert "sparkgate_accept_length 1.01" in text and "sparkgate_gate_open" in text
