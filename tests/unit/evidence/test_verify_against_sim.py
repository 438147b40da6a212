"""`sparkgate verify` against the simulator: healthy stacks pass; each silent failure is refused by the
check that owns it, with a hint. Exit codes: 0 pass, 1 refused, 2 usage."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.plugins.simproc import REPO

# Slow enough that sleep granularity does not distort decode speed on a busy 2-core host.
SCALE = 0.05


def run_verify(sim, profile: str, tmp_path, *extra: str) -> tuple[int, dict, str]:
    log_file = sim.log_dir / f"sim-{sim.port}.out"
    out = tmp_path / f"verdict-{sim.port}.json"
    argv = [
        sys.executable, "-m", "sparkgate", "verify", "--profile", profile, "--engine-url", sim.base_url,
        "--target", "sim", "--time-scale", str(sim.scale), "--log-file", str(log_file), "--json", str(out), *extra,
    ]
    result = subprocess.run(argv, capture_output=True, text=True, cwd=REPO, timeout=120)
    verdict = json.loads(out.read_text()) if out.exists() else {}
    return result.returncode, verdict, result.stdout + result.stderr


def failing(verdict: dict) -> set[str]:
    return {c["name"] for c in verdict["checks"] if not c["passed"]}


@pytest.mark.parametrize("profile", ["all-three", "baseline", "humming-fp8", "mtp"])
def test_healthy_profile_passes(start_profile, tmp_path, profile):
    sim = start_profile(profile, scale=SCALE)
    code, verdict, output = run_verify(sim, profile, tmp_path)
    assert code == 0, output
    assert verdict["passed"] is True and failing(verdict) == set()
    names = {c["name"] for c in verdict["checks"]}
    # Even the baseline gets identity, health and CUDA-graph checks.
    assert {"engine.health", "engine.identity", "engine.cuda_graph_passes", "engine.probe_report"} <= names
    if profile == "all-three":
        assert {"humming.moe_layers_target", "fp8_lm_head.env_declared", "mtp.lm_head_module_shared",
                "mtp.accept_length", "engine.speed_vs_baseline"} <= names
        assert 2.0 <= verdict["calibration"]["accept_length"] <= 3.2


# fault -> checks that must be among the failures (the owning check first).
FAULTS = {
    "fp8-env-ignored": {"fp8_lm_head.env_declared", "fp8_lm_head.target_head", "fp8_lm_head.log_signature"},
    "draft-lm-head-unshared": {"mtp.lm_head_module_shared", "mtp.accept_length", "engine.speed_vs_baseline"},
    "humming-fallback": {"humming.moe_layers_target", "humming.log_signature"},
    "mtp-draft-missing": {"mtp.draft_loaded", "mtp.log_draft_loaded", "mtp.accept_length"},
    "cuda-graph-off": {"engine.cuda_graph_passes", "engine.cuda_graph_capture_log"},
    "probe-missing": {"engine.probe_report", "humming.moe_layers_target", "mtp.lm_head_module_shared"},
}


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_fault_is_refused_by_its_check(start_profile, tmp_path, fault):
    sim = start_profile("all-three", {"SPARKGATE_SIM_FAULTS": fault}, scale=SCALE)
    code, verdict, output = run_verify(sim, "all-three", tmp_path)
    assert code == 1, output
    assert verdict["passed"] is False
    assert FAULTS[fault] <= failing(verdict), (fault, failing(verdict))
    for check in verdict["checks"]:
        if not check["passed"]:
            assert check["hint"] and check["source"], check
    first = sorted(FAULTS[fault])[0]
    assert f"FAIL {first}" in output and "Hint:" in output


def test_draft_trap_reads_accept_one_and_below_baseline(start_profile, tmp_path):
    sim = start_profile("all-three", {"SPARKGATE_SIM_FAULTS": "draft-lm-head-unshared"}, scale=SCALE)
    _, verdict, _ = run_verify(sim, "all-three", tmp_path)
    checks = {c["name"]: c for c in verdict["checks"]}
    assert checks["mtp.accept_length"]["observed"] == pytest.approx(1.0, abs=0.05)
    assert checks["engine.speed_vs_baseline"]["observed"] < 37.81


def test_stock_image_with_fp8_head_is_refused(start_profile, tmp_path):
    sim = start_profile("all-three", {"SPARKGATE_SIM_IMAGE": "stock"}, scale=SCALE)
    code, verdict, output = run_verify(sim, "all-three", tmp_path)
    assert code == 1, output
    assert {"fp8_lm_head.env_declared", "fp8_lm_head.target_head"} <= failing(verdict)
    hint = next(c["hint"] for c in verdict["checks"] if c["name"] == "fp8_lm_head.env_declared")
    assert "stock SGLang" in hint


def test_missing_log_fails_closed(start_profile, tmp_path):
    sim = start_profile("baseline", scale=SCALE)
    argv = [sys.executable, "-m", "sparkgate", "verify", "--profile", "baseline", "--engine-url", sim.base_url,
            "--target", "sim", "--time-scale", str(SCALE)]
    result = subprocess.run(argv, capture_output=True, text=True, cwd=REPO, timeout=120)
    assert result.returncode == 1
    assert "FAIL engine.log" in result.stdout


def test_unreachable_engine_fails_every_check(tmp_path):
    argv = [sys.executable, "-m", "sparkgate", "verify", "--profile", "all-three", "--engine-url",
            "http://127.0.0.1:9", "--target", "sim", "--json", str(tmp_path / "v.json")]
    result = subprocess.run(argv, capture_output=True, text=True, cwd=REPO, timeout=120)
    assert result.returncode == 1
    verdict = json.loads((tmp_path / "v.json").read_text())
    assert verdict["checks"] and not any(c["passed"] for c in verdict["checks"])


@pytest.mark.parametrize("argv", [[], ["--engine-url", "http://x"], ["--profile", "baseline", "--expectations", "e.json", "--engine-url", "http://x"]])
def test_usage_errors_exit_2(argv):
    result = subprocess.run([sys.executable, "-m", "sparkgate", "verify", *argv], capture_output=True, text=True, cwd=REPO)
    assert result.returncode == 2
