"""End to end: `sparkgate verify` (the gate's evidence checks) against the simulator admits healthy
profiles and refuses each fault for the right reason."""

from __future__ import annotations

import pytest

from sparkgate import expectations, profiles
from sparkgate.evidence import logs, verify

SCALE = 0.02


def _verdict(sim, name: str):
    expected = expectations.build(profiles.load(name), "sim", SCALE)
    return verify.verify(sim.base_url, expected, logs.from_file(str(sim.log_dir / f"sim-{sim.port}.out")))


@pytest.mark.parametrize("name", ["baseline", "all-three"])
def test_healthy_profiles_are_admitted(start_profile, name):
    verdict = _verdict(start_profile(name, scale=SCALE), name)
    assert verdict.passed, [(c.name, c.observed) for c in verdict.failures()]


@pytest.mark.parametrize(
    ("fault", "must_fail"),
    [
        ("fp8-env-ignored", {"fp8_lm_head.env_declared", "fp8_lm_head.target_head", "fp8_lm_head.log_signature"}),
        ("draft-lm-head-unshared", {"mtp.lm_head_module_shared", "mtp.accept_length", "engine.speed_vs_baseline"}),
        ("humming-fallback", {"humming.moe_layers_target", "humming.log_signature"}),
        ("mtp-draft-missing", {"mtp.draft_loaded", "mtp.log_draft_loaded", "mtp.accept_length"}),
        ("cuda-graph-off", {"engine.cuda_graph_passes", "engine.cuda_graph_capture_log"}),
        ("probe-missing", {"engine.probe_report"}),
    ],
)
def test_each_fault_is_refused_for_its_reason(start_profile, fault, must_fail):
    sim = start_profile("all-three", {"SPARKGATE_SIM_FAULTS": fault}, scale=SCALE)
    verdict = _verdict(sim, "all-three")
    failed = {c.name for c in verdict.failures()}
    assert not verdict.passed
    assert must_fail <= failed, failed
