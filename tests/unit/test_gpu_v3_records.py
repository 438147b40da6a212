"""The tiny Ling-3.0-flash launches of the GPU lane (tests/fixtures/gpu-v3, gpu-v3-fallbacks, gpu-v3-dspark, from
`bash tests/gpu/run v3|v3-fallbacks|v3-dspark` on CUDA), held on CPU: each verification replays to the verdict the real
engine got, and what made each verdict is in the real output (the Humming census and log line, the kernel cache, the
fork's head variable ignored, real acceptance, the runner stock ran instead of Humming)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sparkgate.evidence.recording import replay
from tests.gpu import records
from tests.gpu.conftest import V3_SETS, v3_launches

ROOT = records.SETS["gpu-v3"]
LANE = {name: spec for name, spec in v3_launches({k: Path(k) for k in (
    "agree", "random", "bf16", "dspark-agree", "dspark-random", "humming-cache")}).items()
        if name in V3_SETS["gpu-v3"]}
CASES = [(set_name, name, profile) for set_name in V3_SETS for name in records.launches(records.SETS[set_name])
         for profile in records.recordings(name, records.SETS[set_name])]


def checks(name: str, profile: str, root: Path = ROOT) -> dict[str, dict]:
    return {c["name"]: c for c in records.recordings(name, root)[profile].verdict["checks"]}


def test_every_launch_of_the_v3_run_is_recorded_from_one_run():
    assert set(records.launches(ROOT)) == set(LANE)
    for name in LANE:
        assert set(records.recordings(name, ROOT)) == set(LANE[name].profiles), name
    assert len({records.launch_info(name, ROOT)["run"] for name in LANE}) == 1


@pytest.mark.parametrize(("set_name", "name", "profile"), CASES)
def test_the_recorded_engine_replays_to_the_same_verdict(set_name, name, profile):
    recording = records.recordings(name, records.SETS[set_name])[profile]
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


# --- the silent fallbacks, for real (`bash tests/gpu/run v3-fallbacks`, 2026-12-06) -----------------------------------
# Two runs: the unimportable launch (which never serves) on an H100, then the Humming reference, the BF16 launch and
# Marlin together on an H100 (`-k "runs_reference or bf16 or marlin"`, 2026-12-06T23:43Z); docs/testing-gpu.md.
FALLBACKS = records.SETS["gpu-v3-fallbacks"]


def start_judged(name: str) -> dict[str, dict]:
    """The product's judgment of a start that never served (sparkgate/evidence/startup.py), on its real log."""
    from sparkgate.bundle import expectations
    from sparkgate.evidence import startup
    from sparkgate.evidence.logs import EngineLog
    from sparkgate.profile import loading

    want = expectations.build(loading.load("humming"), "spark", 1.0)
    checks = startup.judge_start(want, EngineLog(f"{name} server.log", records.server_log(name, FALLBACKS)))
    return {c.name: c.as_dict() for c in checks}


def census_at_load(name: str) -> dict[str, int]:
    """The engagement probe's MoE census of the target, from its load_model line in the real log."""
    from sparkgate_probe.report import LOG_PREFIX

    marker = f"{LOG_PREFIX} {{"  # the fact lines (a hook's failure line names the hook instead)
    lines = [ln for ln in records.server_log(name, FALLBACKS).splitlines() if marker in ln]
    events = [json.loads(ln[ln.index(marker) + len(LOG_PREFIX) + 1:]) for ln in lines]
    return next(e["moe_layers"] for e in events if e.get("event") == "load_model" and e.get("role") == "target")


def test_every_fallback_launch_is_recorded_and_the_served_ones_share_a_run_and_a_card():
    assert set(records.launches(FALLBACKS)) == set(V3_SETS["gpu-v3-fallbacks"])
    served = [records.launch_info(name, FALLBACKS) for name in ("v3-humming-cold", "v3-bf16-humming", "v3-marlin")]
    assert len({(info["run"], info["gpu"]) for info in served}) == 1
    assert all(info["startup_s"] is not None for info in served)


def test_humming_on_a_checkpoint_it_cannot_take_runs_triton_with_the_flag_on_and_is_refused():
    """The BF16 checkpoint with `--moe-runner-backend humming`: SGLang echoes humming, yet every MoE layer's method is
    the unquantized Triton one and no Humming forward is logged; the same run's MXFP4 checkpoint engages Humming."""
    reference = checks("v3-humming-cold", "humming", FALLBACKS)
    assert all(reference[name]["passed"] for name in ("humming.config_echo", "humming.moe_layers_target",
                                                      "humming.log_signature"))
    assert reference["humming.moe_layers_target"]["observed"] == {"Mxfp4HummingMoEMethod/humming": 5}
    bf16 = checks("v3-bf16-humming", "humming", FALLBACKS)
    assert bf16["humming.config_echo"]["passed"] and bf16["humming.config_echo"]["observed"] == "humming"
    assert bf16["humming.moe_layers_target"]["observed"] == {"UnquantizedFusedMoEMethod/triton": 5}
    assert not bf16["humming.moe_layers_target"]["passed"] and "fell back" in bf16["humming.moe_layers_target"]["hint"]
    assert (bf16["humming.log_signature"]["passed"], bf16["humming.log_signature"]["observed"]) == (False, "0x")


