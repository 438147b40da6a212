"""A weight swap after admission (SGLang's /update_weights_from_disk, called inside the stack - the gateway
never forwards it) closes the gate within one re-check period; it reopens only after a fresh full
verification."""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.e2e.test_deploy import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.docker]


def update_weights_from_sentinel(stack, body: dict) -> dict:
    """POST /update_weights_from_disk to the engine from inside the sentinel container (engine network), with
    the engine's admin key (only the sentinel's container can read it)."""
    code = ("import json, sys, urllib.request;"
            "key = open('/run/sparkgate-admin/admin-key').read().strip();"
            "r = urllib.request.Request('http://engine:30000/update_weights_from_disk', data=sys.stdin.buffer.read(),"
            " method='POST', headers={'Content-Type': 'application/json', 'Authorization': 'Bearer ' + key});"
            "sys.stdout.write(urllib.request.urlopen(r, timeout=10).read().decode())")
    argv = ["docker", "exec", "-i", stack.project.container("sentinel"), "python3", "-c", code]
    out = subprocess.run(argv, input=json.dumps(body), capture_output=True, text=True, timeout=30, check=True)
    return json.loads(out.stdout)


def test_weight_swap_closes_the_gate_until_a_fresh_full_verdict(deploy_stack):
    stack = deploy_stack("all-three")
    assert stack.result.admitted, stack.result.reason
    before = stack.verdict()
    answer = update_weights_from_sentinel(stack, {"model_path": "/models/Ling-3.0-flash-fp4", "weight_version": "swapped-1"})
    assert answer["success"] is True and "Weight version updated to swapped-1" in answer["message"], answer
    # Closed by the first re-check that starts after the swap (one may be in flight at it): judged by the
    # sentinel's own re-check count, not in wall seconds (the timeout is a safety net), so a busy host passes.
    seen: list[dict] = []
    wait_for(lambda: seen.append(stack.verdict()) or seen[-1]["state"] != "open"
             or seen[-1]["rechecks"] > before["rechecks"] + 3, timeout=300, interval=0.2)
    assert seen[-1]["state"] != "open", ("the gate stayed open after the weights changed", seen[-1]["rechecks"])
    assert stack.get("/sparkgate/ready", timeout=2)[0] == 503
    # One re-check may finish between `before` and the swap, one may be in flight at it; the next one closes.
    assert seen[-1]["rechecks"] <= before["rechecks"] + 3, (before["rechecks"], seen[-1]["rechecks"])
    failing = [c for c in (stack.verdict()["recheck"] or {}).get("checks", []) if not c["passed"]]
    names = {c["name"] for c in failing}
    if "sentinel.weights_unchanged" not in names:  # the fresh full verification may already be under way
        names = {t["reason"] for t in stack.verdict()["transitions"]}
        assert any("sentinel.weights_unchanged" in reason for reason in names), names
    reopened = wait_for(lambda: stack.verdict()["state"] == "open", timeout=120, interval=1)
    assert reopened, stack.verdict()["reason"]
    assert stack.verdict()["full_runs"] > before["full_runs"], "reopened without a fresh full verification"
