"""Every shipped profile loads, and renders the launch the published recipe uses."""

from __future__ import annotations

import pytest

from sparkgate.profile import loading as profiles
from sparkgate.sglang import flags as F

SHIPPED = ["baseline", "humming", "fp8-lm-head", "humming-fp8", "mtp", "all-three", "dspark"]
NEXTN = [
    F.SPECULATIVE_ALGORITHM, "NEXTN",
    F.SPECULATIVE_NUM_STEPS, "3",
    F.SPECULATIVE_EAGLE_TOPK, "1",
    F.SPECULATIVE_NUM_DRAFT_TOKENS, "4",
]


def flag_value(argv: tuple[str, ...], flag: str) -> str | None:
    return argv[argv.index(flag) + 1] if flag in argv else None


def test_shipped_profiles_are_exactly_these():
    assert profiles.available_profiles() == sorted(SHIPPED)


@pytest.mark.parametrize("name", SHIPPED)
def test_profile_loads_and_names_match(name):
    loaded = profiles.load(name)
    assert loaded.profile.name == name
    assert loaded.profile.description and "\n" not in loaded.profile.description


@pytest.mark.parametrize(
    ("name", "requested"),
    [
        ("baseline", []),
        ("humming", ["humming"]),
        ("fp8-lm-head", ["fp8_lm_head"]),
        ("humming-fp8", ["humming", "fp8_lm_head"]),
        ("mtp", ["mtp"]),
        ("all-three", ["humming", "fp8_lm_head", "mtp"]),
        ("dspark", ["humming", "fp8_lm_head", "dspark"]),
    ],
)
def test_requested_optimizations(name, requested):
    assert profiles.load(name).profile.requested() == requested


def test_all_three_is_the_optimized_launch():
    plan = profiles.load("all-three").plan
    assert flag_value(plan.argv, F.MOE_RUNNER_BACKEND) == "humming"
    position = plan.argv.index(F.SPECULATIVE_ALGORITHM)
    assert list(plan.argv[position : position + 2]) == NEXTN[:2]
    for flag, value in zip(NEXTN[::2], NEXTN[1::2], strict=True):
        assert flag_value(plan.argv, flag) == value
    assert flag_value(plan.argv, F.SPECULATIVE_DRAFT_MODEL_PATH) == flag_value(plan.argv, F.MODEL_PATH)
    assert F.ENABLE_FP32_LM_HEAD not in plan.argv
    env = plan.env_map()
    assert env[F.FP8_LM_HEAD_ENV] == "1"
    assert env[F.HUMMING_COMPILER_ENV] == "nvrtc"
    assert env[F.HUMMING_CACHE_DIR_ENV]


def test_baseline_is_the_opposite():
    plan = profiles.load("baseline").plan
    assert flag_value(plan.argv, F.MOE_RUNNER_BACKEND) == "flashinfer_mxfp4"
    assert F.ENABLE_FP32_LM_HEAD in plan.argv
    assert not any(token.startswith("--speculative") for token in plan.argv)
    assert F.FP8_LM_HEAD_ENV not in plan.env_map()
    assert F.HUMMING_COMPILER_ENV not in plan.env_map()
    assert flag_value(plan.argv, "--mem-fraction-static") == "0.68"
    assert flag_value(plan.argv, F.MAX_RUNNING_REQUESTS) == "1"
    assert flag_value(plan.argv, F.CUDA_GRAPH_BS_DECODE) == "1"


def test_all_three_differs_from_baseline_only_by_its_optimizations():
    """The stacked launch is the published one: same flags as the baseline except the three levers."""
    base = profiles.load("baseline").plan
    stacked = profiles.load("all-three").plan

    def as_pairs(plan):
        return {o.option: o.parsed.values for o in plan.options}

    base_pairs, stacked_pairs = as_pairs(base), as_pairs(stacked)
    changed = {flag for flag in base_pairs.keys() | stacked_pairs.keys() if base_pairs.get(flag) != stacked_pairs.get(flag)}
    assert changed == {
        F.MOE_RUNNER_BACKEND, F.ENABLE_FP32_LM_HEAD, *F.SPECULATIVE_FLAGS,
    }
    env_changed = set(base.env_map().items()) ^ set(stacked.env_map().items())
    assert {name for name, _ in env_changed} == {F.FP8_LM_HEAD_ENV, F.HUMMING_COMPILER_ENV, F.HUMMING_CACHE_DIR_ENV}


def test_gate_evidence_env_is_on_every_profile():
    for name in SHIPPED:
        env = profiles.load(name).plan.env_map()
        assert env[F.EXPOSE_OWN_ENV_VARS_ENV] == "1"
        assert "engagement_probe" in env[F.PLUGINS_ENV].split(",")
        assert F.ENABLE_METRICS in profiles.load(name).plan.argv


def test_diamond_inheritance_keeps_sibling_changes():
    """baseline reaches all-three through humming, fp8-lm-head and mtp; it must not undo fp8-lm-head's
    enable_fp32_lm_head: false when mtp is merged after it."""
    loaded = profiles.load("all-three")
    assert loaded.profile.sglang.enable_fp32_lm_head is False
    assert loaded.file_of("sglang.enable_fp32_lm_head") == "profiles/fp8-lm-head.yaml"


def test_profile_by_path(repo):
    loaded = profiles.load(str(repo / "profiles" / "mtp.yaml"))
    assert loaded.profile.requested() == ["mtp"]