def test_humming_not_importable_is_no_silent_fallback_stock_dies_and_the_refusal_names_the_module():
    """Stock 0.5.23 raises at load (mxfp4_humming_moe.py imports `humming`): nothing else serves, the gate's start
    judgment names the missing module and the package that provides it."""
    checks = start_judged("v3-humming-unimportable")
    health = checks["engine.health"]
    assert health["observed"]["likely_cause"] == "a Python module the launch needs is not installed: humming"
    assert health["observed"]["phases_reached"] == ["arguments", "load_weight_begin"]
    assert "humming-kernels" in health["hint"]
    assert not checks["humming.log_signature"]["passed"]


def test_marlin_served_the_same_checkpoint_and_humming_is_refused_naming_it():
    """`--moe-runner-backend marlin` on the MXFP4 layout served (decode graphs replayed): the census names Marlin's
    method in every MoE layer, the echo says marlin and no Humming forward is logged, so all three refuse."""
    assert census_at_load("v3-marlin") == {"Mxfp4MarlinMoEMethod/marlin": 5}
    marlin = checks("v3-marlin", "humming", FALLBACKS)
    assert (marlin["humming.config_echo"]["passed"], marlin["humming.config_echo"]["observed"]) == (False, "marlin")
    census = marlin["humming.moe_layers_target"]
    assert not census["passed"] and census["observed"] == {"Mxfp4MarlinMoEMethod/marlin": 5}
    assert "Marlin" in census["hint"] and "did not reach the engine" in census["hint"]
    assert (marlin["humming.log_signature"]["passed"], marlin["humming.log_signature"]["observed"]) == (False, "0x")
    assert marlin["engine.cuda_graph_passes"]["passed"]


def test_humming_and_marlin_decode_speeds_come_from_one_run_on_one_card():
    """The ratio docs/testing-gpu.md gives (539 / 556 = 0.97): both engine-timed (meta_info) with decode graphs
    replayed, one run, one card."""
    names = ("v3-humming-cold", "v3-marlin")
    assert len({(records.launch_info(n, FALLBACKS)["run"], records.launch_info(n, FALLBACKS)["gpu"]) for n in names}) == 1
    verdicts = {n: records.recordings(n, FALLBACKS)["humming"].verdict for n in names}
    assert all({c["name"]: c for c in v["checks"]}["engine.cuda_graph_passes"]["passed"] for v in verdicts.values())
    humming, marlin = (round(verdicts[n]["calibration"]["decode_tok_s"]) for n in names)
    assert (humming, marlin, round(humming / marlin, 2)) == (539, 556, 0.97)


def test_a_marlin_start_cut_short_in_its_capture_is_refused_naming_marlin_from_the_census_at_load():
    """The lane's first Marlin start (H100, 2026-12-06), stopped by the lane: its log ends in the first decode-graph
    capture; /server_info never answered, and the probe's census at load still names Marlin."""
    from sparkgate.bundle import expectations
    from sparkgate.evidence import startup
    from sparkgate.evidence.logs import EngineLog
    from sparkgate.profile import loading

    log = (records.FIXTURES.parent / "starts" / "marlin-cut-in-capture.server.log").read_text()
    want = expectations.build(loading.load("humming"), "spark", 1.0)
    checks = {c.name: c.as_dict() for c in startup.judge_start(want, EngineLog("marlin server.log", log))}
    assert checks["engine.health"]["observed"]["phases_reached"][-1] == "cuda_graph_capture"
    census = checks["humming.moe_layers_target"]
    assert not census["passed"] and census["observed"] == {"Mxfp4MarlinMoEMethod/marlin": 5}
    assert (checks["humming.log_signature"]["passed"], checks["humming.log_signature"]["observed"]) == (False, "0x")


# --- DSpark on CUDA (`bash tests/gpu/run v3-dspark`, NVIDIA H200, 2026-12-06) ------------------------------------------
DSPARK = records.SETS["gpu-v3-dspark"]
DSPARK_ENGAGED = ("dspark.config_echo", "dspark.draft_loaded", "dspark.lm_head_module_shared",
                  "dspark.log_runner_initialized", "dspark.drafter_config_read", "dspark.draft_cuda_graph",
                  "dspark.proposal_not_eager")


def spec_meta(name: str) -> list[dict]:
    """SGLang's own per-request speculative accounting (POST /generate meta_info) in the recorded exchanges."""
    return [meta for exchange in records.recordings(name, DSPARK)["dspark"].exchanges
            for chunk in (exchange.chunks or []) for meta in [chunk[1].get("meta_info", {})] if "spec_verify_ct" in meta]


def test_dspark_engages_with_both_drafters_and_acceptance_alone_tells_them_apart():
    assert set(records.launches(DSPARK)) == set(V3_SETS["gpu-v3-dspark"])
    agree, rand = checks("v3-dspark-agree", "dspark", DSPARK), checks("v3-dspark-random", "dspark", DSPARK)
    for got in (agree, rand):
        assert {name: got[name]["passed"] for name in DSPARK_ENGAGED} == dict.fromkeys(DSPARK_ENGAGED, True)
    assert agree["dspark.accept_length"]["passed"] and agree["dspark.accept_length"]["observed"] >= 8.0
    assert not rand["dspark.accept_length"]["passed"] and rand["dspark.accept_length"]["observed"] < 3.0


def test_the_random_drafters_accept_length_is_sglangs_own_count_one_right_draft_per_block():
    """2.0, not ~1.0: the tiny target repeats its last token, which the drafter reads from the target's features and
    the shared head, so the first draft of each block is right and the other seven never are (SGLang's histogram)."""
    metas = spec_meta("v3-dspark-random")
    assert metas
    for meta in metas:
        assert meta["spec_correct_drafts_histogram"] == [0, meta["spec_verify_ct"]]
        assert meta["spec_num_correct_drafts"] * 8 == meta["spec_num_proposed_drafts"]
