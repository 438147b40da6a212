"""DSpark end to end on the simulator: the `dspark` profile is admitted only with its drafter engaged, each DSpark
failure mode is refused with its check named and nothing forwarded, and users can switch one project between
the NEXTN and DSpark drafters (redeploy both ways), each switch gated afresh."""

from __future__ import annotations

import json

import pytest

from sparkgate.deploy import deploy as deploy_mod
from tests.e2e.test_deploy import CHAT, assert_refused_by, forwarded
from tests.e2e.test_redeploy import assert_serving, containers, redeploy_options

pytestmark = [pytest.mark.e2e, pytest.mark.docker]

DSPARK_CHECKS = {
    "dspark.config_echo", "dspark.draft_loaded", "dspark.lm_head_module_shared", "dspark.log_runner_initialized",
    "dspark.drafter_config_read", "dspark.draft_cuda_graph", "dspark.proposal_not_eager", "dspark.accept_length",
    "dspark.speed_over_nextn",
}
# A degraded mode and the head trap, in one whole stack (independent checks read them); each is refused alone by its
# check, as is dspark-draft-graph-disabled, in tests/unit/test_dspark_verify_sim.py. The engine keeps running, so
# the sentinel's verdict names both.
REFUSED_FAULTS = ("dspark-proposal-eager", "draft-lm-head-unshared")
REFUSING_CHECKS = {"dspark.proposal_not_eager", "dspark.lm_head_module_shared"}


def test_dspark_admitted_with_every_dspark_check_passing(deploy_stack):
    stack = deploy_stack("dspark")
    assert stack.result.admitted, stack.result.reason
    verification = stack.verdict()["full"]["verification"]
    passed = {c["name"] for c in verification["checks"] if c["passed"]}
    assert passed >= DSPARK_CHECKS, DSPARK_CHECKS - passed
    assert not {c["name"] for c in verification["checks"]} & {"mtp.accept_length", "mtp.draft_loaded"}
    assert verification["calibration"]["accept_length"] >= 3.0
    status, answer = stack.get("/v1/chat/completions", CHAT)
    assert status == 200 and answer["usage"]["completion_tokens"] > 0, answer
    assert forwarded(stack) >= 1


def test_dspark_faults_refused_and_nothing_admitted(deploy_stack):
    assert_refused_by(deploy_stack("dspark", faults=REFUSED_FAULTS, keep_refused_engine=True), REFUSING_CHECKS)


def test_missing_drafter_refused_at_startup_with_its_check_named(deploy_stack):
    stack = deploy_stack("dspark", faults=("dspark-drafter-missing",))
    assert not stack.result.admitted
    assert "during startup" in stack.result.reason and "dspark.drafter_config_read" in stack.result.reason
    named = {c["name"]: c for c in stack.result.startup_checks}
    assert "dspark.drafter_config_read" in named and "dspark.log_runner_initialized" in named
    assert named["dspark.drafter_config_read"]["observed"], "the refusal must show the offending log line"
    record = json.loads(stack.result.record.read_text())
    assert "dspark.drafter_config_read" in {c["name"] for c in record["startup_checks"]}
    engine = stack.project.state("engine")
    assert engine["Status"] == "exited" and engine["ExitCode"] != 0
    # The engine never listened, and the gate never opened.
    assert stack.get("/v1/models")[0] == 503


def test_one_project_switches_drafters_both_ways(deploy_stack):
    stack = deploy_stack("all-three")
    assert stack.result.admitted, stack.result.reason
    for profile in ("dspark", "all-three"):
        before = containers(stack)
        lines: list[str] = []
        result = deploy_mod.deploy(redeploy_options(stack, profile=profile), say=lines.append)
        print("\n".join(lines))
        assert result.admitted, result.reason
        assert not set(containers(stack)) & set(before), "the old containers were not replaced"
        assert_serving(stack)
        algorithm = stack.verdict()["full"]["verification"]["engine"]["speculative_algorithm"]
        assert algorithm == ("DSPARK" if profile == "dspark" else "EAGLE"), algorithm
