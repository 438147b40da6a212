"""`sparkgate verify` of the dspark profile against the simulator launched with the profile's real argv and
environment: the healthy engine is admitted, and each DSpark fault is refused by the check that owns it.
(The simulator is an independent implementation of SGLang's DSpark shapes; see docs/simulator.md.)"""

from __future__ import annotations

import pytest

from tests.unit.evidence.test_verify_against_sim import SCALE, failing, run_verify

DSPARK_CHECKS = {
    "dspark.config_echo", "dspark.draft_loaded", "dspark.lm_head_module_shared", "dspark.log_runner_initialized",
    "dspark.drafter_config_read", "dspark.draft_cuda_graph", "dspark.proposal_not_eager", "dspark.accept_length",
    "dspark.speed_over_nextn",
}


def test_healthy_dspark_is_admitted(start_profile, tmp_path):
    sim = start_profile("dspark", scale=SCALE)
    code, verdict, output = run_verify(sim, "dspark", tmp_path)
    assert code == 0, output
    checks = {c["name"]: c for c in verdict["checks"]}
    assert set(checks) >= DSPARK_CHECKS and failing(verdict) == set()
    assert not any(name.startswith("mtp.") for name in checks)
    assert checks["dspark.accept_length"]["observed"] >= 3.0
    assert checks["dspark.speed_over_nextn"]["observed"] >= 53.89
    # The verdict records DSpark's configuration (CONFIG_KEYS) for the bench.
    assert verdict["engine"]["speculative_dspark_block_size"] == 8
    assert verdict["engine"]["linear_replayssm_cache_len"] == 32


# fault -> the DSpark checks it must fail (its owning check among them).
FAULTS = {
    "dspark-draft-graph-disabled": {"dspark.draft_cuda_graph"},
    "dspark-proposal-eager": {"dspark.proposal_not_eager"},
    "draft-lm-head-unshared": {"dspark.lm_head_module_shared"},  # the head trap, with DSpark's drafter
}


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_a_degraded_mode_is_refused_by_its_check(start_profile, tmp_path, fault):
    sim = start_profile("dspark", {"SPARKGATE_SIM_FAULTS": fault}, scale=SCALE)
    code, verdict, output = run_verify(sim, "dspark", tmp_path)
    assert code == 1, output
    assert FAULTS[fault] <= failing(verdict), (fault, failing(verdict))
    assert f"FAIL {sorted(FAULTS[fault])[0]}" in output and "Hint:" in output


def test_a_missing_drafter_is_refused_with_its_log_line(start_profile, tmp_path):
    """SGLang logs the unreadable drafter config, then exits at draft load: nothing answers, and the log says
    why (dspark.drafter_config_read), so the gate's verdict names the cause and not only a dead engine."""
    sim = start_profile("dspark", {"SPARKGATE_SIM_FAULTS": "dspark-drafter-missing"}, scale=SCALE, ready=False)
    assert sim.wait_exit() != 0
    code, verdict, output = run_verify(sim, "dspark", tmp_path)
    assert code == 1, output
    assert {"engine.health", "dspark.drafter_config_read", "dspark.log_runner_initialized"} <= failing(verdict)
    [config] = [c for c in verdict["checks"] if c["name"] == "dspark.drafter_config_read"]
    assert config["observed"].startswith("1x: ") and "Failed to read DSpark draft config" in config["observed"]
