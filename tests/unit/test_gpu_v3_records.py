"""The tiny Ling-3.0-flash launches of the GPU lane (tests/fixtures/gpu-v3, from `bash tests/gpu/run v3` on CUDA),
held on CPU: each verification replays to the verdict the real engine got, and what made each verdict is in the
real output (the Humming census and log line, the kernel cache, the fork's head variable ignored, real acceptance)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkgate.evidence.recording import replay
from tests.gpu import records
from tests.gpu.conftest import V3_SETS, v3_launches

ROOT = records.SETS["gpu-v3"]
LANE = {name: spec for name, spec in v3_launches({k: Path(k) for k in (
    "agree", "random", "bf16", "dspark-agree", "dspark-random", "humming-cache")}).items()
        if name in V3_SETS["gpu-v3"]}
CASES = [(name, profile) for name in records.launches(ROOT) for profile in records.recordings(name, ROOT)]


def checks(name: str, profile: str) -> dict[str, dict]:
    return {c["name"]: c for c in records.recordings(name, ROOT)[profile].verdict["checks"]}


def test_every_launch_of_the_v3_run_is_recorded_from_one_run():
    assert set(records.launches(ROOT)) == set(LANE)
    for name in LANE:
        assert set(records.recordings(name, ROOT)) == set(LANE[name].profiles), name
    assert len({records.launch_info(name, ROOT)["run"] for name in LANE}) == 1


@pytest.mark.parametrize(("name", "profile"), CASES)
def test_the_recorded_engine_replays_to_the_same_verdict(name, profile):
    recording = records.recordings(name, ROOT)[profile]
    got = {c["name"]: c["passed"] for c in replay(recording).as_dict()["checks"]}
    assert got == {c["name"]: c["passed"] for c in recording.verdict["checks"]}


def test_humming_compiled_into_the_products_cache_dir_once_and_the_next_starts_reused_it():
    cold = records.launch_info("v3-humming-cold", ROOT)["humming_cache"]
    warm = records.launch_info("v3-humming-warm-fp8-env", ROOT)["humming_cache"]
    assert cold["before"]["files"] == 0 and cold["after"]["files"] > 0
    assert warm["before"]["digest"] == warm["after"]["digest"] == cold["after"]["digest"]
    assert checks("v3-humming-cold", "humming")["humming.moe_layers_target"]["passed"]


def test_the_agreeing_nextn_draft_passes_on_real_counts_and_the_random_one_is_refused():
    agree, rand = checks("v3-nextn-agree", "mtp")["mtp.accept_length"], checks("v3-nextn-random", "mtp")["mtp.accept_length"]
    assert agree["passed"] and agree["observed"] >= 3.5, agree
    assert not rand["passed"] and rand["observed"] < 1.5, rand
    assert not checks("v3-humming-warm-fp8-env", "fp8-lm-head")["fp8_lm_head.target_head"]["passed"]
